"""Every joint method under `jax.jit`, `jax.vmap` and `jax.grad`, for every joint class.

`_methods` calls each method once. One compiled program per joint, `_evaluate` =
`jit(vmap(value_and_grad(loss)))`, returns every method's output and the gradient of a loss
touching all of them, w.r.t. the state and the joint's parameters (`eqx.filter_value_and_grad`).
The tests compare its outputs with the methods evaluated one state at a time by NumPy from
their jaxpr (`numpy_eval`: un-jitted, un-vmapped, no XLA), and its gradients with
central finite differences of its own loss in float64, at random states and at the neutral
configuration with zero velocity (identity quaternion, zero rotation: where a careless `sqrt`,
`arctan2`, `norm` or SVD gives NaN gradients).
"""

import functools
import math
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import JOINT_NAMES, assert_tree_allclose, make_joint, np_state, tree_allclose
from numpy_eval import numpy_eval

import jointdyn as jd

parametrize_joints = pytest.mark.parametrize("name", JOINT_NAMES)

INPUTS = ("q", "q1", "v", "vdot", "F")  # the order of `np_state`
NBATCH = 3  # every call to `_evaluate` has this batch size: one compilation per joint
FD_STEP = 1e-6


def _methods(joint, key, q, q1, v, vdot, F):
    """Each method of the joint once (all but the first two are differentiable in the state)."""
    X = joint.X_FM(q)
    return {
        "neutral": joint.neutral(),
        "random_configuration": joint.random_configuration(key),
        "X_FM": X.as_matrix(),
        "H_FM": joint.H_FM(q),
        "V_FM": joint.V_FM(q, v),
        "A_FM": joint.A_FM(q, v, vdot),
        "qdot_from_v": joint.qdot_from_v(q, v),
        "v_from_qdot": joint.v_from_qdot(q, q1),  # q1 as an arbitrary nq-vector
        "project_force": joint.project_force(q, F),
        "integrate": joint.integrate(q, v),
        "difference": joint.difference(q, q1),
        "interpolate": joint.interpolate(q, q1, 0.3),
        "normalize": joint.normalize(1.1 * q1),
        "q_from_X_FM": joint.X_FM(joint.q_from_X_FM(X)).as_matrix(),
        "passive_force": joint.passive_force(q, v),
    }


def _loss(diff, key, weights):
    """`Σ_methods Σ W ⊙ output` (fixed random weights), and the outputs; `diff = (joint, state)`."""
    joint, state = diff
    out = _methods(joint, key, *state)
    return sum(jnp.sum(w * out[k]) for k, w in weights.items()), out


# ((loss, outputs), (d loss/d joint, d loss/d state)) for a batch of states and one joint.
_evaluate = jax.jit(
    jax.vmap(eqx.filter_value_and_grad(_loss, has_aux=True), in_axes=((None, 0), 0, None))
)


@functools.cache
def _case(name):
    """The joint (with damping and friction, so that passive_force depends on parameters), a
    batch of states, the methods at the first state evaluated by NumPy (`numpy_eval`), and the
    loss weights.

    Everything outside the library calls is NumPy: eager JAX glue (slicing, stacking) would
    compile one small program per shape."""
    joint = make_joint(name)
    rng = np.random.default_rng(1)
    damping = rng.uniform(0.1, 1.0, joint.nv)
    friction = rng.uniform(0.1, 1.0, joint.nv)
    joint = _set_passive(joint, damping, friction)
    keys = np.asarray(jr.split(jr.PRNGKey(0), NBATCH))
    states = [np_state(joint, rng) for _ in range(NBATCH)]
    reference = numpy_eval(_methods, joint, keys[0], *states[0])
    weights = {
        k: rng.normal(size=np.shape(x))
        for k, x in reference.items()
        if k not in ("neutral", "random_configuration")
    }
    return joint, keys, states, reference, weights


def _set_passive(joint, damping, friction):
    """The joint with the given damping and friction (split among a Composite's joints)."""
    if isinstance(joint, jd.Composite):
        sizes = np.cumsum([j.nv for j in joint.joints])[:-1]
        parts = zip(joint.joints, np.split(damping, sizes), np.split(friction, sizes), strict=True)
        return jd.Composite([_set_passive(j, d, f) for j, d, f in parts])
    joint = eqx.tree_at(lambda j: j.params.damping, joint, jnp.asarray(damping))
    return eqx.tree_at(lambda j: j.params.friction, joint, jnp.asarray(friction))


