"""jointdyn against Pinocchio (and MuJoCo MJX when it is installed), side by side in one run.

    python benchmarks/run.py                       # all robots, batches 1, 64, 4096 (< ~10 min)
    python benchmarks/run.py --quick               # smoke run: panda, batches 1 and 64
    python benchmarks/run.py --robots panda,g1 --batches 1,64,4096
    python benchmarks/run.py --gpu-throughput      # float32 aba at batch 65536, panda and g1

Measures, per robot of example-robot-data (panda, ur5, solo12, g1, talos):

- jointdyn `jax.jit(jax.vmap(alg))` of `aba`, `rnea`, `crba` (model passed as an argument) in
  float64 and float32 at each batch: µs per sample, and the compile time apart;
- Pinocchio `abaInParallel` / `rneaInParallel` (ModelPool, 2 threads) at the same batch, and
  one call of `pin.aba` / `pin.rnea` / `pin.crba` from Python;
- the derivatives of `aba` in (q, v, tau), q in the tangent space, with
  `jointdyn.aba_derivatives` (default), `jax.jacrev` or `jax.jacfwd`, batched, against one call
  of `pin.computeABADerivatives`;
- MuJoCo MJX `vmap(forward)` on the fixed-base robots, contacts off, only if `mujoco.mjx`
  imports.

Times are medians of several runs after a warm-up call, with `jax.block_until_ready`. Results:
printed, and written to `benchmarks/results/` as Markdown (`results-<date>.md`,
`results-latest.md`) and JSON (raw numbers). See benchmarks/README.md.

The code is split by concern, each file readable on its own: `_robots.py` (the robots and their
states), `_jointdyn.py` (the jointdyn side), `_pinocchio.py` (the Pinocchio side: coordinate
maps, reference calls, the agreement check), `_mjx.py` (the MuJoCo MJX side), `_sections.py`
(the measurements of one robot), `_tables.py` (the tables and files), `_results.py` (settings
and records), `_timing.py` (the timing loops). This file holds the command line, the worker
processes (one per robot) and the machine's description.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if "--cpu-devices" in sys.argv:  # one XLA CPU device per core; must precede `import jax`
    _n = sys.argv[sys.argv.index("--cpu-devices") + 1]
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_n}"
    ).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # before jointdyn makes any array

import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _jointdyn import ALGORITHMS, DTYPES, configure  # noqa: E402
from _mjx import mjx_available  # noqa: E402
from _results import (  # noqa: E402
    RECORD_PREFIX,
    Settings,
    empty_results,
    log,
    record,
    stream_to_parent,
)
from _robots import ROBOTS  # noqa: E402
from _sections import bench_gpu_throughput, bench_latency, bench_one_robot  # noqa: E402
from _tables import render, write_results  # noqa: E402

# ---------------------------------------------------------------------------------------------
# one process per robot
#
# XLA:CPU (jax 0.10.2) was seen to deadlock, rarely, in a long batched call (every thread asleep
# on a futex, block_until_ready waiting forever). Each robot therefore runs in a worker process
# that streams its records to the parent; a worker silent for `--stall-timeout` seconds is
# killed, its records so far are kept, and the run goes on with the next robot.


def bench_in_worker(
    name: str, st: Settings, res: dict, stall_s: float, role: str = "--worker"
) -> None:
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), role, name]
    cmd += ["--settings-json", json.dumps(st.__dict__)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    last = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            if time.monotonic() - last > stall_s:
                proc.kill()
                proc.wait()
                msg = f"worker silent for {stall_s:.0f} s, killed (XLA:CPU hang?); results kept"
                log(f"  {msg}")
                record(res, "rows", {"robot": name, "alg": "worker", "error": msg})
                return
            continue
        if line is None:
            break
        last = time.monotonic()
        if line.startswith(RECORD_PREFIX):
            r = json.loads(line[len(RECORD_PREFIX) :])
            item = r["item"]
            record(res, r["key"], tuple(item) if isinstance(res[r["key"]], dict) else item)
        else:
            print(line, end="", flush=True)
    rc = proc.wait()
    if rc != 0:
        msg = f"worker exited with status {rc}"
        log(f"  {msg}")
        record(res, "rows", {"robot": name, "alg": "worker", "error": msg})


def machine_info() -> dict[str, Any]:
    cpu, flags = platform.processor() or "?", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("?", "", "x86_64"):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    dev = jax.devices()[0]
    return {
        "cpu": cpu,
        "avx512": "avx512f" in flags.split(),
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _version("jaxlib"),
        "devices": [str(d) for d in jax.devices()],
        "compiler_options": jd.compiler_options(),
        "platform": dev.platform,
        "device_kind": getattr(dev, "device_kind", "?"),
        "pinocchio": pin.__version__,
        "numpy": np.__version__,
        "jointdyn": f"{jd.__version__} ({commit})",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def ints(s):
        return [int(x) for x in s.split(",") if x]

    def strs(s):
        return [x for x in s.split(",") if x]

    p.add_argument("--robots", type=strs, default=None, help=f"of {','.join(ROBOTS)}")
    p.add_argument("--batches", type=ints, default=None, help="default 1,64,4096")
    p.add_argument("--dtypes", type=strs, default=["float64", "float32"])
    p.add_argument("--algorithms", type=strs, default=list(ALGORITHMS))
    p.add_argument("--repeats", type=int, default=None, help="most repeats per timing (7)")
    p.add_argument("--budget", type=float, default=None, help="seconds per timing (1.5)")
    p.add_argument("--threads", type=int, default=2, help="Pinocchio threads (ModelPool)")
    p.add_argument("--no-derivatives", action="store_true")
    p.add_argument(
        "--deriv-mode", type=strs, default=["jd"], help="jd (aba_derivatives), fwd, rev, or a list"
    )
    p.add_argument("--deriv-batches", type=ints, default=None, help="default 64,4096")
    p.add_argument(
        "--deriv-budget", type=float, default=20.0, help="seconds for a large derivative batch"
    )
    p.add_argument("--no-mjx", action="store_true")
    p.add_argument(
        "--cold-repeats",
        type=int,
        default=3,
        help="cold compiles of jit(vmap(aba)) at the largest batch per robot (0: none)",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: panda, batches 1,64")
    p.add_argument(
        "--gpu-throughput", action="store_true", help="only float32 aba at a large batch"
    )
    p.add_argument("--throughput-batch", type=int, default=65536)
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=150.0,
        help="kill a robot's worker process silent this long (seconds)",
    )
    p.add_argument("--in-process", action="store_true", help="no worker processes (debugging)")
    p.add_argument(
        "--impl",
        choices=["vmap", "batched"],
        default="vmap",
        help="jointdyn batching: jax.vmap, or jointdyn.batched (cache-sized chunks, all devices)",
    )
    p.add_argument(
        "--xla-defaults",
        action="store_true",
        help="compile with plain jax.jit, not jointdyn.jit (jointdyn.compiler_options())",
    )
    p.add_argument(
        "--cpu-devices", type=int, default=None, help="XLA CPU devices (one per core: 2)"
    )
    p.add_argument(
        "--no-latency",
        action="store_true",
        help="skip the single calls in a process set up by jointdyn.use_low_latency_cpu()",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--latency-worker", help=argparse.SUPPRESS)
    p.add_argument("--settings-json", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse_args(argv)
    if a.worker:
        stream_to_parent()
        st = Settings(**json.loads(a.settings_json))
        configure(st.impl, st.compiler_options)
        bench_one_robot(a.worker, st, empty_results())
        return
    if a.latency_worker:
        stream_to_parent()
        st = Settings(**json.loads(a.settings_json))
        configure("vmap", st.compiler_options)  # single calls: nothing to batch or place
        bench_latency(a.latency_worker, st, empty_results())
        return
    st = Settings(
        robots=a.robots or (["panda"] if a.quick else list(ROBOTS)),
        batches=a.batches or ([1, 64] if a.quick else [1, 64, 4096]),
        dtypes=a.dtypes,
        algorithms=a.algorithms,
        repeats=a.repeats or (3 if a.quick else 7),
        budget_s=a.budget or (0.5 if a.quick else 1.5),
        threads=a.threads,
        derivatives=not a.no_derivatives,
        deriv_modes=a.deriv_mode,
        deriv_batches=a.deriv_batches or ([64] if a.quick else [64, 4096]),
        deriv_budget_s=a.deriv_budget,
        mjx=not a.no_mjx and mjx_available(),
        quick=a.quick,
        impl=a.impl,
        compiler_options=not a.xla_defaults,
        cold_repeats=a.cold_repeats,
    )
    configure(st.impl, st.compiler_options)
    for name in st.robots:
        if name not in ROBOTS:
            sys.exit(f"unknown robot {name!r}; robots: {', '.join(ROBOTS)}")
    for x in st.algorithms:
        if x not in ALGORITHMS:
            sys.exit(f"unknown algorithm {x!r}; algorithms: {', '.join(ALGORITHMS)}")
    for x in st.dtypes:
        if x not in DTYPES:
            sys.exit(f"unknown dtype {x!r}; dtypes: {', '.join(DTYPES)}")
    for x in st.deriv_modes:
        if x not in ("jd", "fwd", "rev"):
            sys.exit(f"unknown derivative mode {x!r}: jd, fwd or rev")

    t_start = time.perf_counter()
    res: dict[str, Any] = {
        "machine": machine_info(),
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]),
        "settings": st.__dict__,
        **empty_results(),
        "gpu_throughput": a.gpu_throughput,
    }
    m = res["machine"]
    log(
        f"cpu: {m['cpu']} (AVX-512 {'yes' if m['avx512'] else 'no'}), {m['cores']} cores "
        f"({m['affinity']} usable), load {m['loadavg_start']}"
    )
    log(f"jax {m['jax']} (jaxlib {m['jaxlib']}), devices {m['devices']}")
    log(f"pinocchio {m['pinocchio']}, numpy {m['numpy']}, jointdyn {m['jointdyn']}")
    if m["platform"] != "cpu":
        log(f"jointdyn runs on {m['platform']} ({m['device_kind']}); Pinocchio on the CPU")

    if a.gpu_throughput:
        if m["platform"] != "gpu":
            log("note: --gpu-throughput on a non-GPU device")
        bench_gpu_throughput(st, res, a.throughput_batch)
        tag = "gpu-throughput"
    else:
        res["mjx_off"] = None if st.mjx else "--no-mjx" if a.no_mjx else "not importable"
        log(
            f"robots {st.robots}, batches {st.batches}, dtypes {st.dtypes}, derivatives "
            f"{st.deriv_modes if st.derivatives else 'off'} at {st.deriv_batches}, "
            f"mjx {'on' if st.mjx else 'off (not importable)' if not a.no_mjx else 'off'}"
        )
        for name in st.robots:
            t0 = time.perf_counter()
            log(f"\n== {name}")
            if a.in_process:
                bench_one_robot(name, st, res)
            else:
                bench_in_worker(name, st, res, a.stall_timeout)
                if 1 in st.batches and not a.no_latency:
                    bench_in_worker(name, st, res, a.stall_timeout, "--latency-worker")
            log(f"  ({time.perf_counter() - t0:.0f} s)")
        tag = "quick" if st.quick else ""

    res["wall_s"] = time.perf_counter() - t_start
    res["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    text = render(res, st)
    print("\n" + text)
    if not a.no_write:
        paths = write_results(res, text, a.out_dir, tag)
        log("written: " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
