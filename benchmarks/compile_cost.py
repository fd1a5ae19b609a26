"""Compile cost of `jd.jit(jax.vmap(alg))` counted in CPU instructions, under valgrind.

Wall-clock compile times on a shared machine vary by ±30 % from one minute to the next, more
than most changes to the code make. The number of instructions executed is nearly exact
(two runs of one program differ by 0.01 % in XLA's compile, 0.2 % in
trace+lower), so it tells a 2 % change apart:

    python benchmarks/compile_cost.py                          # talos aba, batch 4096
    python benchmarks/compile_cost.py --robot panda --alg rnea --phase lower
    python benchmarks/compile_cost.py --jointdyn /path/to/other/checkout   # A/B

The script starts itself again under `valgrind --tool=callgrind` with instrumentation off, and
turns it on (`callgrind_control -i on`) only around the phase asked for:

- `xla` (default): `Lowered.compile()`, XLA's HLO passes and LLVM;
- `lower`: tracing and lowering to StableHLO, `jd.jit(f).lower(*args)`.

It prints one line: the phase and its instruction count (Ir). The callgrind profile stays in
`--out` for `callgrind_annotate`. A run takes about 3 minutes (valgrind is ~50× slower);
valgrind must be installed (`apt install valgrind`). As a rule of thumb on the 2-core machine
of the README: 19.3 G instructions of XLA compile ≈ 1.5 s, 2.6 G of trace+lower ≈ 0.5 s
(talos `aba`, batch 4096, float64).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--robot", default="talos", help="example-robot-data robot (_robots.ROBOTS's names)"
    )
    ap.add_argument("--alg", default="aba", choices=("aba", "rnea", "crba"))
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--phase", default="xla", choices=("xla", "lower"))
    ap.add_argument("--jointdyn", default=None, help="import jointdyn from this checkout")
    ap.add_argument("--out", default=None, help="callgrind output file (default: a temp file)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def _child(a: argparse.Namespace) -> None:
    """Runs under valgrind: build the arguments, then instrument only the phase asked for."""
    if a.jointdyn:
        sys.path.insert(0, a.jointdyn)
    sys.path.insert(1, str(HERE))
    import jax

    jax.config.update("jax_enable_x64", True)  # float64, as run.py
    import jax.numpy as jnp
    from _jointdyn import jd_args
    from _robots import load_robot

    import jointdyn as jd

    robot = load_robot(a.robot, a.batch, 1)
    args = jd_args(robot, a.alg, a.batch, jnp.float64)
    fn = jax.vmap(getattr(jd, a.alg), (None,) + (0,) * (len(args) - 1))
    jax.jit(lambda x: x + 1)(1.0)  # start the backend outside the measured phase
    pid = str(os.getpid())

    def instrument(on: bool) -> None:
        cmd = ["callgrind_control", "-i", "on" if on else "off", pid]
        subprocess.run(cmd, check=True, capture_output=True)

    if a.phase == "lower":
        instrument(True)
    lowered = jd.jit(fn).lower(*args)
    if a.phase == "lower":
        instrument(False)
    else:
        instrument(True)
        lowered.compile()
        instrument(False)


def main() -> None:
    a = _parse()
    if a.child:
        _child(a)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("compile_cost.py needs valgrind (callgrind and callgrind_control)")
    out = a.out
    if out is None:
        fd, out = tempfile.mkstemp(prefix="callgrind.", suffix=".out")
        os.close(fd)
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    cmd += [sys.executable, __file__, "--child", "--robot", a.robot, "--alg", a.alg]
    cmd += ["--batch", str(a.batch), "--phase", a.phase]
    if a.jointdyn:
        cmd += ["--jointdyn", a.jointdyn]
    p = subprocess.run(cmd, capture_output=True, text=True)  # the child turns on float64 itself
    refs = re.findall(r"Collected\s*:\s*(\d+)", p.stderr)
    if p.returncode != 0 or not refs:
        sys.exit(f"valgrind run failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    n = int(refs[-1])
    print(f"{a.robot} {a.alg} batch {a.batch} {a.phase}: {n:,} instructions ({n / 1e9:.2f} G)")
    print(f"profile: {out}")


if __name__ == "__main__":
    main()
