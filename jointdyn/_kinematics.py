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
import numpy as np
from jaxtyping import Array, Float

from ._autodiff import rules_enabled
from ._compile import accepts_packed, jit_unless_traced
from ._dtype import astype, floating_arguments
from ._joint import AbstractJoint
from ._linalg import add, cross, identity, inverse3, matmul, matvec, mul, rmatvec, sub
from ._model import Model, check_sizes
from ._precision import full_precision
from ._spatial import Transform, motion_cross, parallel_axis, skew
from ._traversal import (
    Plan,
    assemble_bodies,
    assemble_dofs,
    concat,
    gather,
    joint_params,
    map_groups,
    map_joints,
    materialized,
    parents_of,
    plan,
    sum_over_ancestors,
    take,
    write_level,
)


class JointTerms(eqx.Module):
    """Per-body joint quantities in world coordinates (Plücker at the world origin).

    `S[c]` holds the hinge matrices of the bodies of nv-class `c` (`plan.classes[c]`),
    shape (n_c, 6, nv_c), without padding.
    """

    X_WB: Transform  # (nb,)
    X_WF: Transform  # (nb,) each joint's inboard frame F, in world
    S: tuple[Float[Array, "n 6 k"], ...]
    vJ: Float[Array, "nb 6"] | None  # S q̇
    cJ: Float[Array, "nb 6"] | None  # velocity-product acceleration of the joint itself
    V: Float[Array, "nb 6"] | None  # body spatial velocities


def _shift_columns(R_WF, p_WM, H):
    """Columns of `H` (in F, at Mo) to world Plücker: `[R w; R v + p × (R w)]`."""
    w = matmul(R_WF, H[:, :3])
    v = add(matmul(R_WF, H[:, 3:]), cross(p_WM[:, :, None], w, axis=1))
    return jnp.concatenate([w, v], 1)


def _rp(X: Transform) -> Array:
    """`[R | p]`, (..., 3, 4): a pose as one array."""
    return jnp.concatenate([X.R, X.p[..., None]], -1)


def _from_rp(T: Array) -> Transform:
    return Transform(T[..., :3], T[..., 3])


def _poses_by_level(p: Plan, X_PF: Transform, X_FB: Transform) -> tuple[Transform, Transform]:
    """`X_WB = X_WP · X_PF · X_FB` by depth level, the parents' `X_WP` read from the level above;
    then `X_WF = X_WP · X_PF` for every body at once. Returns `(X_WF, X_WB)` in body order.

    Each level's `X_WB` is written as `[R | p]` into one of two buffers, even levels into one
    and odd levels into the other (`write_level`; see there why buffers), so that a level reads
    its parents from the buffer it does not write. One buffer for all levels made XLA copy the
    whole buffer at every level of a chain (panda), where a level's parent rows are a slice
    fused into the in-place update. Measured against separate `R` and `p` buffers with each
    level's `X_WF` kept: talos `jit(vmap(aba))` at batch 4096 184 → 152 kernels and ~6 % less
    XLA compile time; panda `aba` at batch 1 (packed) 112 → 92 kernels.
    """
    X_PF, X_FB = take((X_PF, X_FB), p.level_order)  # level order: each level's rows a slice
    nb = len(p.level_order)
    bufs = [jnp.zeros((nb, 3, 4), X_FB.p.dtype)] * 2  # [R | p] of X_WB, level order
    for li, lv in enumerate(p.levels):
        X_WF = take(X_PF, lv.rows)
        if li > 0:
            X_WF = _from_rp(parents_of(bufs[(li - 1) % 2], lv)) @ X_WF
        bufs[li % 2] = write_level(bufs[li % 2], lv, _rp(X_WF @ take(X_FB, lv.rows)))
    row = np.arange(nb)  # row of each level-order body in the concatenated buffers
    for lv in p.levels[1::2]:
        row[lv.rows] += nb
    both = _from_rp(jnp.concatenate(bufs))
    X_WB = take(both, row[p.level_body_inv])
    n0 = len(p.levels[0].bodies)  # roots: X_WF = X_PF
    if n0 < nb:
        parent = row[np.concatenate([lv.parent_rows for lv in p.levels[1:]])]
        X_WF = concat(
            [take(X_PF, np.arange(n0)), gather(both, parent) @ take(X_PF, np.arange(n0, nb))]
        )
    else:
        X_WF = X_PF
    return take(X_WF, p.level_body_inv), X_WB


