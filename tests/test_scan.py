"""`checkpointed_scan`: every mode gives `lax.scan`'s values, `ys` and derivatives; the modes
with checkpoints compile to programs with less temporary memory in reverse mode."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_tree_allclose

import jointdyn as jd

TOL = dict(rtol=1e-12, atol=1e-12)
N = 13  # not a multiple of 3, 4 or 5
MODES = ["none", "step", 1, 3, 4, 5, N, N + 7]  # k = N: one segment; k > N: a plain scan
DT = 0.05


def pendulum(carry, x):
    """A forced nonlinear pendulum, semi-implicit Euler; `ys` a dict to check the pytree."""
    q, v = carry
    v = v + DT * (-9.81 * jnp.sin(q) - 0.1 * v * jnp.abs(v) + x["tau"])
    q = q + DT * v * x["gain"]
    return (q, v), {"q": q, "energy": 0.5 * v**2 - 9.81 * jnp.cos(q)}


def _inputs(n=N):
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    xs = {"tau": jax.random.normal(k1, (n,)), "gain": 1.0 + 0.1 * jax.random.normal(k2, (n,))}
    return (jnp.asarray(0.4), jnp.asarray(-0.3)), xs


def _loss(scan, init, xs, reverse):
    (q, v), ys = scan(pendulum, init, xs, reverse=reverse)
    return jnp.sum(jnp.sin(3 * ys["q"])) + jnp.sum(ys["energy"] ** 2) + q**2 + v**2


@functools.cache
def _value_and_grad(mode, reverse):
    """Jitted `(carry, ys), grad` of `_loss` for one mode (`"lax"`: plain `lax.scan`)."""
    scan = (
        jax.lax.scan if mode == "lax" else functools.partial(jd.checkpointed_scan, checkpoint=mode)
    )

    def fn(init, xs):
        out = scan(pendulum, init, xs, reverse=reverse)
        grad = jax.grad(_loss, argnums=(1, 2))(scan, init, xs, reverse)
        return out, grad

    return jax.jit(fn)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_values_and_gradients_match_lax_scan(mode, reverse):
    init, xs = _inputs()
    (carry, ys), grad = _value_and_grad(mode, reverse)(init, xs)
    (carry_ref, ys_ref), grad_ref = _value_and_grad("lax", reverse)(init, xs)
    assert ys["q"].shape == (N,) and ys["energy"].shape == (N,)
    assert_tree_allclose((carry, ys), (carry_ref, ys_ref), **TOL, what=f"values, {mode}")
    assert_tree_allclose(grad, grad_ref, **TOL, what=f"gradients, {mode}")


def test_ys_order():
    """`ys[i]` is the output of step `i` (the i-th entry of xs), in both directions."""
    f = lambda c, x: (c + 1, (x, c))  # noqa: E731
    xs = jnp.arange(10) * 10
    for reverse in (False, True):
        ref = jax.lax.scan(f, 0, xs, reverse=reverse)
        for mode in ("step", 3, 5):
            out = jd.checkpointed_scan(f, 0, xs, reverse=reverse, checkpoint=mode)
            np.testing.assert_array_equal(out[1][0], xs)
            assert_tree_allclose(out, ref, rtol=0, atol=0, what=f"{mode}, reverse={reverse}")


def test_no_xs_and_no_ys():
    """`xs=None` with `length`, `ys=None`, and a carry that is a pytree."""

    def f(c, _):
        return {"a": jnp.sin(c["a"]) + c["b"], "b": 0.9 * c["b"]}, None

    init = {"a": jnp.asarray(0.5), "b": jnp.asarray(0.2)}
    loss = lambda scan, c: scan(f, c, None, 11)[0]["a"]  # noqa: E731
    ref = jax.value_and_grad(loss, argnums=1)(jax.lax.scan, init)
    for mode in ("none", "step", 4):
        scan = functools.partial(jd.checkpointed_scan, checkpoint=mode)
        carry, ys = scan(f, init, length=11)
        assert ys is None
        assert_tree_allclose(jax.value_and_grad(loss, argnums=1)(scan, init), ref, **TOL)


def test_gradient_with_respect_to_a_closed_over_parameter():
    """`f` closes over a traced parameter (as a step closes over a model): its cotangent flows
    out of the checkpointed steps."""
    init, xs = _inputs()

    def loss(scan, g):
        def f(c, x):
            q, v = c
            v = v + DT * (-g * jnp.sin(q) + x["tau"])
            return (q + DT * v, v), q

        return jnp.sum(scan(f, init, xs)[1] ** 2)

    @jax.jit
    def grads(g):
        modes = [jax.lax.scan] + [
            functools.partial(jd.checkpointed_scan, checkpoint=c) for c in ("step", 4)
        ]
        return [jax.grad(loss, argnums=1)(s, g) for s in modes]

    ref, *outs = grads(9.81)
    for out in outs:
        assert_tree_allclose(out, ref, **TOL)


def test_zero_length():
    init, xs = _inputs(0)
    for mode in ("none", "step", 4):
        carry, ys = jd.checkpointed_scan(pendulum, init, xs, checkpoint=mode)
        assert_tree_allclose(carry, init, rtol=0, atol=0)
        assert ys["q"].shape == (0,)


def test_vmap_and_jvp():
    """`vmap` over the initial states and controls, `vmap` of `grad`, and `jvp`."""
    init, xs = _inputs()
    batch_init = jax.tree.map(lambda x: x + jnp.linspace(0.0, 0.3, 3), init)
    batch_xs = jax.tree.map(lambda x: x + jnp.linspace(0.0, 0.3, 3)[:, None], xs)
    scan = functools.partial(jd.checkpointed_scan, checkpoint=4)

    @jax.jit
    def both(init, xs):
        run = lambda s: jax.vmap(lambda c, x: s(pendulum, c, x))(init, xs)  # noqa: E731
        grad = lambda s: jax.vmap(jax.grad(_loss, argnums=(1, 2)), (None, 0, 0, None))(  # noqa: E731
            s, init, xs, False
        )
        return (run(scan), grad(scan)), (run(jax.lax.scan), grad(jax.lax.scan))

    out, ref = both(batch_init, batch_xs)
    assert out[0][1]["q"].shape == (3, N)
    assert_tree_allclose(out, ref, **TOL, what="vmap")

    tangents = jax.tree.map(jnp.ones_like, (init, xs))

    @jax.jit
    def jvps(init, xs):
        f = lambda s: lambda c, x: s(pendulum, c, x)  # noqa: E731
        return jax.jvp(f(scan), (init, xs), tangents), jax.jvp(
            f(jax.lax.scan), (init, xs), tangents
        )

    out, ref = jvps(init, xs)
    assert_tree_allclose(out, ref, **TOL, what="jvp")


def test_follows_the_input_dtype():
    init, xs = jax.tree.map(lambda x: x.astype(jnp.float32), _inputs())
    for mode in ("none", "step", 4):
        scan = functools.partial(jd.checkpointed_scan, checkpoint=mode)
        out = scan(pendulum, init, xs)
        grad = jax.grad(_loss, argnums=(1, 2))(scan, init, xs, False)
        for leaf in jax.tree.leaves((out, grad)):
            assert leaf.dtype == jnp.float32


def test_simulation_step_of_a_model():
    """A semi-implicit Euler rollout of the double pendulum with `jd.forward_dynamics`."""
    model = jd.load_model("double_pendulum")
    dt = 0.01

    def step(state, tau):
        q, v = state
        v = v + dt * jd.forward_dynamics(model, q, v, tau)
        q = model.integrate(q, dt * v)
        return (q, v), q

    def loss(scan, controls, q0, v0):
        (q, v), qs = scan(step, (q0, v0), controls)
        return jnp.sum(qs**2) + jnp.sum(v**2)

    scans = [jax.lax.scan] + [
        functools.partial(jd.checkpointed_scan, checkpoint=c) for c in ("step", 4)
    ]

    @jd.jit
    def grads(controls, q0, v0):  # one program, one compile
        return [jax.value_and_grad(loss, argnums=(1, 2, 3))(s, controls, q0, v0) for s in scans]

    controls = 0.5 * jax.random.normal(jax.random.PRNGKey(1), (10, model.nv))
    ref, *outs = grads(controls, jnp.array([0.3, -0.2]), jnp.array([0.1, 0.0]))
    for out in outs:
        assert_tree_allclose(out, ref, **TOL, what="double pendulum")


def test_checkpoints_reduce_temporary_memory():
    """The compiled gradient of a 400-step scan: `k = 20 ≈ √400` and `"step"` need less
    temporary memory than `"none"`, which keeps every step's residuals."""
    n, width = 400, 64
    w1 = jax.random.normal(jax.random.PRNGKey(2), (width, 4)) / 2
    w2 = jax.random.normal(jax.random.PRNGKey(3), (2, width)) / 8

    def step(state, tau):  # residuals of a step: ~3·64 numbers; the carry: 4
        q, v = state
        h = jnp.tanh(w1 @ jnp.concatenate([q, v]))
        v = v + 0.01 * (w2 @ jnp.tanh(h * h) + tau)
        return (q + 0.01 * v, v), None

    def temp_bytes(mode):
        def loss(controls, q0, v0):
            (q, v), _ = jd.checkpointed_scan(step, (q0, v0), controls, checkpoint=mode)
            return jnp.sum(q**2) + jnp.sum(v**2)

        args = (jnp.zeros((n, 2)), jnp.ones(2), jnp.zeros(2))
        stats = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).compile().memory_analysis()
        if stats is None:
            pytest.skip(f"memory_analysis() is None on the {jax.default_backend()} backend")
        return stats.temp_size_in_bytes

    none, step_, k = temp_bytes("none"), temp_bytes("step"), temp_bytes(20)
    assert k < none / 4, (k, none)
    assert step_ < none / 4, (step_, none)


