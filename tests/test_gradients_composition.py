"""Differentiation rules composed with transformations (item 5 of `test_gradients.py`, whose
set-up it shares): gradients through `jit(vmap)`, `jd.batched` (batch-last chunks), `jd.batch_last`
and a `lax.scan` rollout equal the rules-off autodiff, in float64 and float32, for subsets of
the inputs, and without a `batch_last` fallback for the rule."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_gradients as tg
from numpy_eval import numpy_eval
from trees import random_tree

import jointdyn as jd
import jointdyn._batch_last as bl

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module", autouse=True)
def _free_programs():
    """Drop this module's compiled programs when it is done."""
    yield
    tg._PROGRAMS.clear()
    for fn in (_batch_setup, _batch_results, _batch_reference):
        fn.cache_clear()
    jax.clear_caches()


N = 4  # samples
STEPS, DT = 3, 0.01


@functools.cache
def _batch_setup():
    """A small floating tree with passive forces and `N` states; loss weights."""
    model, _ = tg._build(random_tree(2, nbodies=4), seed=6)
    keys = jax.random.split(jax.random.PRNGKey(7), N + 3)
    q = jnp.stack([tg._random_q(model, k) for k in keys[:N]])
    v = 0.5 * jax.random.normal(keys[N], (N, model.nv))
    tau = 0.1 * jax.random.normal(keys[N + 1], (N, model.nv))
    taus = 0.1 * jax.random.normal(keys[N + 2], (STEPS, model.nv))
    w = jnp.asarray(np.random.default_rng(8).normal(size=(N, model.nv)))
    return model, (q, v, tau), taus, w


def _rollout_loss(w):
    def loss(model, q0, v0, taus):
        def step(carry, tau):
            q, v = carry
            v = v + DT * jd.forward_dynamics(model, q, v, tau)
            return (model.integrate(q, DT * v), v), None

        (q, v), _ = jax.lax.scan(step, (q0, v0), taus)
        return jnp.sum(jnp.sin(q[: w.size]) * w) + jnp.sum(jnp.sin(v) * w)

    return loss


def _batch_program(kinds, differentiate=jax.grad):
    """Gradients in (model, q, v, tau) of a batched `aba` loss, per way of batching in
    `kinds`, and of the rollout loss in (model, q0, v0, taus) (fresh closures).
    `differentiate=jax.jacfwd` takes them in forward mode (the rules-off reference: op-by-op
    reverse mode takes longer to compile)."""

    def program(model, q, v, tau, taus, w):
        def grad_of(batched_aba):
            def loss(model, q, v, tau):
                return jnp.sum(jnp.sin(batched_aba(model, q, v, tau)) * w)

            return differentiate(loss, argnums=(0, 1, 2, 3))(model, q, v, tau)

        axes = (None, 0, 0, 0)
        ways = {
            "vmap": lambda: jax.vmap(jd.aba, axes),
            "batched_last": lambda: jd.batched(jd.aba, axes, chunk_size=2, layout="batch_last"),
            "batch_last": lambda: _moved(jd.batch_last(jd.aba, (None, -1, -1, -1))),
        }
        out = {k: grad_of(ways[k]()) for k in kinds if k in ways}
        if "scan" in kinds:
            out["scan"] = differentiate(_rollout_loss(w[0]), argnums=(0, 1, 2, 3))(
                model, q[0], v[0], taus
            )
        return out

    return program


def _moved(fn):
    """A batch-last function called with batch-first arguments (and returning batch-first)."""

    def wrapped(model, *xs):
        return fn(model, *(x.T for x in xs)).T

    return wrapped


#: `jd.batched`'s batch-first chunks are `vmap` per chunk: the "vmap" case covers the rule there.
COMPOSITIONS = ["vmap", "batched_last", "batch_last", "scan"]


@functools.cache
def _batch_results(dtype: str):
    model, (q, v, tau), taus, w = _batch_setup()
    if dtype == "float32":
        cast = jnp.float32
        model, q, v, tau, taus, w = (jd.astype(x, cast) for x in (model, q, v, tau, taus, w))
        kinds = ["vmap", "batched_last", "scan"]
    else:
        kinds = COMPOSITIONS
    args = (model, q, v, tau, taus, w)
    return tg._compile(_batch_program(kinds), args)(*args)


@functools.cache
def _batch_reference():
    model, (q, v, tau), taus, w = _batch_setup()
    args = (model, q, v, tau, taus, w)
    program = _batch_program(["vmap", "scan"], differentiate=jax.jacfwd)
    return tg._reference_eval(program, args)


@pytest.mark.parametrize("kind", COMPOSITIONS)
def test_composition_matches_autodiff(kind):
    """Gradients with the rules on through `kind` equal the rules-off `vmap` (or `scan`)
    ones, relative 1e-9 per leaf (float64)."""
    got = _batch_results("float64")[kind]
    ref = _batch_reference()["scan" if kind == "scan" else "vmap"]
    tg._check_leaves(got, ref, 1e-9, kind)


def test_composition_float32():
    """float32 in, float32 gradients out, finite, within 1e-3 of the float64 reference
    (relative to each leaf's largest entry, or absolute 1e-4 for leaves under 0.1: a small
    gradient is a difference of larger terms, e.g. the armature's `−Σ λ ⊙ v̇`, and its float32
    rounding is absolute: 3e-5 on an armature gradient of 0.015 here, in `vmap` as in
    `batch_last`, against ≤ 5e-5 relative on every other leaf)."""
    got = _batch_results("float32")
    ref = _batch_reference()
    for kind, g in got.items():
        for x in jax.tree.leaves(g):
            assert x.dtype == jnp.float32, (kind, x.dtype)
        tg._assert_finite(g, kind)
        which = ref["scan" if kind == "scan" else "vmap"]
        tg._check_leaves(g, which, 1e-3, f"float32 {kind}", floor=0.1)


