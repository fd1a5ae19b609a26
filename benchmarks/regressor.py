"""The joint-torque regressor: `jd.regressor` batched against Pinocchio's
`computeJointTorqueRegressor` called in a loop, in one run (issue 24).

    python benchmarks/regressor.py                                 # batch 4096, panda, solo12, talos
    python benchmarks/regressor.py --batch 256 --robots panda      # smoke run
    python benchmarks/regressor.py --no-write                      # print only
    python benchmarks/regressor.py --hugepages                     # glibc's huge-page tunable

float64, the robots of example-robot-data (`_robots.py`), the same random states in both
libraries' coordinates.

- jointdyn: `jd.jit(jd.batched(jd.regressor, (None, 0, 0, 0)))` at `--batch`, over 2 XLA CPU
  devices (one per core; set before `import jax`), on one device (`shard=False`), and a plain
  `jd.jit(jax.vmap(...))` on one device. The output is the whole stacked regressor,
  (batch, nv, 10·nbodies): 26 MB for panda, 411 MB for talos at batch 4096.
- Pinocchio (C++, one thread): a Python loop of `pin.computeJointTorqueRegressor(model, data,
  q, v, a)` over the batch's states (columns of Fortran arrays, as `_robots` lays them out),
  each result copied into a preallocated (batch, nv, 10·nbodies) array, the work jointdyn does.
  Pinocchio has no batched or parallel regressor, and a loop from Python pays the binding's
  overhead per call. That overhead is measured apart: the same loop calling
  `pin.computeTotalMass(model, data)` (a binding call that does almost nothing) with the same
  slicing and copy of a result of the same size, and the ratio is also given against the loop
  less that overhead (an estimate of a loop in C++).
- Compile time: `jd.jit(f).lower(...).compile()`, trace+lower and XLA, for both batched forms.
- Agreement: the first 4 samples against Pinocchio's (coordinates mapped, body columns
  matched by joint name), relative max error.

- Memory: the output is allocated afresh on every jointdyn call (a new array), while the
  Pinocchio loop writes into one array allocated before the timing. Buffers this large come
  from `mmap`, and the kernel's 4 KB page faults on a fresh 411 MB buffer are a large part of
  the call (talos: ~100 000 faults per call). `--hugepages` re-runs the script under
  `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc ≥ 2.35: large allocations are advised to
  use transparent huge pages, 2 MB each), for both libraries alike; the JSON records it.

Times: median of repeats (`_timing.time_call`). Ratio = jointdyn µs per sample / Pinocchio's.
Written to `benchmarks/results/regressor-<date>-<time>.json`.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (  # one XLA CPU device per core; must precede `import jax`
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402
from _jointdyn import compile_timed  # noqa: E402
from _robots import load_robot  # noqa: E402
from _timing import time_call  # noqa: E402

import jointdyn as jd  # noqa: E402

jax.config.update("jax_enable_x64", True)
HERE = Path(__file__).parent


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--robots", default="panda,solo12,talos")
    ap.add_argument("--repeats", type=int, default=7, help="most repeats of a timing")
    ap.add_argument("--budget", type=float, default=4.0, help="seconds per timing")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument(
        "--hugepages",
        action="store_true",
        help="re-run under GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (see the docstring)",
    )
    return ap.parse_args()


def pin_columns(robot) -> tuple[np.ndarray, list[int]]:
    """Pinocchio's regressor columns in our body order, and each body's joint id."""
    jid = [robot.pmodel.getJointId(n) for n in robot.model.joint_names]
    return np.concatenate([np.arange(10 * (j - 1), 10 * j) for j in jid]), jid


def agreement(robot, Y: np.ndarray, n: int = 4) -> float:
    s, ps, pm, pd, cm = robot.states, robot.pin_states, robot.pmodel, robot.pdata, robot.cmap
    cols, _ = pin_columns(robot)
    err = 0.0
    for k in range(n):
        Yp = pin.computeJointTorqueRegressor(pm, pd, ps["q"][:, k], ps["v"][:, k], ps["a"][:, k])
        T = cm.matrix(s["q"][k], robot.nv)
        ref = T.T @ np.asarray(Yp)[:, cols]
        err = max(err, float(np.abs(Y[k] - ref).max() / max(1.0, np.abs(ref).max())))
    return err


def run_robot(name: str, a: argparse.Namespace) -> dict:
    B = a.batch
    robot = load_robot(name, B, threads=1)
    m = robot.model
    s = robot.states
    q, v, vdot = (jax.device_put(s[k]) for k in ("q", "v", "vdot"))
    nb = m.nbodies
    out: dict = {"nv": m.nv, "nbodies": nb, "batch": B}
    print(f"\n{name}: nv {m.nv}, {nb} bodies, Y {m.nv}x{10 * nb}, batch {B}", flush=True)

    fns = {
        "batched_2dev": jd.batched(jd.regressor, (None, 0, 0, 0)),
        "batched_1dev": jd.batched(jd.regressor, (None, 0, 0, 0), shard=False),
        "vmap_1dev": jax.vmap(jd.regressor, (None, 0, 0, 0)),
    }
    for key, fn in fns.items():
        if key == "batched_2dev":  # inputs split over the devices once, not on every call
            m_, q_, v_, vdot_ = jd.device_put_batched((m, q, v, vdot), (None, 0, 0, 0))
        else:
            m_, q_, v_, vdot_ = m, q, v, vdot
        exe, lower_s, xla_s = compile_timed(fn, (m_, q_, v_, vdot_))
        ct = {"lower_s": lower_s, "xla_s": xla_s, "total_s": lower_s + xla_s}
        Y = exe(m_, q_, v_, vdot_)
        Y.block_until_ready()
        if key == "batched_2dev":
            out["agreement"] = agreement(robot, np.asarray(Y))
        args = (m_, q_, v_, vdot_)
        t = time_call(
            lambda exe=exe, args=args: exe(*args).block_until_ready(), a.repeats, a.budget
        )
        out[key] = {"us_per_sample": 1e6 * t["median"] / B, "compile": ct}
        print(
            f"  jointdyn {key}: {out[key]['us_per_sample']:.3f} us/sample, compile "
            f"{ct['total_s']:.2f} s (trace+lower {ct['lower_s']:.2f}, XLA {ct['xla_s']:.2f})",
            flush=True,
        )

    pm, pd, ps = robot.pmodel, robot.pdata, robot.pin_states
    qs, vs, as_ = ps["q"], ps["v"], ps["a"]
    Yout = np.empty((B, pm.nv, 10 * (pm.njoints - 1)))
    reg = pin.computeJointTorqueRegressor

    def pin_loop():
        for k in range(B):
            Yout[k] = reg(pm, pd, qs[:, k], vs[:, k], as_[:, k])

    size = np.zeros((pm.nv, 10 * (pm.njoints - 1)))
    mass = pin.computeTotalMass

    def overhead_loop():  # same loop, slicing and copy; a binding call that does ~nothing
        for k in range(B):
            qs[:, k], vs[:, k], as_[:, k]
            mass(pm, pd)
            Yout[k] = size

    for key, fn in (("pinocchio_loop", pin_loop), ("python_overhead", overhead_loop)):
        t = time_call(fn, a.repeats, a.budget)
        out[key] = {"us_per_sample": 1e6 * t["median"] / B}
        print(f"  {key}: {out[key]['us_per_sample']:.3f} us/sample", flush=True)
    p = out["pinocchio_loop"]["us_per_sample"]
    p_net = p - out["python_overhead"]["us_per_sample"]
    for key in fns:
        j = out[key]["us_per_sample"]
        out[key]["ratio"] = j / p
        out[key]["ratio_net"] = j / p_net
        print(f"  ratio {key}: {j / p:.2f} (vs loop less overhead: {j / p_net:.2f})")
    print(f"  agreement with Pinocchio (relative max error): {out['agreement']:.1e}")
    return out


def main() -> None:
    a = _parse()
    tunable = "glibc.malloc.hugetlb=1"
    if a.hugepages and tunable not in os.environ.get("GLIBC_TUNABLES", ""):
        env = dict(os.environ)
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), tunable]))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)  # read at process start
    res = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "pinocchio": pin.__version__,
        "devices": len(jax.devices()),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "robots": {},
    }
    for name in a.robots.split(","):
        res["robots"][name] = run_robot(name, a)
    if not a.no_write:
        out = Path(a.out_dir)
        out.mkdir(exist_ok=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d-%H%M")
        path = out / f"regressor-{stamp}.json"
        path.write_text(json.dumps(res, indent=1))
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