_poses = jax.custom_jvp(_poses_by_level, nondiff_argnums=(0,))
_poses.__doc__ = (
    """`_poses_by_level` with a closed-form tangent (`_poses_jvp`): no AD of the level loop."""
)


@_poses.defjvp
@full_precision
def _poses_jvp(p: Plan, primals, tangents):
    """Tangent of the poses without the level loop. A pose tangent is written in world form,
    `δR = G R`, `δp = G p + t` (`G` any 3×3: exact for every δR and every invertible R), and these
    pairs compose additively along a chain: for `X_WC = X_WA X_AC`,

        (G, t)_WC = (G, t)_WA + (R_WA G_AC R_WA⁻¹,  R_WA t_AC − R_WA G_AC R_WA⁻¹ p_WA)

    with `G_AC = δR_AC R_AC⁻¹`, `t_AC = δp_AC − G_AC p_AC`. `R⁻¹` is the true inverse
    (`inverse3`), not `Rᵀ`: equal in value, but only the inverse keeps this tangent exact off
    the rotations, so that its own derivative (second order, e.g. `jax.hessian` in raw
    quaternion or `X_PF.R` directions) is right too. So the world tangent of every body
    is the sum, over its ancestors and itself, of its joint's two local terms (from `X_PF` and
    from `X_FB`): one product with the ancestor matrix, as for velocities (`V = Aᵀ vJ`).
    """
    X_PF, X_FB = primals
    dPF, dFB = tangents
    X_WF, X_WB = _poses(p, X_PF, X_FB)
    dtype = X_WB.p.dtype
    nb = len(p.parents)
    # parents' poses, the identity for bodies on the world
    eye = Transform(identity(3, dtype=dtype)[None], jnp.zeros((1, 3), dtype))
    if len(p.levels) == 1:  # every body on the world (see below)
        X_Wλ = take(eye, np.zeros(nb, int))
    else:
        X_Wλ = take(concat([X_WB, eye]), np.where(p.parents < 0, nb, p.parents))

    def world(X_WA: Transform, X_AC: Transform, dX_AC: Transform):
        G = matmul(dX_AC.R, inverse3(X_AC.R))
        t = dX_AC.p - matvec(G, X_AC.p)
        Gw = matmul(matmul(X_WA.R, G), inverse3(X_WA.R))
        return Gw, matvec(X_WA.R, t) - matvec(Gw, X_WA.p)

    Ga, ta = world(X_Wλ, X_PF, dPF)
    Gb, tb = world(X_WF, X_FB, dFB)
    inc = jnp.concatenate([(Ga + Gb).reshape(nb, 9), ta + tb], -1)
    tot = sum_over_ancestors(p, inc)
    G_WB, t_WB = tot[:, :9].reshape(nb, 3, 3), tot[:, 9:]
    if len(p.levels) == 1:
        # every body on the world: X_WF = X_PF, whose tangent is its own term alone. Written
        # so, it depends on (X_PF, dX_PF) only, as the primal depends on X_PF only: `G_WB − Gb`
        # (or parents' poses read from X_WB) would depend on the joints too, and a tangent
        # batched where its primal is not breaks `jacfwd` of a `vmap`ped `scan` (JAX 0.10: the
        # rule's primal out is unbatched where vmap recorded it batched, a rank mismatch).
        G_WF, t_WF = Ga, ta
    else:
        G_WF, t_WF = G_WB - Gb, t_WB - tb

    def tangent(X: Transform, G, t) -> Transform:
        return Transform(matmul(G, X.R), matvec(G, X.p) + t)

    # each tangent computed once: its cotangent sums many uses (see `materialized`)
    return (X_WF, X_WB), materialized((tangent(X_WF, G_WF, t_WF), tangent(X_WB, G_WB, t_WB)))


def _local_terms(j, qj, vj=None):
    """One joint: `X_FM`, `H_FM` and (with v) `V_FM = H v` and `Ḣ v`, all in F at Mo
    (`_velocity_product` turns the last two into the joint's velocity-product term)."""
    X = j.X_FM(qj)
    if vj is None:
        return X, j.H_FM(qj)
    if type(j).Hdot_FM is AbstractJoint.Hdot_FM:
        # `H` and `Ḣ = ∂H/∂q · q̇` from one `jvp` (`AbstractJoint.Hdot_FM`'s formula):
        # `H_FM` and `Hdot_FM` called apart traced `H_FM` twice (in every derivative program)
        H, Hdot = jax.jvp(j.H_FM, (qj,), (j.qdot_from_v(qj, vj),))
    else:  # a joint class with its own `Hdot_FM`
        H, Hdot = j.H_FM(qj), j.Hdot_FM(qj, vj)
    return X, H, matvec(H, vj), matvec(Hdot, vj)


