"""`checkpointed_scan`: `lax.scan` whose reverse mode stores less, for long rollouts.

Reverse-mode AD of a `lax.scan` of `N` steps keeps every step's residuals (the intermediates
its backward pass needs) from the forward pass to the backward pass: memory grows as
`N · (residuals per step)`, and for a dynamics step the residuals are many times the state.
`jax.checkpoint` trades memory for recomputation: checkpointing each step stores only the
carry of each step; checkpointing segments of `k` steps stores one carry per segment.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_MODES = ("none", "step")


def checkpointed_scan(
    f: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    *,
    checkpoint: str | int = "none",
) -> tuple[Any, Any]:
    """`jax.lax.scan(f, init, xs, length, reverse, unroll)`, with a choice of what reverse mode
    stores. Values, `ys` (stacked along a leading axis of length `N`, in `lax.scan`'s order) and
    derivatives are the same in every mode; only memory and time differ.

    Let `N` be the number of steps, `C` the size of the carry, `R` the size of one step's
    residuals (what its backward pass needs), `F` the time of one forward step and `B` that of
    one step's backward pass. `xs` and `ys` are `O(N)` in every mode and not counted.

    | `checkpoint` | stored for reverse mode (peak) | time of value and gradient |
    |---|---|---|
    | `"none"` | `N·R` (every step's residuals) | `N·F + N·B` (+ writing and reading `N·R`) |
    | `"step"` | `N·C + R` (the carry entering each step) | `2·N·F + N·B` |
    | `k` (an int) | `⌈N/k⌉·C + k·R` | `2·N·F + N·B` (+ writing and reading `N·R`) |

    - `"none"`: plain `lax.scan`.
    - `"step"`: `lax.scan(jax.checkpoint(f), ...)`. The backward pass recomputes each step
      from its stored carry just before differentiating it.
    - `k`: two levels. The `N` steps are split into `N // k` segments of `k` steps, each a
      `jax.checkpoint`-ed inner `lax.scan`, and an outer `lax.scan` over the segments stores
      only the carry entering each segment. The backward pass recomputes one segment (storing
      its `k` steps' residuals) and differentiates it, segment after segment. The memory
      `(N/k)·C + k·R` is smallest at `k = √(N·C/R)`: the classical `k ≈ √N` when `R ≈ C`.
      The `N mod k` steps left over (the last entries of `xs`; the first with `reverse`) run
      after the segments as a plain scan, without recomputation: their residuals are freed
      before any segment's are made. `k = 1` stores what `"step"` stores; `k ≥ N` what
      `"none"` stores (with the recomputation as well when `k = N`).

    The forward value alone (no differentiation) costs `N·F` in every mode; `jax.jvp` and
    `jax.jacfwd` store nothing and recompute nothing either.

    For a dynamics step `R ≫ C`, and `"step"` is the first choice. Measured (panda, nq = nv = 9,
    float64, 1 000 steps of semi-implicit Euler, a 2-core AVX-512 CPU,
    `benchmarks/rollout_gradient.py`): a step's residuals are 372 arrays, 29.6 kB, its carry
    144 bytes. The forward rollout took 4.6 ms; its gradient (controls, `q0`, `v0`) with
    `"none"` 35 ms and 19.3 MiB of temporary buffers, with `"step"` 21 ms (4.5× the forward)
    and 0.35 MiB, with `k = 32` 37 ms and 0.87 MiB. Recomputing a step costs less than
    writing and reading its 372 residuals, so `"step"` is both the fastest and the smallest
    here; `k` pays off when `N·C` itself is too large (very long horizons, large carries).

    **Arguments:**
    - `f`, `init`, `xs`, `length`, `reverse`, `unroll`: as `jax.lax.scan`. With `k` segments
      `unroll` applies to the inner scans (the steps of a segment).
    - `checkpoint`: `"none"`, `"step"`, or a segment length `k ≥ 1` (an `int`).

    **Returns:** `(carry, ys)`, as `jax.lax.scan`.

    **Raises:** `ValueError` for another `checkpoint`, for `xs` and `length` both missing, for
    `xs` leaves without a leading axis or with different leading axes, and for a `length`
    that disagrees with them.

    Composes with `jax.jit`, `jax.grad`, `jax.vjp`, `jax.jvp` and `jax.vmap`. Example, the
    gradient of a 1 000-step semi-implicit Euler rollout storing 32 carries and the residuals
    of 32 steps at most:

        def step(state, tau):
            q, v = state
            v = v + dt * jd.forward_dynamics(model, q, v, tau)
            q = model.integrate(q, dt * v)
            return (q, v), q

        def loss(controls, q0, v0):
            (q, v), qs = jd.checkpointed_scan(step, (q0, v0), controls, checkpoint=32)
            return jnp.sum(qs**2) + jnp.sum(v**2)

        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(controls, q0, v0)  # controls (1000, nv)
    """
    k = _segment_length(checkpoint)
    n = _scan_length(xs, length)
    if k is None:
        body = f if checkpoint == "none" else jax.checkpoint(f, prevent_cse=False)
        return jax.lax.scan(body, init, xs, n, reverse=reverse, unroll=unroll)

    segments, left = divmod(n, k)
    if segments == 0:  # k > N: one plain scan
        return jax.lax.scan(f, init, xs, n, reverse=reverse, unroll=unroll)
    # The segments cover steps [0, segments·k) forwards and [left, N) in reverse: the steps
    # left over come last in the order the steps run.
    start = left if reverse else 0
    xs_seg = jax.tree.map(lambda x: _segments(x, start, segments, k), xs)
    xs_left = jax.tree.map(lambda x: x[segments * k :] if not reverse else x[:left], xs)

    @functools.partial(jax.checkpoint, prevent_cse=False)  # called only inside a scan
    def segment(carry, xs_k):
        return jax.lax.scan(f, carry, xs_k, k, reverse=reverse, unroll=unroll)

    def run_segments(carry):
        carry, ys = jax.lax.scan(segment, carry, xs_seg, segments, reverse=reverse)
        return carry, jax.tree.map(lambda y: y.reshape((segments * k,) + y.shape[2:]), ys)

    def run_left(carry):
        return jax.lax.scan(f, carry, xs_left, left, reverse=reverse, unroll=unroll)

    if left == 0:
        return run_segments(init)
    carry, ys_seg = run_segments(init)
    carry, ys_left = run_left(carry)
    ys = (ys_left, ys_seg) if reverse else (ys_seg, ys_left)
    return carry, jax.tree.map(lambda a, b: jnp.concatenate([a, b]), *ys)


def _segment_length(checkpoint: Any) -> int | None:
    """`None` for the modes `"none"` and `"step"`; the segment length `k` for an integer."""
    if isinstance(checkpoint, str):
        if checkpoint not in _MODES:
            raise ValueError(
                f"`checkpoint` must be 'none', 'step' or a segment length k >= 1 (an int), "
                f"got {checkpoint!r}"
            )
        return None
    if isinstance(checkpoint, bool | np.bool_):
        raise ValueError(f"`checkpoint` must be 'none', 'step' or an int k >= 1, got {checkpoint}")
    try:
        k = operator.index(checkpoint)
    except TypeError:
        raise ValueError(
            f"`checkpoint` must be 'none', 'step' or a segment length k >= 1 (an int), "
            f"got {checkpoint!r} of type {type(checkpoint).__name__}"
        ) from None
    if k < 1:
        raise ValueError(f"`checkpoint` as a segment length must be >= 1, got {k}")
    return k


def _scan_length(xs: Any, length: Any) -> int:
    """The number of steps: the common leading axis of `xs`' leaves, or `length`."""
    if length is not None:
        try:
            length = operator.index(length)
        except TypeError:
            raise ValueError(f"`length` must be an int, got {length!r}") from None
        if length < 0:
            raise ValueError(f"`length` must be >= 0, got {length}")
    if not jax.tree.leaves(xs):
        if length is None:
            raise ValueError("`length` must be given when `xs` is None (or has no leaves)")
        return length
    sizes = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(xs)[0]:
        shape = jnp.shape(leaf)
        if not shape:
            raise ValueError(
                f"every leaf of `xs` needs a leading axis to scan over; `xs{_keystr(path)}` is "
                f"a scalar"
            )
        sizes.append((shape[0], path))
    first = sizes[0][0]
    if any(size != first for size, _ in sizes):
        listed = ", ".join(f"xs{_keystr(p)}: {s}" for s, p in sizes)
        raise ValueError(f"the leaves of `xs` have different leading axis sizes ({listed})")
    if length is not None and length != first:
        raise ValueError(
            f"`length` = {length} disagrees with the leading axis of `xs` ({first} steps)"
        )
    return first


def _keystr(path) -> str:
    return jax.tree_util.keystr(path) if path else ""


def _segments(x, start: int, segments: int, k: int):
    """Steps `[start, start + segments·k)` of `x` as `(segments, k, ...)`."""
    x = x[start : start + segments * k]
    return x.reshape((segments, k) + x.shape[1:])
