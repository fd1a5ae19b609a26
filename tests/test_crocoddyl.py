"""`jointdyn.optimal_control` against Crocoddyl: the same problem (model, horizon, `dt`, Euler
integrator, quadratic costs, control bounds) solved by both, to tight tolerances; optimal costs
equal to 1e-6 relative, trajectories to 1e-5.

Crocoddyl runs in its own environment, `.venv-croc` (built by `.ci/run`): the registry's
`crocoddyl` 3.2.1 with `pin` 4.1 (the main environment's Pinocchio) returns uninitialised
memory (its `FreeFwdDynamics` `xout` is garbage: the wheels do not match), and the set that
works, `crocoddyl==3.2.0 pin==3.9.0 cmeel-urdfdom==4.0.1 cmeel-tinyxml2==10.0.0`, would move
every Pinocchio comparison of the main suite back to pin 3.9. In the main environment this
module is skipped (no `crocoddyl`).

Crocoddyl's problem: `DifferentialActionModelFreeFwdDynamics` + `IntegratedActionModelEuler`
(running cost `dt · Σ w ½‖r‖²`, terminal cost `Σ w ½‖r‖²`), `ResidualModelState`,
`ResidualModelControl`, `ResidualModelFrameTranslation`; `SolverFDDP` / `SolverBoxFDDP`.
Our costs are the same residuals written in JAX (Gauss–Newton Hessians, as Crocoddyl's). Pinocchio's ABA has no joint damping, so
the jointdyn models here have their damping set to zero.
"""

import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

crocoddyl = pytest.importorskip(
    "crocoddyl", reason="Crocoddyl is tested in .venv-croc (see .ci/run and this docstring)"
)
import pinocchio as pin  # noqa: E402
from robots import load_jointdyn, load_pinocchio, q_to_pinocchio  # noqa: E402

import jointdyn as jd  # noqa: E402
from jointdyn import _bundled  # noqa: E402
from jointdyn import optimal_control as oc  # noqa: E402

TOL_STOP = 1e-12
MAX_ITER = 300


def _undamped(model):
    joints = tuple(
        eqx.tree_at(lambda j: j.params.damping, j, jnp.zeros_like(j.params.damping))
        for j in model.joints
    )
    return eqx.tree_at(lambda m: m.joints, model, joints)


def _croc_solve(pmodel, x0, T, dt, w, frame=None, target=None, bounds=None, xs=None, us=None):
    """Crocoddyl's solve of the problem `_costs` describes; returns (xs, us, cost, solver)."""
    state = crocoddyl.StateMultibody(pmodel)
    actuation = crocoddyl.ActuationModelFull(state)
    nu = state.nv
    running = crocoddyl.CostModelSum(state, nu)
    terminal = crocoddyl.CostModelSum(state, nu)
    xref = np.concatenate([w["q_ref"], np.zeros(state.nv)])
    act_x = crocoddyl.ActivationModelWeightedQuad(np.asarray(w["x_weights"], float))
    running.addCost(
        "x",
        crocoddyl.CostModelResidual(state, act_x, crocoddyl.ResidualModelState(state, xref, nu)),
        w["x"],
    )
    running.addCost(
        "u", crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControl(state, nu)), w["u"]
    )
    act_T = crocoddyl.ActivationModelWeightedQuad(np.asarray(w["xT_weights"], float))
    terminal.addCost(
        "x",
        crocoddyl.CostModelResidual(state, act_T, crocoddyl.ResidualModelState(state, xref, nu)),
        w["xT"],
    )
    if frame is not None:
        fid = pmodel.getFrameId(frame)
        goal = crocoddyl.ResidualModelFrameTranslation(state, fid, np.asarray(target), nu)
        terminal.addCost("goal", crocoddyl.CostModelResidual(state, goal), w["goal"])
    dam = crocoddyl.DifferentialActionModelFreeFwdDynamics
    run_model = crocoddyl.IntegratedActionModelEuler(dam(state, actuation, running), dt)
    term_model = crocoddyl.IntegratedActionModelEuler(dam(state, actuation, terminal), 0.0)
    if bounds is not None:
        run_model.u_lb = np.full(nu, bounds[0])
        run_model.u_ub = np.full(nu, bounds[1])
    problem = crocoddyl.ShootingProblem(x0, [run_model] * T, term_model)
    solver = (crocoddyl.SolverBoxFDDP if bounds is not None else crocoddyl.SolverFDDP)(problem)
    solver.th_stop = TOL_STOP
    xs = [x0] * (T + 1) if xs is None else xs
    us = [np.zeros(nu)] * T if us is None else us
    solver.solve(xs, us, MAX_ITER, False)
    return np.array(solver.xs), np.array(solver.us), solver.cost, solver


