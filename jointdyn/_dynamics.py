"""Inverse and forward dynamics: RNEA, CRBA, ABA and the forces built on them.

All in world coordinates (see `_kinematics.py`): spatial vectors of every body are Plücker
vectors at the world origin in world axes, inertias `Iᵢ` are about the world origin, and
gravity enters as the base acceleration `a₀ = [0; −g]`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._kinematics import JointTerms, _dtype, body_v, dof_columns, joint_terms, world_inertias
from ._misc import astype
from ._model import Model
from ._spatial import force_cross, motion_cross
from ._traversal import Plan, map_joints, plan


def _base_acceleration(model: Model, dtype) -> Array:
    return jnp.concatenate([jnp.zeros(3, dtype), -model.gravity.astype(dtype)])


def _f_ext_world(t: JointTerms, f_ext: Array | None, nb: int) -> Array | None:
    """`F_Bo_W` (nb, 6) → forces at the world origin: `[n + p_WBo × f; f]`."""
    if f_ext is None:
        return None
    if f_ext.shape != (nb, 6):
        raise ValueError(f"`f_ext` must have shape ({nb}, 6) (F_Bo_W per body), got {f_ext.shape}")
    n, f = f_ext[:, :3], f_ext[:, 3:]
    return jnp.concatenate([n + jnp.cross(t.X_WB.p, f), f], -1)


def _check_sizes(model: Model, **arrays) -> None:
    for name, x in arrays.items():
        if x is None:
            continue
        n = model.nq if name == "q" else model.nv
        if x.shape != (n,):
            raise ValueError(f"`{name}` must have shape ({n},), got {x.shape}")


@jax.jit
def rnea(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    vdot: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> Float[Array, " nv"]:
    """Inverse dynamics, `tau = M(q) v̇ + C(q, v) v + g(q) − Σ Jᵢᵀ f_extᵢ` (recursive Newton–Euler).

        aᵢ = a₀ + Σ_{k ⪯ i} (S_k q̈_k + c_k + v_k × S_k q̇_k)     (sum over ancestors)
        fᵢ = Iᵢ aᵢ + vᵢ ×* Iᵢ vᵢ − f_extᵢ
        Fᵢ = Σ_{j ⪰ i} f_j                                        (sum over the subtree)
        tauᵢ = Sᵢᵀ Fᵢ

    **Arguments:** `f_ext` (nbodies, 6): `F_Bo_W`, the external force on each body at its origin,
    world axes. **Returns:** `tau` (nv).
    """
    _check_sizes(model, q=q, v=v, vdot=vdot)
    model = astype(model, _dtype(q, v, vdot, f_ext))
    p = plan(model)
    t = joint_terms(model, q, v)
    anc = jnp.asarray(p.ancestor, t.V.dtype)
    aJ = jnp.einsum("bxk,bk->bx", t.S, body_v(p, vdot)) + t.cJ + motion_cross(t.V, t.vJ)
    a = _base_acceleration(model, t.V.dtype) + anc.T @ aJ
    I = world_inertias(model, t.X_WB)
    f = I.apply(a) + force_cross(t.V, I.apply(t.V))
    fe = _f_ext_world(t, f_ext, model.nbodies)
    if fe is not None:
        f = f - fe
    F = anc @ f
    return _project(p, t.S, F)


def _project(p: Plan, S: Array, F: Array) -> Array:
    """`tau_k = S_kᵀ F_body(k)` in DOF order."""
    tau_b = jnp.einsum("bxk,bx->bk", S, F)
    return tau_b.reshape(-1)[p.dof_pos]


@jax.jit
def bias_forces(model: Model, q: Array, v: Array) -> Float[Array, " nv"]:
    """`C(q, v) v + g(q) = rnea(q, v, 0)` (Pinocchio's `nonLinearEffects`)."""
    return rnea(model, q, v, jnp.zeros_like(v))


@jax.jit
def gravity_forces(model: Model, q: Float[Array, " nq"]) -> Float[Array, " nv"]:
    """`g(q) = rnea(q, 0, 0)`."""
    z = jnp.zeros(model.nv, q.dtype)
    return rnea(model, q, z, z)


@jax.jit
def crba(model: Model, q: Float[Array, " nq"]) -> Float[Array, "nv nv"]:
    """Joint-space inertia matrix `M(q)` (composite rigid body algorithm).

        I^cᵢ = Σ_{j ⪰ i} Iⱼ                                  (composite inertias, world frame)
        M[k, l] = S_kᵀ I^c_body(l) S_l   where body(k) ⪯ body(l), and symmetric.

    In world coordinates the composite inertias are a sum over each subtree (one product with
    the ancestor matrix) and every block of M is one entry of `Sᵀ (I^c S)`.
    """
    _check_sizes(model, q=q)
    model = astype(model, q.dtype)
    p = plan(model)
    t = joint_terms(model, q)
    I = world_inertias(model, t.X_WB).as_matrix()  # (nb, 6, 6)
    anc = jnp.asarray(p.ancestor, I.dtype)
    Ic = jnp.einsum("ib,bxy->ixy", anc, I)
    F = jnp.einsum("bxy,byk->bxk", Ic, t.S)
    Sd, Fd = dof_columns(p, t.S), dof_columns(p, F)
    A = Sd.T @ Fd  # A[k, l] = S_kᵀ I^c_body(l) S_l
    up = jnp.asarray(p.dof_ancestor, bool)
    return jnp.where(up, A, jnp.where(up.T, A.T, 0.0))


@jax.jit
def aba(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> Float[Array, " nv"]:
    """Forward dynamics `v̇ = M⁻¹(tau − C v − g + Σ Jᵢᵀ f_extᵢ)` (articulated body algorithm).

    Up the tree, level by level from the leaves (world frame, so no transforms):

        Uᵢ = I^Aᵢ Sᵢ,  Dᵢ = Sᵢᵀ Uᵢ,  uᵢ = tauᵢ − Sᵢᵀ p^Aᵢ
        I^a = I^Aᵢ − Uᵢ Dᵢ⁻¹ Uᵢᵀ,   p^a = p^Aᵢ + I^a cᵢ + Uᵢ Dᵢ⁻¹ uᵢ
        I^A_λ += I^a,   p^A_λ += p^a

    with `I^Aᵢ = Iᵢ`, `p^Aᵢ = vᵢ ×* Iᵢ vᵢ − f_extᵢ` initially and `cᵢ = c_J + vᵢ × S q̇`. Then down:

        aᵢ = a_λ + cᵢ,  q̈ᵢ = Dᵢ⁻¹ (uᵢ − Uᵢᵀ aᵢ),  aᵢ += Sᵢ q̈ᵢ     (a₀ = [0; −g])

    Bodies of one level are processed together, joints padded to the level's largest nv.
    """
    _check_sizes(model, q=q, v=v, tau=tau)
    model = astype(model, _dtype(q, v, tau, f_ext))
    p = plan(model)
    t = joint_terms(model, q, v)
    dtype = t.V.dtype
    I = world_inertias(model, t.X_WB)
    IA0 = I.as_matrix()
    pA0 = force_cross(t.V, I.apply(t.V))
    fe = _f_ext_world(t, f_ext, model.nbodies)
    if fe is not None:
        pA0 = pA0 - fe
    c = t.cJ + motion_cross(t.V, t.vJ)
    tau_pad = jnp.concatenate([tau, jnp.zeros(1, dtype)])

    # up: articulated inertias, deepest level first
    L = len(p.levels)
    acc_I = [None] * L
    acc_p = [None] * L
    saved = [None] * L
    for li in range(L - 1, -1, -1):
        lv = p.levels[li]
        b = lv.bodies
        k = lv.nv_max
        S = t.S[b, :, :k]
        IA, pA = IA0[b], pA0[b]
        if acc_I[li] is not None:
            IA, pA = IA + acc_I[li], pA + acc_p[li]
        pad = jnp.asarray(lv.v_idx == model.nv, dtype)  # padded columns
        U = IA @ S
        D = jnp.swapaxes(S, 1, 2) @ U + pad[:, :, None] * jnp.eye(k, dtype=dtype)
        u = tau_pad[lv.v_idx] - jnp.einsum("bxk,bx->bk", S, pA)
        Dinv = 1.0 / D if k == 1 else jnp.linalg.inv(D)
        UDinv = U @ Dinv
        saved[li] = (S, U, Dinv, u)
        if li == 0:
            break
        Ia = IA - UDinv @ jnp.swapaxes(U, 1, 2)
        pa = pA + jnp.einsum("bxy,by->bx", Ia, c[b]) + jnp.einsum("bxk,bk->bx", UDinv, u)
        P = jnp.asarray(lv.to_parent, dtype)
        acc_I[li - 1] = jnp.einsum("pc,cxy->pxy", P, Ia)
        acc_p[li - 1] = P @ pa

    # down: accelerations
    a0 = _base_acceleration(model, dtype)
    qdd_levels = []
    a_prev = None
    for li, lv in enumerate(p.levels):
        S, U, Dinv, u = saved[li]
        a_parent = a0[None] if a_prev is None else a_prev[lv.parent_pos]
        a = a_parent + c[lv.bodies]
        qdd = jnp.einsum("bkl,bl->bk", Dinv, u - jnp.einsum("bxk,bx->bk", U, a))
        a_prev = a + jnp.einsum("bxk,bk->bx", S, qdd)
        qdd_levels.append(qdd.reshape(-1))
    return jnp.concatenate(qdd_levels)[p.level_dof_pos]


@jax.jit
def joint_forces(
    model: Model, q: Float[Array, " nq"], v: Float[Array, " nv"]
) -> Float[Array, " nv"]:
    """Passive generalized forces of every joint: damping, Coulomb friction, limit stops
    (see `AbstractJoint.passive_force`)."""
    _check_sizes(model, q=q, v=v)
    model = astype(model, _dtype(q, v))
    return map_joints(model, lambda j, qj, vj: j.passive_force(qj, vj), q=q, v=v, v_out=True)


@jax.jit
def forward_dynamics(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> Float[Array, " nv"]:
    """`aba(q, v, tau + joint_forces(q, v), f_ext)`: forward dynamics with passive forces."""
    return aba(model, q, v, tau + joint_forces(model, q, v), f_ext)
