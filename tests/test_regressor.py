"""The regressor and the inertial parameters (issue 24): against Pinocchio's
`computeJointTorqueRegressor` and `Inertia.toDynamicParameters()` on real robots, `Y π = rnea`
on random trees of every joint class, the joint columns (armature, damping, friction), the
log-Cholesky map, and bad input. float64 throughout (conftest).

Values are the traced programs evaluated by NumPy (`numpy_jit`, `numpy_call`, `numpy_eval`):
the arithmetic is what is checked, and a compile per program would take most of the module's
time. Called directly (concrete): `with_inertial_parameters`, `with_joint_parameters` and
`log_cholesky_from_inertial_parameters`, whose checks run on concrete input only,
`is_physical` (an `eigh`, which `numpy_eval` lacks), and the calls of
`test_regressor_follows_input_dtype` and `test_bad_input`."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from numpy_eval import numpy_call, numpy_eval, numpy_jit
from robots import (
    ROBOTS,
    load_jointdyn,
    load_pinocchio,
    q_to_pinocchio,
    v_to_pinocchio_matrix,
    vdot_to_pinocchio,
)
from trees import random_states, random_tree

import jointdyn as jd

RTOL = 1e-9


def close(actual, expected, what, rtol=RTOL):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=rtol, atol=rtol * scale, err_msg=what
    )


@numpy_jit
def _regressors(model, q, v, vdot):
    """Regressors of a few states and the parameters: one program per model, evaluated by
    NumPy."""
    return jax.vmap(jd.regressor, (None, 0, 0, 0))(model, q, v, vdot), jd.inertial_parameters(model)


# --------------------------------------------------------------------------------------------
# against Pinocchio


@pytest.mark.parametrize("name", sorted(set(ROBOTS) - {"allegro"}))  # 6: 2 fixed, 4 floating
def test_regressor_against_pinocchio(name):
    """`jd.regressor` = Pinocchio's regressor (columns matched by joint name, rows mapped by
    `tau = Tᵀ tau_pin`, free-flyer velocities and accelerations converted), and
    `inertial_parameters` = `toDynamicParameters()`, on 2 random states per robot."""
    model, pmodel = load_jointdyn(name), load_pinocchio(name)
    data = pmodel.createData()
    n = 2

    def states(key):
        k = jax.random.split(key, 3)
        q = jax.vmap(model.random_configuration)(jax.random.split(k[0], n))
        return q, jax.random.normal(k[1], (n, model.nv)), jax.random.normal(k[2], (n, model.nv))

    q, v, vdot = numpy_eval(states, jax.random.PRNGKey(3))
    Y, pi = (np.asarray(x) for x in _regressors(model, q, v, vdot))
    assert Y.shape == (n, model.nv, 10 * model.nbodies)
    jid = [pmodel.getJointId(j) for j in model.joint_names]
    assert sorted(jid) == list(range(1, pmodel.njoints)), "every body matched to one joint"
    cols = np.concatenate([np.arange(10 * (j - 1), 10 * j) for j in jid])
    for s in range(n):
        T = v_to_pinocchio_matrix(model, pmodel, q[s])
        args = (
            q_to_pinocchio(model, pmodel, q[s]),
            T @ np.asarray(v[s]),
            vdot_to_pinocchio(model, pmodel, q[s], v[s], vdot[s]),
        )
        Yp = pin.computeJointTorqueRegressor(pmodel, data, *args)
        close(Y[s], T.T @ np.asarray(Yp)[:, cols], f"{name} regressor, state {s}")
        tau = T.T @ pin.rnea(pmodel, data, *args)
        close(Y[s] @ pi.ravel(), tau, f"{name} Y pi = Pinocchio's rnea, state {s}")
    ref = np.stack([pmodel.inertias[j].toDynamicParameters() for j in jid])
    close(pi, ref, f"{name} inertial parameters")


# --------------------------------------------------------------------------------------------
# identities on random trees of every joint class


def _with_joint_terms(model, seed):
    """`model` with random armature, damping and Coulomb friction on every DOF."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 1.0, 3 * model.nv)
    return jd.with_joint_parameters(model, x), x


@numpy_jit
def _identity_terms(model, q, v, vdot):
    """Both regressors and `rnea − joint_forces`: one program, evaluated by NumPy."""

    def one(q, v, a):
        return (
            jd.regressor(model, q, v, a),
            jd.joint_regressor(model, q, v, a),
            jd.rnea(model, q, v, a) - jd.joint_forces(model, q, v),
        )

    return *jax.vmap(one)(q, v, vdot), jd.inertial_parameters(model), jd.joint_parameters(model)


def test_identity_on_random_tree():
    """`[Y, Y_J] [π; armature; damping; friction] = rnea − joint_forces` on a floating tree with
    every joint class (Weld and Composite included) and random armature (which `rnea` includes),
    damping and friction."""
    model = random_tree(seed=11, nbodies=14, floating=True)
    model, x = _with_joint_terms(model, 5)
    nv = model.nv
    q, v, vdot = numpy_call(random_states, model, 3, seed=2)
    Y, YJ, tau, pi, xj = (np.asarray(a) for a in _identity_terms(model, q, v, vdot))
    close(xj, x, "joint_parameters round trip", rtol=1e-15)
    assert Y.shape == (3, nv, 10 * model.nbodies) and YJ.shape == (3, nv, 3 * nv)
    close(Y @ pi.ravel() + YJ @ xj, tau, "full regressor identity")
    assert np.abs(YJ[..., :nv] @ xj[:nv]).max() > 0.1, "the armature columns matter here"


