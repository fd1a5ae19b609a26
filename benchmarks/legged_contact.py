"""Trajectory optimisation through stiff ground contact on a legged robot, by integrator.

The bundled quadruped (`jd.load_model("quadruped")`, 12 actuated joints on a free base) with
its bundled foot contact at notebook 02's stiffness (`stiffness=2e5`, `damping=1e6`,
`friction_velocity=0.05`), standing with its feet 2 mm in the ground, squats: its base goes
6 cm down over `--horizon` knots of `--dt` s (running cost on the base position, torques and
velocities; terminal cost on the base position and velocities; base torques bounded to 0,
joint torques to ±40 N·m: box-FDDP), cold start (the stance at every knot, zero torques).
`oc.solve` with each of `--integrators`; reported: converged or not, iterations, the final
stop criterion `|d₁ + ½d₂|`, the largest gap, the base height reached against the goal, the
compile seconds (first call less a second, timed call) and the solve seconds.

With contact this stiff, explicit steps of 5–10 ms are unstable (a PD-held semi-implicit
Euler rollout at 5 ms is not finite), and the solver cannot close the gaps; the implicit
integrator (damping and stiffness of the passive and contact forces taken implicitly) can.

    python benchmarks/legged_contact.py
    python benchmarks/legged_contact.py --integrators implicit --horizon 60 --dt 0.005

Machine notes, run records: benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark script: float64 throughout

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jointdyn as jd  # noqa: E402
from jointdyn import optimal_control as oc  # noqa: E402


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--integrators", default="implicit,semi_implicit_euler")
    ap.add_argument("--horizon", type=int, default=30)
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--tolerance", type=float, default=1e-6)
    return ap.parse_args()


def squat(integrator: str, horizon: int, dt: float) -> tuple[oc.ShootingProblem, jax.Array]:
    """The problem and its goal (base position)."""
    quad = jd.load_model("quadruped")
    nv = quad.nv
    feet = jd.load_contact("quadruped", quad, stiffness=2e5, damping=1e6, friction_velocity=0.05)
    stance = quad.neutral()
    for leg in ("FL", "FR", "HL", "HR"):
        stance = stance.at[quad.q_slice(f"{leg}_thigh_joint")].set(0.6)
        stance = stance.at[quad.q_slice(f"{leg}_calf_joint")].set(-1.2)
    lowest = jd.contact_point_forces(quad, feet, stance, jnp.zeros(nv))[1][:, 2].min()
    stance = stance.at[6].add(-float(lowest) - 0.002)  # feet 2 mm in the ground
    goal = stance[4:7].at[2].add(-0.06)
    upper = jnp.full(nv, 40.0).at[:6].set(0.0)

    def running(q, v, tau):
        return jnp.sqrt(dt) * jnp.concatenate([1e-2 * tau[6:], 3.0 * (q[4:7] - goal), 0.3 * v])

    def terminal(q, v):
        return jnp.concatenate([30.0 * (q[4:7] - goal), 3.0 * v])

    problem = oc.ShootingProblem(
        quad,
        stance,
        jnp.zeros(nv),
        horizon,
        dt,
        running,
        terminal,
        contact=feet,
        integrator=integrator,
        tau_lower=-upper,
        tau_upper=upper,
    )
    return problem, goal


def main() -> None:
    a = _parse()
    print(
        f"quadruped squat through contact: {a.horizon} knots of {a.dt} s, up to {a.iterations} "
        f"iterations, tolerance {a.tolerance}, float64, {platform.machine()}, "
        f"jax {jax.__version__}, {jax.device_count()} device(s)"
    )
    for integrator in a.integrators.split(","):
        problem, goal = squat(integrator, a.horizon, a.dt)
        kw = dict(max_iterations=a.iterations, tolerance=a.tolerance)
        t0 = time.perf_counter()
        jax.block_until_ready(oc.solve(problem, **kw))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        sol = jax.block_until_ready(oc.solve(problem, **kw))
        seconds = time.perf_counter() - t0
        print(
            f"  {integrator}: converged {bool(sol.converged)}, {int(sol.iterations)} iterations, "
            f"stop {float(sol.stop):.1e}, gap {float(sol.gap):.1e}, base height "
            f"{float(sol.q[-1, 6]):.4f} m (goal {float(goal[2]):.4f}); compile ~{first - seconds:.1f}"
            f" s, solve {seconds:.2f} s; finite {bool(np.isfinite(np.asarray(sol.q)).all())}"
        )


if __name__ == "__main__":
    main()
