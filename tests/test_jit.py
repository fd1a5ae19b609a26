"""`jointdyn.jit` / `jointdyn.compiler_options`: same results as `jax.jit`, user options win,
unknown options fall back to XLA's defaults, and importing jointdyn starts no backend."""

import gc
import inspect
import logging
import os
import re
import subprocess
import sys
import threading

import equinox as eqx
import jax
import numpy as np
import pytest
from numpy_eval import numpy_eval
from trees import random_states, random_tree

import jointdyn as jd
from jointdyn import _compile

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def batch():
    model = random_tree(2, nbodies=7)
    q, v, tau = random_states(model, 5, seed=1)
    return model, q, v, tau


def test_compiler_options_known_here():
    """Every option this XLA accepts is kept (the fusion-emitter one is known since the JAX
    floor, the YNNPACK one on recent XLA only), each alone; the dict is a copy the caller may
    change."""
    opts = jd.compiler_options()
    expected = {k: v for k, v in _compile.CPU_COMPILER_OPTIONS.items() if _compile._accepted(k, v)}
    assert opts == expected and "xla_cpu_use_fusion_emitters" in opts
    opts["xla_cpu_use_fusion_emitters"] = True
    assert jd.compiler_options() == expected


def test_xla_flags_are_the_options():
    """`jd.xla_flags()` (asked of a fresh process) spells `compiler_options()` as `XLA_FLAGS`."""
    spelled = {
        f"--{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in jd.compiler_options().items()
    }
    assert set(jd.xla_flags().split()) == spelled


def test_jit_equals_jax_jit(batch):
    model, q, v, tau = batch
    f = jax.vmap(jd.aba, (None, 0, 0, 0))
    got = jd.jit(f)(model, q, v, tau)
    expected = jax.jit(f)(model, q, v, tau)
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-11)

    # the options reach XLA: the optimised program is the one `jax.jit` makes with them, and
    # not the one it makes with the fusion emitters on (XLA's default; tests/conftest.py turns
    # them off for the whole test process, so they are asked for explicitly here)
    def hlo(jitted):  # the optimised program without source locations (`jd.jit` adds a frame)
        text = jitted.lower(model, q, v, tau).compile().as_text()
        text = re.sub(r", metadata=\{[^{}]*\}", "", text)
        return text[text.index("\n%") :]  # from the first computation, past the location tables

    text = hlo(jd.jit(f))
    assert text == hlo(jax.jit(f, compiler_options=jd.compiler_options()))
    assert text != hlo(jax.jit(f, compiler_options={"xla_cpu_use_fusion_emitters": True}))


def test_jit_user_options_win_and_decorator(batch):
    model, q, v, tau = batch

    @jd.jit(compiler_options={"xla_cpu_use_fusion_emitters": True})
    def f(model, q, v, tau):
        return jax.vmap(jd.rnea, (None, 0, 0, 0))(model, q, v, tau)

    expected = numpy_eval(jax.vmap(jd.rnea, (None, 0, 0, 0)), model, q, v, tau)  # not compiled
    np.testing.assert_allclose(f(model, q, v, tau), expected, rtol=1e-11, atol=1e-11)
    with pytest.raises(Exception, match="no_such_option"):
        jd.jit(lambda x: x, compiler_options={"no_such_option": 1})(1.0)


def test_unknown_option_falls_back(monkeypatch):
    """An option this XLA does not know is dropped, the others kept."""
    known = {"xla_cpu_use_fusion_emitters": False}
    for options, kept in (
        ({"xla_no_such_option_here": True}, {}),
        ({**known, "xla_no_such": 1}, known),
    ):
        monkeypatch.setattr(_compile, "CPU_COMPILER_OPTIONS", options)
        _compile._supported_options.cache_clear()
        try:
            assert jd.compiler_options() == kept
            assert float(jd.jit(lambda x: 2 * x)(3.0)) == 6.0
        finally:
            monkeypatch.undo()
            _compile._supported_options.cache_clear()
    assert "xla_cpu_use_fusion_emitters" in jd.compiler_options()


def test_direct_call_uses_options(batch, monkeypatch):
    """A direct call compiles once through `jd.jit` (so with the options); under an
    un-jitted `vmap` a plain `jax.jit` is used (a transformation may nest it, and a nested
    jit takes no options)."""
    model, q, v, tau = batch
    made = []

    def recording_jit(fn):
        made.append(fn)
        return _compile.jax.jit(fn, compiler_options=jd.compiler_options())

    monkeypatch.setattr(_compile, "jit", recording_jit)
    aba = _compile.jit_unless_traced(jd.aba.__wrapped__)
    jax.vmap(aba, (None, 0, 0, 0))(model, q, v, tau)
    assert made == []
    got = aba(model, q[0], v[0], tau[0])
    aba(model, q[1], v[1], tau[1])
    # made[0] is full_precision(accepts_packed(aba)): unwrap both
    assert len(made) == 1 and inspect.unwrap(made[0]) is jd.aba.__wrapped__
    expected = numpy_eval(jd.aba, model, q[0], v[0], tau[0])  # a reference, not compiled
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-11)


