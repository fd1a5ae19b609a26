"""`jointdyn.optimal_control`: FDDP on a linear problem against the Riccati solution (exact in
one iteration), the box QP against a projected-gradient reference, control bounds, a `vmap`
batch against single solves, the gradient of a solution against central differences, and bad
input. The comparison with Crocoddyl is tests/test_crocoddyl.py (its own environment).

Cheap by construction: a 1-dof prismatic body (linear dynamics) and a 1-dof pendulum, short
horizons, each solve compiled once per module.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_call, numpy_eval, numpy_jit

import jointdyn as jd
from jointdyn import optimal_control as oc

MASS, DT, T = 2.0, 0.1, 12


def _body(joint, com):
    b = jd.ModelBuilder()
    b.add_body("b", jd.SpatialInertia(MASS, com, 0.1 * np.eye(3)), "world", joint)
    return b.build()


SLIDER = _body(jd.Prismatic([1.0, 0.0, 0.0]), [0.0, 0.0, 0.0])  # v̇ = tau / m: linear
PENDULUM = _body(jd.Revolute([0.0, 1.0, 0.0]), [0.0, 0.0, -0.5])

Q, R, QF = np.diag([1.0, 0.1]), np.array([[0.01]]), np.diag([100.0, 10.0])
X_GOAL = np.array([1.0, 0.0])


def _lqr_problem(q0, goal):
    def running(q, v, tau):
        x = jnp.concatenate([q, v]) - goal
        return 0.5 * x @ jnp.asarray(Q) @ x + 0.5 * tau @ jnp.asarray(R) @ tau

    def terminal(q, v):
        x = jnp.concatenate([q, v]) - goal
        return 0.5 * x @ jnp.asarray(QF) @ x

    return oc.ShootingProblem(SLIDER, q0, jnp.zeros(1), T, DT, running, terminal)


@functools.partial(jax.jit, static_argnames="iterations")
def _solve_lqr(q0, goal, iterations):
    return oc.solve(_lqr_problem(q0, goal), max_iterations=iterations)


def _riccati(x0, goal):
    """Finite-horizon discrete LQR of `x⁺ = A x + B u` (semi-implicit Euler of v̇ = u/m) with
    the costs of `_lqr_problem`, in the error coordinates `x − goal` (goal is an equilibrium)."""
    A = np.array([[1.0, DT], [0.0, 1.0]])
    B = np.array([[DT**2 / MASS], [DT / MASS]])
    P, gains = QF, []
    for _ in range(T):
        K = np.linalg.solve(R + B.T @ P @ B, B.T @ P @ A)
        P = Q + A.T @ P @ (A - B @ K)
        gains.append(K)
    xs, us, e = [x0], [], x0 - goal
    cost = 0.0
    for K in reversed(gains):
        u = -K @ e
        cost += 0.5 * e @ Q @ e + 0.5 * u @ R @ u
        e = A @ e + B @ u
        us.append(u)
        xs.append(e + goal)
    cost += 0.5 * e @ QF @ e
    return np.array(xs), np.array(us), cost


def test_linear_problem_is_solved_in_one_iteration_as_riccati():
    x0 = np.array([-0.5, 0.0])
    xs, us, cost = _riccati(x0, X_GOAL)
    # one iteration: the Riccati solution up to the regularisation μ = 1e-9 on Q_uu and V_xx
    one = _solve_lqr(jnp.asarray(x0[:1]), jnp.asarray(X_GOAL), 1)
    np.testing.assert_allclose(np.asarray(one.q)[:, 0], xs[:, 0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(one.v)[:, 0], xs[:, 1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(one.tau), us, rtol=0, atol=1e-6)
    np.testing.assert_allclose(float(one.cost), cost, rtol=1e-9)
    assert float(one.gap) == 0.0  # the full step closed the multiple-shooting gaps
    # converged: the regularisation only scales the step, so the fixed point is exact
    full = _solve_lqr(jnp.asarray(x0[:1]), jnp.asarray(X_GOAL), 5)
    assert bool(full.converged) and int(full.iterations) <= 3
    np.testing.assert_allclose(np.asarray(full.q)[:, 0], xs[:, 0], rtol=0, atol=1e-11)
    np.testing.assert_allclose(np.asarray(full.tau), us, rtol=0, atol=1e-10)
    np.testing.assert_allclose(float(full.cost), cost, rtol=1e-12)


def test_batch_under_vmap_equals_single_solves():
    q0s = jnp.array([[-0.5], [0.3], [2.0]])
    goals = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.5, 0.0]])
    batch = jax.vmap(lambda q0, g: _solve_lqr(q0, g, 5))(q0s, goals)
    assert batch.q.shape == (3, T + 1, 1) and bool(jnp.all(batch.converged))
    for i in range(3):
        xs, us, cost = _riccati(np.array([q0s[i, 0], 0.0]), np.asarray(goals[i]))
        np.testing.assert_allclose(np.asarray(batch.tau[i]), us, rtol=0, atol=1e-8)
        np.testing.assert_allclose(float(batch.cost[i]), cost, rtol=1e-10)


# --- a nonlinear problem: pendulum swing towards a target angle, with and without bounds ---


def _pendulum_problem(target, bound=jnp.inf):
    def running(q, v, tau):
        return DT * (1e-2 * tau @ tau + 1e-2 * v @ v)

    def terminal(q, v):
        return 10.0 * jnp.sum((q - target) ** 2) + jnp.sum(v**2)

    return oc.ShootingProblem(
        PENDULUM,
        jnp.zeros(1),
        jnp.zeros(1),
        T,
        DT,
        running,
        terminal,
        tau_lower=-bound,
        tau_upper=bound,
    )


@jax.jit
def _solve_pendulum(target, bound=jnp.inf):  # box-FDDP; with infinite bounds: FDDP
    return oc.solve(_pendulum_problem(target, bound), max_iterations=100, tolerance=1e-10)


def test_control_bounds_are_respected_and_active():
    target = jnp.array([1.0])
    free = _solve_pendulum(target, jnp.inf)
    bound = 0.5 * float(jnp.max(jnp.abs(free.tau)))
    boxed = _solve_pendulum(target, bound)
    assert bool(free.converged) and bool(boxed.converged)
    assert float(jnp.max(jnp.abs(boxed.tau))) <= bound + 1e-12
    assert np.isclose(float(jnp.max(jnp.abs(boxed.tau))), bound)  # active
    assert float(boxed.cost) > float(free.cost)
    # the bounded solution is a rollout of its controls
    roll = numpy_call(jd.rollout, PENDULUM, jnp.zeros(1), jnp.zeros(1), boxed.tau, DT)
    np.testing.assert_allclose(np.asarray(roll.q), np.asarray(boxed.q), rtol=0, atol=1e-12)
    # first-order optimality: moving a control inside its bounds cannot lower the cost
    # (the rollout's gradient evaluated by NumPy: an oracle, not compiled)
    grad = numpy_eval(jax.grad(lambda u: _rollout_cost(u, target)), boxed.tau)[:, 0]
    u = np.asarray(boxed.tau)[:, 0]
    inside = np.abs(u) < bound - 1e-9
    np.testing.assert_allclose(np.asarray(grad)[inside], 0.0, atol=1e-5)
    assert np.all(np.asarray(grad)[~inside] * np.sign(u[~inside]) <= 1e-8)  # pushes outwards


def _rollout_cost(tau, target):
    p = _pendulum_problem(target)
    roll = jd.rollout(PENDULUM, p.q0, p.v0, tau, DT)
    run = jax.vmap(p.running_cost)(roll.q[:-1], roll.v[:-1], tau)
    return jnp.sum(run) + p.terminal_cost(roll.q[-1], roll.v[-1])


def _differentiable_solution(target):
    sol = oc.solve(_pendulum_problem(target), max_iterations=8, differentiable=True)
    return sol.cost, sol.tau[:, 0], sol.converged


def test_gradient_of_the_solution_matches_central_differences():
    """Forward mode through the unrolled iterations, jointdyn's differentiation rules on
    (reverse mode, `jax.jacrev`, gives the same; it is left out for its compile time)."""
    target, eps = jnp.array([0.8]), 1e-5
    solution = jax.jit(_differentiable_solution)
    J = jax.jit(jax.jacfwd(lambda t: _differentiable_solution(t)[:2]))(target)
    cost, tau, converged = solution(target)
    assert bool(converged)
    plus, minus = solution(target + eps), solution(target - eps)
    fd_cost = (plus[0] - minus[0]) / (2 * eps)
    fd_tau = (plus[1] - minus[1]) / (2 * eps)
    np.testing.assert_allclose(np.asarray(J[0])[0], float(fd_cost), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(J[1])[:, 0], np.asarray(fd_tau), rtol=1e-4, atol=1e-6)
    assert float(jnp.max(jnp.abs(J[1]))) > 0.1  # the controls do depend on the target


# --- with ground contact: a body on a vertical slider, resting on the ground, sent up ---

HOPPER = _body(jd.Prismatic([0.0, 0.0, 1.0]), [0.0, 0.0, 0.0])
GROUND = jd.GroundContact(HOPPER, ["b"], [[0.0, 0.0, 0.0]], 0.0, stiffness=1e3, damping=10.0)
REST = (MASS * 9.81 / 1e3) ** (2 / 3)  # the depth where the ground carries the weight
DT_HOP, T_HOP, UP = 0.02, 30, 0.1


def _hop_running(q, v, tau):
    return jnp.sqrt(DT_HOP) * jnp.concatenate([1e-2 * tau, 0.3 * (q - UP)])


def _hop_terminal(q, v):
    return jnp.concatenate([10.0 * (q - UP), v])


def _hop_cost(tau):
    roll = jd.rollout(HOPPER, jnp.array([-REST]), jnp.zeros(1), tau, DT_HOP, contact=GROUND)
    run = jax.vmap(_hop_running)(roll.q[:-1], roll.v[:-1], tau)
    return 0.5 * jnp.sum(run**2) + 0.5 * jnp.sum(_hop_terminal(roll.q[-1], roll.v[-1]) ** 2)


def test_contact_problem_is_solved_through_the_contact_dynamics():
    """`contact=`: the solution is a rollout of its controls *with* the contact (and far from
    one without), the ground pushes along its first knots, and it is a stationary point of
    the rollout's cost by reverse-mode autodiff through `jd.rollout` (the solver's
    derivatives are `step_derivatives`' analytic contact Jacobians: an independent path)."""
    problem = oc.ShootingProblem(
        HOPPER,
        jnp.array([-REST]),
        jnp.zeros(1),
        T_HOP,
        DT_HOP,
        _hop_running,
        _hop_terminal,
        contact=GROUND,
    )
    sol = oc.solve(problem, max_iterations=100)
    assert bool(sol.converged)
    q0, v0 = problem.q0, problem.v0
    # the checks' own programs evaluated by NumPy (oracles, not compiled)
    roll = numpy_call(jd.rollout, HOPPER, q0, v0, sol.tau, DT_HOP, contact=GROUND)
    np.testing.assert_allclose(np.asarray(roll.q), np.asarray(sol.q), rtol=0, atol=1e-12)
    free = numpy_call(jd.rollout, HOPPER, q0, v0, sol.tau, DT_HOP)
    assert float(np.max(np.abs(free.q - sol.q))) > 0.1
    normal = jax.vmap(lambda q, v: jd.contact_point_forces(HOPPER, GROUND, q, v)[0][0, 2])
    assert float(np.min(numpy_eval(normal, sol.q[:5], sol.v[:5]))) > 5.0
    grad = numpy_jit(jax.grad(_hop_cost))
    scale = float(np.max(np.abs(grad(jnp.zeros_like(sol.tau)))))
    cost = numpy_eval(_hop_cost, sol.tau)
    np.testing.assert_allclose(float(cost), float(sol.cost), rtol=1e-12)
    assert float(np.max(np.abs(grad(sol.tau)))) < 1e-5 * scale


