"""Casting a pytree's floating-point leaves to the dtype of the inputs; the algorithms' state
arguments as floating-point arrays."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

T = TypeVar("T")


def astype(tree: T, dtype) -> T:
    """Cast every floating-point array leaf of `tree` (a joint, a model, …) to `dtype`.

    Algorithms call this on the model with the dtype of their inputs, so a float32 state gives
    float32 results even where the model was built in float64 (and the reverse).
    **Raises:** `TypeError` when `dtype` is not a real floating dtype (an integer or complex
    model has no meaning: its masses and axes would be truncated or its algorithms fail).
    """
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"`dtype` must be a real floating dtype (float32, float64, …), got {dtype}")

    def cast(x):
        if isinstance(x, jax.Array | jnp.ndarray) and jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(dtype)
        return x

    return jax.tree.map(cast, tree)


#: The algorithms' state arguments, by name: configurations, velocities, accelerations,
#: torques, external forces (`floating_arguments` makes them floating-point arrays).
STATE_ARGUMENTS = frozenset({"q", "v", "vdot", "tau", "f_ext", "q0", "q1", "v0", "controls"})
_FLOAT_DTYPES = frozenset(jnp.dtype(t) for t in ("float16", "bfloat16", "float32", "float64"))
_PYTHON_TYPES = frozenset({list, tuple, int, float, bool})


def floating(x: Any, name: str = "x") -> Any:
    """`x` as an array of a floating dtype, for an algorithm's state argument `name`.

    Floating arrays (JAX or NumPy, tracers included) pass unchanged, as do None and callables
    (a policy). Integer and boolean arrays, Python numbers and lists become arrays of JAX's
    default floating dtype (float32; float64 with `jax_enable_x64`), as `jnp.sin` would make
    them: `jd.aba(model, np.zeros(nq, int), …)` is `jd.aba(model, np.zeros(nq), …)`.
    **Raises:** `TypeError` naming the argument for complex values.
    """
    if x is None or callable(x):
        return x
    dtype = getattr(x, "dtype", None)
    if dtype is not None and (dtype.kind == "f" or jnp.issubdtype(dtype, jnp.floating)):
        return x
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"`{name}` must be real, got dtype {x.dtype}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def floating_converter(
    fn: Callable, python_only: bool = False
) -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """`(args, kwargs) -> (args, kwargs)` for calls of `fn`, with its `STATE_ARGUMENTS` (found
    by name in its signature, passed by position or keyword) made floating-point arrays by
    `floating`; the arguments unchanged (the same objects) when they already are. With
    `python_only`, only Python numbers, lists and tuples are converted (arrays pass as they
    are: for a caller that converts them inside its traced function, at no cost per call)."""
    names = list(inspect.signature(fn).parameters)
    positions = tuple(i for i, n in enumerate(names) if n in STATE_ARGUMENTS)

    def needed(x) -> bool:
        if python_only:
            return type(x) in _PYTHON_TYPES
        return x is not None and getattr(x, "dtype", None) not in _FLOAT_DTYPES

    def convert(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        # the common case (float arrays) costs a type lookup per argument: this runs on
        # direct calls, whose latency matters (`use_low_latency_cpu`)
        n = len(args)
        for i in positions:
            if i < n and needed(args[i]):
                args = tuple(
                    floating(x, names[j]) if j in positions else x for j, x in enumerate(args)
                )
                break
        if kwargs:
            for name in STATE_ARGUMENTS.intersection(kwargs):
                if needed(kwargs[name]):
                    kwargs = {**kwargs, name: floating(kwargs[name], name)}
        return args, kwargs

    return convert


def floating_arguments(fn: Callable) -> Callable:
    """`fn` with its state arguments made floating-point arrays before the call
    (`floating_converter`). Without this, an integer `q` (`jnp.zeros(nq, int)`) or a list
    failed deep inside JAX's differentiation of the joints (a `float0` tangent) instead of
    computing in floating point."""
    convert = floating_converter(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args, kwargs = convert(args, kwargs)
        return fn(*args, **kwargs)

    return wrapper
