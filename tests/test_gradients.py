"""Differentiation rules (`jax.custom_jvp`, e.g. `aba`'s) against generic autodiff and finite
differences.

The functions under test are `FUNCTIONS` (extend it when a rule is added). For each:

1. rules on (`jax.grad` of a scalar loss with respect to the model, `q`, `v`, `tau`/`vdot` and
   `f_ext`, every leaf, and `jax.jacfwd` in `(q, v, tau)`) against the same function traced
   with `jd.differentiation_rules(False)` (op-by-op autodiff), to 1e-10 in float64, on a random
   tree with every joint class and on real robots (`forward_dynamics`' reference is `aba`'s,
   composed with the rules-off Jacobian of `joint_forces`: `aba(tau + joint_forces)`);
2. `jax.jvp` (rules on) against central finite differences along random directions of every
   input: `q` along the manifold (`model.integrate(q, e δ)`), each model leaf, `v`, `tau`,
   `f_ext`;
3. no NaN or inf in any gradient at the neutral configuration and at joint limits;
4. `jax.hessian` through `aba` against finite differences of `jax.grad` and the rules-off one;
5. composition with `jit(vmap)`, `jd.batched`, `jd.batch_last`, a `lax.scan` rollout,
   float32, and no `batch_last` fallback for the rule: in `test_gradients_composition.py`
   (a file of its own, so that the two halves run in parallel under `--dist loadfile`);
6. `jd.batched` split over two devices: in `test_batching.test_batched_shards_over_devices`
   (a subprocess with two CPU devices).

Compiling gradients of the dynamics takes seconds, and these checks are about the rules'
arithmetic, which is the traced program's: every program here is traced once (module caches,
fresh closures traced inside the rules switch: a function object traced before keeps its trace
whatever the switch says) and evaluated by NumPy (`numpy_eval`), the rules on and off alike;
the compiled rules are item 5's. Every case of `FUNCTIONS` is compared, with no check first
that the rules change its program: every function there has a rule (`aba`'s, or the pose rule
inside the kinematics), and that check cost ~10 s of tracing per case.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_eval, numpy_jit
from robots import load_jointdyn
from trees import random_inertia, random_tree

import jointdyn as jd
import jointdyn._autodiff as jd_autodiff
import jointdyn._dynamics as dyn
from jointdyn._compile import jit_unless_traced

jax.config.update("jax_enable_x64", True)

#: (name, function, name of its third argument or None when it takes `(model, q)` only).
FUNCTIONS = [
    ("aba", jd.aba, "tau"),
    ("forward_dynamics", jd.forward_dynamics, "tau"),
    ("rnea", jd.rnea, "vdot"),
    ("crba", jd.crba, None),
]
FN = {name: (fn, u) for name, fn, u in FUNCTIONS}
#: "tree": a floating random tree of 14 bodies, one joint of every class; the rest are
#: example-robot-data robots (skipped when it is not installed).
MODELS = ["tree", "panda", "solo12", "ur5"]
#: Functions with a rule that the finite-difference, NaN and hessian tests are about.
WITH_RULES = ["aba", "forward_dynamics"]


# --------------------------------------------------------------------------------------------
# set-up: models with passive forces, well-conditioned states, programs


def _compile(fn, args):
    """`jax.jit(fn)` compiled for `args` (rules on; for the compositions with `jit`, `vmap`,
    `jd.batched`, `scan` of `test_gradients_composition.py`). `fn` must be a fresh function
    object (a function traced before keeps its cached trace)."""
    return jax.jit(fn).lower(*args).compile()


def _reference_eval(fn, args):
    """`fn(*args)` traced with the rules off and evaluated by NumPy (`numpy_eval`): the
    rules-off references are large programs run once, faster to evaluate than to compile."""
    with jd.differentiation_rules(False):
        return numpy_eval(fn, *args)


def _call(name, model, q, v, u, f):
    fn, kind = FN[name]
    return fn(model, q) if kind is None else fn(model, q, v, u, f)


def _limitable(joint) -> np.ndarray:
    """Which coordinates of `joint` can carry position limits (not quaternions, `[cos, sin]`)."""
    if isinstance(joint, jd.Composite):
        return np.concatenate([_limitable(j) for j in joint.joints])
    if isinstance(joint, jd.Ball | jd.RevoluteUnbounded):
        return np.zeros(joint.nq, bool)
    if isinstance(joint, jd.Free):
        return np.arange(7) >= 4
    return np.ones(joint.nq, bool)


def _with_passive(joint, q: np.ndarray, rng: np.random.Generator, scale: float = 1.0):
    """`joint` with damping, friction and limit stops (their sizes times `scale`); finite
    limits on every limitable coordinate, chosen around `q` so that some coordinates are
    inside, some above the upper and some below the lower limit (stops engaged by at least
    0.1: smooth for small steps)."""
    if isinstance(joint, jd.Composite):
        parts, o = [], 0
        for j in joint.joints:
            parts.append(_with_passive(j, q[o : o + j.nq], rng, scale))
            o += j.nq
        return eqx.tree_at(lambda c: c.joints, joint, tuple(parts))
    nq, nv = joint.nq, joint.nv
    lower, upper = np.full(nq, -np.inf), np.full(nq, np.inf)
    for i in np.flatnonzero(_limitable(joint)):
        case, r = rng.integers(3), rng.uniform(0.1, 0.3)
        if case == 0:  # inside
            lower[i], upper[i] = q[i] - 0.5 - r, q[i] + 0.5 + r
        elif case == 1:  # above the upper limit
            upper[i] = q[i] - r
            lower[i] = upper[i] - 1.0
        else:  # below the lower limit
            lower[i] = q[i] + r
            upper[i] = lower[i] + 1.0
    p = joint.params
    params = eqx.tree_at(
        lambda p: (
            p.position_lower,
            p.position_upper,
            p.damping,
            p.friction,
            p.stop_stiffness,
            p.stop_damping,
        ),
        p,
        tuple(
            jnp.asarray(x, p.damping.dtype)
            for x in (
                lower,
                upper,
                scale * rng.uniform(0.05, 0.3, nv),
                scale * rng.uniform(0.02, 0.1, nv),
                scale * np.where(_limitable(joint), rng.uniform(20.0, 50.0, nq), 0.0),
                scale * np.where(_limitable(joint), rng.uniform(0.1, 0.3, nq), 0.0),
            )
        ),
    )
    return eqx.tree_at(lambda j: j.params, joint, params)


def _random_q(model, key) -> jax.Array:
    """`model.random_configuration`, with the middle angle of `SpaceXYZ` and `Gimbal` joints
    within ±1.2 (away from their singularities: well-conditioned)."""
    q = np.array(model.random_configuration(key))
    for joint, o in zip(model.joints, model.topology.q_offsets, strict=True):
        if isinstance(joint, jd.SpaceXYZ | jd.Gimbal):
            q[o + 1] = np.clip(q[o + 1], -1.2, 1.2)
    return jnp.asarray(q)


def _build(model, seed: int, scale: float = 1.0):
    """The model with passive forces (sizes times `scale`) around a random state, and that
    state `(q, v, u, f_ext)`: `v ~ 0.5 N(0, 1)`, `u` (tau or vdot) and `f_ext` small."""
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = _random_q(model, k[0])
    rng = np.random.default_rng(seed)
    qn = np.asarray(q)
    joints = tuple(
        _with_passive(j, qn[o : o + j.nq], rng, scale)
        for j, o in zip(model.joints, model.topology.q_offsets, strict=True)
    )
    model = eqx.tree_at(lambda m: m.joints, model, joints)
    v = 0.5 * jax.random.normal(k[1], (model.nv,))
    u = 0.1 * jax.random.normal(k[2], (model.nv,))
    f = 0.1 * jax.random.normal(k[3], (model.nbodies, 6))
    return model, (q, v, u, f)


@functools.cache
def _setup(model_name: str):
    """`(model, (q, v, u, f_ext), weights)`; `weights[name]` weighs `name`'s output."""
    if model_name == "tree":
        model, state = _build(random_tree(0, nbodies=14), seed=1)
    else:  # light links (solo12's feet: 38 g): small passive forces keep v̇ moderate
        model, state = _build(load_jointdyn(model_name), seed=1, scale=0.01)
    rng = np.random.default_rng(2)
    nv = model.nv
    weights = {
        name: jnp.asarray(rng.normal(size=(nv, nv) if u is None else (nv,)))
        for name, _, u in FUNCTIONS
    }
    return model, state, weights


