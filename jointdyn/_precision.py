"""Full float32 precision for jointdyn's matrix products, on every backend.

On NVIDIA GPUs since Ampere, XLA computes a float32 matrix product at JAX's default precision
in TF32 (10-bit mantissa, about 1e-3 relative error per product). The rigid-body recursions
chain dozens of products (sums over subtrees are products with the ancestor matrix), and the
errors add up. Measured on an H100 (float32, jax 0.11.2): the bundled quadruped's
`max |rnea(q, v, aba(q, v, tau)) − tau|` over a batch of 1024 was 0.80 at the default
precision and 3.1e-4 at full precision (3.4e-4 on a CPU); panda's `aba` at batch 65536
differed from float64 by 2.9e-2 (relative) against 1.6e-3, at the same speed (0.0185 against
0.0189 µs per sample: the products are small).

So jointdyn traces its products at `"highest"` precision whatever the global default
(`jax_default_matmul_precision`, which the library never changes): `full_precision(fn)` runs
`fn` under `jax.default_matmul_precision("highest")`, which `dot_general` reads when it is
traced; the public functions that compute and the differentiation rules (traced lazily, when a
function is differentiated) are wrapped; `tests/test_precision.py` reads their programs. Joint,
`Transform` and `SpatialInertia` methods called on their own (outside the algorithms) follow
the global setting: `with jax.default_matmul_precision("highest"):` around such code. Float64
is unaffected (no reduced-precision path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


def full_precision(fn: F) -> F:
    """`fn`, tracing its matrix products at float32's full precision (see the module)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
