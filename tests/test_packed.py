"""`jointdyn.pack` / `PackedModel`: a model as one flat parameter vector.

Round trip, every public algorithm gives the model's result, gradients agree with the model's,
new values never retrace, batches of models, and clear errors.

Values are the traced programs evaluated by NumPy (`numpy_jit`, `numpy_call`): the arithmetic
is what is checked, and a compile per program would take most of the module's time. Compiled:
the direct calls with a packed model (`test_keyword_model`, `test_dtype_follows_theta`), the
compile count of `test_round_trip`, and the `jax.jit` of `test_new_values_do_not_retrace` and
`test_batch_of_models`.
"""

import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_call, numpy_jit
from trees import random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def model():
    """Small, to keep the compiles short: packing does not depend on the joint classes
    (`test_round_trip` covers them all)."""
    return random_tree(3, nbodies=4)


@pytest.fixture(scope="module")
def state(model):
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    q = model.random_configuration(k[0])
    v, tau, vdot = (jax.random.normal(kk, (model.nv,)) for kk in k[1:])
    return q, v, tau, vdot


def test_round_trip(caplog):
    """`unpack(pack(model))` is the model, leaf for leaf; outside a trace each is one compiled
    program, not one per leaf (a slice, reshape or cast each: ~280 for this tree)."""
    model = random_tree(3, nbodies=14)  # a Free root, then every joint class
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        packed = jd.pack(model)
        back = packed.unpack()
    compiles = [r for r in caplog.records if "Finished XLA compilation" in r.getMessage()]
    assert len(compiles) <= 2, [r.getMessage() for r in compiles]
    assert jax.tree.leaves(packed) == [packed.theta]  # one buffer to pass
    assert packed.theta.shape == (sum(x.size for x in jax.tree.leaves(model)),)
    assert jax.tree.structure(back) == jax.tree.structure(model)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(model), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert jd.pack(packed) is packed


def _algorithms(model, q, v, tau, vdot):
    frame = model.frame_names[-1]
    f_ext = jnp.linspace(-1.0, 1.0, model.nbodies * 6).reshape(model.nbodies, 6)
    return {
        "aba": (jd.aba, (q, v, tau, f_ext)),
        "forward_dynamics": (jd.forward_dynamics, (q, v, tau)),
        "rnea": (jd.rnea, (q, v, vdot, f_ext)),
        "crba": (jd.crba, (q,)),
        "bias_forces": (jd.bias_forces, (q, v)),
        "gravity_forces": (jd.gravity_forces, (q,)),
        "joint_forces": (jd.joint_forces, (q, v)),
        "forward_kinematics": (jd.forward_kinematics, (q, v, vdot)),
        "body_jacobians": (jd.body_jacobians, (q,)),
        "jacobian": (lambda m, q: jd.jacobian(m, q, frame), (q,)),
        "center_of_mass": (jd.center_of_mass, (q,)),
        "kinetic_energy": (jd.kinetic_energy, (q, v)),
        "potential_energy": (jd.potential_energy, (q,)),
        "centroidal_momentum": (jd.centroidal_momentum, (q, v)),
        "rnea_derivatives": (jd.rnea_derivatives, (q, v, vdot)),
        "aba_derivatives": (jd.aba_derivatives, (q, v, tau)),
    }


@numpy_jit
def _expected(model, q, v, tau, vdot):
    """Every algorithm of `_algorithms` on the (unpacked) model, in one program evaluated by
    NumPy (`numpy_eval`)."""
    return {
        name: fn(model, *args) for name, (fn, args) in _algorithms(model, q, v, tau, vdot).items()
    }


@numpy_jit
def _with_packed(model, packed, q, v, tau, vdot):
    """Every algorithm of `_algorithms` called with `packed` (`model` only gives the frame name
    and body count), in one program evaluated by NumPy."""
    return {
        name: fn(packed, *args) for name, (fn, args) in _algorithms(model, q, v, tau, vdot).items()
    }