def _loss(name, w):
    def loss(model, q, v, u, f):
        return jnp.sum(jnp.sin(_call(name, model, q, v, u, f)) * w)

    return loss


def _rules_program(name):
    """`jax.grad` of the loss in every input, and `jax.jacfwd` in `(q, v, u)` (a fresh closure)."""

    def program(model, q, v, u, f, w):
        grads = jax.grad(_loss(name, w), argnums=(0, 1, 2, 3, 4))(model, q, v, u, f)

        def out(q, v, u):
            return _call(name, model, q, v, u, f)

        return grads, jax.jacfwd(out, argnums=(0, 1, 2))(q, v, u)

    return program


def _reference_program(name):
    """The rules-off reference: `jax.jacfwd` in every input (forward mode, op by op; half the
    compile time of reverse mode), and the output, to contract with the loss's cotangent."""

    def program(model, q, v, u, f):
        def out(*args):
            return _call(name, *args)

        return out(model, q, v, u, f), jax.jacfwd(out, argnums=(0, 1, 2, 3, 4))(model, q, v, u, f)

    return program


#: Built once per case: the rules-on programs, traced and evaluated by NumPy (`_rules_on`), and
#: the rules-off references' values (`_aba_at_passive_tau`).
_PROGRAMS: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _free_programs():
    """Drop this module's programs and compiled executables when it is done (they would
    otherwise stay alive in the test worker)."""
    yield
    _PROGRAMS.clear()
    _setup.cache_clear()
    jax.clear_caches()


