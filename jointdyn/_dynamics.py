"""Inverse and forward dynamics: RNEA, CRBA, ABA and the forces built on them.

All in world coordinates (see `_kinematics.py`): spatial vectors of every body are Plücker
vectors at the world origin in world axes, inertias `Iᵢ` are about the world origin, and
gravity enters as the base acceleration `a₀ = [0; −g]`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._autodiff import MANY_TANGENTS, is_zero, partial_jvp, rules_enabled, tangent_only_lanes
from ._compile import jit_unless_traced
from ._dtype import astype
from ._joint import stop_force, viscous_and_coulomb
from ._kinematics import (
    JointTerms,
    WorldInertia,
    _dtype,
    armature,
    dof_columns,
    hinge_times,
    hinge_transpose_times,
    joint_terms,
    qdot_from_v,
    world_inertias,
)
from ._linalg import add, cross, identity, matmul, matvec, rmatvec, spd_inverse, sub
from ._model import Model, check_sizes
from ._precision import full_precision
from ._spatial import force_cross, motion_cross
from ._traversal import (
    gather,
    joint_params,
    map_joints,
    plan,
    sum_over_ancestors,
    sum_over_subtrees,
    sum_to_parents,
    take,
)


def _base_acceleration(model: Model, dtype) -> Array:
    return jnp.concatenate([jnp.zeros(3, dtype), -model.gravity.astype(dtype)])


def _f_ext_world(model: Model, t: JointTerms, f_ext: Array | None) -> Array | None:
    """`F_Bo_W` (nb, 6) → forces at the world origin: `[n + p_WBo × f; f]`."""
    if f_ext is None:
        return None
    check_sizes(model, f_ext=f_ext)
    n, f = f_ext[:, :3], f_ext[:, 3:]
    return jnp.concatenate([n + cross(t.X_WB.p, f), f], -1)


def external_joint_forces(model: Model, q: Array, f_ext: Array) -> Array:
    """The joint forces of external body forces, `Σ_b J_bᵀ F_b` (nv): `F_Bo_W` per body
    (nbodies, 6) moved to the world origin and summed over each joint's subtree,

        tau_k = S_kᵀ Σ_{b ∈ subtree(k)} F_b,

    that is `−rnea(q, 0, 0, f_ext)` of the model without gravity, with no velocity or
    acceleration terms (and, under `jax.jacfwd`, none of RNEA's Jacobians: the contact forces of
    `jd.step_derivatives` are differentiated through this)."""
    p = plan(model)
    t = joint_terms(model, q)
    return hinge_transpose_times(p, t.S, sum_over_subtrees(p, _f_ext_world(model, t, f_ext)))


@jit_unless_traced
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
        tauᵢ = Sᵢᵀ Fᵢ + armatureᵢ ⊙ q̈ᵢ

    (`M(q)` includes the rotors' reflected inertia `diag(armature)`, `JointParams.armature`.)

    **Arguments:** `f_ext` (nbodies, 6): `F_Bo_W`, the external force on each body at its origin,
    world axes. **Returns:** `tau` (nv).

    **Derivatives**: `jax.jacfwd` goes through the analytic Jacobians (`rnea_derivatives`,
    `crba`), computed once for all its lanes (see `_rnea_jvp`); `jax.grad`, `jax.jvp` through
    RNEA's own tangent.
    """
    check_sizes(model, q=q, v=v, vdot=vdot)
    model = astype(model, _dtype(q, v, vdot, f_ext))
    if rules_enabled():
        return _rnea_rule(model, q, v, vdot, f_ext)
    return _rnea(model, q, v, vdot, f_ext)


def _rnea(model: Model, q: Array, v: Array, vdot: Array, f_ext: Array | None) -> Array:
    p = plan(model)
    t = joint_terms(model, q, v)
    return _joint_torques(model, p, t, _rnea_forward(model, p, t, vdot, f_ext).F, vdot)


