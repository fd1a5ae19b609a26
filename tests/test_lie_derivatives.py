"""`integrate_derivatives` / `difference_derivatives` (the Lie-group Jacobians, Pinocchio's
`dIntegrate` / `dDifference`) of every joint class and of `Model`: against central finite
differences in the tangent space, against Pinocchio's Lie groups (`pin.liegroups`), finite at
identity and zero velocity, and `ValueError` for misshapen input.

Our rotations move on the left with `w_FM_F` (`R ⊕ w = exp([w]×) R`), Pinocchio's on the right
with the local `w_M` (`R exp([w_M]×)`, `w = R w_M`); with `R⁺ = R ⊕ w` the maps are

    J_v = R⁺ J_v^pin Rᵀ,    J_q = R⁺ (J_q^pin + J_v^pin [w_M]×) Rᵀ     (w_M = Rᵀ w held fixed in F)
    d = R₀ d^pin,  J_q1 = R₀ J_q1^pin R₁ᵀ,  J_q0 = R₀ (J_q0^pin − [d^pin]×) R₀ᵀ.

Our `Free` is SO(3) × R³ (not SE(3)): it is compared with Pinocchio's `R3 × SO3`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from helpers import JOINT_NAMES, make_joint, np_skew, np_state
from trees import random_tree

import jointdyn as jd
from jointdyn._spatial import quat_to_rotmat

jax.config.update("jax_enable_x64", True)

EPS = 1e-6  # central differences: error ~ EPS² + 1e-16/EPS


def _central(col, E):
    """`(col(EPS e_k) − col(−EPS e_k)) / 2 EPS` for every k, as columns (one vmap)."""
    plus, minus = jnp.split(jax.vmap(col)(jnp.concatenate([E, -E])), 2)
    return (plus - minus).T / (2 * EPS)


def fd_integrate(space, q, v):
    """Central differences of `q ⊕ v` in the tangent space: columns `(J_q, J_v)`."""
    nv = v.shape[0]
    q1 = space.integrate(q, v)
    E = EPS * jnp.eye(nv, dtype=v.dtype)

    def col_q(e):
        return space.difference(q1, space.integrate(space.integrate(q, e), v))

    def col_v(e):
        return space.difference(q1, space.integrate(q, v + e))

    return _central(col_q, E), _central(col_v, E)


def fd_difference(space, q0, q1):
    nv = space.difference(q0, q1).shape[0]
    E = EPS * jnp.eye(nv, dtype=q0.dtype)

    def col0(e):
        return space.difference(space.integrate(q0, e), q1)

    def col1(e):
        return space.difference(q0, space.integrate(q1, e))

    return _central(col0, E), _central(col1, E)


@jax.jit  # one program per joint (op by op, each operation compiled alone, cost ~2×)
def _jacobians_and_differences(joint, q, q1, v):
    """The Jacobians of `integrate` and `difference`, and their central differences."""
    return (
        joint.integrate_derivatives(q, v),
        fd_integrate(joint, q, v),
        joint.difference_derivatives(q, q1),
        fd_difference(joint, q, q1),
    )


@pytest.mark.parametrize("name", JOINT_NAMES)
def test_joint_jacobians_match_finite_differences(name):
    joint = make_joint(name)
    rng = np.random.default_rng(len(name))
    q, q1, v, _, _ = (jnp.asarray(x) for x in np_state(joint, rng))
    (Jq, Jv), (Fq, Fv), (J0, J1), (F0, F1) = _jacobians_and_differences(joint, q, q1, v)
    np.testing.assert_allclose(Jq, Fq, rtol=0, atol=1e-7, err_msg=f"{name} J_q")
    np.testing.assert_allclose(Jv, Fv, rtol=0, atol=1e-7, err_msg=f"{name} J_v")
    np.testing.assert_allclose(J0, F0, rtol=0, atol=1e-7, err_msg=f"{name} J_q0")
    np.testing.assert_allclose(J1, F1, rtol=0, atol=1e-7, err_msg=f"{name} J_q1")
    assert Jq.shape == Jv.shape == J0.shape == J1.shape == (joint.nv, joint.nv)


@pytest.mark.parametrize("name", JOINT_NAMES)
def test_joint_jacobians_finite_at_identity_and_zero_velocity(name):
    """`J_q = J_v = 1`, `J_q0 = −1`, `J_q1 = 1` at `v = 0`, `q0 = q1`; no NaN in the values or
    in their derivatives there (Taylor branches), and continuous across the Taylor switch."""
    joint = make_joint(name)
    q = joint.neutral()
    zero = jnp.zeros(joint.nv)
    eye = np.eye(joint.nv)
    Jq, Jv = joint.integrate_derivatives(q, zero)
    J0, J1 = joint.difference_derivatives(q, q)
    for J, ref in ((Jq, eye), (Jv, eye), (J0, -eye), (J1, eye)):
        np.testing.assert_allclose(J, ref, rtol=0, atol=1e-15)
    grad = jax.grad(lambda w: sum(J.sum() for J in joint.integrate_derivatives(q, w)))(zero)
    assert np.isfinite(np.asarray(grad)).all()
    if joint.nv:
        # just below and above the Taylor switch (θ² = √eps): the branches agree
        u = np.random.default_rng(0).normal(size=joint.nv)
        u /= np.linalg.norm(u)
        t = np.finfo(np.float64).eps ** 0.25
        below = joint.integrate_derivatives(q, jnp.asarray(u * t * (1 - 1e-9)))
        above = joint.integrate_derivatives(q, jnp.asarray(u * t * (1 + 1e-9)))
        np.testing.assert_allclose(below, above, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------
# against Pinocchio's Lie groups


def _xyzw(q_wxyz):
    return np.concatenate([q_wxyz[1:], q_wxyz[:1]])


def _so3_integrate_from_pinocchio(R, w):
    """Our `(J_q, J_v)` of `exp([w]×) R` from Pinocchio's SO3 `dIntegrate` (module docstring)."""
    G = pin.liegroups.SO3()
    qp = _xyzw(np.asarray(jd.rotmat_to_quat(jnp.asarray(R))))
    wL = R.T @ w
    Aq, Av = G.dIntegrate(qp, wL, pin.ARG0), G.dIntegrate(qp, wL, pin.ARG1)
    R1 = R @ pin.exp3(wL)
    return R1 @ (Aq + Av @ np_skew(wL)) @ R.T, R1 @ Av @ R.T