def _numpy(tree):
    return jax.tree.map(np.asarray, tree)


def _evaluate_batch(joint, keys, states, weights):
    """`_evaluate` on a list of `NBATCH` states, as NumPy."""
    batch = tuple(np.stack(xs) for xs in zip(*states, strict=True))
    return _numpy(_evaluate((joint, batch), keys, weights))


def _params_flat(joint) -> np.ndarray:
    """The joint's inexact array leaves, raveled into one vector."""
    leaves = jax.tree.leaves(eqx.filter(joint, eqx.is_inexact_array))
    return np.concatenate([np.ravel(x) for x in leaves])


def _params_moved(joint, d: np.ndarray):
    """The joint with its inexact array leaves moved by `d` (laid out as `_params_flat`)."""
    params, static = eqx.partition(joint, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    sizes = np.cumsum([np.size(x) for x in leaves])[:-1]
    moved = [
        np.asarray(x) + dx.reshape(np.shape(x))
        for x, dx in zip(leaves, np.split(d, sizes), strict=True)
    ]
    return eqx.combine(jax.tree.unflatten(treedef, moved), static)


# --------------------------------------------------------------------------------------------
# jit and vmap


@parametrize_joints
def test_jit_vmap(name):
    """`jit(vmap(method))`: its first batch element equals the method evaluated by NumPy, and
    permuting the batch permutes the results (no cross-talk between batch elements)."""
    joint, keys, states, reference, weights = _case(name)
    (_, batched), _ = _evaluate_batch(joint, keys, states, weights)
    first = {k: x[0] for k, x in batched.items()}
    assert_tree_allclose(first, reference, rtol=1e-10, atol=1e-10, what="jit(vmap) vs NumPy")
    perm = [2, 0, 1]
    (_, permuted), _ = _evaluate_batch(joint, keys[perm], [states[i] for i in perm], weights)
    expected = {k: x[perm] for k, x in batched.items()}
    assert_tree_allclose(permuted, expected, rtol=1e-12, atol=1e-12, what="permuted batch")
    if joint.nq:  # the states differ, so the check above means something
        assert not tree_allclose(batched["integrate"][0], batched["integrate"][1])


# --------------------------------------------------------------------------------------------
# grad


def _check_gradients(joint, keys, state, weights, rng):
    """The gradient of the loss w.r.t. the state and the joint's parameters is finite and
    matches central differences along random directions."""
    flat = _params_flat(joint)
    finite = np.isfinite(flat)  # infinite limits stay infinite under a finite step
    for _ in range(2):
        d = [rng.normal(size=x.shape) for x in state]
        moved = [
            tuple(x + s * FD_STEP * dx for x, dx in zip(state, d, strict=True)) for s in (1, -1)
        ]
        (loss, _), (g_joint, g_state) = _evaluate_batch(joint, keys, [state, *moved], weights)
        # Exactly at `state` (batch element 0): finite gradients ...
        for name, g in zip(INPUTS, g_state, strict=True):
            assert np.all(np.isfinite(g[0])), f"non-finite gradient w.r.t. {name}: {g[0]}"
        g_joint = jax.tree.map(lambda g: g[0], g_joint)
        g_flat = _params_flat(g_joint)
        assert g_flat.shape == flat.shape and np.all(np.isfinite(g_flat))
        assert np.all(g_flat[~finite] == 0)
        # ... equal to central differences (elements 1 and 2) along d ...
        ad = sum(np.vdot(g[0], dx) for g, dx in zip(g_state, d, strict=True))
        fd = (loss[1] - loss[2]) / (2 * FD_STEP)
        assert_tree_allclose(ad, fd, rtol=1e-6, atol=1e-6, what="state: AD vs FD")
        # ... and along a direction in parameter space.
        dp = np.where(finite, rng.normal(size=flat.shape), 0.0)
        loss_pm = [
            _evaluate_batch(_params_moved(joint, s * FD_STEP * dp), keys, [state] * 3, weights)
            for s in (1, -1)
        ]
        fd = (loss_pm[0][0][0][0] - loss_pm[1][0][0][0]) / (2 * FD_STEP)
        assert_tree_allclose(g_flat @ dp, fd, rtol=1e-6, atol=1e-6, what="params: AD vs FD")
    return g_joint


@parametrize_joints
def test_grad_matches_finite_differences(name):
    joint, keys, states, _, weights = _case(name)
    g_joint = _check_gradients(joint, keys, states[0], weights, np.random.default_rng(2))
    # The geometric parameters (axis, axes, pitch) of the joints that have them matter.
    for leaf in _geometry(g_joint):
        assert np.any(leaf != 0)


@parametrize_joints
def test_grad_at_neutral(name):
    """At q = q1 = neutral (identity quaternion, zero angles) and v = vdot = 0."""
    joint, keys, states, _, weights = _case(name)
    # Coulomb friction jumps at v = 0: leave it out here (damping stays).
    joint = _set_passive(joint, np.asarray(joint.params.damping), np.zeros(joint.nv))
    q0, zero, F = np.asarray(joint.neutral()), np.zeros(joint.nv), states[0][4]
    _check_gradients(joint, keys, (q0, q0, zero, zero, F), weights, np.random.default_rng(3))


def _geometry(joint):
    """The geometric parameters of a joint (axis, axes, pitch), as a list of arrays."""
    if isinstance(joint, jd.Composite):
        return [x for j in joint.joints for x in _geometry(j)]
    names = ("axis", "axis1", "axis2", "axes", "pitch")
    return [getattr(joint, k) for k in names if hasattr(joint, k)]


# Joints whose hinge matrix turns with the angles (or whose pose multiplies several rotations),
# and the number of angles each takes a sine and cosine of.
_TRIG_JOINTS = {"universal": 2, "gimbal": 3, "space_xyz": 3, "composite_ru": 3}


def _trig_evaluations(hlo: str) -> int:
    """Sines and cosines a compiled XLA program evaluates per call: every `sine`/`cosine` in a
    fused computation runs once per element the fusion writes (a loop fusion computes each
    output element from scratch), outside fusions once per element of its own shape."""

    def elements(shape: str) -> int:  # "12,3,32" -> 1152
        return math.prod(int(d) for d in shape.split(",") if d)

    total = 0
    for comp in re.split(r"\n(?=\S.*\{\n)", hlo):
        head = comp.split("\n", 1)[0]
        fused = "fused_computation" in head and "->" in head
        writes = sum(map(elements, re.findall(r"f64\[([0-9,]*)\]", head.split("->")[-1])))
        for shape in re.findall(r"= f64\[([0-9,]*)\]\S* (?:sine|cosine)\(", comp):
            total += writes if fused else elements(shape)
    return total


def test_angles_take_one_sine_and_cosine_per_kernel():
    """Batched RNEA on a chain of the joints whose hinge matrix (or pose) is built from several
    rotations evaluates at most 20 sines and cosines per angle and sample (11 today; 9 of them
    in a materialised pose's kernel, one per rotation entry): the angles' `cos`/`sin`
    (`_spatial.cos_sin`) and a `Composite`'s part poses are materialised. Before, XLA fused
    them into every consumer and re-evaluated them per element read: 81 per angle on this
    chain, a third of a `Gimbal` chain's batched RNEA time (benchmarks/NOTES.md, thirtieth
    session)."""
    b = jd.ModelBuilder()
    parent = "world"
    for name in _TRIG_JOINTS:
        b.add_body(
            name, jd.SpatialInertia(1.0, [0.1, 0.0, 0.2], 0.1 * np.eye(3)), parent, make_joint(name)
        )
        parent = name
    model = b.build()
    batch, chunk = 16, 8
    q = jnp.tile(model.neutral(), (batch, 1))  # the program's structure, not its values
    v = jnp.zeros((batch, model.nv))
    fn = jd.batched(jd.rnea, (None, 0, 0, 0), chunk_size=chunk, shard=False)
    hlo = jd.jit(fn).lower(model, q, v, v).compile().as_text()
    angles = sum(_TRIG_JOINTS.values())
    per_angle = _trig_evaluations(hlo) / (angles * chunk)
    assert 2 <= per_angle <= 20, per_angle