def _rules_on(model_name: str, name: str):
    """`_rules_program` (rules on) for this model, traced once and evaluated by NumPy
    (`numpy_jit`), cached. This module checks the rules' arithmetic, which is the traced
    program's (XLA compiles that program as it is): evaluating it by NumPy saves a compile per
    case. Compiled, under `jit`, `vmap`, `jd.batched` and `scan`, the rules are checked in
    `test_gradients_composition.py`."""
    key = ("on", model_name, name)
    if key not in _PROGRAMS:
        model, (q, v, u, f), w = _setup(model_name)
        _PROGRAMS[key] = numpy_jit(_rules_program(name))
    return _PROGRAMS[key]


# --------------------------------------------------------------------------------------------
# comparisons


def _check_leaves(got, ref, rtol: float, what: str, floor: float = 1e-3) -> None:
    """Every leaf of `got` finite and within `rtol · max(max |ref leaf|, floor)` of `ref`'s;
    all failing leaves in the message."""
    got_leaves = jax.tree_util.tree_leaves_with_path(got)
    ref_leaves = jax.tree.leaves(ref)
    assert len(got_leaves) == len(ref_leaves), what
    bad = []
    for (path, a), b in zip(got_leaves, ref_leaves, strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        where = f"{what}{jax.tree_util.keystr(path)}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        if a.size == 0:
            continue
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            bad.append(f"{where}: not finite")
            continue
        scale = max(float(np.abs(b).max()), floor)
        err = float(np.abs(a - b).max())
        if err > rtol * scale:
            bad.append(f"{where}: max |diff| {err:.3g} > {rtol:g} x {scale:.3g}")
    assert not bad, "\n".join(bad)


def _assert_finite(tree, what: str) -> None:
    bad = [
        jax.tree_util.keystr(p)
        for p, x in jax.tree_util.tree_leaves_with_path(tree)
        if not np.all(np.isfinite(np.asarray(x)))
    ]
    assert not bad, f"{what}: NaN or inf in {bad}"


# --------------------------------------------------------------------------------------------
# 1. rules against generic autodiff


#: Every function on the random tree; aba and forward_dynamics (the rule) on panda; aba on the
#: other robots.
CASES = (
    [("tree", n) for n, _, _ in FUNCTIONS]
    + [("panda", "aba"), ("panda", "forward_dynamics")]
    + [(m, "aba") for m in MODELS[2:]]
)


def _aba_at_passive_tau(model_name: str):
    """`(tau, out, J)`: `tau = u + joint_forces(q, v)` and the rules-off reference of `aba`
    there (its output and `jax.jacfwd` in every input); cached, shared by the `aba` case
    (evaluated at this `tau`) and the `forward_dynamics` case (`aba(tau + joint_forces)`)."""
    key = ("aba at passive tau", model_name)
    if key not in _PROGRAMS:
        model, (q, v, u, f), _ = _setup(model_name)
        tau = u + jd.joint_forces(model, q, v)
        out, J = _reference_eval(_reference_program("aba"), (model, q, v, tau, f))
        _PROGRAMS[key] = (tau, out, J)
    return _PROGRAMS[key]


def _reference(model_name: str, name: str):
    """The rules-off output and `jax.jacfwd` in every input of `name` at the model's state.

    `forward_dynamics` is `aba(q, v, u + joint_forces(q, v))`, so its reference is `aba`'s
    (at that torque) composed with the rules-off `jax.jacfwd` of `joint_forces` by the chain
    rule, `J_fd = J_aba + J_aba,tau J_jf`: both op-by-op autodiff, one large program less to
    compile. Returns `(state, out, J)` with the state the reference was taken at."""
    model, (q, v, u, f), _ = _setup(model_name)
    if name == "aba":
        tau, out, J = _aba_at_passive_tau(model_name)
        return (q, v, tau, f), out, J
    if name == "forward_dynamics":
        _, out, (J_m, J_q, J_v, J_u, J_f) = _aba_at_passive_tau(model_name)

        def joint_forces_jacobian(model, q, v):
            return jax.jacfwd(jd.joint_forces, argnums=(0, 1, 2))(model, q, v)

        P_m, P_q, P_v = _reference_eval(joint_forces_jacobian, (model, q, v))
        J_u = np.asarray(J_u)
        J_m = jax.tree.map(lambda a, b: np.asarray(a) + np.tensordot(J_u, b, 1), J_m, P_m)
        J = (J_m, J_q + J_u @ P_q, J_v + J_u @ P_v, J_u, J_f)
        return (q, v, u, f), out, J
    return (q, v, u, f), *_reference_eval(_reference_program(name), (model, q, v, u, f))


@pytest.mark.parametrize(("model_name", "name"), CASES)
def test_rules_match_autodiff(model_name, name):
    """`jax.grad` (every leaf of every input) and `jax.jacfwd` in `(q, v, u)` with the rules
    on equal op-by-op autodiff with them off, to 3e-10 / 1e-10 relative per leaf."""
    model, _, w = _setup(model_name)
    (q, v, u, f), out, J = _reference(model_name, name)
    grads, jac = _rules_on(model_name, name)(model, q, v, u, f, w[name])
    ct = np.cos(np.asarray(out)) * np.asarray(w[name])  # d loss / d out
    nout = ct.ndim
    ref_grads = jax.tree.map(lambda x: np.tensordot(ct, np.asarray(x), nout), J)
    # 3e-10: the armature's gradient is −λ ⊙ v̇ (λ = M⁻¹ ∂loss/∂v̇), a product of the two
    # largest quantities here (solo12's light legs: |v̇| ~ 1e3), rounded to ~2e-10 of its size
    _check_leaves(grads, ref_grads, 3e-10, f"{model_name} {name} grad")
    _check_leaves(jac, J[1:4], 1e-10, f"{model_name} {name} jacfwd")


def _count_calls(monkeypatch, module, name: str) -> list:
    """Patch `module.name` to record each call (one entry per call) in the returned list."""
    calls, fn = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_many_tangents_take_the_jacobians(monkeypatch):
    """ABA's rule takes its `q`, `v` terms from the analytic Jacobians (`_dense_tangent`)
    exactly when many tangents are mapped at fixed primals: `jax.jacfwd` (traced, un-jitted,
    under a `vmap` of states, around `jd.batched`), not `jax.grad`, `jax.jvp`, a `vmap` of states and tangents
    together, or a `vmap` of fewer than `MANY_TANGENTS` tangents. (Both give the same tangent:
    `test_rules_match_autodiff` checks `jacfwd` through this path against op-by-op autodiff.)"""
    calls = _count_calls(monkeypatch, dyn, "_dense_tangent")
    model, (q, v, u, _), _ = _setup("panda")
    Q, V = jnp.stack([q] * 6), jnp.stack([v] * 6)  # more lanes than MANY_TANGENTS

    # a wrapper of its own: its first un-jitted call traces (no other test's cache)
    fresh_aba = jit_unless_traced(jd.aba.__wrapped__)

    def aba(q, v):
        return fresh_aba(model, q, v, u)

    def uses_jacobians(fn, *args, trace=True) -> bool:
        calls.clear()
        jax.make_jaxpr(fn)(*args) if trace else jax.block_until_ready(fn(*args))
        return bool(calls)

    lanes = jax.jacfwd(aba, argnums=(0, 1))
    assert uses_jacobians(lanes, q, v, trace=False)  # the lanes passed to the jitted call
    assert uses_jacobians(lanes, q, v)
    assert uses_jacobians(jax.jacfwd(aba, argnums=1), q, v)  # nv = 9 lanes
    assert uses_jacobians(jax.vmap(lanes), Q, V)
    assert uses_jacobians(jax.jacfwd(jd.batched(aba, chunk_size=2)), Q, V)  # lanes told inside
    assert not uses_jacobians(jax.grad(lambda q, v: jnp.sum(aba(q, v))), q, v)
    assert not uses_jacobians(lambda q, v: jax.jvp(aba, (q, v), (q, v)), q, v)
    assert not uses_jacobians(jax.vmap(lambda q, v: jax.jvp(aba, (q, v), (q, v))), Q, V)
    few = jnp.stack([v] * (jd_autodiff.MANY_TANGENTS - 1))
    assert not uses_jacobians(
        lambda q, v: jax.vmap(lambda dv: jax.jvp(aba, (q, v), (jnp.zeros_like(q), dv)))(few), q, v
    )


def test_rnea_jacfwd_takes_the_jacobians(monkeypatch):
    """`jax.jacfwd(jd.rnea)` takes RNEA's rule's analytic Jacobians (computed once, a product
    per lane), `jax.grad` and `jax.jvp` RNEA's own tangent; in `v̇` alone the Jacobian is
    `crba`'s `M(q)`. (Against op-by-op autodiff: `test_rules_match_autodiff[tree-rnea]`.)"""
    calls = _count_calls(monkeypatch, jd._derivatives, "rnea_tangent_from_jacobians")
    model, (q, v, a, _), _ = _setup("panda")

    def rnea(q, v, a):
        return jd.rnea(model, q, v, a)

    def uses_jacobians(fn) -> bool:
        calls.clear()
        jax.make_jaxpr(fn)(q, v, a)
        return bool(calls)

    assert uses_jacobians(jax.jacfwd(rnea, argnums=(0, 1, 2)))
    assert not uses_jacobians(jax.grad(lambda *x: jnp.sum(rnea(*x)), argnums=(0, 1, 2)))
    assert not uses_jacobians(lambda q, v, a: jax.jvp(rnea, (q, v, a), (q, v, a)))
    M = numpy_eval(jax.jacfwd(rnea, argnums=2), q, v, a)
    np.testing.assert_allclose(M, jd.crba(model, q), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["aba", "rnea"])
def test_dense_jacfwd_at_neutral_matches_central_differences(name):
    """The rules' dense `jax.jacfwd` paths at the neutral configuration (identity quaternions,
    `[cos, sin] = [1, 0]`, zero angles) and zero velocity, on the tree of every joint class:
    finite, and equal to central differences along `q ⊕ ε e_k` (the ambient Jacobian times
    `N(q) = qdot_from_v`), `v` and `u`."""
    model, (_, _, u, f_ext), w = _setup("tree")
    fn = FN[name][0]
    q0, v0, no_f = model.neutral(), jnp.zeros(model.nv), jnp.zeros_like(f_ext)

    def f(q, v, u):
        return fn(model, q, v, u)

    # the program of `test_rules_match_autodiff` (its `jacfwd` in (q, v, u)), at f_ext = 0
    _, (J_q, J_v, J_u) = _rules_on("tree", name)(model, q0, v0, u, no_f, w[name])
    _assert_finite((J_q, J_v, J_u), f"{name} jacfwd at neutral")
    E, eps = jnp.eye(model.nv), 1e-6

    @numpy_jit  # primal calls only: evaluated by NumPy, not compiled
    def differences(q, v, u):
        def along(move):  # (f(+ε) − f(−ε)) / 2ε for each unit direction, as columns
            return jax.vmap(lambda e: (move(e) - move(-e)) / (2 * eps), out_axes=1)(eps * E)

        return (
            along(lambda d: f(model.integrate(q, d), v, u)),
            along(lambda d: f(q, v + d, u)),
            along(lambda d: f(q, v, u + d)),
        )

    N = jax.vmap(lambda e: jd._kinematics.qdot_from_v(model, q0, e), out_axes=1)(E)
    tangent_J_q = J_q @ N
    _check_leaves((tangent_J_q, J_v, J_u), differences(q0, v0, u), 1e-6, f"{name} vs differences")


def test_many_tangents_with_composite_unit_vectors():
    """`jax.jacfwd` through the Jacobians on `Composite` joints holding quaternions and
    `[cos, sin]`s, one or two per joint, equals op-by-op autodiff, on the unit spheres and off
    them (`X_FM` reads unit vectors normalised: the ambient-to-tangent split is exact there
    too)."""
    rng = np.random.default_rng(3)
    ru = jd.RevoluteUnbounded(rng.normal(size=3))
    b = jd.ModelBuilder()
    b.add_body("a", random_inertia(rng), "world", jd.Free())
    parent = "a"
    for name, joint in [
        ("b", jd.Composite([jd.Ball(), jd.Prismatic(rng.normal(size=3))])),
        ("c", jd.Composite([jd.Revolute(rng.normal(size=3)), ru])),
        ("d", jd.Composite([jd.Ball(), jd.Prismatic(rng.normal(size=3)), ru])),
    ]:
        X_PF = jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3))
        b.add_body(name, random_inertia(rng), parent, joint, X_PF=X_PF)
        parent = name
    model = b.build()
    assert jd._derivatives.dense_tangent_supported(model)
    unit = _random_q(model, jax.random.PRNGKey(0))
    # every coordinate scaled: the unit vectors off their spheres (the rest moves too)
    drifted = unit * jnp.linspace(0.8, 1.3, model.nq)
    v, u = jnp.linspace(-1.0, 1.0, model.nv), jnp.linspace(0.5, -0.5, model.nv)

    def jac():  # in q (the ambient-to-tangent split); a fresh function: one traced keeps its trace
        return jax.jacfwd(lambda *a: jd.aba(model, *a))

    # each traced once, called at both points, evaluated by NumPy (`numpy_jit`)
    with_rules, without = numpy_jit(jac()), numpy_jit(jac())
    for q in (unit, drifted):
        got = with_rules(q, v, u)
        with jd.differentiation_rules(False):
            ref = without(q, v, u)
        _check_leaves(got, ref, 1e-10, "composites jacfwd")


