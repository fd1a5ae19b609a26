"""`jointdyn.batch_last` equals `vmap` with the batch axis last, for every algorithm, and
`batched` (which uses it per chunk on CPU) equals `vmap` for batch sizes around the chunk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_eval, numpy_jit
from trees import random_states, random_tree

import jointdyn as jd
import jointdyn._batch_last as bl

jax.config.update("jax_enable_x64", True)

N = 5  # samples


@pytest.fixture(scope="module")
def states():
    model = random_tree(3, nbodies=14)  # a Free root and every other joint class
    return model, *random_states(model, N, seed=1)


@pytest.fixture(scope="module")
def aba_vmap_reference(states):
    """`vmap(aba)` on the `N` states, `(N, nv)`, evaluated by NumPy (`numpy_eval`) once: the
    reference of both `test_equals_vmap_without_fallback[aba]` and
    `test_batched_around_the_chunk` (whose batches are these states tiled, so their
    reference is this one's rows tiled)."""
    model, q, v, u = states
    return numpy_eval(jax.vmap(jd.aba, (None, 0, 0, 0)), model, q, v, u)


def _assert_tree_close(got, ref, tol=1e-11):
    assert jax.tree.structure(got) == jax.tree.structure(ref)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


ALGORITHMS = {
    "aba": (jd.aba, 3),
    "rnea": (jd.rnea, 3),
    "crba": (jd.crba, 1),
    "forward_dynamics": (jd.forward_dynamics, 3),
    "aba_derivatives": (jd.aba_derivatives, 3),
    "rnea_derivatives": (jd.rnea_derivatives, 3),
    "center_of_mass": (jd.center_of_mass, 1),
    "kinetic_energy": (jd.kinetic_energy, 2),
    "forward_kinematics": (jd.forward_kinematics, 3),  # a pytree of poses, velocities, …
    "jacobian": (lambda m, q: jd.jacobian(m, q, "tool"), 1),
    "centroidal_momentum": (jd.centroidal_momentum, 2),
}


def _forbid_fallback(monkeypatch) -> None:
    """Make `batch_last`'s `vmap` fallback (correct but slow) fail the test when it is used."""

    def no_fallback(eqn, ins):
        raise AssertionError(f"no batch-last rule for {eqn.primitive.name}")

    monkeypatch.setattr(bl, "_fallback", no_fallback)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_equals_vmap_without_fallback(states, name, monkeypatch, request):
    """Same numbers as `vmap(out_axes=-1)`, and every primitive had a batch-last rule (the
    `vmap` fallback, correct but slow, was not needed). `aba`'s batch-last program is compiled;
    the others' are evaluated by NumPy (`numpy_jit`: the program `batch_last` builds is what
    is checked, and compiling each took most of this test's time; compiled, `batch_last`
    programs run in `test_batched_around_the_chunk`, `test_grad_and_float32` and the
    gradient tests below)."""
    fn, nargs = ALGORITHMS[name]
    model, *xs = states
    xs = xs[:nargs]
    axes = (None,) + (-1,) * nargs

    _forbid_fallback(monkeypatch)
    run = jax.jit if name == "aba" else numpy_jit
    got = run(jd.batch_last(fn, axes))(model, *[x.T for x in xs])
    if name == "aba":  # the shared compiled `vmap(aba)`, batch moved last
        ref = request.getfixturevalue("aba_vmap_reference").T
    else:
        ref = numpy_eval(jax.vmap(fn, (None,) + (0,) * nargs, out_axes=-1), model, *xs)
    _assert_tree_close(got, ref)


def test_fallback_is_correct():
    """Primitives without a rule (`custom_jvp_call`, `while`, `cond`, `sort`) run under `vmap`,
    moved first and back: same values and gradients (the custom JVP rule kept); float32
    stays float32 with Python-scalar literals."""
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 3, N))
    y = jax.random.normal(jax.random.PRNGKey(1), (3,))

    def f(x, y):
        z = jax.nn.relu(x * y)  # custom_jvp
        z = jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.sin(c), z)
        z = jax.lax.cond(z.sum() > 0, lambda a: a * 2, lambda a: -a, z)  # a batched predicate
        return jnp.sort(z, axis=0) + jnp.sum(x)

    got = jd.batch_last(f, (-1, None))(x, y)
    np.testing.assert_allclose(got, jax.vmap(f, (-1, None), -1)(x, y), rtol=1e-13)
    g = jax.grad(lambda x: jd.batch_last(f, (-1, None))(x, y).sum())(x)
    g_ref = jax.grad(lambda x: jax.vmap(f, (-1, None), -1)(x, y).sum())(x)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12)

    x32 = x.astype(jnp.float32)

    def h(a):
        return a * 2.0 + 1 - jnp.float32(3) * a**2

    out = jd.batch_last(h)(x32)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, jax.vmap(h, -1, -1)(x32), rtol=1e-6)


