"""Armature (`JointParams.armature`, rotor inertia per DOF): `crba`, `rnea`, `aba` and the
analytic derivatives against Pinocchio with `model.armature` set (fixed and floating base,
float64, 1e-9), identities on a random tree of every joint class (`rnea(aba(tau)) = tau`,
`crba = ∂rnea/∂v̇`, `T = ½ vᵀ M v`), gradients in the armature against finite differences,
and `Model.with_joint_params`.

Values are the traced programs evaluated by NumPy (`numpy_call`, `numpy_jit`): the arithmetic
is what is checked, and a compile per program would take most of the module's time.
`test_gradient_in_armature_matches_finite_differences` (`aba`, `forward_dynamics` and their
rules in the armature) and `test_with_joint_params_round_trip_and_no_retrace` (`crba`)
compile."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from numpy_eval import central_differences, numpy_call, numpy_eval, numpy_jit
from robots import (
    load_jointdyn,
    load_pinocchio,
    q_to_pinocchio,
    v_to_pinocchio_matrix,
    vdot_to_pinocchio,
)
from trees import random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)


def close(actual, expected, what, tol=1e-9):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=tol, atol=tol * scale, err_msg=what
    )


def rotor_armature(model: jd.Model, seed: int) -> np.ndarray:
    """Random armature on every DOF of a 1-DOF joint (a robot's motors), 0 elsewhere (free)."""
    rng = np.random.default_rng(seed)
    a = np.zeros(model.nv)
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        if joint.nv == 1:
            a[model.v_slice(name)] = rng.uniform(0.05, 2.0)
    return a


@numpy_jit
def _ours(model, q, v, vdot, tau):
    return dict(
        crba=jd.crba(model, q),
        rnea=jd.rnea(model, q, v, vdot),
        aba=jd.aba(model, q, v, tau),
        kinetic=jd.kinetic_energy(model, q, v),
        derivatives=jd.aba_derivatives(model, q, v, tau),
    )


@pytest.mark.parametrize("name", ["panda", "solo12"])
def test_matches_pinocchio_with_armature(name):
    model, pmodel = load_jointdyn(name), load_pinocchio(name)
    arm = rotor_armature(model, 1)
    model = model.with_joint_params(armature=arm)
    np.testing.assert_array_equal(model.armature(), arm)
    k = jax.random.split(jax.random.PRNGKey(3), 4)
    q = numpy_call(model.random_configuration, k[0])
    v, vdot, tau = (jax.random.normal(kk, (model.nv,)) for kk in k[1:])
    T = v_to_pinocchio_matrix(model, pmodel, q)  # v_pin = T v, T orthogonal
    pmodel.armature = T @ arm  # 1-DOF joints only: a permutation of the entries
    data = pmodel.createData()
    q_pin, v_pin = q_to_pinocchio(model, pmodel, q), T @ np.asarray(v)
    ours = _ours(model, q, v, vdot, tau)

    M_pin = pin.crba(pmodel, data, q_pin)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    M = T.T @ M_pin @ T
    close(ours["crba"], M, f"{name} crba")
    assert np.abs(np.diag(np.asarray(ours["crba"])) - np.diag(M)).max() < 1e-9
    assert np.abs(arm).max() > 0.05  # the armature is there and matters
    # accelerations: a_pin = T v̇ + c (c: the free joint's frame rotation, `vdot_to_pinocchio`)
    c = vdot_to_pinocchio(model, pmodel, q, v, np.zeros(model.nv))
    a_pin = T @ np.asarray(vdot) + c
    close(ours["rnea"], T.T @ pin.rnea(pmodel, data, q_pin, v_pin, a_pin), f"{name} rnea")
    a_pin = pin.aba(pmodel, data, q_pin, v_pin, T @ np.asarray(tau))
    close(ours["aba"], T.T @ (a_pin - c), f"{name} aba")
    close(ours["kinetic"], 0.5 * np.asarray(v) @ M @ np.asarray(v), f"{name} kinetic energy")
    if name == "panda":  # fixed base: T is a permutation, derivatives compare directly
        pin.computeABADerivatives(pmodel, data, q_pin, v_pin, T @ np.asarray(tau))
        d = ours["derivatives"]
        Minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
        close(T @ d.vdot, data.ddq, "panda vdot")
        close(T @ d.dvdot_dq @ T.T, data.ddq_dq, "panda d vdot / dq")
        close(T @ d.dvdot_dv @ T.T, data.ddq_dv, "panda d vdot / dv")
        close(T @ d.dvdot_dtau @ T.T, Minv, "panda M⁻¹")


@functools.cache
def tree():
    model = random_tree(5, nbodies=14)
    arm = np.random.default_rng(0).uniform(0.1, 1.0, model.nv)
    return model.with_joint_params(armature=arm)


@numpy_jit
def _identities(model, q, v, tau):
    vdot = jd.aba(model, q, v, tau)
    M = jd.crba(model, q)
    return dict(
        tau=jd.rnea(model, q, v, vdot),
        vdot=vdot,
        M=M,
        T=jd.kinetic_energy(model, q, v),
        vMv=0.5 * v @ M @ v,
    )


def test_identities_on_every_joint_class():
    model = tree()
    k = jax.random.split(jax.random.PRNGKey(1), 3)
    q = numpy_call(model.random_configuration, k[0])
    v, tau = jax.random.normal(k[1], (model.nv,)), jax.random.normal(k[2], (model.nv,))
    out = _identities(model, q, v, tau)
    close(out["tau"], tau, "rnea(aba(tau))")
    with jd.differentiation_rules(False):  # on, jacfwd in v̇ would take crba's own M
        dM = numpy_eval(jax.jacfwd(lambda a: jd.rnea(model, q, v, a)), out["vdot"])  # by NumPy
    close(dM, out["M"], "crba = ∂rnea/∂v̇")
    close(out["T"], out["vMv"], "T = ½ vᵀ M v")
    # armature changes the answer: without it M differs by exactly diag(armature)
    M0 = numpy_call(jd.crba, model.with_joint_params(armature=jnp.zeros(model.nv)), q)
    close(out["M"] - M0, np.diag(model.armature()), "M − M(armature = 0)")


def test_gradient_in_armature_matches_finite_differences():
    """`jax.grad` of a loss of `aba` and of `forward_dynamics` in the armature (the ABA rule's
    model tangent) against central differences, no NaN at zero velocity."""
    model = random_tree(6, nbodies=5)
    model = model.with_joint_params(armature=jnp.linspace(0.1, 1.0, model.nv))
    q = model.random_configuration(jax.random.PRNGKey(2))
    v = jnp.zeros(model.nv)
    tau = jax.random.normal(jax.random.PRNGKey(3), (model.nv,))
    arm = model.armature()

    def loss(a):
        m = model.with_joint_params(armature=a)
        return jnp.sum(jd.aba(m, q, v, tau) ** 2) + jnp.sum(jd.forward_dynamics(m, q, v, tau))

    g = jax.jit(jax.grad(loss))(arm)
    assert np.all(np.isfinite(np.asarray(g)))
    fd = central_differences(loss, np.asarray(arm), np.eye(model.nv)[:6], 1e-6)
    close(g[:6], fd, "d loss / d armature", 1e-6)


def test_armature_argument_and_validation():
    j = jd.Revolute((0, 0, 1), armature=0.3)
    assert float(j.params.armature[0]) == 0.3
    assert jd.Free().params.armature.shape == (6,)
    with pytest.raises(ValueError, match="armature"):
        jd.Revolute((0, 0, 1), armature=-1.0)
    with pytest.raises(ValueError, match="armature"):
        jd.Ball(armature=[1.0, 2.0])
    model = tree()
    with pytest.raises(ValueError, match=r"`armature` must have shape"):
        model.with_joint_params(armature=jnp.zeros(model.nv + 1))
    with pytest.raises(ValueError, match="non-negative"):
        model.with_joint_params(armature=-jnp.ones(model.nv))
    with pytest.raises(ValueError, match="unknown joint parameter 'rotor'"):
        model.with_joint_params(rotor=jnp.zeros(model.nv))


def test_with_joint_params_round_trip_and_no_retrace():
    model = tree()
    d = jnp.arange(model.nv, dtype=float)
    lo = model.position_lower() - 1.0
    m2 = model.with_joint_params(damping=d, position_lower=lo)
    np.testing.assert_array_equal(m2._joint_param("damping"), d)
    np.testing.assert_array_equal(m2.position_lower(), lo)
    assert eqx.tree_equal(jax.tree.structure(m2), jax.tree.structure(model))
    traces = []

    @jax.jit
    def mass(m, q):
        traces.append(1)
        return jd.crba(m, q)

    q = model.neutral()
    mass(model, q)
    mass(model.with_joint_params(armature=2 * model.armature()), q)
    assert len(traces) == 1  # a new armature value does not retrace
