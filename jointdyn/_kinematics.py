"""Forward kinematics and the quantities built on it: Jacobians, centre of mass, energy, momentum.

Internally every spatial vector of body i is a Plücker vector **at the world origin, in world
axes** (Featherstone's "world coordinates", Pinocchio's WORLD convention). In these
coordinates velocities and forces of a tree are plain sums:

    v_i = v_λ(i) + S_i q̇_i              (so v = Aᵀ vJ with A the static ancestor matrix)
    a_i = a_λ(i) + S_i q̈_i + c_i + v_i × S_i q̇_i

with `S_i` the joint's hinge matrix re-expressed from F (at Mo) to the world origin and
`c_i` the joint's own velocity-product term: the classical `Ḣ_FM v` less `[0; w × v_Mo]`
(classical to spatial acceleration), re-expressed the same way. Public outputs use the
classical convention of DESIGN.md (`V_WB = [w_WB_W; v_WBo_W]`).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._misc import astype
from ._model import Model
from ._spatial import SpatialInertia, Transform, motion_cross
from ._traversal import Plan, map_joints, plan, take


class JointTerms(eqx.Module):
    """Per-body joint quantities in world coordinates (Plücker at the world origin)."""

    X_WB: Transform  # (nb,)
    S: Float[Array, "nb 6 k"]  # hinge matrices, padded to k = plan.nv_max columns
    vJ: Float[Array, "nb 6"] | None  # S q̇
    cJ: Float[Array, "nb 6"] | None  # velocity-product acceleration of the joint itself
    V: Float[Array, "nb 6"] | None  # body spatial velocities


def _pad_columns(H, k):
    return jnp.pad(H, ((0, 0), (0, k - H.shape[1])))


def _shift_columns(R_WF, p_WM, H):
    """Columns of `H` (in F, at Mo) to world Plücker: `[R w; R v + p × (R w)]`."""
    w = jnp.einsum("bij,bjk->bik", R_WF, H[:, :3])
    v = jnp.einsum("bij,bjk->bik", R_WF, H[:, 3:]) + jnp.cross(p_WM[:, :, None], w, axis=1)
    return jnp.concatenate([w, v], 1)


def _poses(model: Model, p: Plan, X_PB: Transform) -> Transform:
    """`X_WB` by depth level: `X_WB = X_WP · X_PB`, parents gathered from the level above."""
    levels_out = []
    prev = None
    for lv in p.levels:
        X = take(X_PB, lv.bodies)
        if prev is not None:
            X = take(prev, lv.parent_pos) @ X
        levels_out.append(X)
        prev = X
    cat = jax.tree.map(lambda *xs: jnp.concatenate(xs), *levels_out)
    return take(cat, p.level_body_inv)


def joint_terms(model: Model, q: Array, v: Array | None = None) -> JointTerms:
    """Poses, world hinge matrices and (with `v`) velocity terms of every body."""
    p = plan(model)
    k = p.nv_max

    def local(j, qj, vj=None):
        X = j.X_FM(qj)
        H = _pad_columns(j.H_FM(qj), k)
        if vj is None:
            return X, H
        Hv = j.H_FM(qj) @ vj
        # spatial (not classical) relative acceleration: Ḣ v − [0; w × v_Mo]
        c = j.Hdot_FM(qj, vj) @ vj - jnp.concatenate(
            [jnp.zeros(3, Hv.dtype), jnp.cross(Hv[:3], Hv[3:])]
        )
        return X, H, Hv, c

    if v is None:
        X_FM, H = map_joints(model, local, q=q)
    else:
        X_FM, H, V_FM, c_F = map_joints(model, local, q=q, v=v)
    X_PB = model.X_PF @ X_FM @ model.X_BM.inverse()
    X_WB = _poses(model, p, X_PB)
    R_WM = X_WB.R @ model.X_BM.R
    R_WF = R_WM @ jnp.swapaxes(X_FM.R, -1, -2)
    p_WM = X_WB.apply(model.X_BM.p)
    S = _shift_columns(R_WF, p_WM, H)
    if v is None:
        return JointTerms(X_WB, S, None, None, None)
    both = _shift_columns(R_WF, p_WM, jnp.stack([V_FM, c_F], -1))
    vJ, cJ = both[..., 0], both[..., 1]
    anc = jnp.asarray(p.ancestor, vJ.dtype)
    V = anc.T @ vJ
    return JointTerms(X_WB, S, vJ, cJ, V)


def body_v(p: Plan, x: Array) -> Array:
    """A v-sized vector laid out per body, (nb, nv_max), padded with zeros."""
    return jnp.concatenate([x, jnp.zeros(1, x.dtype)])[p.body_v_idx]


def dof_columns(p: Plan, S: Array) -> Array:
    """(nb, 6, k) per-body columns → (6, nv) in DOF order."""
    flat = jnp.swapaxes(S, 1, 2).reshape(-1, 6)
    return flat[p.dof_pos].T


def world_inertias(model: Model, X_WB: Transform) -> SpatialInertia:
    """Body inertias about the world origin, in world axes (stacked)."""
    return model.inertias.transform(X_WB)


def classical(V: Array, X_WB: Transform) -> Array:
    """World Plücker velocity → `[w; v_Bo]` (velocity of the body origin), world axes."""
    w = V[..., :3]
    return jnp.concatenate([w, V[..., 3:] + jnp.cross(w, X_WB.p)], -1)


def _dtype(*xs):
    return jnp.result_type(*[x for x in xs if x is not None])


class Kinematics(eqx.Module):
    """Output of `forward_kinematics`.

    `X_WB` (nb) body poses; `X_WF` (nframes) frame poses; `V_WB` (nb, 6) body velocities
    `[w_WB_W; v_WBo_W]`; `A_WB` (nb, 6) classical accelerations `[α_WB_W; a_WBo_W]`
    (None where `v`/`vdot` were not given).
    """

    X_WB: Transform
    X_WF: Transform
    V_WB: Float[Array, "nb 6"] | None
    A_WB: Float[Array, "nb 6"] | None


def frame_poses(model: Model, X_WB: Transform) -> Transform:
    """Poses of all frames: `X_WF = X_WB · X_BF` (frames on the world keep `X_BF`)."""
    import numpy as np

    parents = np.asarray(model.topology.frame_parents)
    on_world = jnp.asarray(parents < 0)
    X_Wparent = take(X_WB, np.maximum(parents, 0))
    X = X_Wparent @ model.X_BF
    R = jnp.where(on_world[:, None, None], model.X_BF.R, X.R)
    pos = jnp.where(on_world[:, None], model.X_BF.p, X.p)
    return Transform(R, pos)


@jax.jit
def forward_kinematics(
    model: Model, q: Float[Array, " nq"], v: Array | None = None, vdot: Array | None = None
) -> Kinematics:
    """Poses of bodies and frames; with `v`, body velocities; with `vdot` too, accelerations.

    Accelerations are kinematic (no gravity): `a_i = a_λ + S_i q̈_i + c_i + v_i × S_i q̇_i`,
    returned as classical accelerations of the body origins, `a_Bo = ȧ_O + α × p + w × v_Bo`.
    """
    if vdot is not None and v is None:
        raise ValueError("forward_kinematics: `vdot` needs `v`")
    model = astype(model, _dtype(q, v, vdot))
    p = plan(model)
    t = joint_terms(model, q, v)
    X_WF = frame_poses(model, t.X_WB)
    if v is None:
        return Kinematics(t.X_WB, X_WF, None, None)
    V_WB = classical(t.V, t.X_WB)
    if vdot is None:
        return Kinematics(t.X_WB, X_WF, V_WB, None)
    aJ = jnp.einsum("bxk,bk->bx", t.S, body_v(p, vdot)) + t.cJ + motion_cross(t.V, t.vJ)
    a = jnp.asarray(p.ancestor, aJ.dtype).T @ aJ
    alpha, w = a[:, :3], t.V[:, :3]
    a_Bo = a[:, 3:] + jnp.cross(alpha, t.X_WB.p) + jnp.cross(w, V_WB[:, 3:])
    return Kinematics(t.X_WB, X_WF, V_WB, jnp.concatenate([alpha, a_Bo], -1))


@jax.jit
def body_jacobians(model: Model, q: Float[Array, " nq"]) -> Float[Array, "nb 6 nv"]:
    """World-aligned Jacobians of all body origins: `V_WB = J_i v`, `V_WB = [w_W; v_Bo_W]`."""
    model = astype(model, q.dtype)
    p = plan(model)
    t = joint_terms(model, q)
    return _jacobians_at(p, t, t.X_WB.p, p.ancestor[p.dof_body, :].T)


def _jacobians_at(p: Plan, t: JointTerms, points: Array, mask) -> Array:
    """Jacobians (n, 6, nv) of points (n, 3); `mask[i, k] = 1` where DOF k moves point i."""
    Sd = dof_columns(p, t.S)  # (6, nv)
    mask = jnp.asarray(mask, Sd.dtype)
    w = Sd[None, :3, :] * mask[:, None, :]
    vO = Sd[None, 3:, :] * mask[:, None, :]
    v = vO + jnp.cross(w, points[:, :, None], axis=1)
    return jnp.concatenate([w, v], 1)


@functools.partial(jax.jit, static_argnames="frame")
def jacobian(model: Model, q: Float[Array, " nq"], frame: str) -> Float[Array, "6 nv"]:
    """World-aligned Jacobian of a frame or body origin (by name): `[w_WF_W; v_WFo_W] = J v`.

    (Pinocchio's `LOCAL_WORLD_ALIGNED`, with the rotational rows first.)
    """
    model = astype(model, q.dtype)
    p = plan(model)
    t = joint_terms(model, q)
    k = model.frame_index(frame)
    body = model.topology.frame_parents[k]
    X_WF = frame_poses(model, t.X_WB)
    if body < 0:
        return jnp.zeros((6, model.nv), q.dtype)
    return _jacobians_at(p, t, X_WF.p[k][None], p.ancestor[p.dof_body, body][None, :])[0]


@jax.jit
def center_of_mass(model: Model, q: Float[Array, " nq"]) -> Float[Array, "3"]:
    """`c = Σ mᵢ cᵢ / Σ mᵢ` in world (bodies attached to the world by a weld are included)."""
    model = astype(model, q.dtype)
    t = joint_terms(model, q)
    m = model.inertias.mass
    c_W = t.X_WB.apply(model.inertias.com)
    return jnp.sum(m[:, None] * c_W, 0) / jnp.sum(m)


@jax.jit
def kinetic_energy(model: Model, q: Array, v: Array) -> Float[Array, ""]:
    """`T = ½ Σ vᵢᵀ Iᵢ vᵢ` (equal to `½ vᵀ M(q) v`)."""
    model = astype(model, _dtype(q, v))
    t = joint_terms(model, q, v)
    h = world_inertias(model, t.X_WB).apply(t.V)
    return 0.5 * jnp.sum(h * t.V)


@jax.jit
def potential_energy(model: Model, q: Float[Array, " nq"]) -> Float[Array, ""]:
    """`U = −Σ mᵢ g · cᵢ` (zero at the world origin)."""
    model = astype(model, q.dtype)
    t = joint_terms(model, q)
    c_W = t.X_WB.apply(model.inertias.com)
    return -jnp.sum(model.inertias.mass * (c_W @ model.gravity))


@jax.jit
def centroidal_momentum(model: Model, q: Array, v: Array) -> Float[Array, "6"]:
    """Spatial momentum about the centre of mass, world axes: `h_G = [k_G; l]`.

    `l = Σ mᵢ v_cᵢ`, `k_G = Σ (I_Cᵢ wᵢ + (cᵢ − c) × mᵢ v_cᵢ)`.
    """
    model = astype(model, _dtype(q, v))
    t = joint_terms(model, q, v)
    I_W = world_inertias(model, t.X_WB)
    h_O = jnp.sum(I_W.apply(t.V), 0)
    m = I_W.mass
    c = jnp.sum(m[:, None] * I_W.com, 0) / jnp.sum(m)
    return jnp.concatenate([h_O[:3] - jnp.cross(c, h_O[3:]), h_O[3:]])