@pytest.mark.parametrize(
    "sa, sb, dn",
    [
        ((3, 4), (4, 5), (((1,), (0,)), ((), ()))),
        ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),
        ((6, 35), (6, 35), (((0,), (0,)), ((), ()))),  # unrolled contraction
        ((35, 35), (35, 7), (((1,), (0,)), ((), ()))),  # long contraction: batched dot
        ((20, 6), (6, 210), (((1,), (0,)), ((), ()))),  # short one, large product: batched dot
        ((2, 3, 4, 5), (5, 4, 2), (((2, 3), (1, 0)), ((0,), (2,)))),
        ((3,), (3,), (((0,), (0,)), ((), ()))),
    ],
)
@pytest.mark.parametrize("mapped", [(True, True), (True, False), (False, True)])
def test_dot_general(sa, sb, dn, mapped):
    rng = np.random.default_rng(0)
    a = rng.normal(size=sa + ((N,) if mapped[0] else ()))
    b = rng.normal(size=sb + ((N,) if mapped[1] else ()))
    axes = tuple(-1 if m else None for m in mapped)

    def f(x, y):
        return jax.lax.dot_general(x, y, dn)

    got = jd.batch_last(f, axes)(a, b)
    np.testing.assert_allclose(got, jax.vmap(f, axes, -1)(a, b), rtol=1e-12, atol=1e-12)


def test_gather_scatter_and_unbatched_outputs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 3, N))
    u = rng.normal(size=(4, 3))
    idx = np.array([0, 2, 2, 5])

    def f(x, u):
        y = jnp.asarray(x).at[idx].add(u)
        return {"y": y[idx[::-1]], "const": jnp.ones(2) * 3.0}

    got = jd.batch_last(f, (-1, None))(x, u)
    ref = jax.vmap(f, (-1, None), -1)(x, u)
    _assert_tree_close(got, ref, 1e-13)
    assert got["const"].shape == (2, N)  # an output that depends on no mapped input


def test_grad_and_float32(states):
    """Reverse mode through `batch_last`, and float32 in gives float32 out."""
    model, q, v, u = states

    def loss(u, layout):
        f = jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=2, layout=layout)
        return jnp.sum(jnp.sin(f(model, q, v, u)))

    got = jax.jit(jax.grad(loss), static_argnums=1)(u, "batch_last")
    ref = numpy_eval(jax.grad(lambda u: loss(u, "batch_first")), u)  # by NumPy
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    out = jax.jit(jd.batch_last(jd.rnea, (None, -1, -1, -1)))(
        model, *(x.T.astype(jnp.float32) for x in (q, v, u))
    )
    assert out.dtype == jnp.float32