def _velocity_product(V: Array, Hdot_v: Array) -> Array:
    """The spatial velocity-product term of joints, `c = Ḣ v − [0; w × v_Mo]` (classical to
    spatial relative acceleration; `V = [w; v_Mo]`), for any leading axes. `joint_terms`
    takes it once for all bodies (one cross product, not one per joint group)."""
    zero = jnp.zeros(V.shape[:-1] + (3,), V.dtype)
    return sub(Hdot_v, jnp.concatenate([zero, cross(V[..., :3], V[..., 3:])], -1))


def joint_terms(model: Model, q: Array, v: Array | None = None) -> JointTerms:
    """Poses, world hinge matrices and (with `v`) velocity terms of every body."""
    p = plan(model)
    outs = map_groups(model, _local_terms, q=q, v=v)
    # the joints' local poses once, in a kernel of their own: with one joint group (a
    # fixed-base chain or tree of one joint class) XLA fused the joints' `sin`/`cos` into each
    # consumer of `X_FM` (the level-order gather of the poses, the hinge shift) and evaluated
    # them once per element read (benchmarks/NOTES.md, twenty-ninth session)
    X_FM = materialized(take(concat([o[0] for o in outs]), p.group_body_inv))
    poses = _poses if rules_enabled() else _poses_by_level
    X_WF, X_WB = poses(p, model.X_PF, X_FM @ model.X_BM.inverse())
    R_WF = X_WF.R
    p_WM = X_WF.apply(X_FM.p)
    S = []
    for cls in p.classes:
        H = jnp.concatenate([outs[g][1] for g in cls.groups])
        S.append(_shift_columns(take(R_WF, cls.bodies), take(p_WM, cls.bodies), H))
    if v is None:
        return JointTerms(X_WB, X_WF, tuple(S), None, None, None)
    V_FM, Hdot_v = take(concat([(o[2], o[3]) for o in outs]), p.group_body_inv)
    c = _velocity_product(V_FM, Hdot_v)
    both = _shift_columns(R_WF, p_WM, jnp.stack([V_FM, c], -1))
    vJ, cJ = both[..., 0], both[..., 1]
    V = sum_over_ancestors(p, vJ)
    return JointTerms(X_WB, X_WF, tuple(S), vJ, cJ, V)


def hinge_times(p: Plan, S: tuple, x: Array) -> Array:
    """`S_i x_i` for every body, (nb, 6), with `x` a v-sized vector (zero for welds)."""
    parts = [matvec(Sc, take(x, c.dof_idx)) for c, Sc in zip(p.classes, S, strict=True)]
    return assemble_bodies(p, parts, jnp.zeros((1, 6), x.dtype))


def hinge_transpose_times(p: Plan, S: tuple, F: Array) -> Array:
    """`tau_k = S_kᵀ F_body(k)` in DOF order."""
    parts = [rmatvec(Sc, take(F, c.bodies)) for c, Sc in zip(p.classes, S, strict=True)]
    return assemble_dofs(p, parts, F.dtype)


def dof_columns(p: Plan, S: tuple) -> Array:
    """Per-class hinge matrices → (6, nv) in DOF order."""
    if not S:
        return jnp.zeros((6, 0))
    flat = jnp.concatenate([jnp.swapaxes(Sc, 1, 2).reshape(-1, 6) for Sc in S])
    return take(flat, p.class_dof_inv).T


