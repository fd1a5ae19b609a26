"""The unrolled small-matrix algebra of `_linalg` against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jointdyn import _linalg
from jointdyn._linalg import add, cross, inverse3, matmul, matvec, parts, rmatvec, spd_inverse, sub


def _spd(rng, n, batch=20, cond=1e3):
    """Random SPD matrices with eigenvalues spread over `cond`."""
    Q = np.linalg.qr(rng.normal(size=(batch, n, n)))[0]
    lam = np.exp(rng.uniform(0.0, np.log(cond), size=(batch, n)))
    return Q @ (lam[..., None] * np.swapaxes(Q, 1, 2))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_spd_inverse_matches_numpy(n):
    A = _spd(np.random.default_rng(n), n)
    got = np.asarray(spd_inverse(jnp.asarray(A)))
    np.testing.assert_allclose(got, np.linalg.inv(A), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [3, 6])
def test_spd_inverse_float32(n):
    A = _spd(np.random.default_rng(10 + n), n, cond=1e2)
    got = spd_inverse(jnp.asarray(A, jnp.float32))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.linalg.inv(A), rtol=2e-4, atol=2e-4)


def test_inverse3_general_matrix():
    A = np.random.default_rng(3).normal(size=(20, 3, 3))
    np.testing.assert_allclose(np.asarray(inverse3(jnp.asarray(A))), np.linalg.inv(A), rtol=1e-9)


@pytest.mark.parametrize("n", [3, 6])
def test_spd_inverse_gradient_matches_analytic(n):
    """d(A⁻¹) along dA is −A⁻¹ dA A⁻¹."""
    rng = np.random.default_rng(20 + n)
    A = jnp.asarray(_spd(rng, n, batch=1)[0])
    dA = rng.normal(size=(n, n))
    dA = jnp.asarray(dA + dA.T)
    _, tangent = jax.jvp(spd_inverse, (A,), (dA,))
    Ai = jnp.linalg.inv(A)
    np.testing.assert_allclose(
        np.asarray(tangent), np.asarray(-Ai @ dA @ Ai), rtol=1e-8, atol=1e-10
    )


def test_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    for shape_a, shape_b in [((4, 3, 3), (4, 3, 3)), ((6, 6), (5, 6, 1)), ((2, 6, 6), (2, 6, 6))]:
        A, B = rng.normal(size=shape_a), rng.normal(size=shape_b)
        np.testing.assert_allclose(np.asarray(matmul(jnp.asarray(A), jnp.asarray(B))), A @ B)


@pytest.mark.parametrize("split", [True, False], ids=["lax.split", "slices"])
def test_products_and_parts_match_numpy(monkeypatch, split):
    """`matvec`, `rmatvec`, `matmul` and `parts`, from one `lax.split` or (a JAX without it)
    slice by slice: the same values either way."""
    if not split:
        monkeypatch.setattr(_linalg, "_split", None)
    elif _linalg._split is None:
        pytest.skip("this JAX has no lax.split")
    rng = np.random.default_rng(1)
    A, x, B = rng.normal(size=(5, 6, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 4, 3))
    y = rng.normal(size=(5, 6))
    jA, jx, jB, jy = map(jnp.asarray, (A, x, B, y))
    np.testing.assert_allclose(np.asarray(matvec(jA, jx)), np.einsum("bij,bj->bi", A, x))
    np.testing.assert_allclose(np.asarray(rmatvec(jA, jy)), np.einsum("bji,bj->bi", A, y))
    np.testing.assert_allclose(np.asarray(matmul(jA, jB)), A @ B)
    kept, dropped = parts(jA, 1), parts(jA, -2, keepdims=False)
    assert [k.shape for k in kept] == [(5, 1, 4)] * 6 and [d.shape for d in dropped] == [(5, 4)] * 6
    for k in range(6):
        np.testing.assert_array_equal(np.asarray(kept[k]), A[:, k : k + 1])
        np.testing.assert_array_equal(np.asarray(dropped[k]), A[:, k])


@pytest.mark.parametrize(
    "shape_a, shape_b, axis",
    [
        ((3,), (3,), -1),
        ((5, 3), (5, 3), -1),
        ((4, 3, 1), (4, 3, 7), 1),
        ((3, 2), (3, 2), 0),
        ((2, 1, 3), (1, 5, 3), -1),
        ((3,), (4, 3), -1),
    ],
)
def test_cross_matches_numpy(shape_a, shape_b, axis):
    rng = np.random.default_rng(len(shape_a) + len(shape_b))
    a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
    got = cross(jnp.asarray(a), jnp.asarray(b), axis=axis)
    np.testing.assert_allclose(np.asarray(got), np.cross(a, b, axis=axis), rtol=1e-14, atol=1e-15)


def test_cross_under_vmap_is_traced_inline_and_matches_jnp():
    """No nested `jit` (the reason it exists) and the same values as `jnp.cross`, batched."""
    a, b = jax.random.normal(jax.random.key(0), (2, 7, 4, 3))
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x, y: cross(x, y, axis=-1)))(a, b)
    assert all(e.primitive.name not in ("jit", "pjit") for e in jaxpr.jaxpr.eqns)
    got, want = jax.vmap(cross)(a, b), jax.vmap(jnp.cross)(a, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13, atol=1e-15)


def test_add_sub_promote_and_broadcast_like_numpy():
    x32 = jnp.ones((2, 3), jnp.float32)
    x64 = jnp.full((3,), 2.0)
    assert add(x32, x32).dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(sub(x32, x64)), np.full((2, 3), -1.0))
    assert sub(x32, x64).dtype == jnp.result_type(x32, x64)


def test_python_float_operand_keeps_the_array_dtype():
    x32 = jnp.full((2, 3), 0.25, jnp.float32)
    assert sub(1.0, x32).dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(sub(1.0, x32)), np.full((2, 3), 0.75, np.float32))


def test_cross_and_add_fall_back_to_numpy_rules():
    a2, b2 = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_allclose(np.asarray(cross(jnp.asarray(a2), jnp.asarray(b2))), -2.0)
    with pytest.raises(ValueError):
        cross(jnp.ones(4), jnp.ones(4))
    x = jnp.arange(3.0)
    np.testing.assert_array_equal(np.asarray(add(x, 1)), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(sub(2, x)), [2.0, 1.0, 0.0])
