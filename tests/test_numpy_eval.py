"""`numpy_eval` (the tests' NumPy evaluator of reference jaxprs) against XLA on small programs
that use each of its non-elementwise rules: gathers and scatters with batching dimensions
(what `vmap` of indexing makes), `dot_general` with batch dimensions, pads with interior and
negative padding, `scan`, `while`, `cond`, `custom_jvp`, `custom_linear_solve`, and LAPACK's
`lu` with the triangular solves and `sort` that `jnp.linalg.solve` is made of, `cholesky`, `svd`, equinox's `error_if` and JAX's threefry random bits."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_eval, numpy_jit

jax.config.update("jax_enable_x64", True)

_rng = np.random.default_rng(0)
X = _rng.normal(size=(4, 5, 3))
IDX = np.array([[0, 2], [4, 1], [3, 3], [1, 0]])


def _indexing(x, idx):
    rows = jax.vmap(lambda a, i: a[i])(x, idx)  # batched gather
    picked = x[:, idx[0], :]  # gather of whole rows
    upd = jax.vmap(lambda a, i, u: a.at[i].add(u))(x, idx, rows)  # batched scatter-add
    setv = x.at[1, 2].set(7.0)  # scatter
    return rows, picked, upd, setv, jnp.take(x, jnp.array([3, 0]), axis=1)


def _algebra(x, idx):
    b = jnp.einsum("bij,bkj->bik", x, x)  # dot_general with a batch dimension
    p = jax.lax.pad(x[0], 0.5, [(1, -1, 2), (0, 1, 0)])
    s = jnp.cumsum(x, axis=1) + jnp.roll(x, 1, axis=0)
    m = jnp.where(x > 0, jnp.sqrt(jnp.abs(x)), x**3)
    t = jnp.tile(x[0], (2, 3))
    return b, p, s, m, t, jnp.max(x, axis=2), jnp.argmax(x, axis=1), x.astype(jnp.float32)


def _control(x, idx):
    def body(c, xi):
        c = jnp.tanh(c + xi)
        return c, jnp.sin(c)

    carry, ys = jax.lax.scan(body, x[0], x, reverse=True)
    n = jax.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1), (0, x[1]))
    k = jax.lax.cond(x[0, 0, 0] > 0, lambda a: a + 1, lambda a: a - 1, x[2])
    M = x[0, :3] @ x[0, :3].T + 3 * jnp.eye(3)
    # any solve will do (evaluation is what is tested): no LAPACK call
    sol = jax.lax.custom_linear_solve(lambda y: M @ y, x[1, 0], lambda _, b: b / jnp.diag(M))

    @jax.custom_jvp
    def f(y):
        return jnp.sin(y)

    f.defjvp(lambda p, t: (jnp.sin(p[0]), jnp.cos(p[0]) * t[0]))
    return carry, ys, n, k, sol, jax.jacfwd(f)(x[0, 0])


def _linear_algebra(x, idx):
    S = jnp.einsum("bij,bkj->bik", x[:, :3], x[:, :3]) + jnp.eye(3)  # 4 SPD matrices, 3 × 3
    A = S.at[:, 0, 0].set(1e-3)  # the largest pivot is not on the diagonal: rows swap
    rhs = x[:, 3:, :].transpose(0, 2, 1)  # 3 × 2 right-hand sides
    lu, pivots, perm = jax.lax.linalg.lu(A)
    solves = [
        jax.lax.linalg.triangular_solve(
            A, r, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit
        )
        for left, lower, trans, unit in [
            (True, True, False, False),
            (True, False, True, True),
            (False, True, True, False),
            (False, False, False, True),
        ]
        for r in [rhs if left else rhs.transpose(0, 2, 1)]
    ]
    grad = jax.grad(lambda a: jnp.sum(jnp.linalg.solve(a, rhs) ** 2))(A)  # a transpose solve
    order = jnp.sort(x[:, :, 0], axis=1), jnp.argsort(x[:, 1, :], axis=0)
    chol = jnp.linalg.cholesky(S * jnp.array([1.0, -1.0, 1.0, -1.0])[:, None, None])  # 2 not PD
    # singular values, and the pseudo-inverse (independent of the singular vectors' signs)
    svd = jnp.linalg.svd(x[0], compute_uv=False), jnp.linalg.pinv(x[:, :, :2]), jnp.linalg.pinv(A)
    return lu, pivots, perm, solves, jnp.linalg.solve(A, rhs), grad, order, chol, svd


def _random(x, idx):
    """JAX's threefry keys bit for bit: raw and typed keys, split, fold_in, bits, and the
    uniform and normal draws built on them (`erf_inv`), also under `vmap`."""
    key = jax.random.PRNGKey(idx[1, 0])
    keys = jax.random.split(key, 5)
    typed = jax.random.key(idx[2, 0] - 10)  # a negative seed
    return (
        keys,
        jax.random.fold_in(key, 12345),
        jax.random.bits(keys[2], (3, 4)),
        jax.random.uniform(keys[0], (6,)),
        jax.random.normal(keys[1], (2, 3), jnp.float32),
        jax.vmap(lambda k: jax.random.normal(k, (2,)))(keys),
        jax.random.key_data(jax.random.split(typed, (2, 2))),
        jax.random.uniform(jax.random.fold_in(typed, 3), (2,)),
        jax.lax.shift_right_logical(jnp.array([-8, 8, -1], jnp.int32), jnp.int32([1, 1, 32])),
        ~jnp.array([0, 5], jnp.uint32) ^ jnp.array([3, 3], jnp.uint32),
    )


@pytest.mark.parametrize("program", [_indexing, _algebra, _control, _linear_algebra, _random])
def test_equals_xla(program):
    got = numpy_eval(program, X, IDX)
    want = jax.jit(program)(X, IDX)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        if not np.issubdtype(a.dtype, np.inexact):  # integers (random bits), booleans: exact
            np.testing.assert_array_equal(a, np.asarray(b))
        else:  # float32: XLA's erf_inv and others are within an ulp of NumPy's and SciPy's
            tol = 1e-12 if a.dtype == np.float64 else 1e-6
            np.testing.assert_allclose(a, np.asarray(b), rtol=tol, atol=tol)


def test_error_if_raises_as_under_jax():
    def checked(x):
        return eqx.error_if(x, jnp.any(x > 2.0), "too large")

    np.testing.assert_array_equal(numpy_eval(jax.vmap(checked), X[:, 0, :1]), X[:, 0, :1])
    with pytest.raises(Exception, match="too large"):
        numpy_eval(jax.vmap(checked), X[:, 0, :1] + 10.0)


def test_traces_once_per_shape_and_refuses_unknown_primitives():
    traces = []

    def f(x):
        traces.append(1)
        return jnp.sin(x) * 2

    g = numpy_jit(f)
    np.testing.assert_allclose(g(X), np.sin(X) * 2)
    np.testing.assert_allclose(g(X + 1), np.sin(X + 1) * 2)
    assert len(traces) == 1
    g(X[0])
    assert len(traces) == 2
    with pytest.raises(NotImplementedError, match="bessel_i0e"):
        numpy_eval(jax.lax.bessel_i0e, X / 10)