def test_untransformed_vmap_and_grad_compile_one_program(batch, caplog):
    """Under an un-jitted `jax.vmap`, `jax.grad` or `jax.jacfwd` an algorithm is called jitted
    and compiles as one program, not run op by op (each of its hundreds of operations compiled
    on its own the first time: hundreds of compiles, none of them `jit(rnea)`); the results
    equal the jitted transformation's, and the rules switch is honoured on that path."""
    model, q, v, tau = batch

    def f(q, v, tau):
        return jd.rnea(model, q, v, tau)

    def energy(q):
        return jd.kinetic_energy(model, q, v[0])

    def acc(tau):
        return jd.aba(model, q[0], v[0], tau)

    with caplog.at_level(logging.WARNING), jax.log_compiles():
        out = jax.vmap(f)(q, v, tau)
        g = jax.grad(energy)(q[0])
        J = jax.jacfwd(acc)(tau[0])
    compiles = [
        r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()
    ]
    for name in ("rnea", "kinetic_energy", "aba"):  # each algorithm one program
        assert any(f"jit({name})" in m for m in compiles), compiles
    assert len(compiles) <= 40, compiles  # the rest: the test's own indexing, jacfwd's basis
    # the references by NumPy (`numpy_eval`), not compiled
    np.testing.assert_allclose(out, numpy_eval(jax.vmap(f), q, v, tau), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g, numpy_eval(jax.grad(energy), q[0]), rtol=1e-11, atol=1e-11)
    M = jd.crba(model, q[0])
    np.testing.assert_allclose(J @ M, np.eye(model.nv), rtol=0, atol=1e-9)
    caplog.clear()
    with caplog.at_level(logging.WARNING), jax.log_compiles(), jd.differentiation_rules(False):
        J_off = jax.jacfwd(acc)(tau[0])  # traced anew with the rules off: a program of its own
    assert any("Finished XLA compilation" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(J_off, J, rtol=1e-9, atol=1e-9)


def test_import_starts_no_backend():
    code = (
        "import jointdyn\n"
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge.backends_are_initialized(), 'backend started on import'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_traced_model_concrete_states(batch):
    """Under an outer `jit` with only the model traced (system identification: the states are
    constants), the algorithm inlines instead of nesting a jit with compiler options."""
    model, q, v, tau = batch

    def acc(m):
        return jd.aba(m, q[0], v[0], tau[0])

    expected = numpy_eval(acc, model)  # a reference, not compiled
    np.testing.assert_allclose(jax.jit(acc)(model), expected, rtol=1e-11, atol=1e-11)
    g = eqx.filter_jit(eqx.filter_grad(lambda m: acc(m).sum()))(model)
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(g))


def _run(code: str, keep_xla_flags: bool = False) -> subprocess.CompletedProcess:
    """`python -c code` in a fresh process, without the tests' `XLA_FLAGS` unless kept."""
    env = {k: v for k, v in os.environ.items() if keep_xla_flags or k != "XLA_FLAGS"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_use_low_latency_cpu_sets_both_and_changes_the_schedule():
    """In a fresh process: both settings are made, a jitted call still gives the same result,
    and the flag reaches XLA (the compiled program's kernel order differs from the default).
    Both processes keep the tests' XLA flags (lowest backend level: a faster compile; the
    scheduler runs at every level)."""
    code = """
import os, jax, jax.numpy as jnp, numpy as np
import jointdyn as jd
from trees import random_states, random_tree
if LOW:
    done = jd.use_low_latency_cpu()
    assert done["jax_cpu_enable_async_dispatch"] is False, done
    assert jax.config.values['jax_cpu_enable_async_dispatch'] is False
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in os.environ["XLA_FLAGS"]
model = jd.pack(random_tree(2, nbodies=6))
q = jnp.linspace(0.1, 0.7, model.unpack().nq)
q = model.unpack().normalize(q)
v = jnp.linspace(-1.0, 1.0, model.unpack().nv)
f = jax.jit(jd.aba)
print(np.asarray(f(model, q, v, v)).tolist())
print(f.lower(model, q, v, v).compile().as_text().split("ENTRY")[1])
"""
    tests_dir = os.path.dirname(__file__)
    outs = {}
    for low in (False, True):
        r = _run(f"import sys; sys.path.insert(0, {tests_dir!r})\nLOW = {low}\n" + code, True)
        assert r.returncode == 0, r.stderr[-3000:]
        first, _, hlo = r.stdout.partition("\n")
        outs[low] = (np.asarray(eval(first)), hlo)  # noqa: S307 - our own printed list
    np.testing.assert_allclose(outs[True][0], outs[False][0], rtol=1e-5, atol=1e-5)
    assert outs[True][1] != outs[False][1]


def test_use_low_latency_cpu_refuses_after_backend_start():
    r = _run(
        "import jax.numpy as jnp, jointdyn as jd\n"
        "jnp.zeros(1).block_until_ready()\n"
        "try:\n    jd.use_low_latency_cpu()\nexcept RuntimeError as e:\n    print('refused', e)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "refused" in r.stdout and "before JAX's first computation" in r.stdout


@pytest.fixture
def cpython_gc_thresholds():
    """CPython's default thresholds for the test (conftest's are the deferred ones, against
    which deferring could not be seen), conftest's again afterwards."""
    suite = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*suite)


def test_tracing_defers_garbage_collections(cpython_gc_thresholds):
    """While `jd.jit` traces its function, and while a jointdyn algorithm is traced inside a
    plain `jax.jit`, the cyclic collector runs at `TRACING_GC_THRESHOLDS`; afterwards the
    thresholds are what they were, also when the traced function raises."""
    before = cpython_gc_thresholds
    assert before != _compile.TRACING_GC_THRESHOLDS
    seen = []

    def record(x):
        seen.append(gc.get_threshold())
        return x + 1

    assert float(jd.jit(record)(1.0)) == 2.0
    probe = _compile.jit_unless_traced(record)  # a jointdyn algorithm's wrapper
    assert float(jax.jit(lambda x: 2 * probe(x))(1.0)) == 4.0
    assert seen == [_compile.TRACING_GC_THRESHOLDS] * 2
    assert gc.get_threshold() == before

    def fails(x):
        raise ValueError("inside the trace")

    with pytest.raises(ValueError, match="inside the trace"):
        jd.jit(fails)(1.0)
    assert gc.get_threshold() == before


def test_user_functions_trace_with_collections_deferred(cpython_gc_thresholds):
    """The user's own functions traced inside `jd.batched`, a `jd.rollout` policy and the costs
    of `optimal_control.solve` are traced at `TRACING_GC_THRESHOLDS` too (their traces hold the
    user's code, and any `jax.grad` in it, besides jointdyn's algorithms)."""
    from jointdyn import optimal_control as oc

    before = cpython_gc_thresholds
    seen = []

    def recorded(fn):
        def inner(*args):
            seen.append(gc.get_threshold())
            return fn(*args)

        return inner

    xs = jax.numpy.arange(4.0)
    np.testing.assert_allclose(jax.jit(jd.batched(recorded(lambda x: 2 * x)))(xs), 2 * xs)
    pend = jd.load_model("double_pendulum")
    q0, v0 = pend.neutral(), jax.numpy.zeros(pend.nv)
    policy = recorded(lambda k, q, v: -v)
    assert jd.rollout(pend, q0, v0, policy, 1e-3, steps=2).q.shape == (3, pend.nq)
    problem = oc.ShootingProblem(
        pend, q0, v0, 2, 1e-2, recorded(lambda q, v, tau: tau @ tau), lambda q, v: v @ v
    )
    assert np.isfinite(float(oc.solve(problem, max_iterations=1).cost))
    assert len(seen) >= 3 and set(seen) == {_compile.TRACING_GC_THRESHOLDS}, seen
    assert gc.get_threshold() == before


def test_deferred_collections_nest_and_overlap_across_threads(cpython_gc_thresholds):
    """The outermost block sets the thresholds and the last one to leave, in any thread,
    restores them."""
    before = cpython_gc_thresholds
    deferred = _compile.TRACING_GC_THRESHOLDS
    assert before != deferred
    entered, release = threading.Event(), threading.Event()

    def other_thread():
        with _compile.collections_deferred():
            entered.set()
            release.wait(10)

    with _compile.collections_deferred():
        with _compile.collections_deferred():
            assert gc.get_threshold() == deferred
        assert gc.get_threshold() == deferred
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert entered.wait(10)
    assert gc.get_threshold() == deferred  # the other thread is still inside
    release.set()
    thread.join(10)
    assert gc.get_threshold() == before
