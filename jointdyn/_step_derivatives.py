"""Derivatives of one simulation step, for trajectory optimisation: `step_derivatives`.

The discrete dynamics `x⁺ = f(x, u)`, `x = (q, v)`, `u = tau`, of `jd.step`, and its Jacobians
in the tangent space, as Crocoddyl's `Fx`, `Fu`: the state is perturbed as `(q ⊕ δq, v + δv)`
and the next state measured as `(q⁺' ⊖ q⁺, v⁺' − v⁺)` (`model.integrate`, `model.difference`),

    fx = ∂(q⁺, v⁺)/∂(δq, δv)   (2nv × 2nv),      fu = ∂(q⁺, v⁺)/∂tau   (2nv × nv).

**Built from analytic pieces**, never autodiff through ABA: the acceleration
`v̇ = aba(q, v, tau + Q(q, v), f_ext)` (`Q`: the joints' passive forces and the contact
forces' generalized forces, as in `jd.step`) has

    ∂v̇/∂q = A_q + M⁻¹ ∂Q/∂q,   ∂v̇/∂v = A_v + M⁻¹ ∂Q/∂v,   ∂v̇/∂tau = M⁻¹,

with `A_q, A_v, M⁻¹` from `aba_derivatives` (Carpentier & Mansard's analytic derivatives) and
`∂Q`: the joints' passive forces by forward-mode autodiff (local to each joint, `2·nv`
directional derivatives), the contact forces' analytically (`_contact_derivatives`).
Moving `q` by `w` is differentiated with `model.integrate_derivatives` (`dIntegrate`):
`δ(q ⊕ w) = J_q δq + J_v δw`.

**Integrators** (as `jd.step`):

- `"semi_implicit_euler"` (Crocoddyl's `IntegratedActionModelEuler`): `v⁺ = v + dt v̇`,
  `q⁺ = q ⊕ dt v⁺`, so

      ∂v⁺/∂(q, v, tau) = (dt ∂v̇/∂q, 1 + dt ∂v̇/∂v, dt M⁻¹)
      ∂q⁺/∂(q, v, tau) = (J_q, 0, 0) + dt J_v ∂v⁺/∂(q, v, tau)        (J at (q, dt v⁺)).

- `"rk4"`: the stages `qᵢ = q ⊕ cᵢ dt vᵢ₋₁`, `vᵢ = v + cᵢ dt aᵢ₋₁`, `aᵢ = v̇(qᵢ, vᵢ)` carry
  their Jacobians along (`δqᵢ` in the tangent space at `qᵢ`): four `aba_derivatives`, the
  last three in one `lax.scan` (the program holds two copies, not four).
- `"implicit"`: `v⁺ = v + Δv`, `W Δv = r`, `W = M + dt D + dt² K`, `r = dt (M v̇ − dt K v)
  = dt (tau + Q − h − dt K v)` with `h = rnea(q, v, 0, f_ext)` (no ABA, no `aba_derivatives`:
  the step solves with `W`), so

      δΔv = W⁻¹ (δr − δW Δv),   δr = dt (δtau + (A − ∂h/∂q) δq + (B − ∂h/∂v) δv − dt δ(K v)),

  `∂h/∂(q, v)` from `rnea_derivatives` at `(q, v, 0, f_ext)`, `δM Δv` at fixed `Δv` from
  `rnea_derivatives` of the model without gravity at `(q, 0, Δv)` (one program, two lanes),
  and the derivatives of `G = K y + D z` at fixed `(y, z)` (`K = −∂Q/∂q`,
  `D = −∂Q/∂v`) from one tangent of the first derivatives along `(y, z)`: second
  derivatives of `Q` are symmetric in the chart `q ⊕ d` at fixed `q`, so, with
  `A(q, v) = ∂Q/∂q`, `B(q, v) = ∂Q/∂v` (`_passive_derivatives`, contact analytic),

      ∂G/∂v = −δB,   ∂G/∂q = −(δA + A C(y)),   (δA, δB): the tangent of (A, B) along (y, z),

  where `C(y)` (`_chart_bracket`) corrects for `K` being taken at `q ⊕ d` in that point's own
  chart: `C x = ∂²φ[x, y] − ∂²φ[y, x]` for `φ(d, e) = (q ⊕ d ⊕ e) ⊖ q` (zero where `⊕` is
  addition; a Lie bracket for rotations). Two tangents of the first derivatives replace the
  Jacobian of `Q`'s tangent in all `2nv` directions (forward mode through the kinematics
  twice over, with contact): quadruped with contact, batch 64, 1.81 → 0.48 ms per sample.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._compile import jit_unless_traced
from ._contact import GroundContact
from ._derivatives import aba_derivatives, rnea_derivatives
from ._dtype import astype, floating_arguments
from ._model import Model
from ._precision import full_precision
from ._simulation import INTEGRATORS, _check, _implicit_velocity_change, _passive_derivatives


class StepDerivatives(eqx.Module):
    """Output of `step_derivatives`: the next state `q` (nq, normalised), `v` (nv), as
    `jd.step` gives it, and the Jacobians in the tangent space (Crocoddyl's `Fx`, `Fu`):

        fx = [[∂q⁺/∂q, ∂q⁺/∂v], [∂v⁺/∂q, ∂v⁺/∂v]]   (2nv × 2nv),   fu = [∂q⁺/∂tau; ∂v⁺/∂tau]   (2nv × nv)."""

    q: Float[Array, " nq"]
    v: Float[Array, " nv"]
    fx: Float[Array, "2nv 2nv"]
    fu: Float[Array, "2nv nv"]


def _acceleration(model, q, v, tau, contact, f_ext, passive=None):
    """`v̇ = aba(q, v, tau + Q, f_ext)` and its Jacobian `(∂v̇/∂q, ∂v̇/∂v, ∂v̇/∂tau = M⁻¹)`;
    `passive`: `_passive_derivatives`' output where the caller has it already."""
    Q, dQ_dq, dQ_dv = passive or _passive_derivatives(model, contact, q, v)
    d = aba_derivatives(model, q, v, tau + Q, f_ext)
    M_inv = d.dvdot_dtau
    return d.vdot, (d.dvdot_dq + M_inv @ dQ_dq, d.dvdot_dv + M_inv @ dQ_dv, M_inv)


def _in_block(J: Array, k: int) -> Array:
    """`J E_k`, (nv, 3nv): `J` as block `k` of a Jacobian in (q, v, tau) (`E_q = [1 0 0]`,
    `E_v = [0 1 0]`, `E_u = [0 0 1]`), written in place instead of multiplied."""
    blocks = [jnp.zeros_like(J)] * 3
    blocks[k] = J
    return jnp.concatenate(blocks, 1)


def _chain(J: tuple, Dq: Array, Dv: Array) -> Array:
    """`J_q Dq + J_v Dv + J_u E_u`: a Jacobian in (q, v, tau) from one in (its q, v, tau),
    where the stage's tau is the step's."""
    return J[0] @ Dq + J[1] @ Dv + _in_block(J[2], 2)


def _euler_rk4(model, q, v, tau, dt, contact, f_ext, rk4: bool):
    nv, dtype = model.nv, jnp.result_type(q, v, tau)
    # Jacobians with respect to (δq, δv, δtau), as (nv, 3nv) blocks
    E_v = _in_block(jnp.eye(nv, dtype=dtype), 1)  # ∂v/∂(q, v, tau)
    a, Ja = _acceleration(model, q, v, tau, contact, f_ext)
    Da = jnp.concatenate(Ja, 1)  # `J_q E_q + J_v E_v + J_u E_u`, without the products
    if not rk4:
        v1 = v + dt * a
        Dv1 = E_v + dt * Da
        Jq, Jv = model.integrate_derivatives(q, dt * v1)
        Dq1 = _in_block(Jq, 0) + dt * (Jv @ Dv1)
        return model.integrate(q, dt * v1), v1, Dq1, Dv1

    # stages 2..4 in one `lax.scan` (one copy of `aba_derivatives` in the program, not three)
    def stage(carry, c):
        v_prev, Dv_prev, a_prev, Da_prev = carry
        w = c * dt * v_prev
        Jq, Jv = model.integrate_derivatives(q, w)
        qi, Dqi = model.integrate(q, w), _in_block(Jq, 0) + c * dt * (Jv @ Dv_prev)
        vi, Dvi = v + c * dt * a_prev, E_v + c * dt * Da_prev
        ai, Jai = _acceleration(model, qi, vi, tau, contact, f_ext)
        out = (vi, Dvi, ai, _chain(Jai, Dqi, Dvi))
        return out, out

    c = jnp.asarray([0.5, 0.5, 1.0], dtype)
    _, (vs, Dvs, accs, Das) = jax.lax.scan(stage, (v, E_v, a, Da), c)
    wts = jnp.asarray([2.0, 2.0, 1.0], dtype) * (dt / 6)
    dq = dt / 6 * v + jnp.tensordot(wts, vs, 1)
    Ddq = dt / 6 * E_v + jnp.tensordot(wts, Dvs, 1)
    v1 = v + dt / 6 * a + jnp.tensordot(wts, accs, 1)
    Dv1 = E_v + dt / 6 * Da + jnp.tensordot(wts, Das, 1)
    Jq, Jv = model.integrate_derivatives(q, dq)
    return model.integrate(q, dq), v1, _in_block(Jq, 0) + Jv @ Ddq, Dv1


def _chart_bracket(model, q, y):
    """`C(y)` (nv × nv): `C x = ∂²φ[x, y] − ∂²φ[y, x]`, the antisymmetric part of the second
    derivative of `φ(d, e) = (q ⊕ d ⊕ e) ⊖ q` (first slot `d`, second `e`), along `y`: how a
    tangent taken at `q ⊕ d` differs from one taken in the chart at `q` (zero for joints whose
    `⊕` is addition; a Lie bracket for rotations). Configuration space only: no kinematics."""
    zero = jnp.zeros_like(y)

    def phi(d, e):
        return model.difference(q, model.integrate(model.integrate(q, d), e))

    along_e = jax.jacfwd(lambda d: jax.jvp(lambda e: phi(d, e), (zero,), (y,))[1])(zero)
    along_d = jax.jvp(lambda d: jax.jacfwd(lambda e: phi(d, e))(zero), (zero,), (y,))[1]
    return along_e - along_d


def _implicit(model, q, v, tau, dt, contact, f_ext):
    nv, dtype = model.nv, jnp.result_type(q, v, tau)
    eye = jnp.eye(nv, dtype=dtype)
    zv = jnp.zeros(nv, dtype)
    # (Q, ∂Q/∂q, ∂Q/∂v) at (q ⊕ d, x), linearised at (0, v): its value serves r, K and D,
    # its tangent the second derivatives below (one primal evaluation for both)
    passive, passive_tangent = jax.linearize(
        lambda d, x: _passive_derivatives(model, contact, model.integrate(q, d), x), zv, v
    )
    _, A, B = passive  # A = ∂Q/∂q = −K, B = ∂Q/∂v = −D
    K = -A
    W, dv = _implicit_velocity_change(model, q, v, tau, dt, passive, f_ext)
    v1 = v + dv

    # ∂h/∂(q, v) at (q, v, 0, f_ext) and ∂(M Δv)/∂q at fixed Δv (RNEA at (q, 0, Δv) without
    # gravity or f_ext): two lanes of one `rnea_derivatives` program
    def rnea_partials(g, vel, acc, fe):
        return rnea_derivatives(eqx.tree_at(lambda m: m.gravity, model, g), q, vel, acc, fe)

    fe_axis = None if f_ext is None else 0
    fe = None if f_ext is None else jnp.stack([f_ext, jnp.zeros_like(f_ext)])
    lanes = (jnp.stack([model.gravity, jnp.zeros_like(model.gravity)]), jnp.stack([v, zv]))
    dtau_dq, dtau_dv = jax.vmap(rnea_partials, (0, 0, 0, fe_axis))(*lanes, jnp.stack([zv, dv]), fe)
    dh_q, dh_v, dMdv_dq = dtau_dq[0], dtau_dv[0], dtau_dq[1]

    # The derivatives of `K v` (in r) and of `(dt D + dt² K) Δv` (in W Δv) at fixed vectors:
    # both are `G = −∂Q/∂q y − ∂Q/∂v z` at fixed directions `(y, z)`, so one map over the two
    # directions serves both. Each is one tangent of the first derivatives `(∂Q/∂q, ∂Q/∂v)`
    # along `(y, z)` (symmetry of second derivatives; module docstring), not a Jacobian of
    # `Q`'s tangent in all 2nv directions.
    Y = jnp.stack([v, dt**2 * dv])
    Z = jnp.stack([zv, dt * dv])

    def second(y, z):  # (∂G/∂q, ∂G/∂v) = −(δA + A C(y), δB)
        _, dA, dB = passive_tangent(y, z)
        return -(dA + A @ _chart_bracket(model, q, y)), -dB

    d_q, d_v = jax.vmap(second)(Y, Z)
    dKv_q, dKv_v = d_q[0], d_v[0]
    dWs_q, dWs_v = d_q[1], d_v[1]  # ∂((dt D + dt² K) Δv)/∂(q, v) at fixed Δv

    # r = dt (tau + Q − h − dt K v),  W Δv = r  ⇒  W δΔv = δr − δW Δv
    dr_q = dt * (A - dh_q - dt * dKv_q)
    dr_v = dt * (B - dh_v - dt * (dKv_v + K))
    dr_u = dt * eye
    dW_q = dMdv_dq + dWs_q
    dW_v = dWs_v
    rhs = jnp.concatenate([dr_q - dW_q, dr_v - dW_v, dr_u], 1)
    Ddv = jnp.linalg.solve(W, rhs)
    Dv1 = _in_block(eye, 1) + Ddv
    Jq, Jv = model.integrate_derivatives(q, dt * v1)
    Dq1 = _in_block(Jq, 0) + dt * (Jv @ Dv1)
    return model.integrate(q, dt * v1), v1, Dq1, Dv1


@floating_arguments
@full_precision
def step_derivatives(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    dt: ArrayLike,
    *,
    integrator: str = "semi_implicit_euler",
    contact: GroundContact | None = None,
    f_ext: Float[Array, "nb 6"] | None = None,
) -> StepDerivatives:
    """One step of `jd.step` and its Jacobians in the tangent space (Crocoddyl's `Fx`, `Fu`):

        fx[:, :nv] = ∂(q⁺, v⁺)/∂δq  with q ← q ⊕ δq,   fx[:, nv:] = ∂(q⁺, v⁺)/∂v,
        fu = ∂(q⁺, v⁺)/∂tau,         rows: (q⁺' ⊖ q⁺, v⁺' − v⁺)

    built on the analytic `aba_derivatives` (`rnea_derivatives` for `"implicit"`) and
    `model.integrate_derivatives` (formulas: this module's docstring). Every integrator of
    `jd.step`; the contact forces of a `GroundContact` and the joints' passive forces
    (damping, springs, friction, limit stops) are included, `f_ext` (`F_Bo_W`) is held fixed in world axes. One sample; batch a horizon
    with `jax.vmap` or `jd.batched`.

    **Returns:** `StepDerivatives(q, v, fx, fu)`, `q, v` the next state as `jd.step` gives it
    (to rounding: the same formulas, evaluated along the derivatives).

    **Raises:** `ValueError` naming the argument: shapes of `q`, `v`, `tau`, `f_ext`, a
    non-positive `dt`, an unknown `integrator`, a `contact` that is not a `GroundContact`.
    """
    _check(model, q, v, tau, dt, integrator, contact, f_ext)
    return _IMPLEMENTATIONS[integrator](model, q, v, tau, dt, contact, f_ext)


def _step_derivatives(model, q, v, tau, dt, contact, f_ext, *, integrator):
    nv = model.nv
    dtype = jnp.result_type(q, v, tau)
    model, contact, f_ext = astype((model, contact, f_ext), dtype)
    dt = jnp.asarray(dt, dtype)
    if integrator == "implicit":
        q1, v1, Dq1, Dv1 = _implicit(model, q, v, tau, dt, contact, f_ext)
    else:
        rk4 = integrator == "rk4"
        q1, v1, Dq1, Dv1 = _euler_rk4(model, q, v, tau, dt, contact, f_ext, rk4)
    fx = jnp.concatenate([Dq1[:, : 2 * nv], Dv1[:, : 2 * nv]])
    fu = jnp.concatenate([Dq1[:, 2 * nv :], Dv1[:, 2 * nv :]])
    return StepDerivatives(model.normalize(q1), v1, fx, fu)


_IMPLEMENTATIONS = {
    name: jit_unless_traced(functools.partial(_step_derivatives, integrator=name))
    for name in INTEGRATORS
}