def _joint_torques(model: Model, p, t: JointTerms, F: Array, vdot: Array) -> Array:
    """RNEA's last step, `tauᵢ = Sᵢᵀ Fᵢ + armatureᵢ ⊙ v̇ᵢ`, from the subtree forces `F`."""
    return hinge_transpose_times(p, t.S, F) + armature(model) * vdot


_rnea_rule = jax.custom_jvp(_rnea)


@full_precision
def _rnea_jvp(primals, tangents):
    """RNEA's tangent. Under `jax.jacfwd` (at least `MANY_TANGENTS` tangents of `q`, `v` or
    `v̇` mapped at fixed primals, `tangent_only_lanes`) from the analytic Jacobians, computed
    once for all lanes:

        δτ = ∂τ/∂q · δq + ∂τ/∂v · δv + M(q) δv̇ + ∂τ/∂(θ, f_ext) · (δθ, δf)

    (`_derivatives.rnea_tangent_from_jacobians`, `_mass_matrix`; the model and `f_ext` term,
    when present, a tangent of RNEA), then a product per lane where the tangent of the
    recursion is a pass per lane (batched `jacfwd(rnea)` in `(q, v, v̇)` on g1: ~1 000 →
    ~40 µs a sample). Any other call (`jvp`, `grad`, `vmap` of states and tangents together)
    is RNEA's own tangent, op by op: for one cotangent it is cheaper than the Jacobians
    (`benchmarks/NOTES.md`, 2026-11-25)."""
    model, q, v, vdot, f_ext = primals
    dmodel, dq, dv, dvdot, df = tangents
    lanes = tangent_only_lanes(primals, (dq, dv, dvdot))
    if lanes < MANY_TANGENTS or not _derivatives().dense_tangent_supported(model):
        tau, dtau = partial_jvp(_rnea, primals, tangents, primal_out=True)
        return tau, jnp.zeros_like(tau) if dtau is None else dtau
    p = plan(model)
    t = joint_terms(model, q, v)
    fwd = _rnea_forward(model, p, t, vdot, f_ext)
    tau = _joint_torques(model, p, t, fwd.F, vdot)
    more = [] if is_zero(dvdot) else [(_mass_matrix(model, p, t, fwd.I), dvdot)]  # one product
    terms = [
        _derivatives().rnea_tangent_from_jacobians(
            model, p, t, q, v, vdot, f_ext, dq, dv, *more, fwd=fwd
        ),
        partial_jvp(lambda m, f: _rnea(m, q, v, vdot, f), (model, f_ext), (dmodel, df)),
    ]
    terms = [x for x in terms if x is not None]
    return tau, functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(tau)


_rnea_rule.defjvp(_rnea_jvp, symbolic_zeros=True)


class RneaForward(NamedTuple):
    """RNEA's world quantities: accelerations `A` (gravity included), inertias `I`, momenta
    `IV = I V`, external forces at the world origin `fe` (or None), subtree forces `F`."""

    A: Array
    I: WorldInertia
    IV: Array
    fe: Array | None
    F: Array


def _rnea_forward(
    model: Model, p, t: JointTerms, vdot: Array, f_ext: Array | None, I: WorldInertia | None = None
):
    """The forward and backward sums of RNEA (see `rnea`), shared with `rnea_derivatives` and
    ABA's rule; `I` the world inertias (`world_inertias(model, t.X_WB)` when None)."""
    aJ = hinge_times(p, t.S, vdot) + t.cJ + motion_cross(t.V, t.vJ)
    A = _base_acceleration(model, t.V.dtype) + sum_over_ancestors(p, aJ)
    I = world_inertias(model, t.X_WB) if I is None else I
    IV = I.apply(t.V)
    f = I.apply(A) + force_cross(t.V, IV)
    fe = _f_ext_world(model, t, f_ext)
    if fe is not None:
        f = f - fe
    return RneaForward(A, I, IV, fe, sum_over_subtrees(p, f))


