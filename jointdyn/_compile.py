"""How jointdyn compiles: XLA compiler options, `jd.jit`, and the jit-unless-traced wrapper
every public algorithm goes through."""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

from ._autodiff import jacfwd_lanes, rules_enabled, tangent_lanes_hint
from ._dtype import floating_arguments, floating_converter
from ._packed import unpacked
from ._precision import full_precision

#: XLA options jointdyn compiles with on CPU (see `compiler_options`).
CPU_COMPILER_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
}


def _accepted(name: str, value: Any) -> bool:
    try:  # an XLA without the option rejects it at compile time
        jax.jit(lambda x: x, compiler_options={name: value}).lower(0.0).compile()
    except Exception:  # noqa: BLE001 - any refusal means: compile with XLA's default for it
        return False
    return True


@functools.cache
def _supported_options() -> tuple[tuple[str, Any], ...]:
    return tuple((k, v) for k, v in CPU_COMPILER_OPTIONS.items() if _accepted(k, v))


def compiler_options() -> dict[str, Any]:
    """The XLA compiler options jointdyn's own jitted calls use, for your `jax.jit`:

        jax.jit(jax.vmap(jd.aba, (None, 0, 0, 0)), compiler_options=jd.compiler_options())

    - `xla_cpu_use_fusion_emitters=False`: XLA:CPU emits fused kernels with its elemental IR
      emitter instead of the MLIR fusion emitters. Measured on a 2-core AVX-512 machine,
      float64: XLA compile of talos `jit(vmap(aba))` 2.7 → 1.6 s, and at batch 4096
      (`batched`) 13–41 % faster compiles and 5–23 % less time per sample for ABA, RNEA and
      CRBA on panda, g1 and talos.
    - `xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`: XLA:CPU hands
      matrix products to its YNNPACK library, but not reductions. The reductions of a reverse
      pass (transposed broadcasts, a few dozen entries each) ran ~20 µs per call there, a third
      of a gradient's time: `jax.grad` of batched `aba` / `rnea` on g1 (batch 4096, 2 devices)
      49.6 → 33.4 / 44.3 → 29.9 µs per sample, talos 53.9 → 36.1 / 52.9 → 35.1, compile
      23 → 20 s; forward passes and panda unchanged (`benchmarks/NOTES.md`).

    Each option is kept only if the installed XLA knows it (`{}` when it knows neither). Both
    only concern XLA:CPU; other backends ignore them. The same settings for a whole process:
    `XLA_FLAGS` (`jd.xla_flags()` gives the string).
    """
    return dict(_supported_options())


def xla_flags() -> str:
    """`compiler_options()` as `XLA_FLAGS` words (`--name=value`), for a whole process:

        os.environ["XLA_FLAGS"] = jd.xla_flags()   # before the first JAX computation

    XLA reads `XLA_FLAGS` when JAX starts its backend and aborts on a flag it does not know,
    so which options this XLA knows is asked of a fresh Python process (the caller's backend
    is not started: set `os.environ["XLA_FLAGS"]` before the first JAX computation).
    """
    import json
    import os
    import subprocess
    import sys

    code = "import json, jointdyn._compile as c; print(json.dumps(c.compiler_options()))"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    options = json.loads(out.stdout.strip().splitlines()[-1])
    return " ".join(
        f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()
    )


#: CPython's cyclic-GC thresholds while jointdyn traces (`collections_deferred`).
TRACING_GC_THRESHOLDS = (100_000, 50, 1000)
_deferred = threading.local()  # per thread: how deep in `collections_deferred`
_deferred_lock = threading.Lock()
_deferred_saved: list = []  # the thresholds to restore, while any thread is inside
_deferred_count = [0]  # threads inside


@contextlib.contextmanager
def collections_deferred() -> Iterator[None]:
    """Run the block with CPython's cyclic garbage collector collecting rarely
    (`TRACING_GC_THRESHOLDS`), then restore the thresholds.

    Tracing creates millions of Python objects that stay alive (equations, tracers, their
    source information); with the default thresholds `(700, 10, 10)` the collector scans them
    again and again while the trace grows. Measured (g1, `jd.jit(jax.grad(loss of
    jd.batched(jd.aba)))`, fresh processes): tracing 1.52–1.73 → 1.14–1.19 s. Objects are
    still freed by reference counting when they die; only cycles wait, and the first
    collection after the block (the counters are past the restored thresholds) finds them.
    Nested and concurrent blocks share one adjustment: the outermost entry sets the
    thresholds, the last exit restores what it found. Used by `jit`, every algorithm's traced
    body (`jit_unless_traced`), and the entry points that trace the user's own functions:
    `batched`, `rollout`, `optimal_control.solve` (the notebooks' collections: 04 1.5 → 0.8 s,
    02 1.0 → 0.6 s, 03 0.8 → 0.5 s).
    """
    depth = getattr(_deferred, "depth", 0)
    _deferred.depth = depth + 1
    if depth == 0:
        with _deferred_lock:
            if _deferred_count[0] == 0:
                _deferred_saved[:] = [gc.get_threshold()]
                gc.set_threshold(*TRACING_GC_THRESHOLDS)
            _deferred_count[0] += 1
    try:
        yield
    finally:
        _deferred.depth = depth
        if depth == 0:
            with _deferred_lock:
                _deferred_count[0] -= 1
                if _deferred_count[0] == 0:
                    gc.set_threshold(*_deferred_saved.pop())


