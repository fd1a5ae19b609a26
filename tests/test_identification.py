"""Identification helpers (issue 24): base parameters of a stacked regressor, least squares
with and without physical consistency, on the bundled 7-joint arm with armature, damping and
friction. The data are exact (`rnea − joint_forces`), so the identifiable combinations must
come back to rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jointdyn as jd

S = 40  # samples; 7 rows each


@jax.jit
def _data(model, q, v, vdot):
    def one(q, v, a):
        Y = jnp.concatenate([jd.regressor(model, q, v, a), jd.joint_regressor(model, q, v, a)], 1)
        return Y, jd.rnea(model, q, v, a) - jd.joint_forces(model, q, v)

    return jax.vmap(one)(q, v, vdot)


@pytest.fixture(scope="module")
def arm():
    model = jd.load_model("arm7")
    nv = model.nv
    x = np.concatenate([np.full(nv, 0.05), np.asarray(jd.joint_parameters(model))[nv:]])
    model = jd.with_joint_parameters(model, x)  # armature 0.05 on every joint
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.vmap(model.random_configuration)(jax.random.split(k[0], S))
    v = 2 * jax.random.normal(k[1], (S, nv))
    vdot = 5 * jax.random.normal(k[2], (S, nv))
    Y, tau = (np.asarray(a) for a in _data(model, q, v, vdot))
    pi = np.concatenate([np.asarray(jd.inertial_parameters(model)).ravel(), x])
    return dict(model=model, Y=Y, tau=tau, pi=pi)


def test_data_consistent(arm):
    np.testing.assert_allclose(arm["Y"] @ arm["pi"], arm["tau"], rtol=0, atol=1e-10)


def test_base_parameters(arm):
    """`Y π = Y_b (K π)` for any π; the base columns are independent; dependent ones are
    combinations of them; a 7R arm with fixed base has fewer base parameters than columns."""
    Y = arm["Y"].reshape(-1, arm["Y"].shape[-1])
    bp = jd.base_parameters(arm["Y"])
    p = Y.shape[1]
    assert bp.rank < p and bp.rank == np.linalg.matrix_rank(Y)
    assert sorted(np.concatenate([bp.independent, bp.dependent]).tolist()) == list(range(p))
    rng = np.random.default_rng(1)
    for _ in range(3):
        pi = rng.normal(size=p)
        np.testing.assert_allclose(
            bp.base_regressor(Y) @ bp.from_full(pi), Y @ pi, rtol=0, atol=1e-9 * np.abs(Y).max()
        )
    beta = rng.normal(size=bp.rank)
    np.testing.assert_allclose(bp.from_full(bp.to_full(beta)), beta, rtol=0, atol=1e-12)
    # the first link's mass and first moment never act on a fixed base: all dependent, K zero
    assert set(range(4)) <= set(bp.dependent.tolist())
    assert np.all(bp.combination[:, :4] == 0)


def test_least_squares_recovers_base_parameters(arm):
    """Unconstrained: the base parameters exactly, the rest from the prior."""
    bp = jd.base_parameters(arm["Y"])
    prior = arm["pi"] * 1.2
    x = jd.least_squares(arm["Y"], arm["tau"], prior=prior)
    np.testing.assert_allclose(bp.from_full(x), bp.from_full(arm["pi"]), rtol=1e-8, atol=1e-8)
    # what the data cannot see stays at the prior (minimum-norm change)
    np.testing.assert_allclose(x[:4], prior[:4], rtol=1e-10, atol=1e-12)


def test_physical_least_squares(arm):
    """Physically consistent fit from a wrong but physical prior: every body physical, joint
    parameters ≥ 0, base parameters recovered (noise-free data)."""
    nb = arm["model"].nbodies
    bp = jd.base_parameters(arm["Y"])
    prior = arm["pi"].copy()
    prior[: 10 * nb] *= 1.5  # heavier, bigger bodies: still physical
    prior[10 * nb :] = 0.0  # no armature, damping, friction
    x = jd.least_squares(arm["Y"], arm["tau"], prior=prior, physical=True, nbodies=nb)
    assert np.all(np.asarray(jd.is_physical(x[: 10 * nb].reshape(nb, 10))))
    assert np.all(x[10 * nb :] >= 0)
    beta, ref = bp.from_full(x), bp.from_full(arm["pi"])
    np.testing.assert_allclose(beta, ref, rtol=0, atol=1e-6 * np.abs(ref).max())
    jd.with_inertial_parameters(arm["model"], x[: 10 * nb].reshape(nb, 10))  # no ValueError


def test_least_squares_bad_input(arm):
    Y, tau = arm["Y"], arm["tau"]
    with pytest.raises(ValueError, match="tau"):
        jd.least_squares(Y, tau[:-1])
    with pytest.raises(ValueError, match="prior"):
        jd.least_squares(Y, tau, physical=True, nbodies=7)
    bad = arm["pi"].copy()
    bad[0] = -1.0
    with pytest.raises(ValueError, match="not physical"):
        jd.least_squares(Y, tau, prior=bad, physical=True, nbodies=7)
    with pytest.raises(ValueError, match="nbodies"):
        jd.least_squares(Y, tau, prior=arm["pi"], physical=True)
    with pytest.raises(ValueError, match="Y"):
        jd.base_parameters(np.zeros(5))
