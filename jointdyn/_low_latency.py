"""`use_low_latency_cpu`: process-wide XLA:CPU settings for many small calls."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

import jax
import jax.extend.backend

#: The XLA flag `use_low_latency_cpu` adds to `XLA_FLAGS`.
LOW_LATENCY_XLA_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _backends_started() -> bool:
    """Whether a JAX backend exists: every computation, `jax.devices()` and `device_put` go
    through `jax.extend.backend.get_backend`, a cached function whose cache fills on first
    use (JAX's own `backends_are_initialized` is not public)."""
    cache_info = getattr(jax.extend.backend.get_backend, "cache_info", None)
    if cache_info is None:  # pragma: no cover - another JAX: assume not started
        return False
    return cache_info().currsize > 0


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