@pytest.mark.parametrize("name", ["aba", "rnea"])
def test_batched_gradient_in_some_inputs(name):
    """`jax.grad` of batched (batch-last chunks) `name` in the model alone, in `u` alone and
    in the state `(q, v, u)` equals `vmap`'s (for `aba`, the parts of `vmap`'s gradient in
    every input, which `test_composition_matches_autodiff` checks with the rules off): the
    rules inside meet symbolic-zero tangents for the other inputs (the pose rule, which takes
    none, gets zeros)."""
    model, (q, v, tau), _, w = _batch_setup()
    fn = getattr(jd, name)
    ways = [jd.batched(fn, (None, 0, 0, 0), chunk_size=2, layout="batch_last")]
    if name == "rnea":
        ways.insert(0, jax.vmap(fn, (None, 0, 0, 0)))

    def program(model, q, v, tau):
        out = []
        for batched in ways:

            def loss(model, q, v, tau, batched=batched):
                return jnp.sum(jnp.sin(batched(model, q, v, tau)) * w)

            out.append([jax.grad(loss, argnums=k)(model, q, v, tau) for k in (0, 3, (1, 2, 3))])
        return out

    args = (model, q, v, tau)
    if name == "aba":  # `vmap`'s gradient in every input, checked against the rules off above
        full = _batch_results("float64")["vmap"]
        (got,) = tg._compile(program, args)(*args)
        ref = [full[0], full[3], full[1:]]
    else:
        ref, got = tg._compile(program, args)(*args)
    tg._check_leaves(got, ref, 1e-10, f"{name} some inputs")


def test_no_batch_last_fallback_in_gradients(monkeypatch):
    """Tracing `jax.grad` and `jax.jacfwd` of `jd.batched(jd.aba)` and `jd.batched(jd.rnea)`
    (batch-last chunks), and `jd.batched(jax.jacfwd(…))` of both, needs no `batch_last`
    fallback: the rules themselves run batch-last."""
    model, (q, v, tau), _, w = _batch_setup()
    recorded = []
    fallback = bl._fallback

    def record(eqn, ins):
        recorded.append(eqn.primitive.name)
        return fallback(eqn, ins)

    monkeypatch.setattr(bl, "_fallback", record)
    # the recorder works: a primitive without a batch-last rule is recorded
    jax.make_jaxpr(jd.batch_last(lambda x: jnp.sort(x, axis=0)))(jnp.ones((3, 2)))
    assert recorded == ["sort"]
    recorded.clear()

    for alg, chunk_size in [(jd.aba, 2), (jd.aba, N), (jd.rnea, 2)]:  # several chunks, one
        f = jd.batched(alg, (None, 0, 0, 0), chunk_size=chunk_size, layout="batch_last")

        def loss(model, q, v, tau, f=f):
            return jnp.sum(jnp.sin(f(model, q, v, tau)) * w)

        jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3)))(model, q, v, tau)
        jax.make_jaxpr(jax.jacfwd(f, argnums=(1, 2, 3)))(model, q, v, tau)
    # `jacfwd` inside the chunks: the rules' analytic Jacobians batch-last
    for alg in (jd.aba, jd.rnea):
        jacobians = jax.jacfwd(alg, argnums=(1, 2, 3))
        jax.make_jaxpr(jd.batched(jacobians, (None, 0, 0, 0), chunk_size=2))(model, q, v, tau)
    assert not recorded, f"batch_last fell back to vmap for {sorted(set(recorded))}"


@pytest.mark.parametrize("bodies", ["one link", "two links"])
def test_jacfwd_of_vmapped_scan(bodies):
    """`jax.jacfwd` of a `vmap`ped `lax.scan` of dynamics with the rules on equals the
    rules-off autodiff, also when every body hangs from the world (one level: the pose rule's
    tangent of `X_WF = X_PF` once depended on the joints, and the scan's JVP failed with a rank
    mismatch; found differentiating `optimal_control.solve`)."""
    b = jd.ModelBuilder()
    inertia = jd.SpatialInertia(1.0, [0.0, 0.0, -0.5], 0.01 * np.eye(3))
    b.add_body("a", inertia, "world", jd.Revolute([0.0, 1.0, 0.0]))
    if bodies == "two links":
        b.add_body(
            "b",
            inertia,
            "a",
            jd.Revolute([1.0, 0.0, 0.0]),
            X_PF=jd.Transform.from_rpy([0.0, 0.0, 0.0], [0.0, 0.0, -1.0]),
        )
    model = b.build()

    def f(t):
        def one(q):
            def body(c, _):
                v = jnp.ones_like(c)
                return c + 0.1 * jd.aba(model, c, v, v), jd.rnea(model, c, v, v).sum()

            return jax.lax.scan(body, q, None, length=2)[1]

        return jax.vmap(one)(jnp.stack([t, 2 * t]))

    t = jnp.full(model.nq, 0.3)
    J = jax.jit(jax.jacfwd(f))(t)
    with jd.differentiation_rules(False):
        ref = numpy_eval(jax.jacfwd(f), t)  # by NumPy: not compiled
    np.testing.assert_allclose(J, ref, rtol=1e-10, atol=1e-12)