# --- the box QP of box-FDDP ---


def test_box_qp_against_projected_gradient():
    rng = np.random.default_rng(0)
    n, batch = 4, 16
    A = rng.normal(size=(batch, n, n))
    H = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(n)
    g = rng.normal(size=(batch, n)) * 3
    lower, upper = -np.ones((batch, n)), np.ones((batch, n))
    x, free = jax.jit(jax.vmap(lambda *a: oc._box_qp(*a, fixed=False)))(
        H, g, lower, upper, np.zeros((batch, n))
    )
    for b in range(batch):
        ref = np.zeros(n)
        step = 1.0 / np.linalg.eigvalsh(H[b]).max()
        for _ in range(20000):
            ref = np.clip(ref - step * (H[b] @ ref + g[b]), -1, 1)
        np.testing.assert_allclose(np.asarray(x[b]), ref, rtol=0, atol=1e-8)
        grad = H[b] @ ref + g[b]
        clamped = ((ref <= -1) & (grad > 0)) | ((ref >= 1) & (grad < 0))
        np.testing.assert_array_equal(np.asarray(free[b]), ~clamped)
    assert 0 < np.sum(~np.asarray(free)) < batch * n  # some clamped, some free


# --- bad input ---


def _costs():
    return (lambda q, v, tau: tau @ tau), (lambda q, v: q @ q)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(q0=jnp.zeros(2)), "q0"),
        (dict(v0=jnp.zeros((1, 1))), "v0"),
        (dict(horizon=0), "horizon"),
        (dict(horizon=2.5), "horizon"),
        (dict(dt=-0.1), "dt"),
        (dict(tau_lower=1.0, tau_upper=-1.0), "tau_lower"),
        (dict(tau_lower=jnp.zeros(3)), "tau_lower"),
        (dict(integrator="euler"), "integrator"),
        (dict(running_cost=None), "running_cost"),
        (dict(contact="ground"), "contact"),
    ],
)
def test_bad_problem_raises(kwargs, match):
    running, terminal = _costs()
    args = dict(q0=jnp.zeros(1), v0=jnp.zeros(1), horizon=3, dt=0.1)
    args.update(running_cost=running, terminal_cost=terminal)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        oc.ShootingProblem(PENDULUM, **args)