# --------------------------------------------------------------------------------------------
# 2. rules against finite differences


def _directions(model, rng: np.random.Generator):
    """Random directions, one per row: `q` (a tangent δ, used as `integrate(q, e δ)`), `v`,
    `u`, `f_ext`, then one per non-empty model leaf (random, zero on non-finite entries,
    symmetric for rotational inertias). Returns `(labels, (dmodel, dq, dv, du, df))`, each
    leaf stacked over rows."""
    leaves_p, treedef = jax.tree_util.tree_flatten_with_path(model)
    model_rows = [i for i, (_, x) in enumerate(leaves_p) if np.size(x)]
    labels = ["q", "v", "u", "f_ext"] + [jax.tree_util.keystr(leaves_p[i][0]) for i in model_rows]
    K = len(labels)
    dleaves = [np.zeros((K,) + np.shape(x)) for _, x in leaves_p]
    for row, i in enumerate(model_rows, start=4):
        path, x = leaves_p[i]
        d = rng.normal(size=np.shape(x))
        if jax.tree_util.keystr(path).endswith(".inertias.inertia"):
            d = d + np.swapaxes(d, -1, -2)
        dleaves[i][row] = np.where(np.isfinite(np.asarray(x)), d, 0.0)
    dmodel = jax.tree.unflatten(treedef, [jnp.asarray(d) for d in dleaves])
    nv, nb = model.nv, model.nbodies
    dq, dv, du = (np.zeros((K, nv)) for _ in range(3))
    df = np.zeros((K, nb, 6))
    dq[0], dv[1], du[2], df[3] = (rng.normal(size=s) for s in ((nv,), (nv,), (nv,), (nb, 6)))
    return labels, (dmodel, *(jnp.asarray(x) for x in (dq, dv, du, df)))