class WorldInertia(eqx.Module):
    """Body inertias about the world origin in world axes, in the form linear in the
    inertial parameters: `m`, first moment `h = m c`, rotational inertia about the origin
    `I_O = I_C + m (|c|² 1 − c cᵀ)`. Composite inertias are plain sums of these."""

    m: Float[Array, "..."]
    h: Float[Array, "... 3"]
    I_O: Float[Array, "... 3 3"]

    def apply(self, V: Array) -> Array:
        """Momentum `[I_O w + h × v; m v − h × w]` of spatial velocity `V = [w; v]` (…, 6)."""
        w, v = V[..., :3], V[..., 3:]
        ang = matvec(self.I_O, w) + cross(self.h, v)
        lin = self.m[..., None] * v - cross(self.h, w)
        return jnp.concatenate([ang, lin], -1)

    def apply_columns(self, M: Array) -> Array:
        """`apply` on each column of `M` (…, 6, k)."""
        per_column = WorldInertia(
            self.m[..., None], self.h[..., None, :], self.I_O[..., None, :, :]
        )
        return jnp.swapaxes(per_column.apply(jnp.swapaxes(M, -1, -2)), -1, -2)

    def as_matrix(self) -> Array:
        """`[[I_O, [h]×], [[h]×ᵀ, m 1]]` (…, 6, 6)."""
        Hx = skew(self.h)
        eye = identity(3, dtype=self.h.dtype)
        top = jnp.concatenate([self.I_O, Hx], -1)
        bottom = jnp.concatenate([jnp.swapaxes(Hx, -1, -2), self.m[..., None, None] * eye], -1)
        return jnp.concatenate([top, bottom], -2)

    def flatten(self) -> Array:
        """(…, 13): `[m, h, I_O]`, for sums over subtrees as one matrix product."""
        n = self.m.shape
        return jnp.concatenate([self.m[..., None], self.h, self.I_O.reshape(n + (9,))], -1)

    @staticmethod
    def unflatten(x: Array) -> WorldInertia:
        return WorldInertia(x[..., 0], x[..., 1:4], x[..., 4:].reshape(x.shape[:-1] + (3, 3)))


def world_inertias(model: Model, X_WB: Transform) -> WorldInertia:
    """Body inertias about the world origin, world axes.

    Only the symmetric part of each rotational inertia is used, `(I + Iᵀ)/2` (equal to `I` for
    every valid inertia), so that derivatives with respect to it are symmetric and the same
    whichever algorithm (RNEA, ABA, CRBA) they are taken through."""
    I = model.inertias
    m = I.mass
    c = X_WB.apply(I.com)
    I_B = 0.5 * (I.inertia + jnp.swapaxes(I.inertia, -1, -2))
    I_C = matmul(matmul(X_WB.R, I_B), jnp.swapaxes(X_WB.R, -1, -2))
    cc = parallel_axis(c)
    return WorldInertia(m, mul(m[..., None], c), add(I_C, mul(m[..., None, None], cc)))


def classical(V: Array, X_WB: Transform) -> Array:
    """World Plücker velocity → `[w; v_Bo]` (velocity of the body origin), world axes."""
    w = V[..., :3]
    return jnp.concatenate([w, V[..., 3:] + cross(w, X_WB.p)], -1)


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


@jit_unless_traced
def forward_kinematics(
    model: Model, q: Float[Array, " nq"], v: Array | None = None, vdot: Array | None = None
) -> Kinematics:
    """Poses of bodies and frames; with `v`, body velocities; with `vdot` too, accelerations.

    Accelerations are kinematic (no gravity): `a_i = a_λ + S_i q̈_i + c_i + v_i × S_i q̇_i`,
    returned as classical accelerations of the body origins, `a_Bo = ȧ_O + α × p + w × v_Bo`.
    """
    if vdot is not None and v is None:
        raise ValueError("forward_kinematics: `vdot` needs `v`")
    check_sizes(model, q=q, v=v, vdot=vdot)
    model = astype(model, _dtype(q, v, vdot))
    p = plan(model)
    t = joint_terms(model, q, v)
    X_WF = frame_poses(model, t.X_WB)
    if v is None:
        return Kinematics(t.X_WB, X_WF, None, None)
    V_WB = classical(t.V, t.X_WB)
    if vdot is None:
        return Kinematics(t.X_WB, X_WF, V_WB, None)
    aJ = hinge_times(p, t.S, vdot) + t.cJ + motion_cross(t.V, t.vJ)
    a = sum_over_ancestors(p, aJ)
    alpha, w = a[:, :3], t.V[:, :3]
    a_Bo = a[:, 3:] + cross(alpha, t.X_WB.p) + cross(w, V_WB[:, 3:])
    return Kinematics(t.X_WB, X_WF, V_WB, jnp.concatenate([alpha, a_Bo], -1))


@jit_unless_traced
def body_jacobians(model: Model, q: Float[Array, " nq"]) -> Float[Array, "nb 6 nv"]:
    """World-aligned Jacobians of all body origins: `V_WB = J_i v`, `V_WB = [w_W; v_Bo_W]`."""
    check_sizes(model, q=q)
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
    v = vO + cross(w, points[:, :, None], axis=1)
    return jnp.concatenate([w, v], 1)


