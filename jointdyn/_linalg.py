"""Small dense linear algebra written as elementwise operations.

XLA:CPU runs `jnp.linalg.inv` on a batch of 6×6 matrices as one LAPACK call per matrix; the
elementwise forms here (products and sums, unrolled inverses) fuse into a few loops vectorised
across the batch (2.3× faster measured for 6×6) and differentiate like any other elementwise
code.
"""

from __future__ import annotations

import operator

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float


def _lax_or(op, fallback):
    """`op` (a `lax` binary primitive) when both operands have one dtype and rank (or the first
    is a Python float and the second a floating array), else
    `fallback` (NumPy-style promotion and broadcasting). `lax` broadcasts size-1 axes itself
    and traces several times faster than the `jnp` operators, whose jitted wrappers are traced
    again under every `vmap`: the small products and cross products here are most of a
    model's equations."""

    def apply(x, y):
        dx, dy = getattr(x, "dtype", None), getattr(y, "dtype", None)
        if type(x) is float and dy is not None and jnp.issubdtype(dy, jnp.floating):
            return op(np.asarray(x, dy), y)  # a Python float takes the array's dtype, as in NumPy
        if dx is not None and dy is not None and dx == dy and x.ndim == y.ndim:
            return op(x, y)
        return fallback(x, y)

    return apply


add = _lax_or(lax.add, operator.add)
sub = _lax_or(lax.sub, operator.sub)
mul = _lax_or(lax.mul, operator.mul)


def identity(n: int, dtype) -> Array:
    """`jnp.eye(n, dtype=dtype)` as a constant: no traced equations (`jnp.eye` traces five:
    two iotas, a comparison, a conversion; models take dozens of identities)."""
    return jnp.asarray(np.eye(n, dtype=jnp.dtype(dtype)))


def parts(A: Array, axis: int, keepdims: bool = True) -> list[Array]:
    """Every size-1 slice of `A` along `axis`: `A[..., k:k+1, ...]` (or `A[..., k, ...]` without
    `keepdims`) for `k = 0 … n−1`, from one `lax.split`.

    The cross products below take thousands of these. One `split` is one traced operation
    for all `n` slices (it lowers to the same `n` HLO slices as `n` `lax.slice`s, so XLA's
    program is unchanged): talos `jit(vmap(aba))` has 3070 equations instead of 3965, and
    tracing and lowering it take 15 % fewer instructions (2.27 against 2.65 G). A JAX without
    `lax.split` gets the slices one by one.
    """
    axis = axis % A.ndim
    n = A.shape[axis]
    if _split is not None:
        slices = list(_split(A, (1,) * n, axis))
    else:  # a JAX before lax.split (0.4.36)
        slices = [lax.slice_in_dim(A, k, k + 1, axis=axis) for k in range(n)]
    return slices if keepdims else [lax.squeeze(x, (axis,)) for x in slices]


_split = getattr(lax, "split", None)