def test_every_algorithm_accepts_packed(model, state):
    """Each algorithm called with a packed model in a trace (jointdyn's own functions unpack
    inside it: the path of their jit, and of `jax.jit`), against the model's results; both
    programs evaluated by NumPy. Direct, compiled calls with a packed model: `test_keyword_model`
    and `test_dtype_follows_theta`; `jax.jit` of one: the tests below."""
    packed = jd.pack(model)
    expected_all = _expected(model, *state)
    got_all = _with_packed(model, packed, *state)
    for name in _algorithms(model, *state):
        got, expected = got_all[name], expected_all[name]
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


def test_keyword_model(model, state):
    q, v, tau, _ = state
    np.testing.assert_allclose(
        jd.aba(model=jd.pack(model), q=q, v=v, tau=tau),
        numpy_call(jd.aba, model, q, v, tau),
        rtol=1e-12,
    )


def test_gradient_is_the_models(model, state):
    """∂/∂theta of a loss, laid out by `unpack`, is ∂/∂model leaf for leaf."""
    q, v, tau, _ = state

    def loss(m):
        return jnp.sum(jd.aba(m, q, v, tau) ** 2) + jd.potential_energy(m, q)

    g_packed = numpy_call(jax.grad(loss), jd.pack(model))  # one program, by NumPy
    assert isinstance(g_packed, jd.PackedModel)
    g_model = numpy_call(eqx.filter_grad(loss), model)
    got, expected = jax.tree.leaves(g_packed.unpack()), jax.tree.leaves(g_model)
    assert len(got) == len(expected)
    assert any(np.abs(x).max() > 0 for x in expected)  # the check below is not vacuous
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_new_values_do_not_retrace(model, state):
    q, v, tau, _ = state
    traces = []

    @jax.jit
    def f(m, q, v, tau):
        traces.append(1)
        return jd.aba(m, q, v, tau)

    heavier = eqx.tree_at(lambda m: m.inertias.mass, model, model.inertias.mass * 1.5)
    a = f(jd.pack(model), q, v, tau)
    b = f(jd.pack(heavier), q, v, tau)
    assert len(traces) == 1
    assert not np.allclose(a, b)
    np.testing.assert_allclose(b, numpy_call(jd.aba, heavier, q, v, tau), rtol=1e-12, atol=1e-12)


def test_batch_of_models(model, state):
    """`theta` with a leading axis: a batch of models under `vmap`, or unpacked as a batch."""
    q, v, tau, _ = state
    packed = jd.pack(model)
    scale = jnp.ones_like(packed.theta).at[: packed.theta.size // 2].set(1.1)
    thetas = jnp.stack([packed.theta, packed.theta * scale])
    batch = jd.PackedModel(thetas, packed.layout)
    got = jax.jit(jax.vmap(jd.aba, (0, None, None, None)))(batch, q, v, tau)
    for k in range(2):
        one = jd.PackedModel(thetas[k], packed.layout)
        np.testing.assert_allclose(got[k], numpy_call(jd.aba, one, q, v, tau), rtol=1e-12)
    assert batch.unpack().gravity.shape == (2, 3)


def test_dtype_follows_theta(model, state):
    q, v, tau, _ = state
    p32 = jd.astype(jd.pack(model), jnp.float32)
    assert {x.dtype for x in jax.tree.leaves(p32.unpack())} == {jnp.dtype(jnp.float32)}
    out = jd.aba(p32, q.astype(jnp.float32), v.astype(jnp.float32), tau.astype(jnp.float32))
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, numpy_call(jd.aba, model, q, v, tau), rtol=2e-3, atol=2e-3)


def test_errors(model):
    with pytest.raises(ValueError, match=r"\['b'\].*int32"):
        jd.pack({"a": jnp.zeros(2), "b": jnp.zeros(3, jnp.int32)})
    with pytest.raises(ValueError, match="no array leaves"):
        jd.pack({})
    packed = jd.pack(model)
    bad = jd.PackedModel(packed.theta[:-1], packed.layout)
    with pytest.raises(ValueError, match="last axis"):
        bad.unpack()