@jit_unless_traced
def bias_forces(model: Model, q: Array, v: Array) -> Float[Array, " nv"]:
    """`C(q, v) v + g(q) = rnea(q, v, 0)` (Pinocchio's `nonLinearEffects`)."""
    return rnea(model, q, v, jnp.zeros_like(v))


@jit_unless_traced
def gravity_forces(model: Model, q: Float[Array, " nq"]) -> Float[Array, " nv"]:
    """`g(q) = rnea(q, 0, 0)`."""
    z = jnp.zeros(model.nv, q.dtype)
    return rnea(model, q, z, z)


@jit_unless_traced
def crba(model: Model, q: Float[Array, " nq"]) -> Float[Array, "nv nv"]:
    """Joint-space inertia matrix `M(q)` (composite rigid body algorithm).

        I^cᵢ = Σ_{j ⪰ i} Iⱼ                                  (composite inertias, world frame)
        M[k, l] = S_kᵀ I^c_body(l) S_l   where body(k) ⪯ body(l), and symmetric,
        M += diag(armature)                                  (rotor inertia, `JointParams`)

    In world coordinates the composite inertias are a sum over each subtree (one product with
    the ancestor matrix) and every block of M is one entry of `Sᵀ (I^c S)`.
    """
    check_sizes(model, q=q)
    model = astype(model, q.dtype)
    p = plan(model)
    t = joint_terms(model, q)
    return _mass_matrix(model, p, t, world_inertias(model, t.X_WB))


def _mass_matrix(model: Model, p, t: JointTerms, I: WorldInertia) -> Array:
    """`crba` given the plan, the joint terms and the world inertias."""
    Ic = WorldInertia.unflatten(sum_over_subtrees(p, I.flatten()))  # composite inertias
    F = tuple(take(Ic, c.bodies).apply_columns(Sc) for c, Sc in zip(p.classes, t.S, strict=True))
    Sd, Fd = dof_columns(p, t.S), dof_columns(p, F)
    A = Sd.T @ Fd  # A[k, l] = S_kᵀ I^c_body(l) S_l
    up = jnp.asarray(p.dof_ancestor, bool)
    return jnp.where(up, A, jnp.where(up.T, A.T, 0.0)) + jnp.diag(armature(model))


