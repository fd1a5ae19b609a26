"""`jointdyn.batched` equals `vmap` (chunked or not), composes with jit and grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_eval, numpy_jit
from trees import random_states, random_tree

import jointdyn as jd
from jointdyn import _batching

jax.config.update("jax_enable_x64", True)


#: `vmap(aba)`, the reference (traced once for the module, evaluated by NumPy: `numpy_eval`).
_vmap_aba = numpy_jit(jax.vmap(jd.aba, (None, 0, 0, 0)))


@pytest.fixture(scope="module")
def batch():
    model = random_tree(1, nbodies=6)
    q, v, tau = random_states(model, 37)  # not a multiple of the chunk size
    return model, q, v, tau


@pytest.mark.parametrize("chunk_size", [8, "auto", None])
def test_batched_equals_vmap(batch, chunk_size):
    model, q, v, tau = batch
    expected = _vmap_aba(model, q, v, tau)
    got = jax.jit(jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=chunk_size))(model, q, v, tau)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_batched_grad(batch):
    model, q, v, tau = batch
    f = jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=8)
    g = jax.jit(jax.grad(lambda t: jnp.sum(f(model, q, v, t) ** 2)))(tau)
    g_ref = numpy_eval(
        jax.grad(lambda t: jnp.sum(jax.vmap(jd.aba, (None, 0, 0, 0))(model, q, v, t) ** 2)), tau
    )
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-10)


def _small_and_large(model, q, v, tau):
    """A small result (v̇, nv floats) and a large one (`batched` moves it back to batch-first
    inside each chunk: `_batching._IN_CHUNK_LEAF` bytes per sample or more, and the results
    together `_IN_CHUNK_TOTAL` or more), so both ways of joining chunks are used."""
    vdot = jd.aba(model, q, v, tau)
    return vdot, jnp.outer(jnp.tile(vdot, 12), jnp.tile(q[: model.nv], 12))


def test_batched_large_and_small_outputs(batch):
    model, q, v, tau = batch
    large = 8 * (12 * model.nv) ** 2  # bytes per sample of the large leaf
    assert large >= max(_batching._IN_CHUNK_LEAF, _batching._IN_CHUNK_TOTAL)
    f = jd.batched(_small_and_large, (None, 0, 0, 0), chunk_size=8)
    got = jax.jit(f)(model, q, v, tau)
    expected = numpy_eval(jax.vmap(_small_and_large, (None, 0, 0, 0)), model, q, v, tau)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    grad = jax.jit(jax.grad(lambda t: jnp.sum(f(model, q, v, t)[1] ** 2)))(tau)
    grad_ref = numpy_eval(
        jax.grad(
            lambda t: jnp.sum(jax.vmap(_small_and_large, (None, 0, 0, 0))(model, q, v, t)[1] ** 2)
        ),
        tau,
    )
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-10, atol=1e-10)


def test_batched_bad_axes(batch):
    model, q, v, tau = batch
    with pytest.raises(ValueError, match="in_axes"):
        jd.batched(jd.aba, (None, 1, 0, 0))(model, q, v, tau)
    with pytest.raises(ValueError, match="in_axes"):
        jd.batched(jd.aba, (None, 0))(model, q, v, tau)
    with pytest.raises(ValueError, match="in_axes"):
        jd.device_put_batched((model, q), (None, 0, 0))
    # batch sizes that differ (one chunk or several), a scalar mapped leaf, a bad chunk size:
    # each a ValueError naming the problem (were an error about `batch_last`'s last axis, a
    # reshape error and a ZeroDivisionError)
    for n in (2, 40):
        rows = lambda x, k: jnp.resize(x, (k, x.shape[1]))  # noqa: E731
        with pytest.raises(ValueError, match=r"one leading-axis \(batch\) size"):
            jd.batched(jd.aba, (None, 0, 0, 0))(model, rows(q, n + 1), rows(v, n), rows(tau, n))
    with pytest.raises(ValueError, match="scalar leaf"):
        jd.batched(lambda m, q, s: jd.aba(m, q, q * s, q), (None, 0, 0))(model, q, 1.0)
    for size in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=size)(model, q, v, tau)


def test_device_put_batched_one_device(batch):
    """With one device the arguments come back as they are."""
    model, q, v, tau = batch
    out = jd.device_put_batched((model, q, v, tau), (None, 0, 0, 0))
    assert out[1] is q and out[0] is model


def test_batched_shards_over_devices():
    """Run in a subprocess with two CPU devices: sharded `batched` equals `vmap` (values and
    gradients)."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np, sys
        jax.config.update("jax_enable_x64", True)
        sys.path.insert(0, "tests")
        from trees import random_states, random_tree
        from numpy_eval import numpy_eval  # the vmap references: by NumPy, not compiled
        import jointdyn as jd
        assert len(jax.devices()) == 2
        m = random_tree(1, nbodies=5)
        keys = jax.random.split(jax.random.PRNGKey(0), 20)
        q = jax.vmap(m.random_configuration)(keys)
        v = jax.random.normal(keys[0], (20, m.nv))
        ref = numpy_eval(jax.vmap(jd.aba, (None, 0, 0, 0)), m, q, v, v)
        f = jax.jit(jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=4))
        got = f(m, q, v, v)
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
        # inputs placed once where batched computes: states split, the model on both devices
        pm, pq, pv = jd.device_put_batched((m, q, v), (None, 0, 0))
        assert len(pq.sharding.device_set) == 2 and pq.addressable_shards[0].data.shape == (10, m.nq)
        assert all(len(x.sharding.device_set) == 2 and x.sharding.is_fully_replicated
                   for x in jax.tree.leaves(pm))
        np.testing.assert_allclose(f(pm, pq, pv, pv), ref, rtol=1e-10, atol=1e-10)
        # gradients through the split (aba's rule, reverse mode per device) equal vmap's
        def grad_of(fn):
            loss = lambda m, q, v: jnp.sum(jnp.sin(fn(m, q, v, v)))
            return jax.grad(loss, argnums=(0, 1, 2))
        g_ref = numpy_eval(grad_of(jax.vmap(jd.aba, (None, 0, 0, 0))), m, q, v)
        compiled = jax.jit(grad_of(jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=4)))
        compiled = compiled.lower(m, q, v).compile()  # one compile for the values and the HLO
        g = compiled(m, q, v)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.abs(b).max())
        # the model's cotangents are summed over the devices as one array, not one all-reduce
        # operand per leaf (XLA:CPU: ~0.1 ms each; g1's model has ~430 leaves)
        hlo = compiled.as_text().splitlines()
        reduces = [line for line in hlo if " all-reduce(" in line or " all-reduce-start(" in line]
        assert len(jax.tree.leaves(m)) > 20 and len(reduces) == 1, reduces
        assert " = (" not in reduces[0], reduces[0][:300]  # one operand, not a tuple
        # a model half held by stop_gradient (its other leaves differentiated), and a weak-typed
        # shared argument: the same gradients as vmap
        import equinox as eqx

        def half(mapped):
            def loss(m, q, v, s):
                m = eqx.tree_at(lambda m: m.inertias, m, jax.lax.stop_gradient(m.inertias))
                tau = lambda m, q, v, s: jd.aba(m, q, v, s * v)
                return jnp.sum(jnp.sin(mapped(tau, (None, 0, 0, None))(m, q, v, s)))
            return jax.grad(loss, argnums=(0, 3))
        h_ref = numpy_eval(half(jax.vmap), m, q, v, 0.5)  # s: a weak-typed float
        h = jax.jit(half(lambda fn, axes: jd.batched(fn, axes, chunk_size=4)))(m, q, v, 0.5)
        for a, b in zip(jax.tree.leaves(h), jax.tree.leaves(h_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.abs(b).max())
        odd = jd.device_put_batched((m, q[:7]), (None, 0))  # 7 does not split over 2: unchanged
        assert odd[1] is not None and len(odd[1].sharding.device_set) == 1
        # aba_derivatives split over two devices: must not call LAPACK (OpenBLAS from two
        # device threads deadlocked with the former Cholesky of M; that the program has no
        # LAPACK call is test_derivatives.test_aba_derivatives_call_no_lapack)
        ref = numpy_eval(jax.vmap(jd.aba_derivatives, (None, 0, 0, 0)), m, q, v, v)
        got = jax.jit(jd.batched(jd.aba_derivatives, (None, 0, 0, 0), chunk_size=2))(m, q, v, v)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
        print("ok")
        """
    )
    flags = os.environ.get("XLA_FLAGS", "")  # conftest's, kept
    env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count=2")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