def _so3_difference_from_pinocchio(R0, R1):
    G = pin.liegroups.SO3()
    q0, q1 = (_xyzw(np.asarray(jd.rotmat_to_quat(jnp.asarray(R)))) for R in (R0, R1))
    d = G.difference(q0, q1)
    A0, A1 = G.dDifference(q0, q1, pin.ARG0), G.dDifference(q0, q1, pin.ARG1)
    return R0 @ (A0 - np_skew(d)) @ R0.T, R0 @ A1 @ R1.T


def _rotation(joint, q):
    return np.asarray(joint.X_FM(jnp.asarray(q)).R)


# joint → the Pinocchio Lie group of its configuration space
PINOCCHIO_GROUPS = {
    "revolute": "R1",
    "prismatic": "R1",
    "screw": "R1",
    "cylindrical": "R2",
    "universal": "R2",
    "gimbal": "R3",
    "planar_xy": "R3",
    "translational": "R3",
    "revolute_unbounded": "SO2",
    "ball": "SO3",
    "space_xyz": "SO3",
    "free": "R3xSO3",
}


@pytest.mark.parametrize("name", sorted(PINOCCHIO_GROUPS))
def test_joint_jacobians_match_pinocchio(name):
    joint = make_joint(name)
    rng = np.random.default_rng(7)
    q, q1, v, _, _ = np_state(joint, rng)
    Jq, Jv = (np.asarray(J) for J in joint.integrate_derivatives(jnp.asarray(q), jnp.asarray(v)))
    J0, J1 = (np.asarray(J) for J in joint.difference_derivatives(jnp.asarray(q), jnp.asarray(q1)))
    group = PINOCCHIO_GROUPS[name]
    if group in ("R1", "R2", "R3", "SO2"):  # same coordinates and tangent space as ours
        G = getattr(pin.liegroups, group)()
        ref = (
            G.dIntegrate(q, v, pin.ARG0),
            G.dIntegrate(q, v, pin.ARG1),
            G.dDifference(q, q1, pin.ARG0),
            G.dDifference(q, q1, pin.ARG1),
        )
    elif group == "SO3":
        R0, R1 = _rotation(joint, q), _rotation(joint, q1)
        ref = (*_so3_integrate_from_pinocchio(R0, v), *_so3_difference_from_pinocchio(R0, R1))
    else:  # Free: ours [quat; p], [w; ṗ]; Pinocchio's R3 × SO3: [p; quat xyzw], [ṗ; w_M]
        G = pin.liegroups.R3() * pin.liegroups.SO3()
        qp = np.concatenate([q[4:], _xyzw(q[:4])])
        q1p = np.concatenate([q1[4:], _xyzw(q1[:4])])
        R0, R1 = np.asarray(quat_to_rotmat(q[:4])), np.asarray(quat_to_rotmat(q1[:4]))
        vp = np.concatenate([v[3:], R0.T @ v[:3]])
        trans = [
            G.dIntegrate(qp, vp, pin.ARG0),
            G.dIntegrate(qp, vp, pin.ARG1),
            G.dDifference(qp, q1p, pin.ARG0),
            G.dDifference(qp, q1p, pin.ARG1),
        ]
        for A in trans:  # no coupling between the factors
            np.testing.assert_allclose(A[:3, 3:], 0, atol=1e-14)
        rot = (*_so3_integrate_from_pinocchio(R0, v[:3]), *_so3_difference_from_pinocchio(R0, R1))
        ref = tuple(
            np.block([[r, np.zeros((3, 3))], [np.zeros((3, 3)), t[:3, :3]]])
            for r, t in zip(rot, trans, strict=True)
        )
    for ours, theirs, what in zip(
        (Jq, Jv, J0, J1), ref, ("J_q", "J_v", "J_q0", "J_q1"), strict=True
    ):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-10, err_msg=f"{name} {what}")


