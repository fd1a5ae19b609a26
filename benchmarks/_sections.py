"""The measurements of `run.py`, one robot at a time: what each table of the results holds.

- `bench_one_robot(name, st, res)`: everything for one robot, in a worker process of its own:
  `bench_robot` (Pinocchio's single calls; jointdyn's call overhead and single calls; the
  batched rows of every algorithm, dtype and batch against Pinocchio, with their compile time
  and agreement check), `bench_cold_compile` (the cold compile of `jit(vmap(aba))`),
  `bench_derivatives` (ABA's derivatives against `computeABADerivatives`) and, on fixed-base
  robots when MuJoCo is installed, `_mjx.bench_mjx`;
- `bench_latency`: single calls after `jointdyn.use_low_latency_cpu()`, in a process of its own;
- `bench_gpu_throughput`: float32 `aba` at a large batch (`--gpu-throughput`).

Each result goes into the results dict with `_results.record`; `_tables.render` turns it into
tables.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _jointdyn import (
    DTYPES,
    aba_derivatives_fn,
    blocking,
    call_overhead,
    closed_model_call,
    compile_timed,
    jd_args,
    jd_batched,
    packed_model_call,
)
from _mjx import bench_mjx
from _pinocchio import check_output, pin_parallel, pin_reference_call, pin_single_calls
from _results import Settings, log, record
from _robots import Robot, load_robot
from _tables import fmt_row_log
from _timing import paired_ratio, time_call

import jointdyn as jd


def timed_fields(r: dict, batch: int, t_lower: float, t_comp: float, cold: bool) -> dict:
    """A batched row's timing from `time_call`'s result `r`: µs per sample (median and fastest
    repeat), the number of repeats, and the compile (trace+lower, XLA) in seconds."""
    return {
        "jd_us": 1e6 * r["median"] / batch,
        "jd_us_min": 1e6 * r["min"] / batch,
        "repeats": len(r["samples"]),
        "lower_s": t_lower,
        "compile_s": t_comp,
        "cold": cold,
    }


def bench_latency(name: str, st: Settings, res: dict) -> None:
    """Single calls after `jointdyn.use_low_latency_cpu()` (a process of its own: the settings
    are process-wide and must precede JAX's first computation)."""
    done = jd.use_low_latency_cpu()
    robot = load_robot(name, 4, 1)
    out = {"settings": done}
    for alg in st.algorithms:
        out[alg] = packed_model_call(robot, st, alg)
    log(
        "  low-latency single call µs (packed model): "
        + ", ".join(f"{a} {out[a][0]:.1f} (fastest repeat {out[a][1]:.1f})" for a in st.algorithms)
    )
    record(res, "latency", (name, out))


def bench_robot(robot: Robot, st: Settings, res: dict) -> None:
    name = robot.name
    single = pin_single_calls(robot, st)
    overhead = call_overhead(robot, st)
    closed = {alg: closed_model_call(robot, st, alg) for alg in st.algorithms}
    packed = {alg: packed_model_call(robot, st, alg)[0] for alg in st.algorithms}
    record(res, "pin_single", (name, single))
    info = {
        "nq": robot.nq,
        "nv": robot.nv,
        "floating": robot.floating,
        "model_leaves": len(jax.tree.leaves(robot.model)),
        "jd_call_overhead_us": overhead,
        "jd_closed_us": closed,
        "jd_packed_us": packed,
    }
    record(res, "robots", (name, info))
    log(
        "  pinocchio one call µs: "
        + ", ".join(f"{k} {v[0]:.2f}" for k, v in single.items())
        + f"; jointdyn call overhead (model pytree) {overhead:.1f} µs"
    )

    for alg in st.algorithms:
        pin_us, pin1_us = {}, {}
        for b in st.batches:
            if alg == "crba":  # no crbaInParallel: one call from Python stands for one sample
                pin_us[b] = single["crba"]
                pin1_us[b] = single["crba"][0]
                continue
            try:
                pin_us[b] = pin_parallel(robot, alg, b, st)
                # one thread: no OpenMP barrier, so robust to other load on the machine
                pin1_us[b] = pin_parallel(robot, alg, b, st, threads=1)[0]
            except Exception as e:
                log(f"  pinocchio {alg} batch {b}: {type(e).__name__}: {e}")
                pin_us[b], pin1_us[b] = (None, None), None
        for dname in st.dtypes:
            dtype = DTYPES[dname]
            for i, b in enumerate(st.batches):
                row = {"robot": name, "alg": alg, "dtype": dname, "batch": b}
                row["pin_us"], row["pin_us_min"] = pin_us[b]
                row["pin1_us"] = pin1_us[b]
                row["pin_ref"] = "crba one call" if alg == "crba" else f"{alg}InParallel"
                try:
                    if i == 0:
                        jax.clear_caches()  # the first batch of each (alg, dtype) compiles cold
                    args = jd_args(robot, alg, b, dtype)
                    compiled, t_lower, t_comp = compile_timed(jd_batched(alg), args)
                    out = jax.block_until_ready(compiled(*args))
                    if i == 0 or b == 64:
                        row["check_rel_err"] = check_output(robot, alg, out)
                    run = blocking(compiled, args)
                    r = time_call(run, st.repeats, st.budget_s, warm=True)
                    row.update(timed_fields(r, b, t_lower, t_comp, cold=i == 0))
                    if row["pin_us"]:
                        row["ratio"] = row["jd_us"] / row["pin_us"]
                        row["ratio_min"] = row["jd_us_min"] / row["pin_us_min"]
                        pin_call, pin_per = pin_reference_call(robot, alg, b, st.threads)
                        row["ratio_paired"] = paired_ratio(run, b, pin_call, pin_per, st.budget_s)
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"
                record(res, "rows", row)
                log("  " + fmt_row_log(row))

    bench_cold_compile(robot, st, res)
    if st.derivatives:
        for mode in st.deriv_modes:
            bench_derivatives(robot, mode, st, res, *single["aba_derivatives"])


def bench_cold_compile(robot: Robot, st: Settings, res: dict) -> None:
    """Issue 4's compile figure, whatever `--impl`: `jointdyn.jit(jax.vmap(jointdyn.aba))` at
    the largest batch (float64 when measured), on one device, compiled cold `st.cold_repeats`
    times, each after `jax.clear_caches()` (trace, lower and XLA compile; this worker's earlier
    compiles paid XLA's one-time set-up). The batched rows' own cold compile is one sample, and
    under `--impl batched` it is `jointdyn.batched`'s program, not this one."""
    if st.cold_repeats < 1 or "aba" not in st.algorithms:
        return
    b = max(st.batches)
    dname = "float64" if "float64" in st.dtypes else st.dtypes[0]
    dtype = DTYPES[dname]
    row = {"robot": robot.name, "alg": "aba", "dtype": dname, "batch": b}
    try:
        args = jd_args(robot, "aba", b, dtype, placed=False)
        fn = jax.vmap(jd.aba, (None, 0, 0, 0))
        lower_s, compile_s = [], []
        for _ in range(st.cold_repeats):
            jax.clear_caches()
            compiled, t_lower, t_comp = compile_timed(fn, args)
            lower_s.append(t_lower)
            compile_s.append(t_comp)
        row["check_rel_err"] = check_output(robot, "aba", compiled(*args))
        total = [x + y for x, y in zip(lower_s, compile_s, strict=True)]
        row.update(lower_s=lower_s, compile_s=compile_s, total_s=total)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
    record(res, "cold_compile", row)
    if "error" in row:
        log(f"  cold compile jit(vmap(aba)): {row['error']}")
    else:
        log(
            f"  cold compile jit(vmap(aba)) batch {b} {dname}: median "
            f"{np.median(row['total_s']):.2f} s of {', '.join(f'{x:.2f}' for x in total)}"
        )


def bench_derivatives(
    robot: Robot, mode: str, st: Settings, res: dict, pin_us: float, pin_us_min: float
) -> None:
    """Batched derivatives of aba; a larger batch shrinks to fit `deriv_budget_s`."""
    per_sample = None
    done = 0
    for i, b_req in enumerate(st.deriv_batches):
        b, note = b_req, ""
        if per_sample is not None:
            # warm-up + at least two timed calls must fit in the budget
            fits = int(st.deriv_budget_s / (3 * per_sample))
            if fits < b:
                b = 1 << max(0, fits.bit_length() - 1) if fits > 0 else 0
                if b <= done:
                    record(
                        res,
                        "derivatives",
                        {
                            "robot": robot.name,
                            "mode": mode,
                            "batch": b_req,
                            "skipped": f"predicted {3 * per_sample * b_req:.0f} s "
                            f"> budget {st.deriv_budget_s:.0f} s",
                        },
                    )
                    log(f"  derivatives {mode} batch {b_req}: skipped (time budget)")
                    continue
                note = f"batch {b_req} → {b}: predicted {3 * per_sample * b_req:.0f} s > budget"
        row = {"robot": robot.name, "mode": mode, "batch": b, "requested_batch": b_req}
        row["note"] = note
        row["pin_us"], row["pin_us_min"] = pin_us, pin_us_min
        try:
            if i == 0:
                jax.clear_caches()
            log(f"  derivatives {mode} batch {b}: compiling")
            args = jd_args(robot, "aba", b, jnp.float64)
            compiled, t_lower, t_comp = compile_timed(aba_derivatives_fn(mode), args)
            run = blocking(compiled, args)
            r = time_call(run, st.repeats, st.budget_s, min_repeats=2)  # warm-up + 2 or more
            per_sample = r["median"] / b
            done = b
            row.update(
                jd_us=1e6 * per_sample,
                jd_us_min=1e6 * r["min"] / b,
                repeats=len(r["samples"]),
                lower_s=t_lower,
                compile_s=t_comp,
                ratio=1e6 * per_sample / pin_us,
                ratio_min=1e6 * r["min"] / b / pin_us_min,
            )
            if b * per_sample < 0.5:  # a pair per round fits; a larger batch would not
                row["ratio_paired"] = paired_ratio(
                    run,
                    b,
                    *pin_reference_call(robot, "aba_derivatives", b, st.threads),
                    st.budget_s,
                )
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        record(res, "derivatives", row)
        log(
            f"  derivatives {mode} batch {b}: "
            + (
                row["error"]
                if "error" in row
                else f"{row['jd_us']:.1f} µs/sample (pin one call {pin_us:.1f}), "
                f"ratio {row['ratio']:.1f}, compile {t_lower + t_comp:.1f} s {note}"
            )
        )


def bench_gpu_throughput(st: Settings, res: dict, batch: int) -> None:
    """float32 jit(vmap(aba)) at a large batch on the default device, panda and g1."""
    for name in ("panda", "g1"):
        robot = load_robot(name, batch, st.threads)
        info = {"nq": robot.nq, "nv": robot.nv, "floating": robot.floating}
        record(res, "robots", (name, info))
        row = {"robot": name, "alg": "aba", "dtype": "float32", "batch": batch}
        try:
            jax.clear_caches()
            args = jd_args(robot, "aba", batch, jnp.float32)
            compiled, t_lower, t_comp = compile_timed(jd_batched("aba"), args)
            jax.block_until_ready(compiled(*args))
            r = time_call(blocking(compiled, args), st.repeats, st.budget_s)
            row.update(timed_fields(r, batch, t_lower, t_comp, cold=True))
            row["samples_per_s"] = batch / r["median"]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        row["pin_us"], row["pin_us_min"] = pin_parallel(robot, "aba", batch, st)
        row["pin1_us"] = pin_parallel(robot, "aba", batch, st, threads=1)[0]
        row["pin_ref"] = "abaInParallel (float64, CPU)"
        if "jd_us" in row:
            row["ratio"] = row["jd_us"] / row["pin_us"]
            row["ratio_min"] = row["jd_us_min"] / row["pin_us_min"]
        record(res, "rows", row)
        log(f"  {name} " + fmt_row_log(row))


def bench_one_robot(name: str, st: Settings, res: dict) -> None:
    nmax = max(st.batches + (st.deriv_batches if st.derivatives else []))
    try:
        robot = load_robot(name, nmax, st.threads)
    except Exception as e:
        log(f"  cannot load {name}: {type(e).__name__}: {e}")
        record(res, "rows", {"robot": name, "alg": "load", "error": f"{type(e).__name__}: {e}"})
        return
    log(f"  nq {robot.nq}, nv {robot.nv}, floating base {robot.floating}")
    bench_robot(robot, st, res)
    if st.mjx and not robot.floating:
        try:
            bench_mjx(robot, st, res)
        except Exception as e:
            record(res, "mjx", {"robot": name, "batch": None, "error": f"{type(e).__name__}: {e}"})
