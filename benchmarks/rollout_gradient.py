"""Gradient of a long rollout: time and memory of `jd.checkpointed_scan`'s modes.

A semi-implicit Euler rollout of `--steps` steps (`v⁺ = v + dt·forward_dynamics(q, v, tau)`,
`q⁺ = integrate(q, dt·v⁺)`) of an example-robot-data robot (installed with Pinocchio), float64,
random small torques `(steps, nv)`. For each checkpoint mode of `jd.checkpointed_scan` it
measures, all compiled with `jd.jit` and the model passed as an argument:

- the forward rollout (the final state and the trajectory of `q` and `v`);
- the gradient of a scalar loss (squares of the final `q` and `v` plus squares of the
  trajectory) with respect to the controls, `q0` and `v0`, and its ratio to the forward time
  of the plain rollout (`"none"`: what a user without this option would run);
- trace+lower and XLA compile time of each, and the compiled programs' memory
  (`compiled.memory_analysis()`: temporary buffers, arguments, outputs).

Times are medians of repeats after a warm-up (`_timing.time_call`).

    python benchmarks/rollout_gradient.py                       # panda, 1000 steps, dt 1 ms
    python benchmarks/rollout_gradient.py --batch 64            # vmap over 64 initial states
    python benchmarks/rollout_gradient.py --modes none,32 --steps 4000
    python benchmarks/rollout_gradient.py --low-latency         # jd.use_low_latency_cpu() first

The table is printed and written to `benchmarks/results/rollout-gradient-<timestamp>.md`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark script: float64 throughout

import jax.numpy as jnp  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _robots import ROBOTS  # noqa: E402
from _robots import load_jointdyn as load_model  # noqa: E402
from _timing import paired_ratio, time_call  # noqa: E402


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="panda", choices=sorted(ROBOTS))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dt", type=float, default=0.001)
    ap.add_argument("--batch", type=int, default=1, help="vmap over B initial states")
    ap.add_argument("--modes", default="none,step,32,100", help="checkpoint modes: none, step or k")
    ap.add_argument("--repeats", type=int, default=7, help="most repeats of a timing")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--low-latency",
        action="store_true",
        help="call jd.use_low_latency_cpu() first (synchronous dispatch, XLA:CPU scheduler "
        "without concurrency optimisation)",
    )
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    return ap.parse_args()


def make_functions(dt: float, mode, batch: int):
    """`forward(model, controls, q0, v0)` and `grad(...)` (w.r.t. controls, q0, v0)."""

    def step(model, state, tau):
        q, v = state
        v = v + dt * jd.forward_dynamics(model, q, v, tau)
        q = model.integrate(q, dt * v)
        return (q, v), (q, v)

    def rollout(model, controls, q0, v0):
        body = functools.partial(step, model)
        return jd.checkpointed_scan(body, (q0, v0), controls, checkpoint=mode)

    if batch > 1:  # the same controls from B initial states
        rollout = jax.vmap(rollout, in_axes=(None, None, 0, 0))

    def loss(model, controls, q0, v0):
        (q, v), (qs, vs) = rollout(model, controls, q0, v0)
        return jnp.sum(q**2) + jnp.sum(v**2) + jnp.sum(qs**2) + jnp.sum(vs**2)

    return rollout, jax.grad(loss, argnums=(1, 2, 3))


def compile_and_time(fn, args, repeats: int, budget: float) -> dict:
    t0 = time.perf_counter()
    lowered = jd.jit(fn).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    call = lambda: jax.block_until_ready(compiled(*args))  # noqa: E731
    timing = time_call(call, repeats, budget)
    mem = compiled.memory_analysis()
    return {
        "call": call,
        "lower": t1 - t0,
        "compile": t2 - t1,
        "time": timing["median"],
        "min": timing["min"],
        "temp": None if mem is None else mem.temp_size_in_bytes,
        "arg": None if mem is None else mem.argument_size_in_bytes,
        "out": None if mem is None else mem.output_size_in_bytes,
    }


def _mode(text: str):
    return text if text in ("none", "step") else int(text)


def _mb(x) -> str:
    return "n/a" if x is None else f"{x / 2**20:.2f}"


def main() -> None:
    a = _parse()
    if a.low_latency:  # before JAX's first computation
        jd.use_low_latency_cpu()
    model = load_model(a.robot)
    model = jd.astype(model, jnp.float64)
    key_q, key_u = jax.random.split(jax.random.PRNGKey(a.seed))
    shape = (a.batch,) if a.batch > 1 else ()
    q0 = model.neutral() + 0.1 * jax.random.normal(key_q, shape + (model.nq,))
    if a.robot in ("solo12", "anymal", "talos", "g1"):  # keep the base quaternion unit
        q0 = q0.at[..., :4].set(model.neutral()[:4])
    v0 = jnp.zeros(shape + (model.nv,))
    controls = 0.1 * jax.random.normal(key_u, (a.steps, model.nv))
    args = (model, controls, q0, v0)

    modes = [_mode(m) for m in a.modes.split(",")]
    rows = []
    for mode in modes:
        forward, grad = make_functions(a.dt, mode, a.batch)
        f = compile_and_time(forward, args, a.repeats, a.budget)
        g = compile_and_time(grad, args, a.repeats, a.budget)
        rows.append([mode, f, g])
        print(f"done: {mode!r}: forward {f['time'] * 1e3:.2f} ms, grad {g['time'] * 1e3:.2f} ms")

    # the plain rollout's forward time (the first mode's when "none" was not measured)
    plain = next((f for m, f, _ in rows if m == "none"), rows[0][1])
    for row in rows:  # gradient and plain forward timed back to back, round after round
        row.append(paired_ratio(row[2]["call"], 1, plain["call"], 1, a.budget))
    device = jax.devices()[0]
    state_mb = a.batch * a.steps * (model.nq + model.nv) * 8 / 2**20
    lines = [
        f"# Rollout gradient: {a.robot}, {a.steps} steps, dt {a.dt}, batch {a.batch}",
        "",
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}; jax {jax.__version__}, "
        f"{device.platform} ({getattr(device, 'device_kind', '')}), {platform.machine()}, "
        f"float64; nq {model.nq}, nv {model.nv}; `jd.jit`, model passed as an argument; "
        f"{'`jd.use_low_latency_cpu()`' if a.low_latency else 'XLA:CPU default scheduler'}. "
        f"Semi-implicit Euler with `jd.forward_dynamics`, loss = squares of the final state and "
        f"of the trajectory; gradient w.r.t. controls ({a.steps}×{model.nv}), q0, v0. "
        f"Times: median of repeats after a warm-up (fastest in brackets). "
        f"'grad / forward': the mode's gradient over the plain (`\"none\"`; else the first "
        f"mode's) forward rollout, "
        f"ratio of the medians (in brackets: median of ratios, the two timed back to back). "
        f"Memory: `compiled.memory_analysis()`, MiB; the trajectory of q and v alone is "
        f"{state_mb:.2f} MiB.",
        "",
        "| checkpoint | forward ms | gradient ms | grad / forward | compile forward s "
        "(lower + XLA) | compile gradient s (lower + XLA) | temp MiB forward | "
        "temp MiB gradient | args MiB | outputs MiB gradient |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, f, g, paired in rows:
        ratio = g["time"] / plain["time"]
        lines.append(
            f"| {mode if isinstance(mode, str) else f'k = {mode}'} "
            f"| {f['time'] * 1e3:.2f} ({f['min'] * 1e3:.2f}) "
            f"| {g['time'] * 1e3:.2f} ({g['min'] * 1e3:.2f}) | {ratio:.2f} ({paired:.2f}) "
            f"| {f['lower'] + f['compile']:.2f} ({f['lower']:.2f} + {f['compile']:.2f}) "
            f"| {g['lower'] + g['compile']:.2f} ({g['lower']:.2f} + {g['compile']:.2f}) "
            f"| {_mb(f['temp'])} | {_mb(g['temp'])} | {_mb(g['arg'])} | {_mb(g['out'])} |"
        )
    table = "\n".join(lines) + "\n"
    print()
    print(table)
    if not a.no_write:
        out = Path(a.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = f"{datetime.datetime.now():%Y-%m-%d-%H%M%S}"
        path = out / f"rollout-gradient-{stamp}.md"
        path.write_text(table)
        print(f"written: {path}")


if __name__ == "__main__":
    main()