@pytest.mark.parametrize("n", [1, 4, 9, 16])
def test_batched_around_the_chunk(states, aba_vmap_reference, n):
    """Batches below, at and above the chunk size (4), padded where not a multiple. The
    batch is the `N` states tiled: `vmap(aba)`'s reference is its `N` rows tiled (one
    compiled `vmap` for every `n`)."""
    model, q, v, u = states
    reps = -(-n // N)
    q, v, u, ref = (jnp.tile(x, (reps, 1))[:n] for x in (q, v, u, aba_vmap_reference))
    got = jax.jit(jd.batched(jd.aba, (None, 0, 0, 0), chunk_size=4, layout="batch_last"))(
        model, q, v, u
    )
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)


def test_errors(states):
    model, q, v, u = states
    with pytest.raises(ValueError, match="in_axes"):
        jd.batch_last(jd.aba, (None, 0, -1, -1))(model, q.T, v.T, u.T)
    with pytest.raises(ValueError, match="in_axes"):
        jd.batch_last(jd.aba, (None, -1))(model, q.T, v.T, u.T)
    with pytest.raises(ValueError, match="last-axis size"):
        jd.batch_last(jd.aba, (None, -1, -1, -1))(model, q.T, v.T[:, :2], u.T)
    with pytest.raises(ValueError, match="scalar leaf"):
        jd.batch_last(jnp.sin, -1)(jnp.float64(1.0))
    with pytest.raises(ValueError, match="layout"):
        jd.batched(jd.aba, (None, 0, 0, 0), layout="sideways")(model, q, v, u)


def test_model_gradient_through_batched():
    """System identification: the gradient with respect to every model parameter through
    batch-last chunks equals the one through batch-first chunks."""
    model = random_tree(4, nbodies=6)
    q, v, vdot = random_states(model, 9, seed=2)

    def loss(m, layout):
        f = jd.batched(jd.rnea, (None, 0, 0, 0), chunk_size=4, layout=layout)
        return jnp.sum(f(m, q, v, vdot) ** 2)

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    _assert_tree_close(grad(model, "batch_last"), grad(model, "batch_first"), 1e-10)


def test_batched_mapped_external_forces_and_models():
    """Mapped `f_ext` (n, nbodies, 6), and a mapped model (one per sample, e.g. randomised
    parameters), through batch-last chunks, equal `vmap`."""
    model = random_tree(5, nbodies=6)
    n = 11
    q, v, u = random_states(model, n, seed=3)
    f_ext = jax.random.normal(jax.random.PRNGKey(4), (n, model.nbodies, 6))
    axes = (None, 0, 0, 0, 0)
    got = jax.jit(jd.batched(jd.aba, axes, chunk_size=4, layout="batch_last"))(
        model, q, v, u, f_ext
    )
    ref = numpy_eval(jax.vmap(jd.aba, axes), model, q, v, u, f_ext)  # by NumPy, not compiled
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)

    def scaled(s):  # every floating-point array parameter scaled by s
        def f(x):
            return x * s if jnp.issubdtype(x.dtype, jnp.floating) and x.ndim else x

        return jax.tree.map(f, model)

    models = jax.vmap(scaled)(1 + 0.1 * jnp.arange(n))
    got = jax.jit(jd.batched(jd.rnea, 0, chunk_size=4, layout="batch_last"))(models, q, v, u)
    ref = numpy_eval(jax.vmap(jd.rnea), models, q, v, u)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_unknown_primitive_parameter_fails_loudly():
    """A primitive parameter that batch_last does not know (a JAX upgrade) raises a clear
    error instead of being carried over with a possibly wrong meaning."""

    def f(x):
        return x[1:3] * 2.0

    jaxpr = jax.make_jaxpr(f)(jnp.zeros(4)).jaxpr
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "slice"]
    x = jnp.arange(8.0).reshape(4, 2)
    out = bl._rule(eqn, [(x, True)], 2)  # the known parameters: slice rows 1:3 of each sample
    np.testing.assert_array_equal(out[0][0], x[1:3])
    odd = eqn.replace(params={**eqn.params, "axis_semantics": "new"})
    with pytest.raises(
        NotImplementedError, match=r"'slice' has parameter\(s\) \['axis_semantics'\]"
    ):
        bl._rule(odd, [(x, True)], 2)


