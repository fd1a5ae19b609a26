"""Small tree utilities."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax
import jax.numpy as jnp

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


def jit_unless_traced(fn: Callable) -> Callable:
    """`jax.jit(fn)` for calls on concrete arrays; `fn` itself, inlined, when an argument other
    than the first (the model) is a tracer.

    A jitted function used under `vmap`, `grad` or `jvp` is traced to a jaxpr and then traced
    again by the transformation's rule for the nested call: twice the trace time of
    `jit(vmap(aba))`. Inlining traces it once. Direct calls keep jit's cache and dispatch.
    """
    jitted = jax.jit(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args[1:], kwargs))):
            return fn(*args, **kwargs)
        return jitted(*args, **kwargs)

    return wrapper