# ------------------------------------------------------------------------------------------
# Model


@pytest.fixture(scope="module")
def tree():
    return random_tree(3, nbodies=9)  # Free, prismatic, screw, [cos, sin], …, SpaceXYZ, Ball


def test_model_jacobians_are_the_joints_blocks(tree):
    """Each joint's Jacobians (checked against finite differences above) on its block of
    `model.integrate_derivatives` / `difference_derivatives`, zeros elsewhere."""
    m = tree
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    q, q1 = m.random_configuration(k[0]), m.random_configuration(k[1])
    v = 0.5 * jax.random.normal(k[2], (m.nv,))
    model_J = (*m.integrate_derivatives(q, v), *m.difference_derivatives(q, q1))
    blocks = [np.zeros((m.nv, m.nv)) for _ in range(4)]
    for name, joint in zip(m.joint_names, m.joints, strict=True):
        s, sq = m.v_slice(name), m.q_slice(name)
        own = (
            *joint.integrate_derivatives(q[sq], v[s]),
            *joint.difference_derivatives(q[sq], q1[sq]),
        )
        for B, J in zip(blocks, own, strict=True):
            B[s, s] = J
    for ours, ref, what in zip(model_J, blocks, ("J_q", "J_v", "J_q0", "J_q1"), strict=True):
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-14, err_msg=what)
    # at zero velocity and q0 = q1: identities, no NaN
    Iq, Iv = m.integrate_derivatives(m.neutral(), jnp.zeros(m.nv))
    D0, D1 = m.difference_derivatives(q, q)
    eye = np.eye(m.nv)
    for J, ref in ((Iq, eye), (Iv, eye), (D0, -eye), (D1, eye)):
        np.testing.assert_allclose(J, ref, rtol=0, atol=1e-12)


def test_model_jacobians_bad_input(tree):
    m = tree
    q, v = m.neutral(), jnp.zeros(m.nv)
    with pytest.raises(ValueError, match="`v`"):
        m.integrate_derivatives(q, v[:-1])
    with pytest.raises(ValueError, match="`q`"):
        m.integrate_derivatives(q[:-1], v)
    with pytest.raises(ValueError, match="`q1`"):
        m.difference_derivatives(q, q[:-1])
    with pytest.raises(ValueError, match="`q0`"):
        m.difference_derivatives(q[None], q)