def _primitives(jaxpr) -> list:
    """The primitive names of a (closed) jaxpr and of every jaxpr it runs (of a
    `custom_linear_solve`, its solve: the others serve differentiation)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        params = eqn.params
        if eqn.primitive.name == "custom_linear_solve":
            params = {"solve": params["jaxprs"].solve}
        for p in params.values():
            for sub in p if isinstance(p, tuple | list) else (p,):
                if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                    names += _primitives(sub)
    return names


def test_tree_sums_reverse_mode_keeps_the_matrix_on_the_left():
    """`sum_over_ancestors` / `sum_over_subtrees` are `Aᵀ x` / `A x` (NumPy), their gradient
    the other product, and reverse mode multiplies by the constant from the left: no
    `transpose` of a cotangent anywhere in the program (JAX's own transpose of `A x`,
    `dot_general(ḡ, A)` then a transpose, made XLA:CPU copy each batch-last cotangent with
    its samples moved off the minor axis; see `_traversal._static_product`)."""
    from jointdyn._traversal import plan, sum_over_ancestors, sum_over_subtrees

    p = plan(random_tree(3, nbodies=14))
    A = p.ancestor
    rng = np.random.default_rng(0)
    x, w = (jnp.asarray(rng.normal(size=(len(A), 6))) for _ in range(2))
    for fn, M in ((sum_over_ancestors, A.T), (sum_over_subtrees, A)):
        np.testing.assert_allclose(fn(p, x), M @ np.asarray(x), rtol=1e-14, atol=1e-14)

        def loss(x, fn=fn):
            return jnp.sum(jnp.sin(fn(p, x)) * w)

        grad = jax.grad(loss)
        want = M.T @ (np.cos(M @ np.asarray(x)) * np.asarray(w))
        np.testing.assert_allclose(grad(x), want, rtol=1e-13, atol=1e-13)
        assert "transpose" not in _primitives(jax.make_jaxpr(grad)(x))
        batched = jax.make_jaxpr(jd.batch_last(grad, (-1,)))(jnp.stack([x, x], -1))
        assert "transpose" not in _primitives(batched)


def test_materialized_is_the_identity_with_a_gathered_cotangent(monkeypatch):
    """`_traversal.materialized` (used on the pose rule's tangents) changes no value and no
    derivative of any order, and its cotangent is a gather (computed once, in a kernel of its
    own), also batch-last without the `vmap` fallback."""
    from jointdyn._traversal import materialized

    rng = np.random.default_rng(1)
    x, w = (jnp.asarray(rng.normal(size=(5, 3))) for _ in range(2))

    def loss(x, m=True):
        y = jnp.sin(x) * x
        return jnp.sum(jnp.cos(materialized(y) if m else y) * w)

    np.testing.assert_array_equal(materialized((x, w)), (x, w))
    np.testing.assert_allclose(jax.grad(loss)(x), jax.grad(loss)(x, False), rtol=1e-14, atol=1e-14)
    hess = jax.hessian(lambda x: loss(x.reshape(5, 3)))(x.reshape(-1))
    ref = jax.hessian(lambda x: loss(x.reshape(5, 3), False))(x.reshape(-1))
    np.testing.assert_allclose(hess, ref, rtol=1e-13, atol=1e-13)
    assert "gather" in _primitives(jax.make_jaxpr(jax.grad(loss))(x))
    assert "gather" not in _primitives(jax.make_jaxpr(jax.grad(lambda x: loss(x, False)))(x))

    _forbid_fallback(monkeypatch)
    xs = jnp.stack([x, 2 * x], -1)
    got = jd.batch_last(jax.grad(loss), (-1,))(xs)
    np.testing.assert_allclose(got, jax.vmap(jax.grad(loss), -1, -1)(xs), rtol=1e-14, atol=1e-14)