def cross(a: Float[Array, "... 3 ..."], b: Float[Array, "... 3 ..."], axis: int = -1) -> Array:
    """`a × b` along `axis` (size 3): the computation of `jnp.cross`, written with `lax`.

    `jnp.cross` is a jitted wrapper, traced anew for every shape it meets (dozens per model).
    This traces the same operations inline: the same arithmetic, and XLA's programs differ only
    in a few layout copies (talos ABA has 14 fewer). `axis` is moved last first: a variant
    that sliced and concatenated along `axis` in place made batched ABA and RNEA 3–6 %
    slower. The slices keep their size-1 axis and the result is their concatenation (no
    squeezes or expansions: 12 equations where 24 were).
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    n, ax = a.ndim, axis % max(a.ndim, 1)
    if a.dtype != b.dtype or n != b.ndim or n == 0 or a.shape[ax] != 3 or b.shape[ax] != 3:
        return jnp.cross(a, b, axis=axis)  # promotion, rank broadcasting, 2-vectors, errors
    if ax != n - 1:  # moves `axis` last
        last = tuple(d for d in range(n) if d != ax) + (ax,)
        a, b = lax.transpose(a, last), lax.transpose(b, last)
    a0, a1, a2 = parts(a, -1)  # size-1 slices along the last axis
    b0, b1, b2 = parts(b, -1)
    c = [sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2))]
    c = lax.concatenate([*c, sub(mul(a0, b1), mul(a1, b0))], n - 1)
    if ax == n - 1:
        return c
    return lax.transpose(c, tuple(range(ax)) + (n - 1,) + tuple(range(ax, n - 1)))


def matmul(A: Float[Array, "... n k"], B: Float[Array, "... k m"]) -> Float[Array, "... n m"]:
    """`A @ B` for small static sizes, as `Σ_k A[..., :, k, None] B[..., None, k, :]`: one
    broadcast product and one sum over `k` (leading axes broadcast as in `@`); `A @ B` (a
    `dot`) when `n k m > 64`.

    XLA:CPU runs every `dot` as its own kernel and, for 3×3 or 6×6 operands with a batch axis
    in front, at scalar speed; elementwise forms fuse with their neighbours and vectorise over
    the batch (an unrolled `Σ_k` was measured 3.4× faster than `dot` for batched 3×3
    products). This form is three equations whatever `k`; the unrolled one (a slice, a
    product and a sum per `k`) was 40 % of the equations of a gradient of `aba`, for the same
    or slower run time (`benchmarks/NOTES.md`, 2026-11-27).
    """
    if A.shape[-2] * A.shape[-1] * B.shape[-1] > 64:
        return A @ B
    return _product_sum(A[..., :, :, None], B[..., None, :, :], -2)


def matvec(A: Float[Array, "... n k"], x: Float[Array, "... k"]) -> Float[Array, "... n"]:
    """`A x` (small static sizes): `Σ_k A[..., :, k] x[..., None, k]`, like `matmul`."""
    return _product_sum(A, x[..., None, :], -1)


def rmatvec(A: Float[Array, "... k n"], x: Float[Array, "... k"]) -> Float[Array, "... n"]:
    """`Aᵀ x` (small static sizes): `Σ_k A[..., k, :] x[..., k, None]`, like `matmul`."""
    return _product_sum(A, x[..., :, None], -2)


def _product_sum(a: Array, b: Array, axis: int) -> Array:
    """`Σ_axis a ⊙ b` (NumPy broadcasting and promotion; an empty `axis` sums to zeros)."""
    return jnp.sum(mul(a, b), axis)


def inverse3(A: Float[Array, "... 3 3"]) -> Float[Array, "... 3 3"]:
    """Inverse of a 3×3 matrix by its adjugate: rows `c₁×c₂, c₂×c₀, c₀×c₁` over `det A`, with
    `cₖ` the columns of `A`. One division; everything else is products that XLA fuses."""
    c0, c1, c2 = parts(A, -1, False)
    r0 = cross(c1, c2)
    adj = jnp.stack([r0, cross(c2, c0), cross(c0, c1)], -2)
    det = jnp.sum(mul(c0, r0), -1)  # c₀ · (c₁ × c₂)
    return adj / det[..., None, None]


def spd_inverse(A: Float[Array, "... n n"]) -> Float[Array, "... n n"]:
    """Inverse of a symmetric positive-definite matrix `A` (`n` static and small: a joint's nv).

    - `n = 3`: the adjugate (`inverse3`).
    - `n = 6`: 3×3 blocks and the Schur complement of the lower-right block,

          A = [[P, Q], [Qᵀ, R]],  K = Q R⁻¹,  T = P − K Qᵀ,
          A⁻¹ = [[T⁻¹, −T⁻¹ K], [−Kᵀ T⁻¹, R⁻¹ + Kᵀ T⁻¹ K]]

      (`R` and `T` are SPD when `A` is). Two divisions in all: an unrolled 6×6 Cholesky has
      dozens of shared square roots and quotients, each a kernel of its own in XLA (measured
      ~30 kernels for one floating base's `D⁻¹`).
    - otherwise: an unrolled Cholesky factorisation, `A = L Lᵀ`, `A⁻¹ = L⁻ᵀ L⁻¹` (only the
      lower triangle of `A` is read).
    """
    n = A.shape[-1]
    if n == 3:
        return inverse3(A)
    if n == 6:
        P, Q, R = A[..., :3, :3], A[..., :3, 3:], A[..., 3:, 3:]
        Ri = inverse3(R)
        K = matmul(Q, Ri)
        Ti = inverse3(P - matmul(K, jnp.swapaxes(Q, -1, -2)))
        TiK = matmul(Ti, K)
        lower = jnp.concatenate(
            [-jnp.swapaxes(TiK, -1, -2), Ri + matmul(jnp.swapaxes(K, -1, -2), TiK)], -1
        )
        return jnp.concatenate([jnp.concatenate([Ti, -TiK], -1), lower], -2)
    return _cholesky_inverse(A)


def _cholesky_inverse(A: Float[Array, "... n n"]) -> Float[Array, "... n n"]:
    n = A.shape[-1]
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        d = jnp.sqrt(A[..., j, j] - sum((L[j][k] * L[j][k] for k in range(j)), 0.0))
        L[j][j] = d
        for i in range(j + 1, n):
            L[i][j] = (A[..., i, j] - sum((L[i][k] * L[j][k] for k in range(j)), 0.0)) / d
    Li = [[None] * n for _ in range(n)]  # L⁻¹, lower triangular
    for i in range(n):
        Li[i][i] = 1.0 / L[i][i]
        for j in range(i):
            Li[i][j] = -sum(L[i][k] * Li[k][j] for k in range(j, i)) * Li[i][i]
    rows = [
        jnp.stack([sum(Li[k][i] * Li[k][j] for k in range(max(i, j), n)) for j in range(n)], -1)
        for i in range(n)
    ]
    return jnp.stack(rows, -2)
