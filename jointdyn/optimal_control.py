"""Trajectory optimisation by multiple shooting: a `ShootingProblem` and an FDDP solver
(`solve`), with control bounds (box-FDDP), as Crocoddyl's `SolverFDDP` / `SolverBoxFDDP`.

    from jointdyn import optimal_control as oc

    problem = oc.ShootingProblem(model, q0, v0, horizon=50, dt=0.01,
                                 running_cost=lambda q, v, tau: 1e-3 * tau @ tau,
                                 terminal_cost=lambda q, v: (q - q_goal) @ (q - q_goal) + v @ v,
                                 tau_lower=-10.0, tau_upper=10.0)
    sol = oc.solve(problem)        # sol.q (T+1, nq), sol.v (T+1, nv), sol.tau (T, nv), sol.cost

**Name.** A public module, not a top-level function: it holds a problem, a solver and its
solution, a small field of its own ("optimal control", as Crocoddyl, acados and the
literature call it) that builds on the dynamics but that a user of `aba` never needs. Its
names (`ShootingProblem`, `solve`, `Solution`) read as `oc.…` without clashing with
`jd.step`/`jd.rollout`.

**Problem.** States `x = (q, v)`, controls `u = tau` (one per velocity), knots `t = 0..T`:

    min  Σ_{t<T} ℓ(q_t, v_t, u_t) + ℓ_T(q_T, v_T)
    s.t. (q_{t+1}, v_{t+1}) = step(q_t, v_t, u_t, dt),  (q_0, v_0) given,  lower ≤ u_t ≤ upper,

`step` = `jd.step` with the problem's integrator and ground contact, if any
(`"semi_implicit_euler"` is Crocoddyl's `IntegratedActionModelEuler`: `v⁺ = v + dt·v̇`,
`q⁺ = q ⊕ dt·v⁺`; a `jd.GroundContact`'s compliant forces act in every step, so contacts
are made and broken by the dynamics, with no contact sequence to give). `ℓ` is the cost *of
one knot*: Crocoddyl's Euler model multiplies its differential cost by `dt`, so write
`dt · w · ½‖r‖²` to reproduce a Crocoddyl cost of weight `w`.

**Derivatives.** Tangent space at each knot (Crocoddyl's convention): `x ⊕ δx =
(q ⊕ δq, v + δv)`, `x₁ ⊖ x₀ = (q₁ ⊖ q₀, v₁ − v₀)`. Dynamics `F_x = ∂x⁺/∂x`, `F_u = ∂x⁺/∂u`
(2nv × 2nv, 2nv × nv) from `jd.step_derivatives` (analytic). Costs, by autodiff of `z ↦ ℓ(x ⊕ δx, u + δu)` at 0, in one of two
forms, chosen by what the function returns:

- a **scalar**: gradient and **full Hessian** (`jax.hessian`). Exact, but it can be
  indefinite for nonlinear terms (an end-effector distance far from its target): the
  regularisation then rises until the backward pass succeeds, and the solver may need more
  iterations than Crocoddyl.
- a **residual vector** `r`: the cost is `½‖r‖²`, with gradient `Jᵀr` and the
  **Gauss–Newton** Hessian `JᵀJ` (`J = ∂r/∂z`): Crocoddyl's residual costs
  (`w · ½ Σ aᵢ rᵢ²` is the residual `√(w aᵢ) rᵢ`). Always positive semi-definite.

**Solver (FDDP, Mastalli et al. 2020, Crocoddyl's `SolverFDDP::solve` step by step).** The
initial guess `(xs, us)` need not be a rollout: the gaps `f_0 = x_0 ⊖ xs_0`,
`f_{t+1} = step(xs_t, us_t) ⊖ xs_{t+1}` stay open until a full step closes them. Backward pass
(`μ` the regularisation, added to `V_xx` and `Q_uu`):

    Q_x = ℓ_x + F_xᵀ V'_x,   Q_u = ℓ_u + F_uᵀ V'_x,   Q_xx = ℓ_xx + F_xᵀ V'_xx F_x,
    Q_uu = ℓ_uu + F_uᵀ V'_xx F_u + μI,   Q_xu = ℓ_xu + F_xᵀ V'_xx F_u,
    k = Q_uu⁻¹ Q_u,   K = Q_uu⁻¹ Q_xuᵀ,
    V_x = Q_x − Kᵀ Q_u (+ V_xx f_t while infeasible),   V_xx = Q_xx − Q_xu K + μI.

Forward pass with step `α ∈ {1, ½, …, 2⁻⁹}`: `x̂_0 = x_0 ⊕ (α−1) f_0`,
`û_t = u_t − α k_t − K_t (x̂_t ⊖ x_t)`, `x̂_{t+1} = step(x̂_t, û_t) ⊕ (α−1) f_{t+1}` (no gaps
once feasible or when `α = 1`). Expected improvement `ΔV(α) = α (d₁ + ½ α d₂)` with Crocoddyl's
`d₁ = Σ Q_uᵀk − Σ V_xᵀ f + Δ_f`, `d₂ = −Σ kᵀQ_uu k + Σ fᵀV_xx f − 2Δ_f`,
`Δ_f = −Σ f_tᵀ V_xx,t (x_t ⊖ x̂_t)`. Accept when `ΔV ≥ 0` and (`|d₁| < 10⁻¹²` or the actual
decrease `> 0.1 ΔV`), or, while infeasible, when `ΔV < 0` and the decrease `> 2 ΔV`. The
regularisation `μ` (from 10⁻⁹, within [10⁻⁹, 10⁹]) is divided by 10 after a step `α > ½` and
multiplied by 10 after `α ≤ 0.01` or a failed backward pass (non positive-definite `Q_uu`);
the solve stops with `converged` when the trajectory is feasible and
`|d₁ + ½ d₂| < tolerance`, and gives up when `μ` reaches 10⁹.

**Control bounds (box-FDDP, Crocoddyl's `SolverBoxFDDP`).** Once the trajectory is feasible,
the feed-forward step solves the box QP
`min_δu ½ δuᵀ Q_uu δu + Q_uᵀ δu` s.t. `lower − u_t ≤ δu ≤ upper − u_t` by projected Newton
(Bertsekas 1982; Tassa et al. 2014): free set `{i: not (δu_i at a bound and the gradient
pushing out)}`, Newton step on the free set, projected Armijo line search. Then `k = −δu`,
`K = [Q_uu,ff⁻¹ 0] Q_xuᵀ` (zero rows on clamped controls), and the forward pass clips `û`.
One departure from Crocoddyl: it zeroes the clamped entries of `Q_u` before the expected
improvement; here they are kept, so that `d₁ + ½d₂` is the box QP's own decrease
`−(½δuᵀQ_uu δu + Q_uᵀδu)`. With Crocoddyl's zeroing a step that moves a control onto its
bound is predicted to *raise* the cost, full steps are refused and the controls crawl towards
the bound by halving steps, while `|d₁ + ½d₂|` (which no longer sees them) reports
convergence. The optimum is the same.

**Batches and differentiation.** Everything is a pure function of pytrees: `jax.vmap` over a
function that builds and solves a problem solves a batch (targets, initial states, models) in
one program. Under `vmap` every loop runs until the slowest problem is done (the others keep
their result), so prefer `jd.batched(fn, chunk_size=8, layout="batch_first")` (`vmap` over
small chunks, `lax.map` over the chunks) for large batches: see benchmarks/NOTES.md.
The solution is differentiated **unrolled**: `differentiable=True` runs the solver as a
`fori_loop` of exactly `max_iterations` iterations (the line search tries every step length
and the box QP runs a fixed number of Newton iterations), so reverse-mode `jax.grad` goes
through the iterations; iterations past convergence are Newton-like steps at the optimum that
leave the solution in place and refine its derivative. With `differentiable=False` (default)
the loops are `lax.while_loop`s that stop early (forward mode only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from ._batching import batched
from ._compile import _traced_with_collections_deferred
from ._contact import GroundContact
from ._dtype import floating
from ._model import Model
from ._precision import full_precision
from ._simulation import INTEGRATORS, check_contact, step
from ._step_derivatives import step_derivatives

__all__ = ["ShootingProblem", "Solution", "solve"]

# Crocoddyl's defaults (SolverDDP / SolverFDDP / BoxQP).
_ALPHAS = tuple(0.5**i for i in range(10))
_REG_MIN, _REG_MAX, _REG_FACTOR = 1e-9, 1e9, 10.0
_TH_ACCEPT, _TH_ACCEPT_NEG, _TH_GRAD = 0.1, 2.0, 1e-12
_TH_STEP_DEC, _TH_STEP_INC = 0.5, 0.01
_BOXQP_ITERATIONS, _BOXQP_TH_GRAD = 20, 1e-12


class ShootingProblem(eqx.Module):
    """An optimal-control problem over `horizon` knots (this module's docstring).

    **Arguments:**
    - `model`: the `jd.Model`; `q0` (nq,), `v0` (nv,): the initial state.
    - `horizon`: the number of controls `T ≥ 1` (states: `T + 1`). `dt`: the time step.
    - `running_cost(q, v, tau)`: the cost of one knot `t < T`, a scalar (full Hessian) or a
      residual vector `r` for `½‖r‖²` (Gauss–Newton Hessian): see the module docstring.
    - `terminal_cost(q, v)`: the cost of the final state, a scalar or a residual vector.
      Both are JAX functions, differentiated by autodiff. To batch or differentiate over a
      parameter of a cost, build the problem inside the `vmap`/`grad`-ed function (closures
      work), or pass a pytree callable (`jax.tree_util.Partial(cost, target=target)`).
    - `integrator`: as in `jd.step` (default `"semi_implicit_euler"`, Crocoddyl's Euler).
    - `contact`: a `jd.GroundContact` whose forces act in every step (as `jd.step`'s
      `contact`; its Jacobians in `jd.step_derivatives` are analytic), or `None`.
    - `tau_lower`, `tau_upper`: control bounds, scalars or (nv,); `None` for none
      (box-FDDP when either is given).

    **Raises:** `ValueError` naming the argument: shapes of `q0`, `v0`, `tau_lower`,
    `tau_upper`; `horizon < 1`; a non-positive `dt`; `tau_lower > tau_upper`; an unknown
    `integrator`; a cost that is not callable; a `contact` that is not a `GroundContact`.
    """

    model: Model
    q0: Float[Array, " nq"]
    v0: Float[Array, " nv"]
    dt: Float[Array, ""]
    running_cost: Callable
    terminal_cost: Callable
    tau_lower: Float[Array, " nv"]
    tau_upper: Float[Array, " nv"]
    contact: GroundContact | None
    horizon: int = eqx.field(static=True)
    integrator: str = eqx.field(static=True)
    bounded: bool = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        q0: ArrayLike,
        v0: ArrayLike,
        horizon: int,
        dt: ArrayLike,
        running_cost: Callable,
        terminal_cost: Callable,
        *,
        integrator: str = "semi_implicit_euler",
        contact: GroundContact | None = None,
        tau_lower: ArrayLike | None = None,
        tau_upper: ArrayLike | None = None,
    ):
        if not isinstance(horizon, (int, np.integer)) or isinstance(horizon, bool):
            raise ValueError(f"`horizon` must be an int, got {type(horizon).__name__}")
        if horizon < 1:
            raise ValueError(f"`horizon` must be at least 1, got {horizon}")
        if integrator not in INTEGRATORS:
            raise ValueError(f"`integrator` must be one of {INTEGRATORS}, got {integrator!r}")
        check_contact(contact)
        if not callable(running_cost):
            raise ValueError("`running_cost` must be a function (q, v, tau) -> scalar or residual")
        if not callable(terminal_cost):
            raise ValueError("`terminal_cost` must be a function (q, v) -> scalar or residual")
        q0, v0 = floating(q0, "q0"), floating(v0, "v0")  # integers and lists: float arrays
        for name, x, n in (("q0", q0, model.nq), ("v0", v0, model.nv)):
            if x.shape != (n,):
                raise ValueError(f"`{name}` must have shape ({n},), got {x.shape}")
        dtype = jnp.result_type(q0, v0)
        if jnp.ndim(dt) != 0:
            raise ValueError(f"`dt` must be a scalar, got shape {jnp.shape(dt)}")
        if not isinstance(dt, jax.core.Tracer) and not float(dt) > 0:
            raise ValueError(f"`dt` must be positive, got {float(dt)}")
        bounds = []
        for name, b, default in (
            ("tau_lower", tau_lower, -jnp.inf),
            ("tau_upper", tau_upper, jnp.inf),
        ):
            b = jnp.full((model.nv,), default, dtype) if b is None else jnp.asarray(b, dtype)
            if b.ndim == 0:
                b = jnp.full((model.nv,), b, dtype)
            if b.shape != (model.nv,):
                raise ValueError(
                    f"`{name}` must be a scalar or have shape ({model.nv},), got {b.shape}"
                )
            bounds.append(b)
        lower, upper = bounds
        if not isinstance(lower, jax.core.Tracer) and not isinstance(upper, jax.core.Tracer):
            bad = np.flatnonzero(np.asarray(lower) > np.asarray(upper))
            if bad.size:
                raise ValueError(f"`tau_lower` > `tau_upper` at controls {bad.tolist()}")
        self.model = model
        self.q0, self.v0 = q0.astype(dtype), v0.astype(dtype)
        self.dt = jnp.asarray(dt, dtype)
        self.running_cost, self.terminal_cost = running_cost, terminal_cost
        self.tau_lower, self.tau_upper = lower, upper
        self.contact = contact
        self.horizon, self.integrator = int(horizon), integrator
        self.bounded = tau_lower is not None or tau_upper is not None


class Solution(eqx.Module):
    """Output of `solve`: the trajectory `q` (T+1, nq), `v` (T+1, nv), `tau` (T, nv); its
    `cost`; `iterations` (solver iterations run, until convergence); `converged` (feasible and
    `|d₁ + ½d₂| < tolerance`); `stop` (that criterion's last value); `gap` (the largest
    dynamics gap `‖f_t‖∞`, 0 once feasible); `cost_history` (max_iterations,): the cost after
    each iteration, NaN after the last one."""

    q: Float[Array, "T+1 nq"]
    v: Float[Array, "T+1 nv"]
    tau: Float[Array, "T nv"]
    cost: Float[Array, ""]
    iterations: Int[Array, ""]
    converged: Bool[Array, ""]
    stop: Float[Array, ""]
    gap: Float[Array, ""]
    cost_history: Float[Array, " max_iterations"]


# ---------------------------------------------------------------------------------------------
# tangent-space helpers


def _oplus(model: Model, q, v, dx):
    """`x ⊕ δx = (q ⊕ δq, v + δv)`."""
    return model.normalize(model.integrate(q, dx[: model.nv])), v + dx[model.nv :]


def _ominus(model: Model, q0, v0, q1, v1):
    """`x₁ ⊖ x₀ = (q₁ ⊖ q₀, v₁ − v₀)` (Crocoddyl's `diff(x0, x1)`)."""
    return jnp.concatenate([model.difference(q0, q1), v1 - v0])


def _step(problem: ShootingProblem, q, v, tau):
    kw = dict(integrator=problem.integrator, contact=problem.contact)
    return step(problem.model, q, v, tau, problem.dt, **kw)


def _dynamics_derivatives(problem: ShootingProblem, q, v, tau):
    """`(q⁺, v⁺, F_x, F_u)` in the tangent space: `jd.step_derivatives` (analytic ABA
    derivatives and the Lie-group Jacobians of `integrate`)."""
    kw = dict(integrator=problem.integrator, contact=problem.contact)
    d = step_derivatives(problem.model, q, v, tau, problem.dt, **kw)
    return d.q, d.v, d.fx, d.fu


def _knot_dynamics_derivatives(problem: ShootingProblem, qs, vs, us):
    """`_dynamics_derivatives` at every knot, as one chunk of `jd.batched` (no sharding: nested
    meshes fail under an outer `jd.batched`). On CPU that chunk is `batch_last`: the knots
    along the last axis of every array, so that `aba_derivatives`' small matrix products run
    vectorised across knots (panda, horizon 100: 18-21 µs per knot against 35-36 µs for
    `jax.vmap`); elsewhere `batched`'s layout is a `vmap` of the chunk."""
    fn = functools.partial(_dynamics_derivatives, problem)
    return batched(fn, chunk_size=max(1, us.shape[0]), shard=False)(qs, vs, us)


def _cost_derivatives(fn, z0):
    """Value, gradient and Hessian of `fn` at `z0`. A scalar `fn` is a cost: its full Hessian
    (`jax.hessian`). A vector `fn` is a residual `r` of the cost `½‖r‖²`: gradient `Jᵀr` and
    the Gauss–Newton Hessian `JᵀJ` (`J = ∂r/∂z` by forward mode), as Crocoddyl's residual costs."""
    user_fn = fn
    fn = lambda z: jnp.asarray(user_fn(z))  # noqa: E731  (a Python number is a scalar cost)
    out = jax.eval_shape(fn, z0)
    if out.ndim == 0:
        return fn(z0), jax.grad(fn)(z0), jax.hessian(fn)(z0)
    if out.ndim != 1:
        raise ValueError(f"a cost must return a scalar or a residual vector, got shape {out.shape}")
    r, J = fn(z0), jax.jacfwd(fn)(z0)
    return 0.5 * r @ r, J.T @ r, J.T @ J


def _running_derivatives(problem: ShootingProblem, q, v, tau):
    """Value, gradient (3nv) and Hessian (3nv × 3nv) of `δ ↦ ℓ(x ⊕ δx, u + δu)` at 0."""
    model, nv = problem.model, problem.model.nv

    def c(z):
        qz = model.integrate(q, z[:nv])
        return problem.running_cost(qz, v + z[nv : 2 * nv], tau + z[2 * nv :])

    return _cost_derivatives(c, jnp.zeros(3 * nv, q.dtype))


def _terminal_derivatives(problem: ShootingProblem, q, v):
    model, nv = problem.model, problem.model.nv

    def c(z):
        return problem.terminal_cost(model.integrate(q, z[:nv]), v + z[nv:])

    return _cost_derivatives(c, jnp.zeros(2 * nv, q.dtype))


def _value(r):
    """A cost's value: the scalar itself, or `½‖r‖²` of a residual."""
    r = jnp.asarray(r)
    return r if r.ndim == 0 else 0.5 * r @ r


# ---------------------------------------------------------------------------------------------
# loops: while_loop (early exit, forward mode) or fixed-count fori_loop (reverse mode too)


def _loop(cond, body, init, max_count: int, fixed: bool):
    """Run `body` while `cond` holds, at most `max_count` times. `fixed`: `fori_loop` of
    `max_count` iterations, each applied only where `cond` holds (reverse-differentiable)."""
    if fixed:

        def step_(_, c):
            new = body(c)
            keep = cond(c)
            return jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, c)

        return jax.lax.fori_loop(0, max_count, step_, init)

    def cond_(c):
        return (c[0] < max_count) & cond(c[1])

    def body_(c):
        return c[0] + 1, body(c[1])

    return jax.lax.while_loop(cond_, body_, (jnp.asarray(0), init))[1]


# ---------------------------------------------------------------------------------------------
# box QP


def _box_qp(H, g, lower, upper, x, fixed: bool):
    """`min ½xᵀHx + gᵀx` s.t. `lower ≤ x ≤ upper` by projected Newton from `x` (clipped).

    Returns `(x, free)`: the solution and the free set at it (not clamped: strictly inside,
    or at a bound with the gradient pointing inwards)."""
    n = g.shape[0]
    eye = jnp.eye(n, dtype=H.dtype)
    alphas = jnp.asarray(_ALPHAS, H.dtype)

    def free_set(x):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        return ~clamped, grad

    def f(x):
        return 0.5 * x @ H @ x + g @ x

    def body(c):
        x, _ = c
        free, grad = free_set(x)
        Hf = jnp.where(free[:, None] & free[None, :], H, eye)
        dx = -jnp.linalg.solve(Hf, jnp.where(free, grad, 0.0))
        xs = jnp.clip(x + alphas[:, None] * dx, lower, upper)
        fs = jax.vmap(f)(xs)
        ok = f(x) - fs > _TH_ACCEPT * ((x - xs) @ grad)
        i = jnp.argmax(ok)
        x_new = jnp.where(ok[i], xs[i], x)
        done = jnp.max(jnp.abs(jnp.where(free, grad, 0.0))) <= _BOXQP_TH_GRAD
        return x_new, done | jnp.all(x_new == x)

    x = jnp.clip(x, lower, upper)
    x, _ = _loop(lambda c: ~c[1], body, (x, jnp.asarray(False)), _BOXQP_ITERATIONS, fixed)
    return x, free_set(x)[0]


# ---------------------------------------------------------------------------------------------
# one FDDP iteration


class _State(eqx.Module):
    q: Array
    v: Array
    u: Array
    cost: Array
    reg: Array
    feasible: Array
    was_feasible: Array
    stop: Array
    gap: Array
    converged: Array
    failed: Array
    iteration: Array
    iterations: Array
    history: Array


def _derivatives(problem: ShootingProblem, qs, vs, us):
    model = problem.model
    (qn, vn, Fx, Fu) = _knot_dynamics_derivatives(problem, qs[:-1], vs[:-1], us)
    c, g, H = jax.vmap(lambda q, v, u: _running_derivatives(problem, q, v, u))(qs[:-1], vs[:-1], us)
    cT, gT, HT = _terminal_derivatives(problem, qs[-1], vs[-1])
    gaps = jnp.concatenate(
        [
            _ominus(model, qs[0], vs[0], problem.q0, problem.v0)[None],
            jax.vmap(lambda a, b, c_, d: _ominus(model, a, b, c_, d))(qs[1:], vs[1:], qn, vn),
        ]
    )
    return jnp.sum(c) + cT, Fx, Fu, g, H, gT, HT, gaps


def _backward(problem, Fx, Fu, g, H, gT, HT, fs, us, reg, feasible, fixed):
    ndx = 2 * problem.model.nv
    eye_x = jnp.eye(ndx, dtype=HT.dtype)
    infeasible = ~feasible
    VxxT = HT + reg * eye_x
    VxT = gT + jnp.where(infeasible, VxxT @ fs[-1], 0.0)

    def body(carry, inp):
        Vx, Vxx = carry
        fx, fu, gt, Ht, f, u = inp
        # Q = ℓ'' + Fᵀ V'xx F and q = ℓ' + Fᵀ V'x with F = [F_x F_u]: two products
        F = jnp.concatenate([fx, fu], axis=1)
        FV = F.T @ Vxx
        Qall = Ht + FV @ F
        qall = gt + F.T @ Vx
        Qx, Qu = qall[:ndx], qall[ndx:]
        Qxx, Qxu = Qall[:ndx, :ndx], Qall[:ndx, ndx:]
        Quu = Qall[ndx:, ndx:] + reg * jnp.eye(Qu.shape[0], dtype=Qall.dtype)
        L = jnp.linalg.cholesky(Quu)
        kK = jax.scipy.linalg.cho_solve((L, True), jnp.concatenate([Qu[:, None], Qxu.T], axis=1))
        k, K = kK[:, 0], kK[:, 1:]
        if problem.bounded:
            x, free = _box_qp(Quu, Qu, problem.tau_lower - u, problem.tau_upper - u, -k, fixed)
            mask = free[:, None] & free[None, :]
            Hf = jnp.where(mask, Quu, jnp.eye(Qu.shape[0], dtype=Quu.dtype))
            Kb = jnp.where(
                free[:, None], jnp.linalg.solve(Hf, jnp.where(free[:, None], Qxu.T, 0.0)), 0.0
            )
            k = jnp.where(feasible, -x, k)
            K = jnp.where(feasible, Kb, K)
        Vx_t = Qx - K.T @ Qu
        Vxx_t = Qxx - Qxu @ K
        Vxx_t = 0.5 * (Vxx_t + Vxx_t.T) + reg * eye_x
        Vx_t = Vx_t + jnp.where(infeasible, Vxx_t @ f, 0.0)
        return (Vx_t, Vxx_t), (k, K, Vx_t, Vxx_t, Qu, Quu @ k)

    _, (k, K, Vx, Vxx, Qu, Quuk) = jax.lax.scan(
        body, (VxT, VxxT), (Fx, Fu, g, H, fs[:-1], us), reverse=True
    )
    Vx = jnp.concatenate([Vx, VxT[None]])
    Vxx = jnp.concatenate([Vxx, VxxT[None]])
    ok = jnp.all(jnp.isfinite(Vx)) & jnp.all(jnp.isfinite(Vxx)) & jnp.all(jnp.isfinite(K))
    return k, K, Vx, Vxx, Qu, Quuk, ok


def _forward(problem, s: _State, k, K, fs, alpha):
    """Crocoddyl's `forwardPass(alpha)`: the trial trajectory and its cost."""
    model = problem.model
    closing = s.feasible | (alpha == 1.0)

    def shift(qn, vn, f):
        return _oplus(model, qn, vn, jnp.where(closing, 0.0, (alpha - 1.0) * f))

    def body(carry, inp):
        qn, vn = carry
        q, v, u, kt, Kt, f = inp
        qt, vt = shift(qn, vn, f)
        ut = u - alpha * kt - Kt @ _ominus(model, q, v, qt, vt)
        if problem.bounded:
            ut = jnp.clip(ut, problem.tau_lower, problem.tau_upper)
        q1, v1 = _step(problem, qt, vt, ut)
        return (q1, v1), (qt, vt, ut, _value(problem.running_cost(qt, vt, ut)))

    (qT, vT), (qs, vs, us, cs) = jax.lax.scan(
        body, (problem.q0, problem.v0), (s.q[:-1], s.v[:-1], s.u, k, K, fs[:-1])
    )
    qT, vT = shift(qT, vT, fs[-1])
    cost = jnp.sum(cs) + _value(problem.terminal_cost(qT, vT))
    return jnp.concatenate([qs, qT[None]]), jnp.concatenate([vs, vT[None]]), us, cost


def _iteration(problem, s: _State, tolerance, fixed: bool) -> _State:
    model = problem.model
    cost, Fx, Fu, g, H, gT, HT, gaps = _derivatives(problem, s.q, s.v, s.u)
    infeasible = ~s.feasible
    fs = jnp.where(infeasible, gaps, 0.0)
    k, K, Vx, Vxx, Qu, Quuk, ok = _backward(
        problem, Fx, Fu, g, H, gT, HT, fs, s.u, s.reg, s.feasible, fixed
    )

    # updateExpectedImprovement
    dg = jnp.sum(Qu * k) - jnp.where(infeasible, jnp.sum(Vx * fs), 0.0)
    dq = -jnp.sum(k * Quuk) + jnp.where(infeasible, jnp.einsum("ti,tij,tj->", fs, Vxx, fs), 0.0)
    alphas = jnp.asarray(_ALPHAS, cost.dtype)

    def trial(i):
        alpha = alphas[i]
        qs, vs, us, cost_try = _forward(problem, s, k, K, fs, alpha)
        dx = jax.vmap(lambda a, b, c, d: _ominus(model, a, b, c, d))(qs, vs, s.q, s.v)
        dv = jnp.where(infeasible, -jnp.einsum("ti,tij,tj->", fs, Vxx, dx), 0.0)
        d1, d2 = dg + dv, dq - 2.0 * dv
        expected = alpha * (d1 + 0.5 * alpha * d2)
        dV = cost - cost_try
        finite = jnp.isfinite(cost_try) & jnp.all(jnp.isfinite(qs)) & jnp.all(jnp.isfinite(vs))
        accept = jnp.where(
            expected >= 0,
            (jnp.abs(d1) < _TH_GRAD) | (dV > _TH_ACCEPT * expected),
            infeasible & (dV > _TH_ACCEPT_NEG * expected),
        )
        return (qs, vs, us, cost_try), accept & finite, finite, d1 + 0.5 * d2

    # line search: the first accepted step length (Crocoddyl's order)
    empty = (s.q, s.v, s.u, cost)
    init = (jnp.asarray(0), jnp.asarray(False), empty, s.stop, jnp.asarray(_ALPHAS[-1], cost.dtype))

    def ls_body(c):
        i, _, best, stop, _ = c
        cand, accept, finite, crit = trial(i)
        best = jax.tree.map(lambda a, b: jnp.where(accept, a, b), cand, best)
        stop = jnp.where(finite, jnp.abs(crit), stop)
        return i + 1, accept, best, stop, jnp.where(accept, alphas[i], alphas[-1])

    _, accepted, (qs, vs, us, cost_try), stop, steplength = _loop(
        lambda c: ok & ~c[1] & (c[0] < len(_ALPHAS)), ls_body, init, len(_ALPHAS), fixed
    )
    accepted = accepted & ok
    steplength = jnp.where(ok, steplength, 0.0)

    was_feasible = jnp.where(accepted, s.feasible, s.was_feasible)
    feasible = jnp.where(accepted, s.feasible | (steplength == 1.0), s.feasible)
    new_cost = jnp.where(accepted, cost_try, cost)
    reg = jnp.where(steplength > _TH_STEP_DEC, jnp.maximum(s.reg / _REG_FACTOR, _REG_MIN), s.reg)
    reg = jnp.where(steplength <= _TH_STEP_INC, jnp.minimum(reg * _REG_FACTOR, _REG_MAX), reg)
    converged = was_feasible & (stop < tolerance) & ok
    shrink = jnp.where(accepted, 1.0 - steplength, 1.0)
    gap = jnp.where(feasible, 0.0, shrink * jnp.max(jnp.abs(gaps)))
    iteration = s.iteration + 1
    return _State(
        q=qs,
        v=vs,
        u=us,
        cost=new_cost,
        reg=reg,
        feasible=feasible,
        was_feasible=was_feasible,
        stop=stop,
        gap=gap,
        converged=s.converged | converged,
        failed=reg >= _REG_MAX,
        iteration=iteration,
        iterations=jnp.where(s.converged, s.iterations, iteration),
        history=s.history.at[s.iteration].set(new_cost),
    )


# ---------------------------------------------------------------------------------------------
# the solver


def _initial_guess(problem: ShootingProblem, q, v, tau):
    T, model = problem.horizon, problem.model
    dtype = problem.q0.dtype
    q = jnp.broadcast_to(problem.q0, (T + 1, model.nq)) if q is None else jnp.asarray(q, dtype)
    v = jnp.broadcast_to(problem.v0, (T + 1, model.nv)) if v is None else jnp.asarray(v, dtype)
    tau = jnp.zeros((T, model.nv), dtype) if tau is None else jnp.asarray(tau, dtype)
    for name, x, shape in (
        ("q", q, (T + 1, model.nq)),
        ("v", v, (T + 1, model.nv)),
        ("tau", tau, (T, model.nv)),
    ):
        if x.shape != shape:
            raise ValueError(f"`{name}` (initial guess) must have shape {shape}, got {x.shape}")
    return q, v, tau


@eqx.filter_jit
@_traced_with_collections_deferred
@full_precision
def solve(
    problem: ShootingProblem,
    q: Float[Array, "T+1 nq"] | None = None,
    v: Float[Array, "T+1 nv"] | None = None,
    tau: Float[Array, "T nv"] | None = None,
    *,
    max_iterations: int = 100,
    tolerance: float = 1e-9,
    feasible: bool = False,
    differentiable: bool = False,
) -> Solution:
    """Solve `problem` by FDDP (box-FDDP with control bounds), from the initial guess
    `(q, v, tau)` (default: the initial state at every knot, zero torques). The guess need
    not be dynamically feasible (multiple shooting: the gaps close along the iterations);
    `feasible=True` declares that it is a rollout. Algorithm: this module's docstring.

    **Arguments:**
    - `max_iterations`: the most iterations (each: derivatives, backward pass, line search).
    - `tolerance`: convergence when feasible and `|d₁ + ½d₂| < tolerance` (Crocoddyl's
      `th_stop`: 1e-9 for FDDP, 5e-5 for box-FDDP).
    - `differentiable`: fixed-count loops, so that `jax.grad` differentiates the solution
      through the iterations (unrolled); every one of the `max_iterations` runs.

    **Returns:** a `Solution`. Jitted (`eqx.filter_jit`); `jax.vmap` a function that builds
    and solves a problem to solve a batch in one program.

    **Raises:** `ValueError` naming the initial guess of the wrong shape, or a
    `max_iterations < 1`.
    """
    if max_iterations < 1:
        raise ValueError(f"`max_iterations` must be at least 1, got {max_iterations}")
    q, v, tau = _initial_guess(problem, q, v, tau)
    dtype = q.dtype
    false = jnp.asarray(False)
    s = _State(
        q=q,
        v=v,
        u=tau,
        cost=jnp.asarray(jnp.nan, dtype),
        reg=jnp.asarray(_REG_MIN, dtype),
        feasible=jnp.asarray(bool(feasible)),
        was_feasible=false,
        stop=jnp.asarray(jnp.inf, dtype),
        gap=jnp.asarray(jnp.inf, dtype),
        converged=false,
        failed=false,
        iteration=jnp.asarray(0),
        iterations=jnp.asarray(0),
        history=jnp.full((max_iterations,), jnp.nan, dtype),
    )
    tolerance = jnp.asarray(tolerance, dtype)
    if differentiable:
        cond = lambda s: ~s.failed  # noqa: E731 - keep iterating past convergence
    else:
        cond = lambda s: ~s.converged & ~s.failed  # noqa: E731
    s = _loop(
        cond,
        lambda s: _iteration(problem, s, tolerance, differentiable),
        s,
        max_iterations,
        differentiable,
    )
    return Solution(
        q=s.q,
        v=s.v,
        tau=s.u,
        cost=s.cost,
        iterations=s.iterations,
        converged=s.converged,
        stop=s.stop,
        gap=s.gap,
        cost_history=s.history,
    )
