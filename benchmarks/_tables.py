"""The tables of `run.py`: the results dict rendered as Markdown, and the files written.

- `render(res, st)`: the header (machine, versions, command) and one table per measurement:
  batched dynamics, single call, compile time, cold compile of `jit(vmap(aba))`, derivatives,
  MuJoCo MJX, agreement with Pinocchio, errors;
- `write_results`: `results-<date>-<time>.md` / `.json` and `results-latest.*` (the JSON holds
  the raw numbers);
- `fmt_row_log`: the one-line progress log of a batched row; `table` and `_f`: Markdown tables
  and number formatting.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from _jointdyn import ALGORITHMS

if TYPE_CHECKING:
    from _results import Settings


def _f(x, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if x >= 1000:
            return f"{x:,.0f}"
        if x >= 100:
            return f"{x:.0f}" if digits <= 1 else f"{x:.1f}"
        return f"{x:.{digits}f}"
    return str(x)


def fmt_row_log(row: dict) -> str:
    head = f"{row['alg']:<5} {row['dtype']:<7} batch {row['batch']:>5}: "
    if "error" in row:
        return head + "ERROR " + row["error"]
    return head + (
        f"jointdyn {_f(row['jd_us'])} µs/sample, pinocchio {_f(row['pin_us'])} "
        f"(1 thread {_f(row.get('pin1_us'))}), ratio {_f(row.get('ratio'))}, "
        f"compile {row['lower_s'] + row['compile_s']:.1f} s"
    )


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render(res: dict, st: Settings) -> str:
    m = res["machine"]
    out = [f"# jointdyn benchmarks — {m['date']}", ""]
    out.append(
        f"- machine: {m['cpu']} (AVX-512: {'yes' if m['avx512'] else 'no'}), {m['cores']} cores "
        f"({m['affinity']} usable), load average at start "
        f"{', '.join(f'{x:.1f}' for x in m['loadavg_start'] or [])}, at end "
        f"{', '.join(f'{x:.1f}' for x in res.get('loadavg_end') or [])}"
    )
    out.append(f"- jax {m['jax']} (jaxlib {m['jaxlib']}), devices {', '.join(m['devices'])}")
    out.append(
        f"- pinocchio {m['pinocchio']} (threads for *InParallel: {st.threads}), numpy "
        f"{m['numpy']}, python {m['python']}, jointdyn {m['jointdyn']}"
    )
    out.append(f"- command: `{res['command']}`; wall time {res.get('wall_s', 0):.0f} s")
    opts = m.get("compiler_options")
    out.append(
        f"- jointdyn compiled with `jointdyn.jit`, XLA options {opts}"
        if st.compiler_options
        else "- jointdyn compiled with plain `jax.jit` (XLA's default options, `--xla-defaults`)"
    )
    out.append(
        "- µs per sample, median of repeats after a warm-up call; ratio = jointdyn / Pinocchio "
        "(< 1: jointdyn faster). Pinocchio is always float64 on the CPU. 'paired ratio' is the "
        "median over rounds of jointdyn's time over Pinocchio's, timed back to back in each "
        "round (~50 ms each, after one untimed call): insensitive to a machine whose speed "
        "drifts over minutes, but each side loses its warm caches to the other, so read it "
        "beside the plain ratio. 'ratio of minima' "
        "compares the fastest repeats: less sensitive to other load on the machine (with as "
        "many OpenMP threads as cores, Pinocchio's parallel calls stall when a core is taken)."
    )
    out.append("")

    rows = [r for r in res["rows"] if r.get("alg") in ALGORITHMS and "robot" in r]
    if rows:
        how = "jit(vmap(alg))" if st.impl == "vmap" else "jit(jointdyn.batched(alg))"
        out += [f"## Batched dynamics: jointdyn {how} vs Pinocchio", ""]
        out.append(
            "Pinocchio: `abaInParallel` / `rneaInParallel` (ModelPool) at the same batch, with "
            f"{st.threads} threads and with 1 (no OpenMP barrier: the steady figure on a loaded "
            "machine); crba (†): Pinocchio has no parallel crba, so both columns are one "
            "`pin.crba` call from Python (one thread)."
        )
        out.append("")
        body = []
        for r in rows:
            nv = res["robots"].get(r["robot"], {}).get("nv", "")
            alg = r["alg"] + (" †" if r["alg"] == "crba" else "")
            if "error" in r:
                body.append([r["robot"], nv, alg, r["dtype"], r["batch"], "ERROR", *[""] * 6])
                continue
            body.append(
                [
                    r["robot"],
                    nv,
                    alg,
                    r["dtype"],
                    r["batch"],
                    r["jd_us"],
                    r["pin_us"],
                    r.get("ratio"),
                    r.get("ratio_paired"),
                    r.get("ratio_min"),
                    r.get("pin1_us"),
                    r["jd_us"] / r["pin1_us"] if r.get("pin1_us") else None,
                ]
            )
        out.append(
            table(
                [
                    "robot",
                    "nv",
                    "alg",
                    "dtype",
                    "batch",
                    "jointdyn µs/sample",
                    f"Pinocchio µs/sample ({st.threads} threads)",
                    "ratio",
                    "paired ratio",
                    "ratio of minima",
                    "Pinocchio 1 thread",
                    "ratio to 1 thread",
                ],
                body,
            )
        )
        out.append("")

    if res["pin_single"]:
        out += ["## Single call: jointdyn jitted, batch 1, vs one Pinocchio call from Python", ""]
        out.append(
            "jointdyn: the batch-1 float64 row above (jit(vmap), one sample), µs per call. "
            "'call overhead' is a jitted identity `f(model, q) = q`: the cost of passing the "
            "model pytree into a jitted function, part of every jointdyn call. 'model closed "
            "over' is `jit(lambda q, ...: alg(model, q, ...))` without vmap: the model is a "
            "compile-time constant (nothing to pass, model-only work folded; new parameter "
            "values would retrace). 'packed' is `jointdyn.jit(alg)(jointdyn.pack(model), ...)`: "
            "the model as one flat vector, one buffer to pass, new values do not retrace. "
            "The call-overhead, closed-over and packed columns wait with the result's own "
            "`.block_until_ready()` (`jax.block_until_ready`, a pytree walk, adds ~0.8 µs). "
            "'packed, low-latency' is the same call in a process of its own that first ran "
            "`jointdyn.use_low_latency_cpu()` (synchronous dispatch; XLA's scheduler without "
            "concurrency optimisation); its ratio is to the Pinocchio call."
        )
        out.append("")
        body = []
        for name, single in res["pin_single"].items():
            info = res["robots"][name]
            low = res["latency"].get(name, {})
            for alg in st.algorithms:
                r = next(
                    (
                        x
                        for x in rows
                        if x["robot"] == name
                        and x["alg"] == alg
                        and x["dtype"] == "float64"
                        and x["batch"] == 1
                        and "jd_us" in x
                    ),
                    None,
                )
                jdu = r["jd_us"] if r else None
                body.append(
                    [
                        name,
                        alg,
                        jdu,
                        single[alg][0],
                        jdu / single[alg][0] if jdu else None,
                        r["jd_us_min"] / single[alg][1] if r else None,
                        info["jd_call_overhead_us"],
                        info.get("jd_closed_us", {}).get(alg),
                        info["model_leaves"],
                        info.get("jd_packed_us", {}).get(alg),
                        low[alg][0] if alg in low else None,
                        low[alg][1] if alg in low else None,
                        low[alg][0] / single[alg][0] if alg in low else None,
                    ]
                )
        out.append(
            table(
                [
                    "robot",
                    "alg",
                    "jointdyn µs/call",
                    "Pinocchio µs/call",
                    "ratio",
                    "ratio of minima",
                    "call overhead µs",
                    "model closed over µs/call",
                    "model leaves",
                    "packed µs/call",
                    "packed, low-latency µs/call",
                    "(fastest repeat)",
                    "ratio (low-latency)",
                ],
                body,
            )
        )
        out.append("")

    if rows:
        out += ["## Compile time (seconds, apart from the timings)", ""]
        how = "jax.vmap(alg)" if st.impl == "vmap" else "jointdyn.batched(alg)"
        out.append(
            f"`jointdyn.jit({how}).lower(*args).compile()` (`jax.jit` with "
            "`jointdyn.compiler_options()`; plain `jax.jit` under `--xla-defaults`), the program "
            "the rows above time. Cold: after `jax.clear_caches()`, "
            "at the first batch; the other batches reuse the traced inner jaxpr and compile "
            "their own XLA program."
        )
        out.append("")
        body = []
        keys = dict.fromkeys((r["robot"], r["alg"], r["dtype"]) for r in rows)
        for robot, alg, dname in keys:
            rs = [
                r
                for r in rows
                if (r["robot"], r["alg"], r["dtype"]) == (robot, alg, dname) and "jd_us" in r
            ]
            cold = next((r for r in rs if r["cold"]), None)
            if cold is None:
                continue
            others = ", ".join(
                f"{r['batch']}: {r['lower_s'] + r['compile_s']:.1f}" for r in rs if not r["cold"]
            )
            body.append(
                [
                    robot,
                    alg,
                    dname,
                    cold["batch"],
                    cold["lower_s"],
                    cold["compile_s"],
                    cold["lower_s"] + cold["compile_s"],
                    others or "–",
                ]
            )
        out.append(
            table(
                [
                    "robot",
                    "alg",
                    "dtype",
                    "cold at batch",
                    "trace+lower",
                    "XLA compile",
                    "cold total",
                    "other batches (total)",
                ],
                body,
            )
        )
        out.append("")

    cold = [r for r in res.get("cold_compile", []) if "total_s" in r]
    if cold:
        n = len(cold[0]["total_s"])
        out += ["## Cold compile of `jit(vmap(aba))` (issue 4's figure: talos, at most 2 s)", ""]
        out.append(
            "`jointdyn.jit(jax.vmap(jointdyn.aba)).lower(*args).compile()` (plain `jax.jit` "
            "under `--xla-defaults`) at the run's largest "
            f"batch on one device, compiled cold {n} times in each robot's worker process, each "
            "after `jax.clear_caches()` (trace, lower and XLA compile; earlier compiles in the "
            "process paid XLA's one-time set-up, ~1–2 s more for a process's first compile). "
            "Seconds; the medians of each column."
        )
        out.append("")
        body = [
            [
                r["robot"],
                r["dtype"],
                r["batch"],
                float(np.median(r["lower_s"])),
                float(np.median(r["compile_s"])),
                float(np.median(r["total_s"])),
                f"{min(r['total_s']):.2f}–{max(r['total_s']):.2f}",
            ]
            for r in cold
        ]
        out.append(
            table(
                ["robot", "dtype", "batch", "trace+lower", "XLA compile", "total", "range"],
                body,
            )
        )
        out.append("")

    if res["derivatives"]:
        out += ["## Derivatives of aba in (q, v, tau), float64", ""]
        how = "jit(vmap" if st.impl == "vmap" else "jit(jointdyn.batched"
        out.append(
            f"jointdyn: `{how}(jointdyn.aba_derivatives))` (jd: −M⁻¹ ∂RNEA with analytic "
            f"RNEA partials), or `{how}(jac(lambda dq, v, tau: aba(model, model.integrate(q, dq), "
            "v, tau), argnums=(0, 1, 2))))` at dq = 0 with jac = `jax.jacrev` (rev) or "
            "`jax.jacfwd` (fwd); q-derivatives in the tangent space, as Pinocchio's. Pinocchio: one call "
            "of `computeABADerivatives` (one thread). A batch that would not fit the time budget "
            f"({st.deriv_budget_s:.0f} s for warm-up + 2 calls) is shrunk to a power of two."
        )
        out.append("")
        body = []
        for r in res["derivatives"]:
            nv = res["robots"].get(r["robot"], {}).get("nv", "")
            if "skipped" in r:
                body.append(
                    [r["robot"], nv, r["mode"], r["batch"], "skipped", *[""] * 5, r["skipped"]]
                )
            elif "error" in r:
                body.append(
                    [r["robot"], nv, r["mode"], r["batch"], "ERROR", *[""] * 5, r["error"][:80]]
                )
            else:
                body.append(
                    [
                        r["robot"],
                        nv,
                        r["mode"],
                        r["batch"],
                        r["jd_us"],
                        r["pin_us"],
                        r["ratio"],
                        r.get("ratio_paired"),
                        r["ratio_min"],
                        r["lower_s"] + r["compile_s"],
                        r["note"] or "",
                    ]
                )
        out.append(
            table(
                [
                    "robot",
                    "nv",
                    "mode",
                    "batch",
                    "jointdyn µs/sample",
                    "Pinocchio µs/call",
                    "ratio",
                    "paired ratio",
                    "ratio of minima",
                    "compile s",
                    "note",
                ],
                body,
            )
        )
        out.append("")

    if res["mjx"]:
        out += ["## MuJoCo MJX vmap(forward), constraints off", ""]
        out.append(
            "`mjx.forward` batched as jointdyn's rows are (`jax.vmap`, or `jointdyn.batched` "
            "with `--impl batched`), with contacts and joint limits disabled "
            "(no constraint solver: the problem `aba` solves), next to the jointdyn `aba` row "
            "of the same batch and dtype above and Pinocchio's `abaInParallel`. Fixed-base "
            "robots only. MJX is compiled with the same XLA options as jointdyn (its own best "
            "on XLA:CPU: with XLA's default fusion emitters, jax 0.10.2, panda at batch 64 "
            "compiled in 35 s and ran at 0.12 s per sample). Compile: cold, trace + lower + XLA."
        )
        out.append("")
        body = [
            [
                r["robot"],
                r.get("dtype", ""),
                r["batch"],
                r.get("us"),
                r.get("jd_us"),
                r.get("ratio_jd"),
                r.get("pin_us"),
                r.get("ratio"),
                r.get("compile_s"),
                r.get("jd_compile_s"),
                r.get("error", "")[:80],
            ]
            for r in res["mjx"]
        ]
        out.append(
            table(
                [
                    "robot",
                    "dtype",
                    "batch",
                    "MJX µs/sample",
                    "jointdyn aba µs/sample",
                    "MJX / jointdyn",
                    "Pinocchio aba µs/sample",
                    "MJX / Pinocchio",
                    "MJX compile s",
                    "jointdyn compile s",
                    "error",
                ],
                body,
            )
        )
        out.append("")
    elif not res.get("gpu_throughput"):
        why = "`--no-mjx`" if res.get("mjx_off") == "--no-mjx" else "`mujoco.mjx` is not importable"
        out += [f"MuJoCo MJX: not measured ({why}).", ""]

    checks = [r for r in rows if "check_rel_err" in r]
    checks += [
        {**r, "alg": "aba (cold-compile table)"}
        for r in res.get("cold_compile", [])
        if "check_rel_err" in r
    ]
    if checks:
        out += ["## Agreement with Pinocchio (same states, first 4 samples)", ""]
        out.append(
            "max |jointdyn − Pinocchio| / max(1, max |Pinocchio|), after the coordinate maps."
        )
        out.append("")
        body = [
            [r["robot"], r["alg"], r["dtype"], r["batch"], f"{r['check_rel_err']:.1e}"]
            for r in checks
        ]
        out.append(table(["robot", "alg", "dtype", "batch", "rel. error"], body))
        out.append("")

    errors = [
        r
        for r in res["rows"] + res["derivatives"] + res["mjx"] + res.get("cold_compile", [])
        if "error" in r
    ]
    if errors:
        out += ["## Errors", ""]
        for r in errors:
            what = [r.get("robot"), r.get("alg", r.get("mode", "mjx")), r.get("dtype")]
            if r.get("batch") is not None:
                what.append(f"batch {r['batch']}")
            out.append(f"- {' '.join(str(x) for x in what if x)}: `{r['error'][:300]}`")
        out.append("")
    return "\n".join(out)


def write_results(res: dict, text: str, out_dir: Path, tag: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    prefix = f"results{'-' + tag if tag else ''}"
    paths = [
        out_dir / f"{prefix}-{stamp}.md",
        out_dir / f"{prefix}-latest.md",
        out_dir / f"{prefix}-{stamp}.json",
        out_dir / f"{prefix}-latest.json",
    ]
    raw = json.dumps(res, indent=1, default=str)
    for p in paths:
        p.write_text(text + "\n" if p.suffix == ".md" else raw)
    return paths
