"""Derivatives of the discrete dynamics along a horizon: `jd.step_derivatives` against Pinocchio.

For a horizon of `--horizon` knots of an example-robot-data robot (float64, random states and
torques, semi-implicit Euler, `dt` 10 ms), the Jacobians `fx` (2nv × 2nv) and `fu` (2nv × nv)
of every knot, in the tangent space (Crocoddyl's `Fx`, `Fu`):

- jointdyn: `jd.jit(jd.batched(step_derivatives, chunk_size=horizon, shard=False))` over the
  horizon, one call: the knots as one batch-last chunk, what `jointdyn.optimal_control` does
  on CPU (and `jax.vmap` in place of `jd.batched`);
- Pinocchio 4.1 from Python: a loop over the knots of `computeABADerivatives` + `dIntegrate`
  (ARG0, ARG1) and the same few matrix products with NumPy (what Crocoddyl's
  `IntegratedActionModelEuler.calcDiff` does in C++, without the costs), with the joint damping
  added to `tau` and `∂v̇/∂v` as jointdyn's forward dynamics does.

Also the trace + XLA compile time of the jitted call. Times are medians of repeats after a
warm-up; the ratio is paired (`_timing.paired_ratio`): jointdyn's time per knot / Pinocchio's.

    python benchmarks/step_derivatives.py                    # panda, horizon 100
    python benchmarks/step_derivatives.py --robot solo12 --horizon 1000
"""

from __future__ import annotations

import argparse
import functools
import platform
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark script: float64 throughout

import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _robots import ROBOTS, load_robot  # noqa: E402
from _timing import paired_ratio, time_call  # noqa: E402


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="panda", choices=sorted(ROBOTS))
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    return ap.parse_args()


def pinocchio_loop(pmodel, data, q, v, tau, D, dt):
    """Per knot: `computeABADerivatives` + `dIntegrate`, assembled into `fx`, `fu`."""
    nv = pmodel.nv
    eye, zero = np.eye(nv), np.zeros((nv, nv))
    out = []
    for k in range(q.shape[0]):
        pin.computeABADerivatives(pmodel, data, q[k], v[k], tau[k] - D @ v[k])
        Minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
        v1 = v[k] + dt * data.ddq
        Jq = pin.dIntegrate(pmodel, q[k], dt * v1, pin.ARG0)
        Jv = pin.dIntegrate(pmodel, q[k], dt * v1, pin.ARG1)
        Vx = np.concatenate([dt * data.ddq_dq, eye + dt * (data.ddq_dv - Minv @ D)], 1)
        fx = np.concatenate([np.concatenate([Jq, zero], 1) + dt * Jv @ Vx, Vx])
        fu = np.concatenate([dt * dt * Jv @ Minv, dt * Minv])
        out.append((fx, fu))
    return out


def main() -> None:
    args = _parse()
    H = args.horizon
    robot = load_robot(args.robot, H, threads=1)
    model, pmodel = robot.model, robot.pmodel
    s = robot.states
    q, v, tau = (jax.numpy.asarray(s[k]) for k in ("q", "v", "tau"))
    dt = args.dt

    # Pinocchio's inputs in its coordinates (T orthogonal: tau_pin = T tau)
    qp = np.ascontiguousarray(robot.pin_states["q"].T)
    vp = np.ascontiguousarray(robot.pin_states["v"].T)
    tp = np.ascontiguousarray(robot.pin_states["tau"].T)
    nv = model.nv
    # T: v_pin = T v (a permutation, and the free base's rotation: zero damping there)
    T = robot.cmap.motion(np.repeat(s["q"][:1], nv, 0), np.eye(nv)).T
    D = T @ np.diag(np.asarray(model._joint_param("damping"))) @ T.T

    fn = functools.partial(jd.step_derivatives, dt=dt)
    # the horizon as one batch-last chunk, as `optimal_control` evaluates its knots on CPU
    batched = jd.jit(
        jd.batched(lambda m, a, b, c: fn(m, a, b, c), (None, 0, 0, 0), chunk_size=H, shard=False)
    )
    vmapped = jd.jit(jax.vmap(lambda m, a, b, c: fn(m, a, b, c), (None, 0, 0, 0)))

    t0 = time.perf_counter()
    lowered = batched.lower(model, q, v, tau)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    out = jax.block_until_ready(batched(model, q, v, tau))
    jax.block_until_ready(vmapped(model, q, v, tau))

    data = pmodel.createData()
    ref = pinocchio_loop(pmodel, data, qp, vp, tp, D, dt)
    if not robot.floating:  # same coordinates up to a permutation: check the figures agree
        T2 = np.kron(np.eye(2), T)
        err = max(
            float(np.abs(T2 @ np.asarray(out.fx[k]) @ T2.T - ref[k][0]).max()) for k in range(H)
        )
        print(f"max |fx - fx_pinocchio| over the horizon: {err:.2e}")

    def jd_batched():
        jax.block_until_ready(batched(model, q, v, tau))

    def jd_vmap():
        jax.block_until_ready(vmapped(model, q, v, tau))

    def pin_loop():
        pinocchio_loop(pmodel, data, qp, vp, tp, D, dt)

    def pin_aba_only():
        for k in range(H):
            pin.computeABADerivatives(pmodel, data, qp[k], vp[k], tp[k])

    ta = time_call(pin_aba_only, args.repeats, args.budget)["median"]
    tb = time_call(jd_batched, args.repeats, args.budget)["median"]
    tv = time_call(jd_vmap, args.repeats, args.budget)["median"]
    tp_ = time_call(pin_loop, args.repeats, args.budget)["median"]
    ratio = paired_ratio(jd_batched, H, pin_loop, H, args.budget)
    print(
        f"step_derivatives {args.robot} (nv {model.nv}) horizon {H}, float64, "
        f"{platform.machine()}, jax {jax.__version__}, pinocchio {pin.__version__}\n"
        f"  jd.batched  {tb * 1e6 / H:8.2f} µs/knot  ({tb * 1e3:.2f} ms per horizon)\n"
        f"  jax.vmap    {tv * 1e6 / H:8.2f} µs/knot\n"
        f"  Pinocchio computeABADerivatives + dIntegrate loop (Python) "
        f"{tp_ * 1e6 / H:8.2f} µs/knot\n"
        f"  Pinocchio computeABADerivatives alone, same loop {ta * 1e6 / H:8.2f} µs/knot\n"
        f"  paired ratio jd.batched / Pinocchio: {ratio:.2f}\n"
        f"  compile: trace+lower {t1 - t0:.1f} s, XLA {t2 - t1:.1f} s"
    )


if __name__ == "__main__":
    main()
