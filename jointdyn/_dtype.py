"""Casting a pytree's floating-point leaves to the dtype of the inputs."""

from __future__ import annotations

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
