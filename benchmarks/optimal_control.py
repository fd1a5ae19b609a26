"""Trajectory optimisation: `jointdyn.optimal_control.solve` (FDDP) against Crocoddyl's
`SolverFDDP`, on the same problem, in one run. Run it in `.venv-croc` (Crocoddyl 3.2.0 with
pin 3.9, see .ci/run), which has jax and jointdyn too:

    .venv-croc/bin/python benchmarks/optimal_control.py                # batch 1024 (~5 min)
    .venv-croc/bin/python benchmarks/optimal_control.py --batch 64     # smoke run
    python benchmarks/optimal_control.py --no-crocoddyl                # jointdyn alone (GPU)

float64. The problem: panda (example-robot-data, 9 dof, damping removed: Pinocchio's ABA has
none) reaching a hand target, horizon `--horizon` (100) knots of `dt` 0.01 s, Euler
(Crocoddyl's `IntegratedActionModelEuler` = jointdyn's `semi_implicit_euler`); running cost
`dt·(0.1·½‖x − x₀‖²_W + 10⁻³·½‖u‖²)`, terminal `10·½‖v‖² + 10³·½‖p_tcp − p*‖²` (residuals:
Gauss–Newton Hessians on both sides); initial guess `x₀` at every knot, zero torques
(infeasible: multiple shooting).

- **One problem, per iteration**: a solve of exactly `--iterations` iterations (tolerance 0),
  time / iterations. An iteration is derivatives + backward pass + line search (forward
  passes). Both follow the same path (same iterates to rounding; the script prints the costs).
  jointdyn: `jd.jit(solve)` (a `lax.while_loop`; the dynamics derivatives are
  `jd.step_derivatives` over the knots, one `batch_last` chunk on CPU). Crocoddyl: `solver.solve`
  (its pip wheel runs one thread; the table also gives its time / 2, the 2-core figure it
  would reach at best). The ratio is paired (`_timing.paired_ratio`: the two solvers timed
  back to back in alternating rounds, median of the per-round ratios); the times per
  iteration beside it are each side's own median.
- **A batch** of `--batch` problems (random targets) in one call: `jd.batched(solve,
  chunk_size=--chunk, layout="batch_first")`, `jax.vmap` of the same solve over chunks of 8
  problems (`lax.map` over the chunks; measured at batch 256: chunks of 8 about 2× faster per
  problem than 32 or 128, a plain `vmap` of 1 000 slower still: under `vmap` every loop runs
  until the slowest problem of its chunk is done, the line search included), split over 2 XLA
  CPU devices; time per problem against Crocoddyl solving them one after another (its
  single-problem time; it has no batch).
- **Compile time** of both jointdyn programs (`lower` + `compile`).

Machine notes, run records: benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

os.environ["XLA_FLAGS"] = (  # one XLA CPU device per core; must precede `import jax`
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # benchmark script: float64

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _robots import ROBOTS, ROBOTS_DIR  # noqa: E402
from _timing import paired_ratio, time_call  # noqa: E402

import jointdyn as jd  # noqa: E402
from jointdyn import optimal_control as oc  # noqa: E402

FRAME = "panda_hand_tcp"
Q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8, 0.02, 0.02])
W_X, W_U, W_V_T, W_GOAL = 0.1, 1e-3, 10.0, 1e3


def _models(with_pinocchio: bool = True):
    path = str(ROBOTS_DIR / ROBOTS["panda"][0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = jd.load_urdf(path)
    joints = tuple(
        eqx.tree_at(lambda j: j.params.damping, j, jnp.zeros_like(j.params.damping))
        for j in model.joints
    )
    model = eqx.tree_at(lambda m: m.joints, model, joints)
    if not with_pinocchio:
        return model, None
    import pinocchio as pin

    pmodel = pin.buildModelFromUrdf(path)
    assert list(pmodel.names)[1:] == list(model.joint_names), "joint orders differ"
    return model, pmodel


def _x_weights(nv):
    return np.concatenate([np.ones(nv), 10 * np.ones(nv)])


def make_problem(model, target, horizon, dt):
    nv, i = model.nv, model.frame_names.index(FRAME)
    q_ref, wx = jnp.asarray(Q0), jnp.sqrt(W_X * jnp.asarray(_x_weights(nv)))

    def running(q, v, tau):
        r = jnp.concatenate([q - q_ref, v])
        return jnp.sqrt(dt) * jnp.concatenate([wx * r, np.sqrt(W_U) * tau])

    def terminal(q, v):
        p = jd.forward_kinematics(model, q).X_WF.p[i]
        return jnp.concatenate([np.sqrt(W_V_T) * v, np.sqrt(W_GOAL) * (p - target)])

    return oc.ShootingProblem(model, jnp.asarray(Q0), jnp.zeros(nv), horizon, dt, running, terminal)


def crocoddyl_solver(pmodel, target, horizon, dt):
    import crocoddyl

    state = crocoddyl.StateMultibody(pmodel)
    actuation = crocoddyl.ActuationModelFull(state)
    nu = state.nv
    running, terminal = crocoddyl.CostModelSum(state, nu), crocoddyl.CostModelSum(state, nu)
    xref = np.concatenate([Q0, np.zeros(nu)])
    act = crocoddyl.ActivationModelWeightedQuad(_x_weights(nu))
    res_x = crocoddyl.ResidualModelState(state, xref, nu)
    running.addCost("x", crocoddyl.CostModelResidual(state, act, res_x), W_X)
    res_u = crocoddyl.ResidualModelControl(state, nu)
    running.addCost("u", crocoddyl.CostModelResidual(state, res_u), W_U)
    act_v = crocoddyl.ActivationModelWeightedQuad(np.concatenate([np.zeros(nu), np.ones(nu)]))
    terminal.addCost("v", crocoddyl.CostModelResidual(state, act_v, res_x), W_V_T)
    goal = crocoddyl.ResidualModelFrameTranslation(state, pmodel.getFrameId(FRAME), target, nu)
    terminal.addCost("goal", crocoddyl.CostModelResidual(state, goal), W_GOAL)
    dam = crocoddyl.DifferentialActionModelFreeFwdDynamics
    run_model = crocoddyl.IntegratedActionModelEuler(dam(state, actuation, running), dt)
    term_model = crocoddyl.IntegratedActionModelEuler(dam(state, actuation, terminal), 0.0)
    x0 = np.concatenate([Q0, np.zeros(nu)])
    solver = crocoddyl.SolverFDDP(crocoddyl.ShootingProblem(x0, [run_model] * horizon, term_model))
    solver.th_stop = 1e-300  # run every iteration (0 is refused)
    return solver, [x0] * (horizon + 1), [np.zeros(nu)] * horizon


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--dt", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--out-dir", default=None, help="for the JSON (default results/)")
    parser.add_argument(
        "--no-crocoddyl", action="store_true", help="jointdyn alone (a machine without it)"
    )
    args = parser.parse_args()
    T, dt, its = args.horizon, args.dt, args.iterations
    model, pmodel = _models(with_pinocchio=not args.no_crocoddyl)
    rng = np.random.default_rng(0)
    targets = np.array([0.5, 0.3, 0.5]) + rng.uniform(-0.15, 0.15, (args.batch, 3))

    def solve_one(target):
        return oc.solve(make_problem(model, target, T, dt), max_iterations=its, tolerance=0.0)

    out: dict = {"horizon": T, "dt": dt, "iterations": its, "batch": args.batch}
    one = jd.jit(solve_one)
    t0 = time.perf_counter()
    one_c = one.lower(jnp.asarray(targets[0])).compile()
    out["compile_single_s"] = time.perf_counter() - t0
    sol = one_c(jnp.asarray(targets[0]))
    target0 = jnp.asarray(targets[0])

    def jd_one():
        jax.block_until_ready(one_c(target0))

    t = time_call(jd_one, 10, 20.0)
    out["jointdyn_per_iteration_ms"] = 1e3 * t["median"] / its
    out["jointdyn_cost"] = float(sol.cost)

    if not args.no_crocoddyl:
        solver, xs, us = crocoddyl_solver(pmodel, targets[0], T, dt)

        def croc():
            solver.solve(xs, us, its, False)

        t = time_call(croc, 20, 20.0)
        # iter is the loop index: maxiter after a full run (th_stop ~0: no early return)
        assert solver.iter == its, (solver.iter, its)
        out["crocoddyl_iterations"] = solver.iter
        out["crocoddyl_per_iteration_ms"] = 1e3 * t["median"] / (solver.iter + 1)
        out["crocoddyl_cost"] = solver.cost
        # paired: the two solvers timed back to back in alternating rounds (the machine's speed
        # drifts between the two medians above), per iteration on both sides
        out["ratio_single"] = paired_ratio(jd_one, its, croc, solver.iter + 1, 20.0)
        out["ratio_single_vs_half"] = 2 * out["ratio_single"]

    batch = jd.jit(jd.batched(solve_one, chunk_size=args.chunk, layout="batch_first"))
    t0 = time.perf_counter()
    batch_c = batch.lower(jnp.asarray(targets)).compile()
    out["compile_batch_s"] = time.perf_counter() - t0
    sols = batch_c(jnp.asarray(targets))
    t = time_call(lambda: jax.block_until_ready(batch_c(jnp.asarray(targets))), 3, 60.0)
    out["jointdyn_batch_per_problem_ms"] = 1e3 * t["median"] / args.batch
    out["batch_converged_cost_median"] = float(jnp.median(sols.cost))
    if not args.no_crocoddyl:
        out["crocoddyl_per_problem_ms"] = (
            out["crocoddyl_per_iteration_ms"] * out["crocoddyl_iterations"]
        )
        out["ratio_batch"] = out["jointdyn_batch_per_problem_ms"] / out["crocoddyl_per_problem_ms"]

    dev = jax.devices()[0]
    out["device"] = f"{dev.platform}: {getattr(dev, 'device_kind', dev)}"
    print(f"panda reaching, horizon {T}, dt {dt}, {its} FDDP iterations, float64, {out['device']}")
    if args.no_crocoddyl:
        print(
            f"  per iteration: jointdyn {out['jointdyn_per_iteration_ms']:.3f} ms "
            f"(cost {out['jointdyn_cost']:.10g})"
        )
        print(
            f"  batch {args.batch}: jointdyn {out['jointdyn_batch_per_problem_ms']:.3f} ms "
            f"per problem ({its} iterations)"
        )
    else:
        print(
            f"  cost after {its} iterations: jointdyn {out['jointdyn_cost']:.10g}, "
            f"crocoddyl {out['crocoddyl_cost']:.10g}"
        )
        print(
            f"  per iteration: jointdyn {out['jointdyn_per_iteration_ms']:.3f} ms, crocoddyl "
            f"{out['crocoddyl_per_iteration_ms']:.3f} ms (1 thread); ratio "
            f"{out['ratio_single']:.2f}, vs crocoddyl/2 {out['ratio_single_vs_half']:.2f}"
        )
        print(
            f"  batch {args.batch}: jointdyn {out['jointdyn_batch_per_problem_ms']:.3f} ms per "
            f"problem ({its} iterations), crocoddyl sequential "
            f"{out['crocoddyl_per_problem_ms']:.3f} ms; ratio {out['ratio_batch']:.2f}"
        )
    print(
        f"  compile: single {out['compile_single_s']:.1f} s, batch {out['compile_batch_s']:.1f} s"
    )
    if not args.no_write:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M")
        out_dir = Path(args.out_dir) if args.out_dir else Path(__file__).parent / "results"
        path = out_dir / f"optimal_control-{stamp}.json"
        path.write_text(json.dumps(out, indent=1))
        print(f"  written {path}")


if __name__ == "__main__":
    main()
