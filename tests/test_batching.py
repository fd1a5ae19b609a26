"""`jointdyn.batched` equals `vmap` (chunked or not), composes with jit and grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from trees import random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def batch():
    model = random_tree(1, nbodies=6)
    n = 37  # not a multiple of the chunk size
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    q = jax.vmap(model.random_configuration)(keys)
    v = jax.random.normal(keys[0], (n, model.nv))
    tau = jax.random.normal(keys[1], (n, model.nv))
    return model, q, v, tau


@pytest.mark.parametrize("chunk_size", [8, "auto", None])
def test_batched_equals_vmap(batch, chunk_size):
    model, q, v, tau = batch
    expected = jax.jit(jax.vmap(jd.aba, (None, 0, 0, 0)))(model, q, v, tau)
    got = jax.jit(jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=chunk_size))(model, q, v, tau)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_batched_grad(batch):
    model, q, v, tau = batch
    f = jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=8)
    g = jax.jit(jax.grad(lambda t: jnp.sum(f(model, q, v, t) ** 2)))(tau)
    g_ref = jax.jit(
        jax.grad(lambda t: jnp.sum(jax.vmap(jd.aba, (None, 0, 0, 0))(model, q, v, t) ** 2))
    )(tau)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-10)


def test_batched_bad_axes(batch):
    model, q, v, tau = batch
    with pytest.raises(ValueError, match="in_axes"):
        jd.batched(jd.aba, (None, 1, 0, 0))(model, q, v, tau)
    with pytest.raises(ValueError, match="in_axes"):
        jd.batched(jd.aba, (None, 0))(model, q, v, tau)