def _along(name):
    """`(e, d) ↦ f(model + e dm, integrate(q, e δ), v + e dv, u + e du, f + e df)`."""

    def along(model, q, v, u, f, e, d):
        dm, dq, dv, du, df = d
        m = jax.tree.map(lambda x, t: x + e * t, model, dm)
        return _call(name, m, model.integrate(q, e * dq), v + e * dv, u + e * du, f + e * df)

    return along


def _jvp_program(name):
    """For every row of directions: `jax.jvp` of `_along` at `e = 0`."""

    def program(model, q, v, u, f, directions):
        along = _along(name)

        def one(d):
            return jax.jvp(lambda e: along(model, q, v, u, f, e, d), (0.0,), (1.0,))[1]

        return jax.vmap(one)(directions)

    return program


def _fd_program(name, eps: float):
    """For every row of directions: the central difference of `_along` at `e = ±eps`."""

    def program(model, q, v, u, f, directions):
        along = _along(name)

        def one(d):
            return (along(model, q, v, u, f, eps, d) - along(model, q, v, u, f, -eps, d)) / (
                2 * eps
            )

        return jax.vmap(one)(directions)

    return program


@pytest.mark.parametrize("name", WITH_RULES)
def test_jvp_matches_finite_differences(name):
    """`jax.jvp` (rules on) along random directions of every input against central finite
    differences (float64, step 1e-6) of the same composed function, relative 1e-5 per row
    (rows that hardly move the output: relative to a tenth of the largest row)."""
    model, (q, v, u, f), _ = _setup("tree")
    labels, directions = _directions(model, np.random.default_rng(3))
    args = (model, q, v, u, f, directions)
    jvp = np.asarray(numpy_eval(_jvp_program(name), *args))  # the rules' tangent, by NumPy
    fd = np.asarray(numpy_eval(_fd_program(name, 1e-6), *args))  # no derivative: NumPy
    assert np.all(np.isfinite(jvp)), [
        lab for lab, x in zip(labels, jvp, strict=True) if not np.isfinite(x).all()
    ]
    bad = []
    # floor: a tenth of the largest change (rounding in f, amplified by the smooth friction
    # and stop laws, leaves ~1e-7 in differences along directions that change nothing)
    floor = 0.1 * float(np.abs(jvp).max())
    for label, a, b in zip(labels, jvp, fd, strict=True):
        scale = max(float(np.abs(a).max()), floor)
        err = float(np.abs(a - b).max())
        if err > 1e-5 * scale:
            bad.append(
                f"{label}: jvp {a[:3]}... fd {b[:3]}... max |diff| {err:.3g}, scale {scale:.3g}"
            )
    assert not bad, f"{name}: {len(bad)} of {len(labels)} directions differ:\n" + "\n".join(bad)
    # the directions are not vacuous: the state, every joint axis, pose and inertia leaf move
    # the output (frames `X_BF` and joint limits' bounds do not), and with passive forces
    # (forward dynamics) some joint's damping, friction and stop parameters do
    moves = dict(zip(labels, np.abs(jvp).max(1) > 1e-8, strict=True))
    still = [k for k, m in moves.items() if not m and ".params." not in k and ".X_BF" not in k]
    assert not still, f"{name}: no change along {still}"
    if name == "forward_dynamics":
        for leaf in ("damping", "friction", "stop_stiffness", "stop_damping"):
            assert any(m for k, m in moves.items() if k.endswith(f".params.{leaf}")), leaf


