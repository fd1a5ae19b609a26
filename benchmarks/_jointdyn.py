"""The jointdyn side of `run.py`: how each jointdyn function is batched, compiled and called.

- `configure(impl, compiler_options)` sets, once per process, how every function below batches
  (`jax.vmap`, or `jointdyn.batched` under `--impl batched`) and compiles (`jointdyn.jit`, or
  plain `jax.jit` under `--xla-defaults`);
- `jd_args` gives an algorithm's arguments from a robot's states, `jd_batched` and
  `aba_derivatives_fn` the batched functions, `compile_timed` their AOT compile with its time;
- `call_us`, `call_overhead`, `closed_model_call` and `packed_model_call` time single calls
  (batch 1) in the ways the "Single call" table lists.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from _timing import time_call

import jointdyn as jd

if TYPE_CHECKING:
    from _results import Settings
    from _robots import Robot

ALGORITHMS = ("aba", "rnea", "crba")
DTYPES = {"float64": jnp.float64, "float32": jnp.float32}

IMPL = "vmap"  # set from Settings.impl: "vmap" = jax.vmap, "batched" = jointdyn.batched
COMPILER_OPTIONS = True  # Settings.compiler_options: jointdyn.jit, else plain jax.jit


def configure(impl: str, compiler_options: bool) -> None:
    """How this process batches (`"vmap"` or `"batched"`) and compiles (`jointdyn.jit` if
    `compiler_options`, else plain `jax.jit`): `Settings.impl` and `Settings.compiler_options`."""
    global IMPL, COMPILER_OPTIONS
    IMPL, COMPILER_OPTIONS = impl, compiler_options


def place(args: tuple, in_axes: tuple) -> tuple:
    """`args` where `batch_over_states` computes: under `--impl batched` the batched ones split
    over the devices (`jointdyn.device_put_batched`), else unchanged."""
    if IMPL == "batched":
        return jd.device_put_batched(args, in_axes)
    return args


def jd_args(robot: Robot, alg: str, batch: int, dtype, placed: bool = True) -> tuple:
    """(model, states...) of `alg` at `batch` in `dtype`; under `--impl batched` (and `placed`)
    the states split over the devices where `jointdyn.batched` computes."""
    s = robot.states
    model = jd.astype(robot.model, dtype)

    def a(x):
        return jnp.asarray(x[:batch], dtype=dtype)

    if alg == "aba":
        args = model, a(s["q"]), a(s["v"]), a(s["tau"])
    elif alg == "rnea":
        args = model, a(s["q"]), a(s["v"]), a(s["vdot"])
    else:
        args = model, a(s["q"])
    if placed:
        args = place(args, (None,) + (0,) * (len(args) - 1))
    return args


def jd_batched(alg: str):
    fn = getattr(jd, alg)
    return batch_over_states(fn, (None, 0) if alg == "crba" else (None, 0, 0, 0))


def batch_over_states(fn, in_axes):
    """`jax.vmap`, or with `--impl batched` `jointdyn.batched` (cache-sized chunks on CPU, split
    over all local devices)."""
    if IMPL == "batched":
        return jd.batched(fn, in_axes)
    return jax.vmap(fn, in_axes=in_axes)


def compile_timed(fn, args) -> tuple[Any, float, float]:
    """AOT-compile `jointdyn.jit(fn)` (`jax.jit` with `jointdyn.compiler_options()`; plain
    `jax.jit` under `--xla-defaults`) for `args`: (executable, trace+lower s, compile s)."""
    t0 = time.perf_counter()
    lowered = (jd.jit(fn) if COMPILER_OPTIONS else jax.jit(fn)).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


def blocking(compiled, args):
    """A call of `compiled(*args)` that waits for every output: what the batched rows time."""
    return lambda: jax.block_until_ready(compiled(*args))


def aba_derivatives_fn(mode: str):
    """(model, q, v, tau) → (∂v̇/∂q in the tangent space, ∂v̇/∂v, ∂v̇/∂tau), each (nv, nv).

    `jd`: `jointdyn.aba_derivatives` (−M⁻¹ ∂RNEA); `fwd` / `rev`: `jax.jacfwd` / `jax.jacrev`
    of `aba`.
    """
    if mode == "jd":

        def library(model, q, v, tau):
            d = jd.aba_derivatives(model, q, v, tau)
            return d.dvdot_dq, d.dvdot_dv, d.dvdot_dtau

        return batch_over_states(library, (None, 0, 0, 0))
    jac = {"fwd": jax.jacfwd, "rev": jax.jacrev}[mode]

    def derivatives(model, q, v, tau):
        def f(dq, v, tau):
            return jd.aba(model, model.integrate(q, dq), v, tau)

        return jac(f, argnums=(0, 1, 2))(jnp.zeros_like(v), v, tau)

    return batch_over_states(derivatives, (None, 0, 0, 0))


# ---------------------------------------------------------------------------------------------
# checks: jointdyn's outputs against Pinocchio's on the same states (relative max error)


def call_us(fn, args, st: Settings) -> tuple[float, float]:
    """µs per call (median, fastest repeat) of `jointdyn.jit(fn)` (AOT-compiled) on `args`.

    Each call waits for its result with the array's own `.block_until_ready()` (0.3 µs):
    `jax.block_until_ready(x)` walks `x` as a pytree first and costs ~1.1 µs on this machine,
    which is not part of the call (batched timings keep it; it is noise there)."""
    compiled, _, _ = compile_timed(fn, args)
    if isinstance(compiled(*args), jax.Array):
        r = time_call(lambda: compiled(*args).block_until_ready(), st.repeats, st.budget_s)
    else:
        r = time_call(lambda: jax.block_until_ready(compiled(*args)), st.repeats, st.budget_s)
    return 1e6 * r["median"], 1e6 * r["min"]


def one_sample(robot: Robot, alg: str) -> tuple:
    """The state arguments of `alg` (no model) for one float64 sample, without a batch axis."""
    return tuple(jnp.asarray(a[0]) for a in jd_args(robot, alg, 1, jnp.float64)[1:])


def call_overhead(robot: Robot, st: Settings) -> float:
    """µs per call of a jitted identity that takes the model: the cost of passing the model."""
    return call_us(lambda model, q: q, (robot.model, jnp.asarray(robot.states["q"][:1])), st)[0]


def closed_model_call(robot: Robot, st: Settings, alg: str) -> float:
    """µs per call of `jit(lambda *x: alg(model, *x))` on one float64 sample: the model is a
    compile-time constant (no pytree to pass, model-only work folded); parameter changes would
    retrace."""
    model, fn = robot.model, getattr(jd, alg)
    return call_us(lambda *x: fn(model, *x), one_sample(robot, alg), st)[0]


def packed_model_call(robot: Robot, st: Settings, alg: str) -> tuple[float, float]:
    """µs per call (median, fastest repeat) of `jointdyn.jit(alg)(jd.pack(model), *x)` on one
    float64 sample: the model passed as one flat vector (`jointdyn.pack`); new parameter values
    do not retrace."""
    return call_us(getattr(jd, alg), (jd.pack(robot.model), *one_sample(robot, alg)), st)
