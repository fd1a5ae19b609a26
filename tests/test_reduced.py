"""`jd.reduced_model` (joints locked at a reference configuration) against Pinocchio's
`buildReducedModel`, and against the full model with the locked joints held still.

Values are the traced programs evaluated by NumPy (`numpy_call`): the arithmetic is what is
checked, and a compile per program would take most of the module's time. The locked dynamics
(`_locked_forward_dynamics`, its rules-on gradient and Jacobian, `jd.batched`,
`jd.locking_forces`) and the float32 model compile."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_call, numpy_eval, numpy_jit
from robots import (
    load_jointdyn,
    load_pinocchio,
    q_to_pinocchio,
    v_to_pinocchio_matrix,
    vdot_to_pinocchio,
)
from trees import random_tree

import jointdyn as jd

#: Joints to lock: panda's fingers; talos's grippers and its right arm.
LOCKS = {
    "panda": lambda names: [n for n in names if "finger" in n],
    "talos": lambda names: [n for n in names if "gripper" in n or n.startswith("arm_right")],
}


def close(a, b, what, tol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, what
    if a.size == 0:
        return
    scale = max(1.0, float(np.abs(b).max()))
    assert np.abs(a - b).max() <= tol * scale, f"{what}: max |diff| {np.abs(a - b).max():.3g}"


@pytest.mark.parametrize("robot", sorted(LOCKS))
def test_matches_pinocchio_build_reduced_model(robot):
    """Mass matrix, RNEA and ABA of the reduced model equal Pinocchio's reduced model's
    (float64, 1e-9), at a random state of the kept joints."""
    import pinocchio as pin

    model, pmodel = load_jointdyn(robot), load_pinocchio(robot)
    locked = LOCKS[robot](model.joint_names)
    q_ref = numpy_call(model.random_configuration, jax.random.PRNGKey(0))
    reduced = jd.reduced_model(model, locked, q_ref)
    ids = [pmodel.getJointId(n) for n in locked]
    preduced = pin.buildReducedModel(pmodel, ids, q_to_pinocchio(model, pmodel, q_ref))
    assert reduced.nv == preduced.nv == model.nv - len(locked)
    assert set(reduced.joint_names) == set(preduced.names[1:])

    iq, iv = jd.reduced_indices(model, locked)
    key = jax.random.split(jax.random.PRNGKey(1), 3)
    q = numpy_call(model.random_configuration, key[0])[iq]
    v, a = (jax.random.normal(k, (reduced.nv,)) for k in key[1:])
    data = preduced.createData()
    q_pin = q_to_pinocchio(reduced, preduced, q)
    T = v_to_pinocchio_matrix(reduced, preduced, q)
    v_pin, a_pin = T @ np.asarray(v), vdot_to_pinocchio(reduced, preduced, q, v, a)

    close(numpy_call(jd.crba, reduced, q), T.T @ pin.crba(preduced, data, q_pin) @ T, "M")
    tau_pin = pin.rnea(preduced, data, q_pin, v_pin, a_pin)
    close(numpy_call(jd.rnea, reduced, q, v, a), T.T @ tau_pin, "rnea")
    vdot = numpy_call(jd.aba, reduced, q, v, T.T @ tau_pin)
    close(
        vdot_to_pinocchio(reduced, preduced, q, v, vdot),
        pin.aba(preduced, data, q_pin, v_pin, tau_pin),
        "aba",
    )
    # frames: every frame of the full model is still there, at the same world pose
    q_full = jd.expand_configuration(model, locked, q, q_ref)
    kin_full = numpy_call(jd.forward_kinematics, model, q_full)
    kin = numpy_call(jd.forward_kinematics, reduced, q)
    for name in model.topology.frame_names:
        i, k = model.frame_index(name), reduced.frame_index(name)
        close(kin.X_WF.p[k], kin_full.X_WF.p[i], f"frame {name} position")
        close(kin.X_WF.R[k], kin_full.X_WF.R[i], f"frame {name} rotation")


def test_equals_full_model_with_locked_joints_still():
    """On a random tree of every joint class with locked joints in the middle (kept bodies
    below them): the reduced model's `M` is the kept block of the full `M` at
    `expand_configuration`, and its RNEA is the full RNEA with the locked joints at rest;
    the total mass is kept (nothing merged into the world); `reduced_indices` and the expand
    helpers are consistent."""
    model = random_tree(3, nbodies=14)
    locked = [model.joint_names[i] for i in (2, 5, 8, 11)]
    q_ref = numpy_call(model.random_configuration, jax.random.PRNGKey(2))
    reduced = jd.reduced_model(model, locked, q_ref)
    iq, iv = jd.reduced_indices(model, locked)
    assert reduced.nq == len(iq) and reduced.nv == len(iv)
    assert float(reduced.total_mass()) == pytest.approx(float(model.total_mass()), rel=1e-12)

    key = jax.random.split(jax.random.PRNGKey(4), 3)
    q = numpy_call(model.random_configuration, key[0])[iq]
    v, a = (jax.random.normal(k, (reduced.nv,)) for k in key[1:])
    q_full = jd.expand_configuration(model, locked, q, q_ref)
    v_full, a_full = (jd.expand_velocity(model, locked, x) for x in (v, a))
    np.testing.assert_array_equal(q_full[iq], q)
    np.testing.assert_array_equal(v_full[iv], v)
    assert np.all(np.delete(np.asarray(v_full), iv) == 0)
    M_full = numpy_call(jd.crba, model, q_full)
    close(numpy_call(jd.crba, reduced, q), M_full[np.ix_(iv, iv)], "M")
    tau = numpy_call(jd.rnea, reduced, q, v, a)
    close(tau, numpy_call(jd.rnea, model, q_full, v_full, a_full)[iv], "rnea")
    close(numpy_call(jd.aba, reduced, q, v, tau), a, "aba(rnea)")


def test_float32_model_and_world_weld():
    """A locked root welds its body to the world (its mass can no longer move and is dropped);
    a float32 model stays float32."""
    model = jd.astype(random_tree(5, nbodies=6, floating=False), jnp.float32)
    q_ref = model.neutral()
    reduced = jd.reduced_model(model, [model.joint_names[0]], q_ref)
    assert reduced.X_PF.p.dtype == jnp.float32 and reduced.nbodies == 5
    iq, _ = jd.reduced_indices(model, [0])  # body indices work too
    q = q_ref[iq]
    kin = jd.forward_kinematics(reduced, q)
    kin_full = jd.forward_kinematics(model, q_ref)
    for name in model.topology.frame_names:
        close(
            kin.X_WF.p[reduced.frame_index(name)],
            kin_full.X_WF.p[model.frame_index(name)],
            name,
            tol=1e-5,
        )


def test_errors():
    model = random_tree(0, nbodies=4)
    q = model.neutral()
    with pytest.raises(ValueError, match="unknown joint"):
        jd.reduced_model(model, ["nope"], q)
    with pytest.raises(ValueError, match="twice"):
        jd.reduced_model(model, [1, 1], q)
    with pytest.raises(ValueError, match="sequence"):
        jd.reduced_model(model, model.joint_names[1], q)
    with pytest.raises(ValueError, match="every joint"):
        jd.reduced_model(model, list(model.joint_names), q)
    with pytest.raises(ValueError, match="q_reference"):
        jd.reduced_model(model, [1], q[:-1])
    with pytest.raises(ValueError, match="q_reference"):
        jd.reduced_model(model, [1], q.at[0].set(jnp.nan))


# --------------------------------------------------------------------------------------------
# locking in simulation: forward_dynamics(..., locked=mask)


#: Traces of `_locked_forward_dynamics`, to check that a new mask does not retrace it.
_TRACES = []


@jax.jit
def _locked_forward_dynamics(model, q, v, tau, locked):
    """`forward_dynamics` with the mask `locked`, jitted: one program for the tests below."""
    _TRACES.append(1)
    return jd.forward_dynamics(model, q, v, tau, None, locked)


def _locking_case(nbodies=9, lock=(2, 5, 7)):
    model = random_tree(3, nbodies=nbodies)  # a free root, then other joint classes
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    q = model.random_configuration(k[0])
    v, tau = (jax.random.normal(kk, (model.nv,)) for kk in k[1:])
    locked = np.zeros(model.nbodies, bool)
    locked[list(lock)] = True
    return model, q, v, tau, jnp.asarray(locked)


def test_locked_forward_dynamics_is_the_reduced_models():
    """With `locked`, the free joints' `v̇` equals `forward_dynamics` of the reduced model
    welded at `q`, the locked ones' is exactly 0 (whatever their `v`), and `locking_forces`
    closes `rnea(q, v₀, v̇) = tau + joint_forces + locking forces` on every DOF."""
    model, q, v, tau, locked = _locking_case()
    names = [model.joint_names[i] for i in np.flatnonzero(locked)]
    iq, iv = jd.reduced_indices(model, names)
    vdot = _locked_forward_dynamics(model, q, v, tau, locked)
    reduced = jd.reduced_model(model, names, q)
    free = numpy_call(jd.forward_dynamics, reduced, q[iq], v[iv], tau[iv])
    close(vdot[iv], free, "free joints")
    assert np.all(np.delete(np.asarray(vdot), iv) == 0.0)
    held = jd.locking_forces(model, q, v, tau, locked)  # compiled: only here
    assert np.all(np.asarray(held)[iv] == 0.0) and np.abs(np.delete(np.asarray(held), iv)).max() > 0
    v0 = jd.expand_velocity(model, names, v[iv])
    balance = tau + held + numpy_call(jd.joint_forces, model, q, v0)
    close(numpy_call(jd.rnea, model, q, v0, vdot), balance, "balance")
    # no lock: the plain dynamics
    close(
        _locked_forward_dynamics(model, q, v, tau, jnp.zeros(model.nbodies, bool)),
        numpy_call(jd.forward_dynamics, model, q, v, tau),
        "nothing locked",
    )


def test_lock_and_unlock_without_retracing():
    """The mask is an array: a jitted step traces once for any mask."""
    model, q, v, tau, locked = _locking_case()
    a = _locked_forward_dynamics(model, q, v, tau, locked)
    traced = len(_TRACES)  # 1, or more if a test before this one traced it for other shapes
    assert traced >= 1
    b = _locked_forward_dynamics(model, q, v, tau, ~locked)
    assert len(_TRACES) == traced  # the other mask did not retrace
    dofs = np.asarray(jd.locked_dofs(model, locked))
    np.testing.assert_array_equal(dofs, np.repeat(np.asarray(locked), model.topology.nvs))
    assert np.all(np.asarray(a)[dofs] == 0) and np.all(np.asarray(b)[~dofs] == 0)
    assert np.any(np.asarray(a)[~dofs] != 0) and np.any(np.asarray(b)[dofs] != 0)


def test_locked_gradients_and_batching():
    """Gradients and `jax.jacfwd` (many tangents: the rule's analytic Jacobians) in
    `(q, v, tau)` through the locked dynamics with the rules on equal op-by-op autodiff; in
    `tau` of the free joints the gradients equal the reduced model's; `jd.batched` equals
    `vmap`."""
    model, q, v, tau, locked = _locking_case(nbodies=5, lock=(2, 4))  # small: compiles
    names = [model.joint_names[i] for i in np.flatnonzero(locked)]
    iq, iv = jd.reduced_indices(model, names)
    w = jnp.asarray(np.random.default_rng(0).normal(size=model.nv))

    def locked_dynamics(model, q, v, tau):
        return jd.forward_dynamics(model, q, v, tau, None, locked)

    @jax.jit
    def grad_and_jacobian(model, q, v, tau):
        def loss(model, q, v, tau):
            return jnp.sum(jnp.sin(locked_dynamics(model, q, v, tau)) * w)

        grad = jax.grad(loss, argnums=(1, 2, 3))(model, q, v, tau)
        return grad, jax.jacfwd(locked_dynamics, argnums=(1, 2, 3))(model, q, v, tau)

    @numpy_jit
    def value_and_jacobian(model, q, v, tau):
        """The rules-off reference: forward mode only (the gradient is the loss's cotangent
        times the Jacobian), evaluated by NumPy (`numpy_eval`), not compiled."""
        out = locked_dynamics(model, q, v, tau)
        return out, jax.jacfwd(locked_dynamics, argnums=(1, 2, 3))(model, q, v, tau)

    g_on = grad_and_jacobian(model, q, v, tau)
    with jd.differentiation_rules(False):
        out, J_off = value_and_jacobian(model, q, v, tau)
    ct = np.cos(np.asarray(out)) * np.asarray(w)  # d loss / d out
    g_off = (tuple(ct @ np.asarray(J) for J in J_off), J_off)
    for a, b in zip(jax.tree.leaves(g_on), jax.tree.leaves(g_off), strict=True):
        close(a, b, "rules on/off", tol=1e-10)
    reduced = jd.reduced_model(model, names, q)
    g_red = numpy_eval(
        jax.grad(lambda t: jnp.sum(jnp.sin(jd.forward_dynamics(reduced, q[iq], v[iv], t)) * w[iv])),
        tau[iv],
    )
    close(g_on[0][2][iv], g_red, "tau gradient")

    n = 4
    qs = jnp.stack([q] * n)
    vs, taus = (x[None] * jnp.arange(1, n + 1)[:, None] for x in (v, tau))
    axes = (None, 0, 0, 0, None, None)
    ref = numpy_eval(jax.vmap(jd.forward_dynamics, axes), model, qs, vs, taus, None, locked)
    got = jax.jit(jd.batched(jd.forward_dynamics, axes, chunk_size=2))(
        model, qs, vs, taus, None, locked
    )
    close(got, ref, "batched")


def test_lock_mask_errors():
    model, q, v, tau, _ = _locking_case()
    with pytest.raises(ValueError, match="locked"):
        jd.forward_dynamics(model, q, v, tau, None, jnp.zeros(3, bool))
    with pytest.raises(ValueError, match="locked"):
        jd.forward_dynamics(model, q, v, tau, None, jnp.zeros(model.nbodies))