# --------------------------------------------------------------------------------------------
# 3. no NaN at the neutral configuration and at joint limits


def _special_states(model):
    """`(label, model, q, v, u, f)`: neutral (identity quaternions) with zero v, u, f_ext;
    every finite upper limit exactly; past the upper and the lower limits by 0.05 (stops
    engaged)."""
    nv, nb = model.nv, model.nbodies
    z, zf = jnp.zeros(nv), jnp.zeros((nb, 6))
    q0 = model.neutral()
    lo, hi = model.position_lower(), model.position_upper()
    at_upper = jnp.where(jnp.isfinite(hi), hi, q0)
    past_upper = jnp.where(jnp.isfinite(hi), hi + 0.05, q0)
    past_lower = jnp.where(jnp.isfinite(lo), lo - 0.05, q0)
    return [
        ("neutral", q0, z, z, zf),
        ("at upper limits", at_upper, z, z, zf),
        ("past upper limits", past_upper, z, z, zf),
        ("past lower limits", past_lower, 0.3 * jnp.ones(nv), z, zf),
    ]


#: The rule's functions on the tree and panda; `rnea` and `crba` on the tree too (their
#: programs are compiled for `test_rules_match_autodiff` already).
NAN_CASES = [(m, n) for m in ("tree", "panda") for n in WITH_RULES] + [
    ("tree", "rnea"),
    ("tree", "crba"),
]