def _traced_with_collections_deferred(fn: Callable) -> Callable:
    """`fn`, its body run in `collections_deferred()`. For a jitted function's body (`jit`,
    `jit_unless_traced`, `solve`) that is while it is traced; an entry point that may be
    called eagerly (`batched`, `rollout`) defers for the whole call: its trace, compile and
    run."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with collections_deferred():
            return fn(*args, **kwargs)

    return traced


def jit(fn: Callable | None = None, **jit_kwargs) -> Callable:
    """`jax.jit(fn, **jit_kwargs)` with `compiler_options()` (yours, if given, take precedence):

    aba_batch = jd.jit(jd.batched(jd.aba, (None, 0, 0, 0)))

    While `fn` is traced, Python's cyclic garbage collector collects rarely
    (`collections_deferred`): tracing a large gradient is ~30 % faster.
    """
    if fn is None:
        return functools.partial(jit, **jit_kwargs)
    options = {**compiler_options(), **(jit_kwargs.pop("compiler_options", None) or {})}
    return jax.jit(_traced_with_collections_deferred(fn), compiler_options=options, **jit_kwargs)


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _staged(x) -> bool:
    """Whether tracer `x` is, at bottom, a value of a program being staged (`jit`, `scan`,
    `make_jaxpr`, …) rather than a concrete array that an un-jitted `vmap`, `grad` or `jvp`
    is transforming op by op. Follows `BatchTracer.val` and `JVPTracer.primal` (or
    `LinearizeTracer.primal`) down to what they wrap; a tracer with neither counts as staged."""
    while isinstance(x, jax.core.Tracer):
        x = getattr(x, "val", None) if hasattr(x, "val") else getattr(x, "primal", None)
    return not isinstance(x, jax.Array)


def _under_trace(tracers: list) -> bool:
    """Whether a transformation that stages a program (`jit`, `scan`, a `grad` or `vmap`
    inside them, …) is tracing this call: one of its argument tracers (`_tracers`) wraps a
    staged value. A function that closes over tracers but takes none as an argument is seen
    as untraced and called jitted, which is correct, only traced twice.

    An un-jitted `jax.vmap`, `jax.grad`, `jax.jvp` or `jax.jacfwd` (every tracer wraps a
    concrete array) is not a staging trace: inlined there, the algorithm would run op by op,
    each of its hundreds of operations dispatched, and compiled at its first use, on its own.
    Such calls take the jitted function instead, which the transformation then maps or
    differentiates as one program."""
    return any(_staged(x) for x in tracers)


def _tracers(args, kwargs) -> list:
    """The tracers among the array arguments (one `isinstance` each: the common traced call
    has a traced state), or, only when there are none, among the leaves of the pytree
    arguments (the model: ~14 µs for a 32-leaf model; one leaf for a `PackedModel`). Found
    once per call: `_under_trace` and the jitted function's key both use them."""
    values = (*args, *kwargs.values())
    tracers = [x for x in values if _is_tracer(x)]
    if not tracers:
        tracers = [x for x in jax.tree.leaves(values) if _is_tracer(x)]
    return tracers


def accepts_packed(fn: Callable) -> Callable:
    """`fn` with every `PackedModel` argument unpacked first (inside the trace when jitted)."""

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        args = tuple(unpacked(a) for a in args)
        return fn(*args, **{k: unpacked(v) for k, v in kwargs.items()})

    return inner


def jit_unless_traced(fn: Callable) -> Callable:
    """`jit(fn)` (with `compiler_options()`) for calls outside any staged program; `fn`
    itself, inlined, when called while one is traced (`jit`, `scan`, and `vmap`, `grad`, …
    inside them; see `_under_trace`).

    A jitted function used under `vmap`, `grad` or `jvp` inside `jit` is traced to a jaxpr and
    then traced again by the transformation's rule for the nested call: twice the trace time of
    `jit(vmap(aba))`. Inlining traces it once; and XLA compiler options are only allowed on
    the outermost `jit`. Direct calls, and calls under an un-jitted `vmap`/`grad`/`jvp`, keep
    jit's cache and dispatch (the latter compile the mapped or differentiated program once
    instead of running hundreds of operations one by one). The jitted function is made at the
    first such call, not at import, so importing jointdyn starts no backend, and once per
    state of `differentiation_rules` (read while tracing); under an un-jitted transformation
    it is a plain `jax.jit` (the transformation may stage it inside a program of its own, as
    `grad` does, where a nested jit takes no compiler options). Under an un-jitted
    `jax.jacfwd` the number of its tangent lanes is passed to the rules traced by the jitted
    call's JVP (`tangent_lanes_hint`), which cannot see them on their tracers. A
    `PackedModel` argument is unpacked inside (`accepts_packed`); integer states and lists
    become floating-point arrays first (`_dtype.floating_arguments`).
    """
    jitted = {}  # per state of `differentiation_rules` (read when tracing), and per kind
    inner = _traced_with_collections_deferred(
        full_precision(accepts_packed(floating_arguments(fn)))
    )
    to_floating = floating_converter(fn, python_only=True)  # arrays: converted when traced

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args, kwargs = to_floating(args, kwargs)
        tracers = _tracers(args, kwargs)
        if _under_trace(tracers):
            return inner(*args, **kwargs)
        # an un-jitted transformation may stage the call into a program of its own (`grad`
        # linearizes): there the jit is nested, and a nested jit takes no compiler options
        # an un-jitted `jax.jacfwd`: its lanes do not show inside the jitted call's JVP, where
        # the rules are traced; they are passed on (`tangent_lanes_hint`)
        lanes = jacfwd_lanes(tracers) if tracers else 0
        key = (rules_enabled(), bool(tracers), bool(lanes))
        if key not in jitted:  # a closure of its own: jit caches traces by function
            fresh = functools.wraps(fn)(lambda *a, **k: inner(*a, **k))
            jitted[key] = jax.jit(fresh) if key[1] else jit(fresh)
        with tangent_lanes_hint(lanes):  # a no-op without lanes
            return jitted[key](*args, **kwargs)

    return wrapper
