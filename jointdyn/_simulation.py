"""Simulation: one step of the dynamics (`step`), rollouts (`rollout`) and the ODE's vector field.

Forces on the system: `tau` + `joint_forces` (damping, friction, limit stops) + the contact
forces of a `GroundContact` + `f_ext`. Configurations move on their manifold
(`model.integrate`, never `q + dt·q̇`) and are normalised after every step (unit quaternions,
unit `[cos θ, sin θ]`), so long rollouts stay on it.

Integrators (`integrator=`):

- `"semi_implicit_euler"` (MuJoCo's `Euler`): `v⁺ = v + dt·v̇(q, v)`, `q⁺ = q ⊕ dt·v⁺`.
- `"rk4"` (MuJoCo's `RK4`): classical Runge–Kutta whose stages move `q` with `integrate`:
  `(v₁, a₁) = (v, v̇(q, v))`, `qᵢ = q ⊕ cᵢ dt vᵢ₋₁`, `vᵢ = v + cᵢ dt aᵢ₋₁`, `aᵢ = v̇(qᵢ, vᵢ)`
  (`c = ½, ½, 1`); then `v⁺ = v + dt/6 (a₁ + 2a₂ + 2a₃ + a₄)` and
  `q⁺ = q ⊕ dt/6 (v₁ + 2v₂ + 2v₃ + v₄)`: the stage velocities are averaged in the tangent
  space at `q` and `q` moves once.
- `"implicit"`: linearly implicit Euler in the passive and contact forces `Q(q, v)` (joint
  damping, friction, limit stops, ground contact): with `D = −∂Q/∂v` and `K = −∂Q/∂q`
  (tangent space: the joints' passive forces by forward-mode autodiff, the contact forces'
  analytically, `_passive_derivatives`),

      (M + dt·D + dt²·K) Δv = dt·(M v̇ − dt·K v),   v⁺ = v + Δv,   q⁺ = q ⊕ dt·v⁺,

  with `M v̇ = tau + Q − h`, `h = rnea(q, v, 0, f_ext) = C v + g − Σ Jᵀ f_ext`: since the
  step solves with `W = M + dt·D + dt²·K` anyway, it needs no ABA, and `Q` comes with its
  Jacobians (the contact forces evaluated once).

  This is MuJoCo's `implicitfast` (damping implicit, Coriolis explicit) plus the stiffness
  term, so stiff joint damping *and* stiff contact or limit springs stay stable at a `dt`
  where the explicit integrators blow up. Costs a CRBA, an RNEA, the Jacobians of `Q` and a
  dense solve per step.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._compile import _traced_with_collections_deferred
from ._contact import GroundContact, contact_forces, contact_point_forces
from ._contact_derivatives import contact_joint_force_derivatives
from ._dtype import floating_arguments
from ._dynamics import crba, external_joint_forces, forward_dynamics, joint_forces, rnea
from ._kinematics import qdot_from_v
from ._model import Model, check_sizes
from ._precision import full_precision
from ._scan import checkpointed_scan

INTEGRATORS = ("semi_implicit_euler", "rk4", "implicit")


class Trajectory(eqx.Module):
    """Output of `rollout`: `q` (T+1, nq) and `v` (T+1, nv), the initial state first;
    `contact_forces` (T, npoints, 3), the ground's force on each contact sphere (world axes,
    `[f_x, f_y, f_n]`) at the start of each step, or `None` without contact."""

    q: Float[Array, "T+1 nq"]
    v: Float[Array, "T+1 nv"]
    contact_forces: Float[Array, "T n 3"] | None


def check_contact(contact) -> None:
    """`ValueError` unless `contact` is a `GroundContact` or None (`step`, `rollout`,
    `step_derivatives`, `optimal_control.ShootingProblem`)."""
    if contact is not None and not isinstance(contact, GroundContact):
        raise ValueError(
            f"`contact` must be a jd.GroundContact or None, got {type(contact).__name__}"
        )


def _check(model: Model, q, v, tau, dt, integrator: str, contact, f_ext=None) -> None:
    if integrator not in INTEGRATORS:
        raise ValueError(f"`integrator` must be one of {INTEGRATORS}, got {integrator!r}")
    check_sizes(model, q=q, v=v, tau=tau, f_ext=f_ext)
    if jnp.ndim(dt) != 0:
        raise ValueError(f"`dt` must be a scalar, got shape {jnp.shape(dt)}")
    if not isinstance(dt, jax.core.Tracer) and not float(dt) > 0:
        raise ValueError(f"`dt` must be positive, got {float(dt)}")
    check_contact(contact)


def _external(model, contact, q, v, f_ext):
    """`f_ext` plus the contact forces (None if neither)."""
    if contact is None:
        return f_ext
    f = contact_forces(model, contact, q, v)
    return f if f_ext is None else f + f_ext


def _accel(model, q, v, tau, contact, f_ext):
    return forward_dynamics(model, q, v, tau, _external(model, contact, q, v, f_ext))


def _passive(model, contact, q, v):
    """`Q(q, v)`: joint passive forces plus the contact forces' generalized forces
    `Σ Jᵀ F` (`external_joint_forces`)."""
    Q = joint_forces(model, q, v)
    if contact is not None:
        Q = Q + external_joint_forces(model, q, contact_forces(model, contact, q, v))
    return Q


def _passive_derivatives(model, contact, q, v):
    """`Q(q, v)` (passive and contact generalized forces) and `(∂Q/∂q, ∂Q/∂v)`, q in the
    tangent space: the joints' passive forces by forward mode (cheap, local to each joint;
    two maps, not one over all `2nv` directions, so that zero tangents drop out), the contact
    forces' analytically (`contact_joint_force_derivatives`: forward mode through the
    kinematics cost ~36 kinematics passes on the quadruped)."""
    zero = jnp.zeros_like(v)
    Q = joint_forces(model, q, v)
    dQ_dq = jax.jacfwd(lambda d: joint_forces(model, model.integrate(q, d), v))(zero)
    dQ_dv = jax.jacfwd(lambda x: joint_forces(model, q, x))(v)
    if contact is None:
        return Q, dQ_dq, dQ_dv
    Qc, dQc_dq, dQc_dv = contact_joint_force_derivatives(model, contact, q, v)
    return Q + Qc, dQ_dq + dQc_dq, dQ_dv + dQc_dv


def _step(model, q, v, tau, dt, integrator, contact, f_ext):
    if integrator == "semi_implicit_euler":
        v1 = v + dt * _accel(model, q, v, tau, contact, f_ext)
        return model.integrate(q, dt * v1), v1
    if integrator == "rk4":
        vs, accs = [v], [_accel(model, q, v, tau, contact, f_ext)]
        for c in (0.5, 0.5, 1.0):
            qi = model.integrate(q, c * dt * vs[-1])
            vi = v + c * dt * accs[-1]
            vs.append(vi)
            accs.append(_accel(model, qi, vi, tau, contact, f_ext))
        w = (1.0, 2.0, 2.0, 1.0)
        dv = sum(wi * a for wi, a in zip(w, accs, strict=True)) * (dt / 6)
        dq = sum(wi * x for wi, x in zip(w, vs, strict=True)) * (dt / 6)
        return model.integrate(q, dq), v + dv
    # implicit
    _, dv = _implicit_velocity_change(
        model, q, v, tau, dt, _passive_derivatives(model, contact, q, v), f_ext
    )
    v1 = v + dv
    return model.integrate(q, dt * v1), v1


def _implicit_velocity_change(model, q, v, tau, dt, passive, f_ext):
    """The implicit step's `(W, Δv)` from `passive = (Q, ∂Q/∂q, ∂Q/∂v)`:

        W = M + dt D + dt² K,   W Δv = dt (tau + Q − h − dt K v),   h = rnea(q, v, 0, f_ext)

    (`K = −∂Q/∂q`, `D = −∂Q/∂v`; `M v̇ = tau + Q − h`, so no ABA: `W` is solved anyway).
    Shared by `step` and `step_derivatives`."""
    Q, A, B = passive
    W = crba(model, q) - dt * B - dt**2 * A
    h = rnea(model, q, v, jnp.zeros_like(v), f_ext)
    return W, jnp.linalg.solve(W, dt * (tau + Q - h + dt * (A @ v)))


@floating_arguments
@full_precision
def step(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    dt: ArrayLike,
    *,
    integrator: str = "semi_implicit_euler",
    contact: GroundContact | None = None,
    f_ext: Float[Array, "nb 6"] | None = None,
) -> tuple[Float[Array, " nq"], Float[Array, " nv"]]:
    """One time step `(q, v) → (q⁺, v⁺)` of length `dt` under `tau`, the joints' passive
    forces, the `contact` forces and `f_ext` (`F_Bo_W`, held over the step). Integrators and
    formulas: this module's docstring. `q⁺` is normalised. A pure function: `jit`, `vmap`,
    `grad` (in every argument, `dt` and the contact parameters included).

    **Raises:** `ValueError` naming the argument: shapes of `q`, `v`, `tau`, `f_ext`, a
    non-positive `dt`, an unknown `integrator`, a `contact` that is not a `GroundContact`.
    """
    _check(model, q, v, tau, dt, integrator, contact, f_ext)
    q1, v1 = _step(model, q, v, tau, dt, integrator, contact, f_ext)
    return model.normalize(q1), v1


@floating_arguments
@full_precision
@_traced_with_collections_deferred
def rollout(
    model: Model,
    q0: Float[Array, " nq"],
    v0: Float[Array, " nv"],
    controls: Float[Array, "T nv"] | Callable,
    dt: ArrayLike,
    *,
    steps: int | None = None,
    integrator: str = "semi_implicit_euler",
    contact: GroundContact | None = None,
    checkpoint: str | int = "none",
) -> Trajectory:
    """`T` steps of `step` from `(q0, v0)`, as one `lax.scan` (compiles once, whatever `T`).

    **Arguments:**
    - `controls`: the torques, an array `(T, nv)`; or a policy `policy(k, q, v) -> tau`
      (k the step index), then `steps=T` is required. `T = 0` gives the initial state.
    - `dt`, `integrator`, `contact`: as in `step`.
    - `checkpoint`: what reverse mode stores (`checkpointed_scan`): `"none"` every step's
      intermediates, `"step"` only the state entering each step (recomputed backwards: far
      less memory for long rollouts), or an int `k` (segments of `k` steps).

    **Returns:** a `Trajectory` (`q`, `v` of length T+1; the contact forces of each step).
    Composes with `jax.vmap` / `jd.batched` (a batch of rollouts) and `jax.grad` (through
    model parameters, contact parameters, initial state, controls and `dt`).
    """
    if callable(controls):
        if steps is None or int(steps) < 0:
            raise ValueError("a policy `controls` needs `steps` (a number of steps, 0 or more)")
        policy, xs = controls, jnp.arange(int(steps))
    else:
        controls = jnp.asarray(controls)
        if controls.ndim != 2 or controls.shape[1] != model.nv:
            raise ValueError(
                f"`controls` must be an array (T, {model.nv}) or a policy, got {controls.shape}"
            )
        if steps is not None and int(steps) != controls.shape[0]:
            raise ValueError(f"`steps`={steps} differs from len(controls)={controls.shape[0]}")
        policy, xs = None, controls
    tau0 = jnp.zeros(model.nv, jnp.result_type(q0, v0)) if policy or not len(xs) else xs[0]
    _check(model, q0, v0, tau0, dt, integrator, contact)

    def body(state, x):
        q, v = state
        tau = policy(x, q, v) if policy else x
        forces = None if contact is None else contact_point_forces(model, contact, q, v)[0]
        q1, v1 = _step(model, q, v, tau, dt, integrator, contact, None)
        q1 = model.normalize(q1)
        return (q1, v1), (q1, v1, forces)

    (_, _), (qs, vs, forces) = checkpointed_scan(body, (q0, v0), xs, checkpoint=checkpoint)
    return Trajectory(jnp.concatenate([q0[None], qs]), jnp.concatenate([v0[None], vs]), forces)


def vector_field(
    model: Model, contact: GroundContact | None = None
) -> Callable[[ArrayLike, tuple, object], tuple]:
    """The equations of motion as an ODE vector field `f(t, y, args) -> dy/dt` with
    `y = (q, v)`, `dy/dt = (N(q) v, v̇)`, and `args` the torques: an array `tau`, or a function
    `tau(t, q, v)`. Its signature is diffrax's, so it is an `ODETerm`:

        term = diffrax.ODETerm(jd.vector_field(model, contact))
        sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 1e-3, (q0, v0), args=tau)

    A general-purpose solver moves `q` in ℝⁿᵠ (`q + ∫ q̇`), off the manifold by its error;
    normalise the result (`model.normalize`) or prefer `step`/`rollout`, which integrate on it.
    """

    @full_precision
    def f(t, y, args):
        q, v = y
        tau = args(t, q, v) if callable(args) else args
        return qdot_from_v(model, q, v), _accel(model, q, v, tau, contact, None)

    return f
