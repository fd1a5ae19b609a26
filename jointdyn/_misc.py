"""Small tree utilities."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from ._packed import unpacked

T = TypeVar("T")


def astype(tree: T, dtype) -> T:
    """Cast every floating-point array leaf of `tree` (a joint, a model, …) to `dtype`.

    Algorithms call this on the model with the dtype of their inputs, so a float32 state gives
    float32 results even where the model was built in float64 (and the reverse).
    """

    def cast(x):
        if isinstance(x, jax.Array | jnp.ndarray) and jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(dtype)
        return x

    return jax.tree.map(cast, tree)


#: XLA options jointdyn compiles with on CPU (see `compiler_options`).
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def _supported_options() -> tuple[tuple[str, Any], ...]:
    try:  # an XLA without the option rejects it at compile time
        jax.jit(lambda x: x, compiler_options=CPU_COMPILER_OPTIONS).lower(0.0).compile()
    except Exception:  # noqa: BLE001 - any refusal means: compile with XLA's defaults
        return ()
    return tuple(CPU_COMPILER_OPTIONS.items())


def compiler_options() -> dict[str, Any]:
    """The XLA compiler options jointdyn's own jitted calls use, for your `jax.jit`:

        jax.jit(jax.vmap(jd.aba, (None, 0, 0, 0)), compiler_options=jd.compiler_options())

    `xla_cpu_use_fusion_emitters=False`: XLA:CPU emits fused kernels with its elemental IR
    emitter instead of the MLIR fusion emitters. Measured on a 2-core AVX-512 machine, float64:
    XLA compile of talos `jit(vmap(aba))` 2.7 → 1.6 s, and at batch 4096 (`batched`) 13–41 %
    faster compiles and 5–23 % less time per sample for ABA, RNEA and CRBA on panda, g1 and
    talos. The option only concerns XLA:CPU; other backends ignore it.
    Returns `{}` when the installed XLA does not know the option. The same setting for a whole
    process: `XLA_FLAGS=--xla_cpu_use_fusion_emitters=false`.
    """
    return dict(_supported_options())


def jit(fn: Callable | None = None, **jit_kwargs) -> Callable:
    """`jax.jit(fn, **jit_kwargs)` with `compiler_options()` (yours, if given, take precedence):

    aba_batch = jd.jit(jd.batched(jd.aba, (None, 0, 0, 0)))
    """
    if fn is None:
        return functools.partial(jit, **jit_kwargs)
    options = {**compiler_options(), **(jit_kwargs.pop("compiler_options", None) or {})}
    return jax.jit(fn, compiler_options=options, **jit_kwargs)


try:  # True when no transformation (jit, vmap, grad, …) is tracing: 0.2 µs
    from jax._src.core import trace_state_clean as _top_level
except ImportError:  # pragma: no cover - a JAX without it: look for tracers instead
    _top_level = None


def _under_trace(args, kwargs) -> bool:
    if _top_level is not None:
        return not _top_level()
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))


def accepts_packed(fn: Callable) -> Callable:
    """`fn` with every `PackedModel` argument unpacked first (inside the trace when jitted)."""

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        args = tuple(unpacked(a) for a in args)
        return fn(*args, **{k: unpacked(v) for k, v in kwargs.items()})

    return inner


def jit_unless_traced(fn: Callable) -> Callable:
    """`jit(fn)` (with `compiler_options()`) for calls outside any transformation; `fn` itself,
    inlined, when called under one (`jit`, `vmap`, `grad`, …).

    A jitted function used under `vmap`, `grad` or `jvp` is traced to a jaxpr and then traced
    again by the transformation's rule for the nested call: twice the trace time of
    `jit(vmap(aba))`. Inlining traces it once; and XLA compiler options are only allowed on
    the outermost `jit`. Direct calls keep jit's cache and dispatch. The jitted function is
    made at the first direct call, not at import, so importing jointdyn starts no backend.
    A `PackedModel` argument is unpacked inside (`accepts_packed`).
    """
    jitted = None
    inner = accepts_packed(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        nonlocal jitted
        if _under_trace(args, kwargs):
            return inner(*args, **kwargs)
        if jitted is None:
            jitted = jit(inner)
        return jitted(*args, **kwargs)

    return wrapper


#: The XLA flag `use_low_latency_cpu` adds to `XLA_FLAGS`.
LOW_LATENCY_XLA_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # pragma: no cover - another JAX: assume not started
        return False


@functools.cache
def _xla_knows(flag: str) -> bool:
    """Whether the installed XLA accepts `flag` (XLA aborts the process on an unknown flag in
    `XLA_FLAGS`, so this asks a child process; about a second, once)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    probe = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=120)
    return run.returncode == 0


def use_low_latency_cpu() -> dict[str, Any]:
    """Set this process's XLA:CPU up for many small calls (one state at a time, control loops,
    Python-side integrators) rather than big batches. Call it before JAX's first computation.

    1. `jax_cpu_enable_async_dispatch = False`: a call runs on the calling thread and returns
       when it is done, instead of being queued to another thread and waited for.
    2. `XLA_FLAGS += --xla_cpu_enable_concurrency_optimized_scheduler=false`: XLA orders each
       program's kernels to keep dependent ones together instead of interleaving independent
       branches; XLA's executor then runs a small program on one thread, without hand-offs
       between threads that cost more than the kernels themselves.

    Measured on a 2-core AVX-512 machine, panda, float64, one `jax.jit(jd.aba)` call with a
    `pack`-ed model: 65 µs with XLA's defaults, 18 µs after this call (the model pytree itself
    would add ~57 µs). Batched calls are better off without it: at batch 4096 the scheduler flag
    made talos RNEA 1.3–1.5× slower. Both settings are process-wide, which is why jointdyn never
    applies them by itself.

    Returns what was set. Raises `RuntimeError` if a JAX backend has started already (the
    settings would be silently ignored). A flag the user already put in `XLA_FLAGS` is kept; a
    flag the installed XLA does not know is left out (checked in a child process).
    """
    if _backends_started():
        raise RuntimeError(
            "use_low_latency_cpu() must run before JAX's first computation: a backend has "
            "started, and its settings can no longer change"
        )
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    done: dict[str, Any] = {"jax_cpu_enable_async_dispatch": False}
    flags = os.environ.get("XLA_FLAGS", "")
    name = LOW_LATENCY_XLA_FLAG.split("=")[0]
    if name in flags:
        done["XLA_FLAGS"] = f"kept the user's {name}"
    elif _xla_knows(LOW_LATENCY_XLA_FLAG):
        os.environ["XLA_FLAGS"] = f"{flags} {LOW_LATENCY_XLA_FLAG}".strip()
        done["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    else:
        done["XLA_FLAGS"] = f"{name} unknown to this XLA: not set"
    return done
