"""State arguments given as integers or lists compute in floating point, as with float arrays.

`jnp.array([0, 0])` is an integer array; before `_dtype.floating_arguments`, most algorithms
failed with it deep inside JAX (a `float0` tangent in the joints' differentiation), and lists
with an `AttributeError`. Each function is compared with its call on float arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jointdyn as jd
from jointdyn import optimal_control as oc

MODEL = jd.load_model("double_pendulum")
CONTACT = jd.GroundContact(MODEL, [MODEL.body_names[-1]], [[0.0, 0.0, 0.0]], 0.0, stiffness=1e3)
Q, V, U = np.array([1, -2]), np.array([0, 3]), np.array([2, 1])  # NumPy integer arrays

CALLS = {  # name: (function, state arguments by position after the model)
    "aba": (jd.aba, (Q, V, U)),
    "rnea": (jd.rnea, (Q, V, U)),
    "forward_dynamics": (jd.forward_dynamics, (Q, V, U)),
    "crba": (jd.crba, (Q,)),
    "bias_forces": (jd.bias_forces, (Q, V)),
    "kinetic_energy": (jd.kinetic_energy, (Q, V)),
    "forward_kinematics": (jd.forward_kinematics, (Q, V, U)),
    "jacobian": (lambda m, q: jd.jacobian(m, q, MODEL.body_names[-1]), (Q,)),
    "aba_derivatives": (jd.aba_derivatives, (Q, V, U)),
    "regressor": (jd.regressor, (Q, V, U)),
    "step": (lambda m, q, v, u: jd.step(m, q, v, u, 0.01, contact=CONTACT), (Q, V, U)),
    "step_derivatives": (lambda m, q, v, u: jd.step_derivatives(m, q, v, u, 0.01), (Q, V, U)),
    "rollout": (lambda m, q, v, u: jd.rollout(m, q, v, u, 0.01), (Q, V, np.stack([U, U]))),
    "contact_forces": (lambda m, q, v: jd.contact_forces(m, CONTACT, q, v), (Q, V)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_integer_and_list_states_compute_in_floating_point(name):
    fn, states = CALLS[name]
    want = fn(MODEL, *(jnp.asarray(x, jnp.float64) for x in states))
    for given in (states, tuple(x.tolist() for x in states)):  # integer arrays, lists
        got = fn(MODEL, *given)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert a.dtype == b.dtype == jnp.float64, name
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_keywords_and_complex_states():
    want = jd.aba(MODEL, jnp.asarray(Q, float), jnp.asarray(V, float), jnp.asarray(U, float))
    np.testing.assert_array_equal(jd.aba(MODEL, q=[1, -2], v=[0, 3], tau=[2, 1]), want)
    with pytest.raises(TypeError, match="`v` must be real"):
        jd.aba(MODEL, Q, V + 1j, U)


def test_shooting_problem_with_integer_initial_state():
    """`ShootingProblem` took its dtype from `q0`, `v0`: integers made `dt = 0.02` a 0 and the
    unbounded torque limits `−inf` an error."""
    problem = oc.ShootingProblem(MODEL, Q, [0, 0], 4, 0.02, lambda q, v, u: u, lambda q, v: q)
    assert problem.q0.dtype == problem.v0.dtype == problem.dt.dtype == jnp.float64
    assert float(problem.dt) == 0.02 and bool(jnp.all(problem.tau_lower == -jnp.inf))


def test_configuration_operations_with_integer_states():
    """`Model.integrate` and friends on a floating base: integer `q` failed in the quaternion
    (`data type int64 not inexact`)."""
    model = jd.load_model("quadruped")
    q = np.asarray(model.neutral()).round().astype(int)  # an integer configuration
    v = np.arange(model.nv) % 3 - 1
    qf, vf = q.astype(float), v.astype(float)
    for name, got, want in [
        ("integrate", model.integrate(q, v), model.integrate(qf, vf)),
        ("difference", model.difference(q, list(q)), model.difference(qf, qf)),
        ("normalize", model.normalize(q), model.normalize(qf)),
        ("interpolate", model.interpolate(q, q, 0.5), model.interpolate(qf, qf, 0.5)),
        (
            "integrate_derivatives",
            model.integrate_derivatives(q, v),
            model.integrate_derivatives(qf, vf),
        ),
    ]:
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert a.dtype == jnp.float64, name
            np.testing.assert_array_equal(a, b, err_msg=name)


QUAD = jd.load_model("quadruped")  # nq = 19, nv = 18: a q for a v (or the reverse) is caught
_q, _v = QUAD.neutral(), jnp.zeros(QUAD.nv)
_short_q, _short_v, _f = jnp.zeros(QUAD.nq - 1), jnp.zeros(QUAD.nv - 1), jnp.zeros((2, 6))
_contact = jd.load_contact("quadruped", QUAD)
_locked = jnp.zeros(QUAD.nbodies, bool)
WRONG_SIZES = {  # name: (call with one argument of the wrong size, the argument's name)
    "forward_kinematics q": (lambda: jd.forward_kinematics(QUAD, _short_q), "q"),
    "forward_kinematics v": (lambda: jd.forward_kinematics(QUAD, _q, _short_v), "v"),
    "forward_kinematics vdot": (lambda: jd.forward_kinematics(QUAD, _q, _v, _q), "vdot"),
    "jacobian": (lambda: jd.jacobian(QUAD, _short_q, "trunk"), "q"),
    "body_jacobians": (lambda: jd.body_jacobians(QUAD, _v), "q"),
    "center_of_mass": (lambda: jd.center_of_mass(QUAD, _short_q), "q"),
    "kinetic_energy": (lambda: jd.kinetic_energy(QUAD, _q, _q), "v"),
    "potential_energy": (lambda: jd.potential_energy(QUAD, _v), "q"),
    "centroidal_momentum": (lambda: jd.centroidal_momentum(QUAD, _q, _short_v), "v"),
    "forward_dynamics": (lambda: jd.forward_dynamics(QUAD, _q, _v, _short_v), "tau"),
    "aba f_ext": (lambda: jd.aba(QUAD, _q, _v, _v, _f), "f_ext"),
    "locking_forces": (lambda: jd.locking_forces(QUAD, _q, _short_v, _v, _locked), "v"),
    "step f_ext": (lambda: jd.step(QUAD, _q, _v, _v, 0.01, contact=_contact, f_ext=_f), "f_ext"),
    "integrate": (lambda: QUAD.integrate(_q, _short_v), "v"),
    "difference": (lambda: QUAD.difference(_q, _v), "q1"),
    "normalize": (lambda: QUAD.normalize(_v), "q"),
    "interpolate": (lambda: QUAD.interpolate(_short_q, _q, 0.5), "q0"),
    "random_configuration": (
        lambda: QUAD.random_configuration(jax.random.key(0), _short_q, _q),
        "lower",
    ),
    "expand_configuration q_reduced": (
        lambda: jd.expand_configuration(QUAD, ["FL_hip_joint"], _short_q[1:], _q),
        "q_reduced",
    ),
    "expand_configuration q_reference": (
        lambda: jd.expand_configuration(QUAD, ["FL_hip_joint"], _short_q, _short_q),
        "q_reference",
    ),
    "expand_velocity": (lambda: jd.expand_velocity(QUAD, ["FL_hip_joint"], _v), "v_reduced"),
    "pseudo_inertia": (lambda: jd.pseudo_inertia(jnp.zeros(9)), "pi"),
    "is_physical": (lambda: jd.is_physical(jnp.zeros((3, 9))), "pi"),
    "inertial_parameters_from_log_cholesky": (
        lambda: jd.inertial_parameters_from_log_cholesky(jnp.zeros(9)),
        "theta",
    ),
}


@pytest.mark.parametrize("name", sorted(WRONG_SIZES))
def test_wrong_sizes_raise_naming_the_argument(name):
    """A state of the wrong size raises a `ValueError` naming it, before any computation:
    without the check, JAX's clamped indexing returned an answer for the wrong sizes
    (`forward_kinematics`, `jacobian`, `center_of_mass`, `potential_energy`, the configuration
    operations, `expand_configuration`'s reference, the inertial-parameter maps on 9-vectors)
    or a broadcasting error from deep inside."""
    call, arg = WRONG_SIZES[name]
    with pytest.raises(ValueError, match=f"`{arg}` must have shape"):
        call()


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.complex64, bool])
def test_astype_refuses_non_floating_dtypes(dtype):
    """`jd.astype(model, jnp.int32)` returned a model with truncated masses and axes."""
    with pytest.raises(TypeError, match="real floating dtype"):
        jd.astype(MODEL, dtype)