@jit_unless_traced
def aba(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> Float[Array, " nv"]:
    """Forward dynamics `v̇ = M⁻¹(tau − C v − g + Σ Jᵢᵀ f_extᵢ)` (articulated body algorithm).

    Up the tree, level by level from the leaves (world frame, so no transforms):

        Uᵢ = I^Aᵢ Sᵢ,  Dᵢ = Sᵢᵀ Uᵢ + diag(armatureᵢ),  uᵢ = tauᵢ − Sᵢᵀ p^Aᵢ
        I^a = I^Aᵢ − Uᵢ Dᵢ⁻¹ Uᵢᵀ,   p^a = p^Aᵢ + I^a cᵢ + Uᵢ Dᵢ⁻¹ uᵢ
        I^A_λ += I^a,   p^A_λ += p^a

    with `I^Aᵢ = Iᵢ`, `p^Aᵢ = vᵢ ×* Iᵢ vᵢ − f_extᵢ` initially and `cᵢ = c_J + vᵢ × S q̇`. Then down:

        aᵢ = a_λ + cᵢ,  q̈ᵢ = Dᵢ⁻¹ (uᵢ − Uᵢᵀ aᵢ),  aᵢ += Sᵢ q̈ᵢ     (a₀ = [0; −g])

    Bodies of one level are processed together, one subset per joint nv (no padding). The
    inertia half of the up pass depends on q alone (`_articulated_inertias`); the rest is linear
    in `(p^A, c, tau, a₀)` (`_aba_sweep`), so `aba_derivatives` reuses the first to apply `M⁻¹`.

    **Derivatives** (`jax.jvp`, `jax.grad`, …) use a rule, not the recursion (see `_aba_jvp`):

        δv̇ = M⁻¹ (δtau − δRNEA(θ, q, v, v̇, f_ext)|_{v̇ fixed})
    """
    check_sizes(model, q=q, v=v, tau=tau)
    model = astype(model, _dtype(q, v, tau, f_ext))
    return _aba_dispatch(model, q, v, tau, f_ext, None)


def _aba_dispatch(model, q, v, tau, f_ext, keep):
    """ABA with its rule (or without, `differentiation_rules(False)`); `keep` (nbodies,),
    1.0 for moving joints and 0.0 for locked ones, or None (none locked)."""
    if rules_enabled():
        return _aba_rule(model, q, v, tau, f_ext, keep)
    return _aba(model, q, v, tau, f_ext, keep)


def _aba(model: Model, q: Array, v: Array, tau: Array, f_ext: Array | None, keep=None) -> Array:
    p, _, fac, pA0, c, a0 = _aba_setup(model, q, v, f_ext, keep)
    return _aba_sweep(p, fac, pA0, c, tau, a0)


_aba_rule = jax.custom_jvp(_aba)


def _derivatives():
    """`jointdyn._derivatives` (imported when first needed: it imports this module)."""
    from . import _derivatives

    return _derivatives


@full_precision
def _aba_jvp(primals, tangents):
    """ABA's tangent from `RNEA(θ, q, v, ABA(θ, q, v, tau, f), f) = tau`:

        δv̇ = M⁻¹ (δtau − ∂RNEA/∂(θ, q, v, f) · (δθ, δq, δv, δf))     at v̇ = ABA(…)

    `M⁻¹` is ABA's own linear sweep (`_aba_sweep` with the articulated inertias of the primal
    call, bias terms zero), and the RNEA term is the tangent of RNEA (no recursion: sums over
    the ancestor matrix) along the inputs whose tangent is not a symbolic zero. Every input is
    covered at once, model parameters included; reverse mode transposes this linear map.
    The kinematics (`_kinematics`: poses, hinges, velocities, world inertias) are computed
    once, with their tangent, and serve both the sweep and the RNEA term, whose tangent then
    starts from theirs (RNEA recomputing them from `(θ, q, v)` doubled them in every
    derivative program: `grad` of `aba` in every input on the tests' 14-body tree 13 070 →
    10 007 equations; g1, batch 4096, 2 CPU devices: 64–69 → 45–53 µs per sample).
    `M⁻¹` is a `lax.custom_linear_solve` (solve: the sweep; matvec: `_mass_times`; symmetric),
    so that its transpose is the sweep again, not the sweep's ops transposed one by one (g1,
    `jax.grad` in `tau`: 299 → 162 XLA fusions, 6.4 → 4.6 µs per sample), and its own
    derivative is `−M⁻¹ δM M⁻¹` (second order) instead of autodiff of the sweep.

    **Many tangents at once** (`jax.jacfwd`: a `vmap` of at least `MANY_TANGENTS` tangents
    of `q` or `v` at fixed primals, read from the tracers by `tangent_only_lanes`) take the
    `q`, `v` terms from the analytic Jacobians instead (`_dense_tangent`): computed once, then
    a product per lane, where the tangent of the recursion is a sweep per lane (batched
    `jacfwd(aba)` in `(q, v, tau)` / `aba_derivatives`: g1 32× → ~1.3×). Same tangent, to
    rounding; any other call (`grad`, `jvp`, `vmap` of both) takes the path above.

    `custom_jvp` rather than `custom_vjp`, because one rule then serves `jvp`, `jacfwd`,
    `grad` and `vmap`, and the rule is itself differentiable (plain JAX code), so higher
    derivatives stay correct.
    """
    model, q, v, tau, f_ext, keep = primals
    dmodel, dq, dv, dtau, df, _ = tangents  # the lock mask is piecewise constant
    p = plan(model)
    # under `jax.jacfwd` (q or v tangents mapped, primals not): the analytic Jacobians once
    lanes = tangent_only_lanes(primals, (dq, dv))
    dense = lanes >= MANY_TANGENTS and _derivatives().dense_tangent_supported(model)
    # the kinematics (poses, hinges, velocities, world inertias) once, with their tangent:
    # the RNEA term below starts from them rather than recomputing them from (θ, q, v)
    if dense:
        (t, I), dkin = partial_jvp(
            lambda m: _kinematics(m, q, v), (model,), (dmodel,), primal_out=True
        )
    else:
        (t, I), dkin = partial_jvp(_kinematics, (model, q, v), (dmodel, dq, dv), primal_out=True)
    fac, pA0, c, a0 = _aba_terms(model, p, t, I, f_ext, keep)
    vdot = _aba_sweep(p, fac, pA0, c, tau, a0)

    def rnea_at_kinematics(m, t, I, f):  # RNEA at v̇, from the kinematics
        return _joint_torques(m, p, t, _rnea_forward(m, p, t, vdot, f, I).F, vdot)

    if dkin is None:
        dr = partial_jvp(lambda m, f: rnea_at_kinematics(m, t, I, f), (model, f_ext), (dmodel, df))
    else:
        dr = partial_jvp(rnea_at_kinematics, (model, t, I, f_ext), (dmodel, *dkin, df))
    rhs = None if is_zero(dtau) else dtau
    if dr is not None:
        rhs = -dr if rhs is None else rhs - dr
    if dense:  # M⁻¹ once (the sweep on the unit vectors), then one product per lane
        return vdot, _dense_tangent(model, p, t, I, fac, q, v, vdot, f_ext, dq, dv, rhs)
    if rhs is None:
        return vdot, jnp.zeros_like(vdot)
    rotor = armature(model)
    dvdot = jax.lax.custom_linear_solve(
        lambda x: _mass_times(p, t, I, x, rotor),
        rhs,
        lambda _, b: _aba_sweep(p, fac, None, None, b, None),
        symmetric=True,
    )
    return vdot, dvdot


def _dense_tangent(model, p, t, I, fac, q, v, vdot, f_ext, dq, dv, rhs):
    """ABA's tangent `M⁻¹ (rhs − ∂RNEA/∂(q, v) · (dq, dv))` for many tangent lanes at once:
    `∂RNEA/∂q`, `∂RNEA/∂v` (`_derivatives.rnea_tangent_from_jacobians`) and `M⁻¹` (the sweep
    on the unit vectors) are computed once for all lanes, and each lane costs two products."""
    M_inv = _mass_inverse(p, fac, model.nv, vdot.dtype)
    fwd = _rnea_forward(model, p, t, vdot, f_ext, I)  # with the world inertias ABA has
    dr = _derivatives().rnea_tangent_from_jacobians(model, p, t, q, v, vdot, f_ext, dq, dv, fwd=fwd)
    if dr is not None:
        rhs = -dr if rhs is None else rhs - dr
    return jnp.zeros_like(vdot) if rhs is None else M_inv @ rhs


def _mass_inverse(p, fac, nv: int, dtype) -> Array:
    """`M(q)⁻¹` (nv × nv) from ABA's factorisation (`_articulated_inertias`): the linear sweep
    on the unit vectors, column k = `M⁻¹ e_k`. No LAPACK call (it runs inside `shard_map` on
    several CPU devices and stays cheap on GPU)."""
    solve = lambda b: _aba_sweep(p, fac, None, None, b, None)  # noqa: E731
    return jax.vmap(solve, out_axes=1)(identity(nv, dtype))


def _mass_times(p, t: JointTerms, I: WorldInertia, x: Array, armature: Array) -> Array:
    """`M(q) x = Sᵀ A (I Aᵀ S x) + armature ⊙ x` (RNEA's sums with `v = 0`, no gravity), the
    matrix that `M⁻¹` inverts in ABA's rule (`lax.custom_linear_solve` differentiates through
    it)."""
    V = sum_over_ancestors(p, hinge_times(p, t.S, x))
    Mx = hinge_transpose_times(p, t.S, sum_over_subtrees(p, I.apply(V)))
    return Mx + armature * x


_aba_rule.defjvp(_aba_jvp, symbolic_zeros=True)


def _kinematics(model: Model, q: Array, v: Array) -> tuple[JointTerms, WorldInertia]:
    """`joint_terms` and the world inertias: what ABA and RNEA compute from `(θ, q, v)`."""
    t = joint_terms(model, q, v)
    return t, world_inertias(model, t.X_WB)


def _aba_setup(model: Model, q: Array, v: Array, f_ext: Array | None, keep=None):
    """ABA's q- and v-dependent inputs: the plan, `joint_terms`, articulated inertias, `p^A₀`,
    `c` and `a₀`. `keep` (per body, 0.0 for a locked joint) zeroes
    locked joints' `D⁻¹`."""
    p = plan(model)
    t, I = _kinematics(model, q, v)
    return (p, t, *_aba_terms(model, p, t, I, f_ext, keep))


def _aba_terms(model: Model, p, t: JointTerms, I: WorldInertia, f_ext: Array | None, keep):
    """From the kinematics: articulated inertias, `p^A₀ = V ×* I V − f_ext`, `c`, `a₀`."""
    pA0 = force_cross(t.V, I.apply(t.V))
    fe = _f_ext_world(model, t, f_ext)
    if fe is not None:
        pA0 = pA0 - fe
    c = t.cJ + motion_cross(t.V, t.vJ)
    fac = _articulated_inertias(p, t, I.as_matrix(), armature(model), keep)
    return fac, pA0, c, _base_acceleration(model, t.V.dtype)


class _AbaSubset(NamedTuple):
    """Saved per level subset by the inertia pass (all None but `Ia` for nv = 0 joints, whose
    `Ia` is the articulated inertia passed on unchanged; `UDinv`, `Ia` None at the root level)."""

    S: Array | None
    U: Array | None
    Dinv: Array | None
    UDinv: Array | None
    Ia: Array | None


def _articulated_inertias(
    p, t: JointTerms, IA0: Array, armature: Array, keep=None
) -> list[list[_AbaSubset]]:
    """The inertia half of ABA's up pass: `I^A`, `U`, `D⁻¹`, `I^a` per level and subset
    (`D = Sᵀ I^A S + diag(armature)`, armature (nv,) in DOF order).

    A locked joint (`keep` 0.0) gets `D⁻¹ = 0`: then `I^a = I^A` passes its whole inertia on
    and `q̈ = D⁻¹(u − Uᵀ a) = 0`, which is ABA on the model with that joint welded."""
    L = len(p.levels)
    acc: list = [None] * L  # children's I^a summed per level
    fac: list = [None] * L
    IA0 = take(IA0, p.level_order)  # level order: each level's and subset's rows are a slice
    keep = None if keep is None else take(keep, p.level_order)
    armature = take(armature, p.level_dofs)
    S_L = [take(S, pos) for S, pos in zip(t.S, p.class_level_pos, strict=True)]
    for li in range(L - 1, -1, -1):
        lv = p.levels[li]
        IA = take(IA0, lv.rows)
        if acc[li] is not None:
            IA = add(IA, acc[li])
        fac[li] = []
        for s in lv.subsets:
            IAs = take(IA, s.level_pos)
            if s.nv == 0:  # a weld passes its inertia on unchanged
                fac[li].append(_AbaSubset(None, None, None, None, IAs))
                continue
            S = take(S_L[s.cls], s.class_rows)
            U = matmul(IAs, S)
            D = matmul(jnp.swapaxes(S, 1, 2), U)
            D = add(D, take(armature, s.dof_rows)[:, :, None] * identity(s.nv, dtype=D.dtype))
            if keep is not None:  # a locked joint may move no inertia (D = 0): invert 1
                k = take(keep, s.rows)[:, None, None]
                D = jnp.where(k > 0, D, identity(s.nv, dtype=D.dtype))
            Dinv = 1.0 / D if s.nv == 1 else spd_inverse(D)
            if keep is not None:
                Dinv = k * Dinv
            UDinv = Ia = None
            if li > 0:
                UDinv = matmul(U, Dinv)
                Ia = sub(IAs, matmul(UDinv, jnp.swapaxes(U, 1, 2)))
            fac[li].append(_AbaSubset(S, U, Dinv, UDinv, Ia))
        if li > 0:
            Ia = jnp.concatenate([x.Ia for x in fac[li]])
            acc[li - 1] = sum_to_parents(lv, Ia)
    return fac


def _aba_sweep(p, fac, pA0: Array | None, c: Array | None, tau: Array, a0: Array | None) -> Array:
    """The part of ABA linear in `(p^A₀, c, tau, a₀)`, given `_articulated_inertias`: the bias
    forces up the tree, then the accelerations down. `None` for `p^A₀`, `c` or `a₀` means zero;
    with all three None it is the linear solve `M(q)⁻¹ tau`."""
    dtype = tau.dtype
    L = len(p.levels)
    acc: list = [None] * L  # children's p^a summed per level
    us: list = [None] * L
    # level order: each level's and subset's rows are a slice
    pA0, c = take((pA0, c), p.level_order)
    tau = take(tau, p.level_dofs)
    for li in range(L - 1, -1, -1):
        lv = p.levels[li]
        pA = acc[li]
        if pA0 is not None:
            pA = take(pA0, lv.rows) if pA is None else add(take(pA0, lv.rows), pA)
        if pA is None:
            pA = jnp.zeros((len(lv.bodies), 6), dtype)
        parts, us[li] = [], []
        for s, f in zip(lv.subsets, fac[li], strict=True):
            pAs = take(pA, s.level_pos)
            if s.nv == 0:
                parts.append(pAs if c is None else add(pAs, matvec(f.Ia, take(c, s.rows))))
                us[li].append(None)
                continue
            u = sub(take(tau, s.dof_rows), rmatvec(f.S, pAs))
            us[li].append(u)
            if li > 0:
                pa = add(pAs, matvec(f.UDinv, u))
                parts.append(pa if c is None else add(pa, matvec(f.Ia, take(c, s.rows))))
        if li > 0:
            pa = jnp.concatenate(parts)
            acc[li - 1] = sum_to_parents(lv, pa)

    qdd_parts = []
    a_prev = None
    for li, lv in enumerate(p.levels):
        n = len(lv.bodies)
        if a_prev is not None:
            a = gather(a_prev, lv.parent_pos)
        elif a0 is not None:
            a = jnp.broadcast_to(a0, (n, 6))
        else:
            a = jnp.zeros((n, 6), dtype)
        if c is not None:
            a = add(a, take(c, lv.rows))
        da = []
        for s, f, u in zip(lv.subsets, fac[li], us[li], strict=True):
            if u is None:
                da.append(jnp.zeros((len(s.bodies), 6), dtype))
                continue
            qdd = matvec(f.Dinv, sub(u, rmatvec(f.U, take(a, s.level_pos))))
            qdd_parts.append(qdd.reshape(-1))
            da.append(matvec(f.S, qdd))
        a_prev = add(a, jnp.concatenate(da))
    if not qdd_parts:  # no degree of freedom (every joint a Weld)
        return jnp.zeros((0,), dtype)
    return take(jnp.concatenate(qdd_parts), p.level_dof_inv)


@jit_unless_traced
def joint_forces(
    model: Model, q: Float[Array, " nq"], v: Float[Array, " nv"]
) -> Float[Array, " nv"]:
    """Passive generalized forces of every joint: damping, Coulomb friction, springs and
    limit stops (`AbstractJoint.passive_force`, joint by joint).

    The coordinate-wise laws (`stop_force`, `viscous_and_coulomb`) run once on the whole
    q- and v-vectors; only `q̇ = N(q) v` and `N(q)ᵀ f_stop − k ⊙ (q ⊖ q_ref)` are evaluated
    per joint class (a tree of every joint class: 1 126 traced equations instead of 1 702 for
    `passive_force` mapped over every class, its gradient 2 718 instead of 4 107).
    """
    check_sizes(model, q=q, v=v)
    model = astype(model, _dtype(q, v))
    qdot = qdot_from_v(model, q, v)
    p = functools.partial(joint_params, model)
    f_q = stop_force(
        q,
        qdot,
        p("position_lower"),
        p("position_upper"),
        p("stop_stiffness"),
        p("stop_damping"),
    )
    joint = map_joints(
        model, lambda j, qj, fj: j.stop_and_spring_force(qj, fj), q=q, q2=f_q, v_out=True
    )
    return joint + viscous_and_coulomb(v, p("damping"), p("friction"))


@jit_unless_traced
def forward_dynamics(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
    locked: Array | None = None,
) -> Float[Array, " nv"]:
    """`aba(q, v, tau + joint_forces(q, v), f_ext)`: forward dynamics with passive forces.

    **Locking** (Drake's `Joint::Lock`): `locked`, one bool per joint (body order), holds
    those joints still: their `v` is taken as 0 and their `v̇` is 0, and the other joints
    move with the dynamics of the model in which the locked joints are welds at `q` (equal
    to `aba` on `reduced_model(model, locked joints, q)`; ABA with `D⁻¹ = 0` at the locked
    joints). The mask is an array: locking and unlocking never retrace. `locking_forces`
    gives the generalized forces that hold the locked joints. The returned `v̇` is zero at
    locked DOFs, so a state whose locked velocities are zero keeps them zero; zero them when
    locking (`locked_dofs`).
    """
    check_sizes(model, q=q, v=v, tau=tau)
    if locked is None:
        return aba(model, q, v, tau + joint_forces(model, q, v), f_ext)
    model = astype(model, _dtype(q, v, tau, f_ext))
    dof = locked_dofs(model, locked)
    v = jnp.where(dof, 0.0, v)
    keep = jnp.where(jnp.asarray(locked), 0.0, 1.0).astype(v.dtype)
    vdot = _aba_dispatch(model, q, v, tau + joint_forces(model, q, v), f_ext, keep)
    return jnp.where(dof, 0.0, vdot)  # exact zeros (the sweep gives 0 · finite)


def locked_dofs(model: Model, locked: Array) -> Array:
    """The per-joint lock mask `locked` (nbodies,) as a per-DOF mask (nv,): zero a state's
    velocity when locking, `v = jnp.where(locked_dofs(model, locked), 0.0, v)`, so that an
    integrator keeps the locked joints where they are."""
    locked = jnp.asarray(locked)
    if locked.shape != (model.nbodies,) or locked.dtype != jnp.bool_:
        raise ValueError(
            f"`locked` must be a bool array of shape ({model.nbodies},) (one per joint), "
            f"got {locked.dtype} {locked.shape}"
        )
    return jnp.repeat(locked, np.asarray(model.topology.nvs), total_repeat_length=model.nv)


@jit_unless_traced
def locking_forces(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    locked: Array,
    f_ext: Float[Array, "nb 6"] | None = None,
) -> Float[Array, " nv"]:
    """The generalized forces that hold the `locked` joints still under `forward_dynamics(
    model, q, v, tau, f_ext, locked)`: `rnea(q, v₀, v̇, f_ext) − tau − joint_forces(q, v₀)` at
    the locked joints' DOFs (with `v₀` the velocity with locked entries zeroed), 0 elsewhere.
    Added to `tau`, they make the unlocked dynamics produce the same motion.
    """
    check_sizes(model, q=q, v=v, tau=tau, f_ext=f_ext)
    dof = locked_dofs(model, locked)
    v0 = jnp.where(dof, 0.0, v)
    vdot = forward_dynamics(model, q, v0, tau, f_ext, locked)
    held = rnea(model, q, v0, vdot, f_ext) - tau - joint_forces(model, q, v0)
    return jnp.where(dof, held, 0.0)