def test_regressor_follows_input_dtype():
    model = jd.load_model("double_pendulum")
    z = jnp.zeros(2, jnp.float32)
    assert jd.regressor(model, z, z, z).dtype == jnp.float32
    assert jd.joint_regressor(model, z, z, z).dtype == jnp.float32


# --------------------------------------------------------------------------------------------
# inertial parameters and the log-Cholesky map


def test_with_inertial_parameters_round_trip():
    model = random_tree(seed=4, nbodies=8)
    pi = numpy_call(jd.inertial_parameters, model)
    back = jd.with_inertial_parameters(model, pi)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(model), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-14)
    # flat input, and new values: the model's inertias are what the parameters say
    new = np.asarray(pi) * np.array([2.0] + [1.0] * 9)  # double the masses, keep m c and I
    m2 = jd.with_inertial_parameters(model, new.ravel())
    close(numpy_call(jd.inertial_parameters, m2), new, "new parameters", rtol=1e-14)


def test_log_cholesky_round_trip_and_physical():
    """Physical bodies → θ → the same bodies; any θ (large too) → a physical body."""
    rng = np.random.default_rng(0)
    model = random_tree(seed=7, nbodies=10)
    pi = numpy_call(jd.inertial_parameters, model)
    theta = jd.log_cholesky_from_inertial_parameters(pi)
    back = numpy_call(jd.inertial_parameters_from_log_cholesky, theta)
    close(back, pi, "round trip", rtol=1e-12)
    close(
        jd.log_cholesky_from_inertial_parameters(back),
        theta,
        "inverse round trip",
        rtol=1e-12,
    )
    theta = rng.normal(0.0, 2.0, (200, 10))
    out = numpy_call(jd.inertial_parameters_from_log_cholesky, theta)
    assert np.all(out[:, 0] > 0)
    ev = np.linalg.eigvalsh(numpy_call(jd.pseudo_inertia, out))
    assert np.all(ev > 0), "pseudo-inertia positive definite"
    assert np.all(np.asarray(jd.is_physical(out)))
    # and the model accepts them (the triangle inequality of I_C, checked by the builder's code)
    m = jd.with_inertial_parameters(model, out[: model.nbodies])
    I_C = np.asarray(m.inertias.inertia)
    for k in range(model.nbodies):
        a, b, c = np.linalg.eigvalsh(I_C[k])
        assert a > 0 and a + b >= c * (1 - 1e-12)
    # gradients through the map are finite, also far out
    g = jax.grad(lambda th: jnp.sum(jd.inertial_parameters_from_log_cholesky(th) ** 2))
    assert np.all(np.isfinite(numpy_eval(g, theta)))


def test_pseudo_inertia_of_a_point_mass():
    """`J = m [p; 1][p; 1]ᵀ` for a point mass at p (no rotational inertia about it)."""
    m, p = 2.0, np.array([0.1, -0.2, 0.3])
    I_O = m * (p @ p * np.eye(3) - np.outer(p, p))
    pi = np.concatenate([[m], m * p, I_O[[0, 0, 1, 0, 1, 2], [0, 1, 1, 2, 2, 2]]])
    close(numpy_call(jd.pseudo_inertia, pi), m * np.outer(np.append(p, 1), np.append(p, 1)), "J")


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_input():
    model = random_tree(seed=4, nbodies=5, floating=False)
    pi = numpy_call(jd.inertial_parameters, model)
    names = model.body_names
    with pytest.raises(ValueError, match="shape"):
        jd.with_inertial_parameters(model, pi[:-1])
    bad = pi.copy()
    bad[2, 0] = -1.0
    with pytest.raises(ValueError, match=names[2]):
        jd.with_inertial_parameters(model, bad)
    bad = pi.copy()
    bad[1, 4] = bad[1, 6] + bad[1, 9] + 1.0  # I_xx > I_yy + I_zz: no body
    with pytest.raises(ValueError, match=names[1]):
        jd.with_inertial_parameters(model, bad)
    bad = pi.copy()
    bad[3, 0] = 0.0  # a first moment without mass
    with pytest.raises(ValueError, match=names[3]):
        jd.with_inertial_parameters(model, bad)
    # traced: no check (and no error), the values pass through
    jax.jit(jd.with_inertial_parameters)(model, bad)
    with pytest.raises(ValueError, match="no log-Cholesky"):
        jd.log_cholesky_from_inertial_parameters(bad)
    with pytest.raises(ValueError, match=r"\(\.\.\., 10\)"):
        jd.log_cholesky_from_inertial_parameters(pi[:, :9])
    z = jnp.zeros(model.nv)
    with pytest.raises(ValueError, match="`vdot`"):
        jd.regressor(model, jnp.zeros(model.nq), z, z[:-1])
    with pytest.raises(ValueError, match="`q`"):
        jd.joint_regressor(model, z[:-1], z, z)
    with pytest.raises(ValueError, match="shape"):
        jd.with_joint_parameters(model, np.zeros(model.nv))
    with pytest.raises(ValueError, match="non-negative"):
        jd.with_joint_parameters(model, -np.ones(3 * model.nv))