@pytest.mark.parametrize(
    "checkpoint, match",
    [
        ("all", "'none', 'step' or a segment length"),
        ("Step", "'none', 'step' or a segment length"),
        (0, "must be >= 1, got 0"),
        (-3, "must be >= 1, got -3"),
        (2.5, "got 2.5 of type float"),
        (None, "got None"),
        (True, "got True"),
    ],
)
def test_bad_checkpoint(checkpoint, match):
    init, xs = _inputs()
    with pytest.raises(ValueError, match=match):
        jd.checkpointed_scan(pendulum, init, xs, checkpoint=checkpoint)


def test_bad_lengths():
    init, xs = _inputs()
    with pytest.raises(ValueError, match=r"`length` = 7 disagrees .* \(13 steps\)"):
        jd.checkpointed_scan(pendulum, init, xs, 7, checkpoint=4)
    with pytest.raises(ValueError, match="`length` must be given when `xs` is None"):
        jd.checkpointed_scan(pendulum, init, checkpoint="step")
    with pytest.raises(ValueError, match="`length` must be >= 0, got -1"):
        jd.checkpointed_scan(pendulum, init, length=-1)
    with pytest.raises(ValueError, match="`length` must be an int, got 2.0"):
        jd.checkpointed_scan(pendulum, init, length=2.0)
    bad = {"tau": xs["tau"], "gain": xs["gain"][:5]}
    with pytest.raises(ValueError, match=r"different leading axis sizes \(xs\['gain'\]: 5"):
        jd.checkpointed_scan(pendulum, init, bad, checkpoint=3)
    with pytest.raises(ValueError, match=r"`xs\['gain'\]` is a scalar"):
        jd.checkpointed_scan(pendulum, init, {"tau": xs["tau"], "gain": jnp.asarray(1.0)})
