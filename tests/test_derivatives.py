"""`aba_derivatives` and `rnea_derivatives` (analytic): against Pinocchio's analytic
derivatives on fixed-base robots, against automatic differentiation of `aba` and `rnea` on
floating-base robots and on random trees of every joint class, and against finite
differences.

Values are the traced programs evaluated by NumPy (`numpy_call`, `numpy_jit`): the arithmetic
is what is checked, and a compile per program would take most of the module's time;
`test_derivatives_jit_vmap_float32` compiles."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import JOINT_NAMES, make_joint, np_state
from numpy_eval import numpy_call, numpy_jit
from robots import load_jointdyn, load_pinocchio, q_to_pinocchio, v_to_pinocchio_matrix
from trees import random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)


def state(model, seed):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    q = model.random_configuration(k[0])
    v = jax.random.normal(k[1], (model.nv,))
    a = jax.random.normal(k[2], (model.nv,))
    tau = 10 * jax.random.normal(k[3], (model.nv,))
    f = jax.random.normal(k[4], (model.nbodies, 6))
    return q, v, a, tau, f


#: One random tree with a joint of every class (a Free root and the 13 classes of
#: `trees.every_joint`), shared by the tests below so that they share traced programs.
NBODIES = 14


@functools.cache
def tree(seed: int = 3):
    return random_tree(seed, nbodies=NBODIES)


#: `jd.aba_derivatives` traced once per model structure and kind of `f_ext` (array or None) and
#: evaluated by NumPy; its jaxpr is also the LAPACK check's.
_aba_derivatives = numpy_jit(jd.aba_derivatives)


def aba_derivatives(model, q, v, tau, f_ext=None):
    """`jd.aba_derivatives`, evaluated by NumPy (`f_ext` always passed: one trace per kind)."""
    return _aba_derivatives(model, q, v, tau, f_ext)


@numpy_jit
def autodiff_aba(model, q, v, tau, f_ext):
    """`aba` and its `jax.jacfwd` in (q ⊕ dq, v, tau) at dq = 0, op by op: the reference
    (traced once per model and evaluated by NumPy, `numpy_eval`; `f_ext` zero is the same as
    none). Traced with the rules off: with them on, `jacfwd` takes the very Jacobians under
    test (`_dynamics._dense_tangent`)."""

    def f(dq, v, tau):
        out = jd.aba(model, model.integrate(q, dq), v, tau, f_ext)
        return out, out

    with jd.differentiation_rules(False):
        jac, value = jax.jacfwd(f, argnums=(0, 1, 2), has_aux=True)(jnp.zeros_like(v), v, tau)
    return value, jac


@numpy_jit
def autodiff_rnea(model, q, v, a, f_ext):
    """`jax.jacfwd` of `rnea` along `q ⊕ dq` and `v`, op by op (traced once per model, evaluated by NumPy). Traced
    with the rules off: with them on, `jacfwd` takes the very Jacobians under test
    (`_dynamics._rnea_jvp`)."""

    def tau(dq, dv):
        return jd.rnea(model, model.integrate(q, dq), v + dv, a, f_ext)

    zero = jnp.zeros(model.nv)
    with jd.differentiation_rules(False):
        return jax.jacfwd(tau, argnums=(0, 1))(zero, zero)


def assert_close(actual, expected, tol, what):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=tol, atol=tol * scale, err_msg=what
    )


@pytest.mark.parametrize("with_f_ext", [False, True])
def test_aba_derivatives_match_autodiff_on_every_joint_class(with_f_ext):
    model = tree()
    q, v, _, tau, f = state(model, 1)
    f_ext = f if with_f_ext else None
    d = aba_derivatives(model, q, v, tau, f_ext)
    vdot, ref = autodiff_aba(model, q, v, tau, f if with_f_ext else jnp.zeros_like(f))
    assert_close(d.vdot, vdot, 1e-10, "vdot")
    for got, want, what in zip(
        (d.dvdot_dq, d.dvdot_dv, d.dvdot_dtau), ref, ("d/dq", "d/dv", "d/dtau"), strict=True
    ):
        assert_close(got, want, 1e-8, what)
    assert_close(d.dvdot_dtau @ numpy_call(jd.crba, model, q), np.eye(model.nv), 1e-9, "M⁻¹ M")


@pytest.mark.parametrize("seed", [3, 5])
@pytest.mark.parametrize("with_f_ext", [False, True])
def test_rnea_derivatives_match_autodiff_on_every_joint_class(seed, with_f_ext):
    """The analytic RNEA derivatives against `jax.jacfwd` of `rnea` along `q ⊕ dq` and `v`."""
    model = tree(seed)
    q, v, a, _, f = state(model, seed)
    f_ext = f if with_f_ext else None
    ref_q, ref_v = autodiff_rnea(model, q, v, a, f if with_f_ext else jnp.zeros_like(f))
    dq, dv = numpy_call(jd.rnea_derivatives, model, q, v, a, f_ext)
    assert_close(dq, ref_q, 1e-10, "d tau / dq")
    assert_close(dv, ref_v, 1e-10, "d tau / dv")


def test_rnea_derivatives_match_finite_differences():
    model = tree(5)
    q, v, a, _, f = state(model, 2)
    dq, dv = numpy_call(jd.rnea_derivatives, model, q, v, a, f)
    eps = 1e-6

    @numpy_jit  # evaluated by NumPy (`numpy_eval`), not compiled
    def differences(q, v):
        """Central differences along every `e_k`, as columns (one vmapped program)."""

        def column(e):
            fd_q = jd.rnea(model, model.integrate(q, e), v, a, f) - jd.rnea(
                model, model.integrate(q, -e), v, a, f
            )
            fd_v = jd.rnea(model, q, v + e, a, f) - jd.rnea(model, q, v - e, a, f)
            return fd_q / (2 * eps), fd_v / (2 * eps)

        return jax.tree.map(lambda x: x.T, jax.vmap(column)(eps * jnp.eye(model.nv)))

    fd_q, fd_v = differences(q, v)
    for k in range(model.nv):
        assert_close(dq[:, k], fd_q[:, k], 1e-6, f"d tau / d q_{k}")
        assert_close(dv[:, k], fd_v[:, k], 1e-6, f"d tau / d v_{k}")


def test_derivatives_jit_vmap_float32():
    model = tree()
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.vmap(model.random_configuration)(keys)
    v = jax.random.normal(keys[0], (3, model.nv))
    tau = jax.random.normal(keys[1], (3, model.nv))
    batched = jax.jit(jax.vmap(jd.aba_derivatives, in_axes=(None, 0, 0, 0)))
    d = batched(model, q, v, tau)
    assert d.dvdot_dq.shape == (3, model.nv, model.nv)
    one = aba_derivatives(model, q[1], v[1], tau[1])
    assert_close(d.dvdot_dq[1], one.dvdot_dq, 1e-10, "vmap")
    d32 = jd.aba_derivatives(
        jd.astype(model, jnp.float32), *(x[1].astype(jnp.float32) for x in (q, v, tau))
    )
    assert d32.dvdot_dq.dtype == jnp.float32
    assert_close(d32.dvdot_dv, one.dvdot_dv, 2e-3, "float32")


def test_no_nan_derivatives_at_neutral_and_zero_velocity():
    model = tree()
    z = jnp.zeros(model.nv)
    d = aba_derivatives(model, model.neutral(), z, z)
    for x in (d.vdot, d.dvdot_dq, d.dvdot_dv, d.dvdot_dtau):
        assert np.all(np.isfinite(np.asarray(x)))


@pytest.mark.parametrize("name", ["panda", "ur5", "allegro"])
def test_aba_derivatives_match_pinocchio_fixed_base(name):
    """Fixed base: `v_pin = P v` with P a permutation, so `∂v̇_pin/∂q_pin = P (∂v̇/∂q) Pᵀ`."""
    import pinocchio as pin

    model, pmodel = load_jointdyn(name), load_pinocchio(name)
    q, v, a, tau, _ = state(model, 11)
    P = v_to_pinocchio_matrix(model, pmodel, q)
    assert np.allclose(np.abs(P).sum(0), 1.0) and set(np.unique(P)) <= {0.0, 1.0}
    q_pin = q_to_pinocchio(model, pmodel, q)
    v_pin, tau_pin = P @ np.asarray(v), P @ np.asarray(tau)
    data = pmodel.createData()
    pin.computeABADerivatives(pmodel, data, q_pin, v_pin, tau_pin)
    Minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
    d = aba_derivatives(model, q, v, tau)
    assert_close(P @ d.vdot, data.ddq, 1e-9, f"{name} vdot")
    assert_close(P @ d.dvdot_dq @ P.T, data.ddq_dq, 1e-9, f"{name} d vdot / dq")
    assert_close(P @ d.dvdot_dv @ P.T, data.ddq_dv, 1e-9, f"{name} d vdot / dv")
    assert_close(P @ d.dvdot_dtau @ P.T, Minv, 1e-9, f"{name} M⁻¹")

    a_pin = P @ np.asarray(a)
    pin.computeRNEADerivatives(pmodel, data, q_pin, v_pin, a_pin)
    dq, dv = numpy_call(jd.rnea_derivatives, model, q, v, a)
    assert_close(P @ dq @ P.T, data.dtau_dq, 1e-9, f"{name} d tau / dq")
    assert_close(P @ dv @ P.T, data.dtau_dv, 1e-9, f"{name} d tau / dv")


@pytest.mark.parametrize("name", ["solo12", "g1"])
def test_aba_derivatives_match_autodiff_floating_base(name):
    model = load_jointdyn(name)
    q, v, _, tau, f = state(model, 12)
    d = aba_derivatives(model, q, v, tau, f)
    _, ref = autodiff_aba(model, q, v, tau, f)
    for got, want, what in zip(
        (d.dvdot_dq, d.dvdot_dv, d.dvdot_dtau), ref, "q v tau".split(), strict=True
    ):
        assert_close(got, want, 1e-8, f"{name} d vdot / d{what}")


def test_bad_sizes_raise():
    model = tree()
    q, v, _, tau, _ = state(model, 1)
    with pytest.raises(ValueError, match="`v` must have shape"):
        jd.aba_derivatives(model, q, v[:-1], tau)
    with pytest.raises(ValueError, match="`vdot` must have shape"):
        jd.rnea_derivatives(model, q, v, tau[:-1])


@pytest.mark.parametrize("name", JOINT_NAMES)
def test_constant_hinge_flag_matches_own_terms(name):
    """`constant_hinge_at_F` lets the derivatives skip a joint's own terms: it must be True
    exactly when they vanish (False where they vanish would only cost time)."""
    from jointdyn._derivatives import _own_partials_at_F

    joint = make_joint(name)
    rng = np.random.default_rng(0)
    q, _, v = np_state(joint, rng)[:3]
    dH, dc_q, dc_v = numpy_call(_own_partials_at_F, joint, jnp.asarray(q), jnp.asarray(v))
    vanish = all(np.allclose(np.asarray(x), 0.0, atol=1e-12) for x in (dH, dc_q, dc_v))
    assert joint.constant_hinge_at_F == vanish


def test_aba_derivatives_call_no_lapack():
    """`M⁻¹` comes from ABA's own factorisation: no LAPACK custom call (OpenBLAS, called from
    several XLA CPU device threads at once, can deadlock; see `jd.batched`)."""
    model = tree()
    q, v, _, tau, _ = state(model, 0)
    jaxpr = str(_aba_derivatives.jaxpr(model, q, v, tau, None))  # the program evaluated below
    lapack = re.findall(
        r"= (cholesky|triangular_solve|lu|lu_pivots_to_permutation|eigh|qr)\b", jaxpr
    )
    assert not lapack, lapack
    d = aba_derivatives(model, q, v, tau)
    M = numpy_call(jd.crba, model, q)
    np.testing.assert_allclose(d.dvdot_dtau @ M, np.eye(model.nv), rtol=0, atol=1e-10)
