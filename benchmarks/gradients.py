"""Gradients against forward passes, side by side in one run (the gradients issue's targets).

For each robot, float64 (`--dtype`), batch `--batch` (4096), the batch split over
`--cpu-devices` XLA CPU devices (2: one per core), every function compiled with `jd.jit`:

- **forward** `jd.batched(alg)` and **gradient** `jax.grad` of `sum(batched(alg)(model, q, v,
  u)**2)` with respect to `(model, q, v, u)` (`u` = tau for ABA, vdot for RNEA), µs per
  sample, and their **paired ratio** (the two timed back to back in rounds; median of the
  per-round ratios: the machine's speed drifts, a ratio inside one round does not);
- the **cold compile** (trace + lower + XLA) of the jitted forward and gradient;
- `jax.jacfwd(aba, argnums=(1, 2, 3))` under `jd.batched` against `jd.aba_derivatives`
  (the analytic derivatives), and `jax.jacfwd(rnea, argnums=(1, 2, 3))` against
  `jd.rnea_derivatives` with `jd.crba` (`∂τ/∂v̇ = M`), per sample, paired ratio;
- with `--wrt state`, the gradient in `(q, v, u)` only (trajectory optimisation's case),
  `--wrt identification` in the model's inertias and joint parameters only (the other leaves
  held by `stop_gradient`: identification's case, e.g. with `--algorithms
  forward_dynamics`), `--wrt all,state` both;
- with `--loss inside` (or `outside,inside`), the same loss taken per sample inside the
  batched function and summed (reverse mode then needs no forward loop for the output);
- with `--generic`, the same gradient with `jd.differentiation_rules(False)` (op-by-op AD of
  the recursion), for the record of what the rules save;
- **anchors** (`--anchors pinocchio,mjx`, the default; each skipped with a note when its
  package is missing): Pinocchio's analytic derivatives against its own forward pass, one call
  on one thread (`computeABADerivatives` / `aba`, `computeRNEADerivatives` / `rnea`: full
  Jacobians in `(q, v, u)`, what the issue's "3–6× one ABA" refers to), and MJX's reverse mode
  on the fixed-base robots: `jax.grad` of `Σ qacc²` of `mjx.forward` (contacts and
  constraints off, the problem `aba` solves, `_mjx.mjx_model`) in `(qpos, qvel,
  qfrc_applied)` and in those and every floating leaf of the MJX model, batched, compiled and
  timed exactly as jointdyn's rows.

    python benchmarks/gradients.py --robots panda,g1,talos
    python benchmarks/gradients.py --robots panda --batch 256 --rounds 3   # smoke run

Writes `benchmarks/results/gradients-<date>.md` (and prints it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--robots", default="panda,g1,talos")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--cpu-devices", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7, help="paired rounds per ratio")
    ap.add_argument("--algorithms", default="aba,rnea")
    ap.add_argument("--no-jacfwd", action="store_true")
    ap.add_argument("--generic", action="store_true", help="also time rules-off gradients")
    ap.add_argument(
        "--wrt",
        default="all",
        help="comma list of gradient inputs: all = (model, q, v, u); state = (q, v, u); "
        "identification = the model's inertias and joint parameters",
    )
    ap.add_argument(
        "--loss",
        default="outside",
        help="comma list: outside = sum(batched(alg)(...)**2); inside = the same loss per "
        "sample inside the batched function, summed",
    )
    ap.add_argument(
        "--anchors",
        default="pinocchio,mjx",
        help="comma list (or empty): pinocchio = its derivatives / its forward, one call; "
        "mjx = jax.grad of batched mjx.forward / the forward (fixed-base robots)",
    )
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    return ap.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.cpu_devices > 1:
    flag = f"--xla_force_host_platform_device_count={ARGS.cpu_devices}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(HERE))

from _robots import load_jointdyn as load  # noqa: E402
from _timing import _block, _calls_lasting  # noqa: E402

import jointdyn as jd  # noqa: E402


def states(model, batch: int, seed: int = 0, dtype=jnp.float64):
    keys = jax.random.split(jax.random.key(seed), batch)
    q = jax.vmap(model.random_configuration)(keys).astype(dtype)
    rng = np.random.default_rng(seed)
    v, u = (jnp.asarray(rng.normal(size=(batch, model.nv)), dtype) for _ in range(2))
    return jd.device_put_batched((jd.astype(model, dtype), q, v, u), (None, 0, 0, 0))


def compiled(fn, args):
    """(executable, cold compile seconds: trace + lower + XLA)."""
    t0 = time.perf_counter()
    exe = jd.jit(fn).lower(*args).compile()
    return exe, time.perf_counter() - t0


def paired(f, g, rounds: int) -> tuple[float, float, float]:
    """(s per call of f, of g, median over rounds of the per-round ratio g/f); each side of a
    round is ~50 ms of back-to-back calls after one untimed call."""
    nf = _calls_lasting(0.05, min(_block(f), _block(f)))
    ng = _calls_lasting(0.05, min(_block(g), _block(g)))
    tf, tg, ratios = [], [], []
    for r in range(rounds):
        pair = []
        for fn, n in ((f, nf), (g, ng)) if r % 2 == 0 else ((g, ng), (f, nf)):
            fn()
            pair.append((fn, _block(fn, n)))
        a = dict(pair)[f]
        b = dict(pair)[g]
        tf.append(a)
        tg.append(b)
        ratios.append(b / a)
    return float(np.median(tf)), float(np.median(tg)), float(np.median(ratios))


def blocking(exe, args):
    return lambda: jax.block_until_ready(exe(*args))


ARGNUMS = {"all": (0, 1, 2, 3), "state": (1, 2, 3), "identification": (0,)}


def identified(path: str) -> bool:
    """The model leaves of `--wrt identification`: the bodies' inertias and the joints'
    parameters (friction, damping, armature, stops, springs)."""
    return path.startswith(".inertias") or ".params." in path


def _held(model):
    """`model` with every leaf but the `identified` ones held by `stop_gradient`."""
    return jax.tree_util.tree_map_with_path(
        lambda p, x: x if identified(jax.tree_util.keystr(p)) else jax.lax.stop_gradient(x), model
    )


def loss_grad(alg: str, wrt: str = "all", where: str = "outside"):
    """(batched forward, gradient of the loss `Σ alg(…)²`): the loss taken on the batched
    output (`outside`), or per sample inside the batched function and then summed
    (`inside`: the same value and gradient; reverse mode then needs no forward loop for the
    output, see benchmarks/NOTES.md)."""
    if where not in ("outside", "inside"):
        raise ValueError(f"--loss: expected outside or inside, got {where!r}")
    fn = getattr(jd, alg)
    fb = jd.batched(fn, (None, 0, 0, 0))
    if wrt not in ARGNUMS:
        raise ValueError(f"--wrt: expected one of {sorted(ARGNUMS)}, got {wrt!r}")
    held = _held if wrt == "identification" else (lambda model: model)
    if where == "outside":

        def loss(model, q, v, u):
            return jnp.sum(fb(held(model), q, v, u) ** 2)

    else:
        per_sample = jd.batched(lambda m, q, v, u: jnp.sum(fn(m, q, v, u) ** 2), (None, 0, 0, 0))

        def loss(model, q, v, u):
            return jnp.sum(per_sample(held(model), q, v, u))

    return fb, jax.grad(loss, argnums=ARGNUMS[wrt])


def bench(name: str, a: argparse.Namespace) -> list[list]:
    model = load(name)
    args = states(model, a.batch, dtype=jnp.dtype(a.dtype))
    B = a.batch
    rows = []
    cases = [
        (x, w, lo)
        for x in a.algorithms.split(",")
        if x
        for w in a.wrt.split(",")
        for lo in a.loss.split(",")
    ]
    for alg, wrt, where in cases:
        fb, g = loss_grad(alg, wrt, where)
        fwd, c_fwd = compiled(fb, args)
        grad, c_grad = compiled(g, args)
        tf, tg, ratio = paired(blocking(fwd, args), blocking(grad, args), a.rounds)
        row = [
            name,
            model.nv,
            f"{alg} (grad in {wrt})" + ("" if where == "outside" else ", loss inside batched"),
            tf / B * 1e6,
            tg / B * 1e6,
            ratio,
            c_fwd,
            c_grad,
        ]
        if a.generic:
            with jd.differentiation_rules(False):
                _, g0 = loss_grad(alg, wrt, where)
                gen, c_gen = compiled(g0, args)
            _, t0, r0 = paired(blocking(fwd, args), blocking(gen, args), max(3, a.rounds // 2))
            row += [t0 / B * 1e6, r0, c_gen]
        rows.append(row)
        print(fmt(row), flush=True)
    if not a.no_jacfwd:
        jf = jd.batched(jax.jacfwd(jd.aba, argnums=(1, 2, 3)), (None, 0, 0, 0))
        ad = jd.batched(jd.aba_derivatives, (None, 0, 0, 0))
        e_jf, c_jf = compiled(jf, args)
        e_ad, c_ad = compiled(ad, args)
        out_jf, out_ad = e_jf(*args), e_ad(*args)
        err = float(jnp.max(jnp.abs(out_jf[1] - out_ad.dvdot_dv)))
        t_ad, t_jf, r = paired(blocking(e_ad, args), blocking(e_jf, args), a.rounds)
        row = [name, model.nv, "jacfwd(aba) / aba_derivatives", t_ad / B * 1e6, t_jf / B * 1e6]
        rows.append(row + [r, c_ad, c_jf, err])
        print(fmt(rows[-1]), flush=True)

        def analytic(m, q, v, a):  # RNEA's Jacobians in (q, v, v̇): rnea_derivatives and crba
            return (*jd.rnea_derivatives(m, q, v, a), jd.crba(m, q))

        jf = jd.batched(jax.jacfwd(jd.rnea, argnums=(1, 2, 3)), (None, 0, 0, 0))
        e_jf, c_jf = compiled(jf, args)
        e_ad, c_ad = compiled(jd.batched(analytic, (None, 0, 0, 0)), args)
        err = float(jnp.max(jnp.abs(e_jf(*args)[1] - e_ad(*args)[1])))
        t_ad, t_jf, r = paired(blocking(e_ad, args), blocking(e_jf, args), a.rounds)
        what = "jacfwd(rnea) / rnea_derivatives + crba"
        rows.append([name, model.nv, what, t_ad / B * 1e6, t_jf / B * 1e6, r, c_ad, c_jf, err])
        print(fmt(rows[-1]), flush=True)
    return rows


def pinocchio_rows(name: str, a: argparse.Namespace) -> list[list]:
    """Pinocchio's analytic derivatives against its forward pass: one call on one thread each,
    µs per call, paired ratio (no compile: the last two columns are empty)."""
    try:
        from _pinocchio import pin_single_call
        from _robots import load_robot
    except ImportError as e:
        print(f"{name}: Pinocchio anchor skipped ({e})")
        return []
    robot = load_robot(name, 1, threads=1)
    rows = []
    for fwd, der, what in (
        ("aba", "aba_derivatives", "Pinocchio: computeABADerivatives / aba"),
        ("rnea", "rnea_derivatives", "Pinocchio: computeRNEADerivatives / rnea"),
    ):
        f, g = pin_single_call(robot, fwd), pin_single_call(robot, der)
        tf, tg, r = paired(f, g, a.rounds)
        rows.append([name, robot.nv, what, tf * 1e6, tg * 1e6, r, "", ""])
        print(fmt(rows[-1]), flush=True)
    return rows


def mjx_rows(name: str, a: argparse.Namespace) -> list[list]:
    """MJX's reverse mode against its forward, as jointdyn's rows (`jd.batched`, `jd.jit`,
    the same batch and devices): `jax.grad` of `Σ qacc²` in the state, and in the state and
    every floating leaf of the MJX model. Fixed-base robots only (MuJoCo's URDF import has no
    free joint, so a floating robot would be another problem)."""
    from _mjx import mjx_available, mjx_model, mjx_qacc
    from _robots import ROBOTS, ROBOTS_DIR

    rel, floating = ROBOTS[name]
    if not mjx_available() or floating:
        why = "mujoco.mjx is not installed" if not mjx_available() else "floating base"
        print(f"{name}: MJX anchor skipped ({why})")
        return []
    import equinox as eqx

    mj, m, d0 = mjx_model(str(ROBOTS_DIR / rel))
    dtype = jnp.dtype(a.dtype)
    rng = np.random.default_rng(0)
    B = a.batch
    q, v, u = (
        jnp.asarray(x, dtype)
        for x in (
            rng.uniform(-1, 1, (B, mj.nq)),
            rng.normal(size=(B, mj.nv)),
            rng.normal(size=(B, mj.nv)),
        )
    )
    floats, rest = eqx.partition(m, eqx.is_inexact_array)
    fb = jd.batched(
        lambda f, d, q, v, u: mjx_qacc(eqx.combine(f, rest), d, q, v, u), (None, None, 0, 0, 0)
    )
    args = jd.device_put_batched((floats, d0, q, v, u), (None, None, 0, 0, 0))

    def loss(f, d, q, v, u):
        return jnp.sum(fb(f, d, q, v, u) ** 2)

    fwd, c_fwd = compiled(fb, args)
    rows = []
    for wrt, argnums in (("state", (2, 3, 4)), ("all", (0, 2, 3, 4))):
        grad, c_grad = compiled(jax.grad(loss, argnums=argnums), args)
        tf, tg, ratio = paired(blocking(fwd, args), blocking(grad, args), a.rounds)
        what = f"MJX: mjx.forward (grad in {wrt})"
        rows.append([name, mj.nv, what, tf / B * 1e6, tg / B * 1e6, ratio, c_fwd, c_grad])
        print(fmt(rows[-1]), flush=True)
    return rows


def fmt(row) -> str:
    return " | ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in row)


def _devices() -> str:
    d = jax.devices()
    return f"{len(d)} {d[0].platform.upper()} device(s) ({getattr(d[0], 'device_kind', '')})"


def main() -> None:
    a = ARGS
    print(f"jax {jax.__version__}, {_devices()}, batch {a.batch}, {a.dtype}")
    rows = []
    anchors = [x for x in a.anchors.split(",") if x]
    if set(anchors) - {"pinocchio", "mjx"}:
        raise ValueError(f"--anchors: expected pinocchio and/or mjx, got {a.anchors!r}")
    for name in a.robots.split(","):
        rows += bench(name, a)
        if "pinocchio" in anchors:
            rows += pinocchio_rows(name, a)
        if "mjx" in anchors:
            rows += mjx_rows(name, a)
    head = (
        "| robot | nv | what | forward µs/sample | gradient µs/sample | paired ratio "
        "| forward compile s | gradient compile s |"
    )
    if a.generic:
        head += " rules off: gradient µs | ratio | compile s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            "| " + " | ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in r) + " |"
        )
    text = (
        f"# Gradients, {time.strftime('%Y-%m-%d %H:%M')}\n\n"
        f"jax {jax.__version__}, {_devices()}, batch {a.batch}, {a.dtype}. "
        "Rows 'jacfwd(aba) / aba_derivatives': forward = `jd.aba_derivatives`, gradient = "
        "`jax.jacfwd(jd.aba, argnums=(1, 2, 3))`, both under `jd.batched`; the last column is "
        "their largest difference in ∂v̇/∂v. Rows 'jacfwd(rnea) / …': forward = "
        "`jd.rnea_derivatives` and `jd.crba`, gradient = `jax.jacfwd(jd.rnea, argnums=(1, 2, "
        "3))`; the last column their largest difference in ∂τ/∂v. Rows 'Pinocchio: …': "
        "its analytic derivatives (Jacobians in q, v, u) / its forward pass, one call on one "
        "thread, µs per call. Rows 'MJX: …': `jax.grad` of `Σ qacc²` of batched `mjx.forward` "
        "(contacts and constraints off) / the forward, in the state or in the state and every "
        "floating leaf of the MJX model, compiled and timed as jointdyn's rows.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    print(text)
    if not a.no_write:
        out = Path(a.out_dir) / f"gradients-{time.strftime('%Y-%m-%d-%H%M')}.md"
        out.write_text(text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