@pytest.mark.parametrize(("model_name", "name"), NAN_CASES)
def test_no_nan_at_neutral_and_limits(model_name, name):
    """Every gradient (every model leaf included) and `jacfwd` finite, rules on."""
    model, _, w = _setup(model_name)
    run = _rules_on(model_name, name)
    stops = []
    for label, q, v, u, f in _special_states(model):
        assert np.all(np.isfinite(np.asarray(q)))
        grads, jac = run(model, q, v, u, f, w[name])
        _assert_finite(grads, f"{model_name} {name} grad, {label}")
        _assert_finite(jac, f"{model_name} {name} jacfwd, {label}")
        stops.append(np.asarray(jd.joint_forces(model, q, jnp.zeros(model.nv))))
    # neutral and at the limit: no stop force (zero velocity); past a limit: stops push back
    if model_name == "tree":
        assert np.abs(stops[1]).max() == 0.0
        assert np.abs(stops[2]).max() > 1.0 and np.abs(stops[3]).max() > 1.0


# --------------------------------------------------------------------------------------------
# 4. second derivatives


def test_hessian_matches_finite_differences_and_autodiff():
    """`jax.hessian` through `aba` in `(q, v, tau)` (ambient q) with the rules on equals
    central differences of `jax.grad` (1e-6) and the rules-off hessian (1e-9). Ambient `q`
    moves quaternions off the unit sphere: the second order needs the pose rule exact there."""
    rng = np.random.default_rng(1)
    b = jd.ModelBuilder()
    parent = "world"
    for i, joint in enumerate(
        [
            jd.Free(),
            jd.Ball(),
            jd.Universal([1.0, 0, 0], [0, 1.0, 0]),
            jd.RevoluteUnbounded(rng.normal(size=3)),
        ]
    ):
        b.add_body(
            f"b{i}",
            random_inertia(rng),
            parent,
            joint,
            X_PF=jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3)),
        )
        parent = f"b{i}"
    model = b.build()  # two quaternions, a [cos, sin] pair, a q-dependent hinge
    model, (q, v, u, f) = _build(model, seed=4)
    nq, nv = model.nq, model.nv
    w = jnp.asarray(np.random.default_rng(5).normal(size=nv))
    x0 = jnp.concatenate([q, v, u])

    def make_loss():
        def loss(x):
            out = jd.aba(model, x[:nq], x[nq : nq + nv], x[nq + nv :], f)
            return jnp.sum(jnp.sin(out) * w)

        return loss

    eps = 1e-5
    E = eps * jnp.eye(x0.size)

    def on(x):
        return jax.hessian(make_loss())(x)

    def fd(x):  # the rules' gradient, evaluated by NumPy (`numpy_eval`): no compile
        g = jax.vmap(jax.grad(make_loss()))(jnp.concatenate([x + E, x - E]))
        return (g[: x.size] - g[x.size :]).T / (2 * eps)

    def off(x):  # forward over forward: the same Hessian, faster to compile op by op
        return jax.jacfwd(jax.jacfwd(make_loss()))(x)

    H = numpy_eval(on, x0)
    H_fd = numpy_eval(fd, x0)
    H_off = _reference_eval(off, (x0,))
    scale = float(np.abs(H_off).max())
    np.testing.assert_allclose(H, H_off, rtol=0, atol=1e-9 * scale, err_msg="rules off")
    np.testing.assert_allclose(H, H_fd, rtol=0, atol=1e-6 * scale, err_msg="finite differences")
    np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-10 * scale, err_msg="symmetry")