def _our_problem(model, q0, T, dt, w, frame=None, target=None, bounds=None):
    q_ref = jnp.asarray(w["q_ref"])
    wx, wxT = jnp.asarray(w["x_weights"]), jnp.asarray(w["xT_weights"])
    nv = model.nv
    if frame is not None:
        i = model.frame_names.index(frame)

    def residual_x(q, v):
        return jnp.concatenate([model.difference(q_ref, q), v])

    # residuals r with ½‖r‖² = Crocoddyl's weighted costs: Gauss–Newton Hessians, as Crocoddyl
    def running(q, v, tau):
        r = residual_x(q, v)
        return jnp.sqrt(dt) * jnp.concatenate([jnp.sqrt(w["x"] * wx) * r, jnp.sqrt(w["u"]) * tau])

    def terminal(q, v):
        r = jnp.sqrt(w["xT"] * wxT) * residual_x(q, v)
        if frame is not None:
            p = jd.forward_kinematics(model, q).X_WF.p[i]
            r = jnp.concatenate([r, jnp.sqrt(w["goal"]) * (p - jnp.asarray(target))])
        return r

    lower, upper = bounds
    return oc.ShootingProblem(
        model, q0, jnp.zeros(nv), T, dt, running, terminal, tau_lower=lower, tau_upper=upper
    )


@eqx.filter_jit
def _our_solve(model, q0, T, dt, w, frame, target, lower, upper):
    """Our solve, compiled once per robot: the bounds are traced (±inf without bounds: the
    box QP is then the unconstrained step, FDDP), so FDDP and box-FDDP share a program."""
    problem = _our_problem(model, q0, T, dt, w, frame, target, (lower, upper))
    return oc.solve(problem, max_iterations=MAX_ITER, tolerance=TOL_STOP)


def _bounds(bounds, nv):
    lo, hi = (-np.inf, np.inf) if bounds is None else bounds
    return np.full(nv, lo), np.full(nv, hi)


def _compare(ours, xs, us, cost, model, to_pin):
    assert bool(ours.converged), f"jointdyn did not converge (stop {float(ours.stop):.3g})"
    np.testing.assert_allclose(float(ours.cost), cost, rtol=1e-6, atol=0)
    q_pin = np.stack([to_pin(q) for q in np.asarray(ours.q)])
    np.testing.assert_allclose(q_pin, xs[:, : q_pin.shape[1]], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.v), xs[:, q_pin.shape[1] :], rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(ours.tau), us, rtol=0, atol=1e-5 * max(1.0, np.abs(us).max())
    )


@pytest.mark.parametrize("bounds", [None, (-8.0, 8.0)], ids=["fddp", "box_fddp"])
def test_double_pendulum_swing_up(bounds):
    model = jd.load_model("double_pendulum")
    pmodel = pin.buildModelFromXML(_bundled._urdf_text("double_pendulum"))
    T, dt = 60, 0.02
    w = dict(
        q_ref=np.array([np.pi, 0.0]),
        x_weights=np.array([0.0, 0.0, 0.0, 0.0]),
        x=0.0,
        u=1e-2,
        xT_weights=np.array([1.0, 1.0, 0.1, 0.1]),
        xT=100.0,
    )
    q0 = np.zeros(2)
    xs, us, cost, solver = _croc_solve(pmodel, np.zeros(4), T, dt, w, bounds=bounds)
    assert solver.isFeasible and solver.stop < TOL_STOP, solver.stop
    sol = _our_solve(model, q0, T, dt, w, None, None, *_bounds(bounds, 2))
    print(
        "double pendulum", bounds, "iterations: ours", int(sol.iterations), "crocoddyl", solver.iter
    )
    assert abs(xs[-1, 0] - np.pi) < 0.1  # it swung up
    if bounds is not None:
        assert np.abs(us).max() == pytest.approx(8.0)  # the bound is active
    _compare(sol, xs, us, cost, model, lambda q: q)


@pytest.mark.parametrize("bounds", [None, (-30.0, 30.0)], ids=["fddp", "box_fddp"])
def test_panda_reaching(bounds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _undamped(load_jointdyn("panda"))
    pmodel = load_pinocchio("panda")
    T, dt = 40, 0.02
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02, 0.02])
    target = np.array([0.5, 0.3, 0.5])
    nv = model.nv
    w = dict(
        q_ref=q0,
        x_weights=np.concatenate([np.ones(nv), 10 * np.ones(nv)]),
        x=1e-1,
        u=1e-3,
        xT_weights=np.concatenate([np.zeros(nv), np.ones(nv)]),
        xT=10.0,
        goal=1e3,
    )
    to_pin = lambda q: q_to_pinocchio(model, pmodel, q)  # noqa: E731
    x0 = np.concatenate([to_pin(q0), np.zeros(nv)])
    xs, us, cost, solver = _croc_solve(pmodel, x0, T, dt, w, "panda_hand_tcp", target, bounds)
    assert solver.isFeasible and solver.stop < TOL_STOP, solver.stop
    sol = _our_solve(model, q0, T, dt, w, "panda_hand_tcp", target, *_bounds(bounds, nv))
    print("panda", bounds, "iterations: ours", int(sol.iterations), "crocoddyl", solver.iter)
    data = pmodel.createData()
    pin.framesForwardKinematics(pmodel, data, xs[-1, :nv])
    assert np.linalg.norm(data.oMf[pmodel.getFrameId("panda_hand_tcp")].translation - target) < 0.05
    if bounds is not None:
        assert np.abs(us).max() == pytest.approx(bounds[1])  # the bound is active
    _compare(sol, xs, us, cost, model, to_pin)