@floating_arguments
@functools.partial(jax.jit, static_argnames="frame")
@accepts_packed
@full_precision
def jacobian(model: Model, q: Float[Array, " nq"], frame: str) -> Float[Array, "6 nv"]:
    """World-aligned Jacobian of a frame or body origin (by name): `[w_WF_W; v_WFo_W] = J v`.

    (Pinocchio's `LOCAL_WORLD_ALIGNED`, with the rotational rows first.)
    """
    check_sizes(model, q=q)
    model = astype(model, q.dtype)
    p = plan(model)
    t = joint_terms(model, q)
    k = model.frame_index(frame)
    body = model.topology.frame_parents[k]
    X_WF = frame_poses(model, t.X_WB)
    if body < 0:
        return jnp.zeros((6, model.nv), q.dtype)
    return _jacobians_at(p, t, X_WF.p[k][None], p.ancestor[p.dof_body, body][None, :])[0]


@jit_unless_traced
def center_of_mass(model: Model, q: Float[Array, " nq"]) -> Float[Array, "3"]:
    """`c = Σ mᵢ cᵢ / Σ mᵢ` in world (bodies attached to the world by a weld are included)."""
    check_sizes(model, q=q)
    model = astype(model, q.dtype)
    t = joint_terms(model, q)
    m = model.inertias.mass
    c_W = t.X_WB.apply(model.inertias.com)
    return jnp.sum(m[:, None] * c_W, 0) / jnp.sum(m)


def qdot_from_v(model: Model, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Array:
    """`q̇ = N(q) v`, joint by joint (quaternion rates, `[cos, sin]` rates, …)."""
    return map_joints(model, lambda j, qj, vj: j.qdot_from_v(qj, vj), q=q, v=v, q_out=True)


def v_from_qdot(model: Model, q: Float[Array, " nq"], qdot: Float[Array, " nq"]) -> Array:
    """`v` from `q̇`, joint by joint: the left inverse of `qdot_from_v` (`v_from_qdot(q,
    N(q) v) = v`), blind to the part of `q̇` off the configuration manifold (a quaternion's
    radial rate)."""
    return map_joints(model, lambda j, qj, qdj: j.v_from_qdot(qj, qdj), q=q, q2=qdot, v_out=True)


def armature(model: Model) -> Array:
    """Every joint's `params.armature`, one entry per DOF (nv,): the rotor inertias that
    `crba`, `aba`, `rnea` and `kinetic_energy` add on the diagonal of `M`."""
    return joint_params(model, "armature")


@jit_unless_traced
def kinetic_energy(model: Model, q: Array, v: Array) -> Float[Array, ""]:
    """`T = ½ Σ vᵢᵀ Iᵢ vᵢ + ½ Σ armature ⊙ v²` (equal to `½ vᵀ M(q) v`; the second sum is
    the rotors', `JointParams.armature`)."""
    check_sizes(model, q=q, v=v)
    model = astype(model, _dtype(q, v))
    t = joint_terms(model, q, v)
    h = world_inertias(model, t.X_WB).apply(t.V)
    return 0.5 * (jnp.sum(h * t.V) + jnp.sum(armature(model) * v * v))


@jit_unless_traced
def potential_energy(model: Model, q: Float[Array, " nq"]) -> Float[Array, ""]:
    """`U = −Σ mᵢ g · cᵢ + ½ Σ k ⊙ (q ⊖ q_ref)²`: gravity (zero at the world origin) and the
    joint springs (`JointParams.spring_stiffness`, `spring_reference`; zero without them)."""
    check_sizes(model, q=q)
    model = astype(model, q.dtype)
    t = joint_terms(model, q)
    c_W = t.X_WB.apply(model.inertias.com)
    spring = map_joints(
        model,
        lambda j, qj: (
            0.5 * j.params.spring_stiffness * j.difference(j.params.spring_reference, qj) ** 2
        ),
        q=q,
        v_out=True,
    )
    return -jnp.sum(model.inertias.mass * (c_W @ model.gravity)) + jnp.sum(spring)


@jit_unless_traced
def centroidal_momentum(model: Model, q: Array, v: Array) -> Float[Array, "6"]:
    """Spatial momentum about the centre of mass, world axes: `h_G = [k_G; l]`.

    `l = Σ mᵢ v_cᵢ`, `k_G = Σ (I_Cᵢ wᵢ + (cᵢ − c) × mᵢ v_cᵢ)`.
    """
    check_sizes(model, q=q, v=v)
    model = astype(model, _dtype(q, v))
    t = joint_terms(model, q, v)
    I_W = world_inertias(model, t.X_WB)
    h_O = jnp.sum(I_W.apply(t.V), 0)
    c = jnp.sum(I_W.h, 0) / jnp.sum(I_W.m)
    return jnp.concatenate([h_O[:3] - cross(c, h_O[3:]), h_O[3:]])