def test_a_cost_may_be_a_python_number():
    """A running cost that returns a Python number (a constant per knot) is a scalar cost (was
    an `AttributeError`: 'float' object has no attribute 'ndim')."""
    problem = oc.ShootingProblem(
        PENDULUM, jnp.zeros(1), jnp.zeros(1), 3, 0.1, lambda q, v, tau: 2.0, lambda q, v: q - 1.0
    )
    sol = oc.solve(problem, max_iterations=3)
    final = float(sol.q[-1, 0]) - 1.0
    np.testing.assert_allclose(float(sol.cost), 3 * 2.0 + 0.5 * final**2, rtol=1e-12)


@pytest.mark.parametrize(
    "guess, match",
    [
        (dict(q=jnp.zeros((3, 1))), "`q`"),
        (dict(v=jnp.zeros((4, 2))), "`v`"),
        (dict(tau=jnp.zeros((4, 1))), "`tau`"),
    ],
)
def test_bad_initial_guess_raises(guess, match):
    running, terminal = _costs()
    problem = oc.ShootingProblem(PENDULUM, jnp.zeros(1), jnp.zeros(1), 3, 0.1, running, terminal)
    with pytest.raises(ValueError, match=match):
        oc.solve(problem, **guess)


# --- no retrace when only parameter values change ---

_TRACES = []


def _target_cost(q, v, target):
    _TRACES.append(None)  # runs once per trace
    return 10.0 * jnp.sum((q - target) ** 2) + jnp.sum(v**2)


def test_new_parameter_values_do_not_retrace():
    """Costs as `jax.tree_util.Partial` (their parameters are pytree leaves): a new target is
    a new value of the same program, and `oc.solve` (`eqx.filter_jit`) does not trace again."""

    def problem(target):
        terminal = jax.tree_util.Partial(_target_cost, target=jnp.asarray(target))
        running = jax.tree_util.Partial(_running_cost_pendulum)
        return oc.ShootingProblem(PENDULUM, jnp.zeros(1), jnp.zeros(1), 4, DT, running, terminal)

    first = oc.solve(problem([0.3]), max_iterations=3)
    traced = len(_TRACES)
    second = oc.solve(problem([0.6]), max_iterations=3)
    assert len(_TRACES) == traced > 0
    assert float(first.q[-1, 0]) != float(second.q[-1, 0])


def _running_cost_pendulum(q, v, tau):
    return DT * 1e-2 * tau @ tau
