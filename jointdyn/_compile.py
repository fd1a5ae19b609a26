"""How jointdyn compiles: XLA compiler options, `jd.jit`, and the jit-unless-traced wrapper
every public algorithm goes through."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from ._packed import unpacked
from ._precision import full_precision

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


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _under_trace(args, kwargs) -> bool:
    """Whether a transformation (`jit`, `vmap`, `grad`, …) is tracing this call: some argument
    is a tracer. The array arguments are looked at first (one `isinstance` each: the common
    traced call has a traced state); only when none is a tracer are the leaves of the pytree
    arguments (the model) searched (~14 µs for a 32-leaf model; one leaf for a `PackedModel`).
    A function that closes over tracers but takes none as an argument is seen as untraced and
    called jitted, which is correct, only traced twice."""
    values = (*args, *kwargs.values())
    if any(_is_tracer(x) for x in values):
        return True
    return any(_is_tracer(x) for x in jax.tree.leaves(values))


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
    inner = full_precision(accepts_packed(fn))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        nonlocal jitted
        if _under_trace(args, kwargs):
            return inner(*args, **kwargs)
        if jitted is None:
            jitted = jit(inner)
        return jitted(*args, **kwargs)

    return wrapper
