"""Spatial algebra: rotations, quaternions, rigid transforms, spatial vectors and inertias.

References are independent of the library: NumPy formulas (Rodrigues, the quaternion matrix),
`scipy.linalg.expm`, and the 4×4 / 6×6 matrix forms of the operations. Rotations are sampled
three ways (as jaxlie does): uniform, generic hand-picked (including half-turns), and near the
identity at the 1e-7 scale where Taylor branches take over.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import (
    assert_tree_allclose,
    np_quat_to_rotmat,
    np_rot,
    np_skew,
    random_rotation,
    tree_allclose,
)

import jointdyn as jd
from jointdyn._spatial import (
    motion_cross_matrix,
    quat_exp,
    quat_log,
    quat_multiply,
    skew,
)

RNG_SEED = 0
N = 16  # samples per kind
TOL = dict(rtol=1e-12, atol=1e-12)


def _rng():
    return np.random.default_rng(RNG_SEED)


def _unit_quaternions(kind: str, rng) -> np.ndarray:
    """(n, 4) unit quaternions: uniform, generic (half-turns, axis-aligned) or near identity."""
    if kind == "uniform":
        q = rng.normal(size=(N, 4))
    elif kind == "generic":
        q = np.array(
            [
                [1.0, 0, 0, 0],
                [0.0, 1, 0, 0],  # half-turns: w = 0, each Shepperd branch in turn
                [0.0, 0, 1, 0],
                [0.0, 0, 0, 1],
                [0.0, 1, 1, 0],
                [0.0, 1, -2, 3],
                [1e-9, 1, 2, -1],
                [-1.0, 0, 0, 0],  # the same rotation as the identity
                [0.5, 0.5, 0.5, 0.5],
                [np.cos(0.5), 0, np.sin(0.5), 0],
                [-0.3, 0.1, 0.9, -0.2],  # w < 0
            ]
        )
    elif kind == "near_identity":
        q = np.concatenate([np.ones((N, 1)), 1e-7 * rng.normal(size=(N, 3))], 1)
    else:
        raise ValueError(kind)
    q = np.resize(q, (N, 4))  # one batch size for every kind: fewer compilations
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _rotation_vectors(kind: str, rng) -> np.ndarray:
    """(n, 3) rotation vectors with |w| < π."""
    if kind == "uniform":
        axes = rng.normal(size=(N, 3))
        axes /= np.linalg.norm(axes, axis=1, keepdims=True)
        return axes * rng.uniform(0, np.pi - 1e-3, (N, 1))
    if kind == "generic":
        w = np.array(
            [
                [0.0, 0, 0],
                [1.0, 0, 0],
                [0, -2.0, 0],
                [0, 0, 3.1],
                [1.0, 2.0, -0.5],
                # Either side of the Taylor thresholds (θ² = √eps in float64 and float32).
                [1.2e-4, 0, 0],
                [0, 1.3e-4, 0],
                [0.0186, 0, 0],
                [0, 0.0187, 0],
            ]
        )
        return np.resize(w, (N, 3))  # one batch size for every kind: fewer compilations
    if kind == "near_identity":
        return 1e-7 * rng.normal(size=(N, 3))
    raise ValueError(kind)


SAMPLINGS = ["uniform", "generic", "near_identity"]


def _random_transform(rng, batch=()):
    R = np.stack([random_rotation(rng) for _ in range(int(np.prod(batch, dtype=int)))])
    R = R.reshape(batch + (3, 3))
    p = rng.normal(size=batch + (3,))
    return jd.Transform(R, p)


def _homogeneous(R, p):
    T = np.zeros(R.shape[:-2] + (4, 4))
    T[..., :3, :3], T[..., :3, 3], T[..., 3, 3] = R, p, 1.0
    return T


def _np_motion_matrix(R, p):
    """Plücker transform of motion vectors, [w; v] ordering: [[R, 0], [p̂ R, R]]."""
    X = np.zeros((6, 6))
    X[:3, :3] = X[3:, 3:] = R
    X[3:, :3] = np_skew(p) @ R
    return X


# --------------------------------------------------------------------------------------------
# rotations and quaternions


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_quat_to_rotmat(kind):
    q = _unit_quaternions(kind, _rng())
    R = np.asarray(jd.quat_to_rotmat(q))
    assert_tree_allclose(R, np.stack([np_quat_to_rotmat(x) for x in q]), **TOL)
    assert_tree_allclose(R @ np.swapaxes(R, -1, -2), np.broadcast_to(np.eye(3), R.shape), **TOL)
    assert_tree_allclose(np.linalg.det(R), np.ones(len(q)), **TOL)


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_quaternion_rotmat_round_trip(kind):
    q = _unit_quaternions(kind, _rng())
    q_back = np.asarray(jd.rotmat_to_quat(jd.quat_to_rotmat(q)))
    # q and −q are the same rotation; rotmat_to_quat picks w ≥ 0.
    assert np.all(q_back[:, 0] >= 0)
    sign = np.sign(np.sum(q_back * q, 1, keepdims=True))
    assert_tree_allclose(q_back, sign * q, **TOL)
    # And the other way round, from rotation matrices.
    R = np.stack([np_quat_to_rotmat(x) for x in q])
    assert_tree_allclose(jd.quat_to_rotmat(jd.rotmat_to_quat(R)), R, **TOL)


def test_quat_multiply_composes_rotations():
    rng = _rng()
    a, b = _unit_quaternions("uniform", rng), _unit_quaternions("uniform", rng)
    expected = np.stack(
        [np_quat_to_rotmat(x) @ np_quat_to_rotmat(y) for x, y in zip(a, b, strict=True)]
    )
    assert_tree_allclose(jd.quat_to_rotmat(quat_multiply(a, b)), expected, **TOL)


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_so3_exp_matches_matrix_exponential(kind):
    w = _rotation_vectors(kind, _rng())
    expected = np.stack([scipy.linalg.expm(np_skew(x)) for x in w])
    assert_tree_allclose(jd.so3_exp(w), expected, **TOL)
    assert_tree_allclose(jd.quat_to_rotmat(quat_exp(w)), expected, **TOL)


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_so3_log_exp_round_trip(kind):
    w = _rotation_vectors(kind, _rng())
    assert_tree_allclose(jd.so3_log(jd.so3_exp(w)), w, rtol=1e-9, atol=1e-12)
    assert_tree_allclose(quat_log(quat_exp(w)), w, rtol=1e-9, atol=1e-12)
    assert_tree_allclose(quat_log(-quat_exp(w)), w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", SAMPLINGS)
def test_so3_exp_log_round_trip(kind):
    R = jd.quat_to_rotmat(_unit_quaternions(kind, _rng()))
    w = jd.so3_log(R)
    assert np.all(np.linalg.norm(w, axis=-1) <= np.pi + 1e-12)
    assert_tree_allclose(jd.so3_exp(w), R, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_exp_log_dtype(dtype):
    w = jnp.asarray(np.concatenate([_rotation_vectors(k, _rng()) for k in SAMPLINGS]), dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == jnp.float32 else dict(rtol=1e-9, atol=1e-12)
    R = jd.so3_exp(w)
    assert R.dtype == dtype and quat_exp(w).dtype == dtype
    assert jd.so3_log(R).dtype == dtype and jd.rotmat_to_quat(R).dtype == dtype
    assert_tree_allclose(jd.so3_log(R), w, **tol)
    assert_tree_allclose(quat_log(quat_exp(w)), w, **tol)


def _exp_log_jacobians(jac, w):
    """Jacobians, by `jac` (jacfwd or jacrev), of exp and log at the rotation vector `w`."""
    q, R = quat_exp(w), jd.so3_exp(w)
    return {
        "so3_exp": jac(jd.so3_exp)(w),
        "quat_exp": jac(quat_exp)(w),
        "so3_log o so3_exp": jac(lambda x: jd.so3_log(jd.so3_exp(x)))(w),
        "quat_log o quat_exp": jac(lambda x: quat_log(quat_exp(x)))(w),
        "quat_log": jac(quat_log)(q),
        "so3_log": jac(jd.so3_log)(R),
        "R": R,
    }


@pytest.mark.parametrize("jac", [jax.jacfwd, jax.jacrev], ids=["jacfwd", "jacrev"])
def test_exp_log_gradients_at_and_near_zero(jac):
    """No NaN at zero rotation (double-`where`), and the Jacobians are the known ones there."""
    w = np.stack([np.zeros(3), 1e-7 * np.array([1.0, -2.0, 0.5]), 1e-7 * np.ones(3)])
    J = jax.jit(jax.vmap(lambda x: _exp_log_jacobians(jac, x)))(w)
    for k, x in J.items():
        assert np.all(np.isfinite(x)), k
    eye3 = np.broadcast_to(np.eye(3), (len(w), 3, 3))
    generators = np.stack([np_skew(e) for e in np.eye(3)], -1)  # ∂exp([w]×)/∂wᵢ at 0 = [eᵢ]×
    atol = dict(atol=1e-6)
    assert_tree_allclose(J["so3_exp"], np.broadcast_to(generators, (len(w), 3, 3, 3)), **atol)
    dq = np.concatenate([np.zeros((1, 3)), np.eye(3) / 2])  # q ≈ [1, w/2]
    assert_tree_allclose(J["quat_exp"], np.broadcast_to(dq, (len(w), 4, 3)), **atol)
    assert_tree_allclose(J["so3_log o so3_exp"], eye3, **atol)
    assert_tree_allclose(J["quat_log o quat_exp"], eye3, **atol)
    assert_tree_allclose(J["quat_log"][..., 1:], 2 * eye3, **atol)  # w ≈ 2 q_xyz
    # Along R ↦ R + [δ]× R (a small rotation δ applied to R) so3_log moves by δ.
    dR = np.einsum("ijk,bjl->bilk", generators, J["R"])
    assert_tree_allclose(np.einsum("baij,bijk->bak", J["so3_log"], dR), eye3, **atol)


def test_exp_log_gradients_match_finite_differences():
    w = np.concatenate([_rotation_vectors(k, _rng())[:8] for k in ("uniform", "generic")])
    w = w[np.linalg.norm(w, axis=1) > 1e-3]  # central differences need |w| ≫ h

    def f(x):
        return jnp.concatenate(
            [
                jd.so3_exp(x).reshape(-1),
                quat_exp(x),
                jd.so3_log(jd.so3_exp(x)),
                quat_log(quat_exp(x)),
            ]
        )

    J = jax.jit(jax.vmap(jax.jacrev(f)))(w)
    f_batch = jax.jit(jax.vmap(f))
    h = 1e-6
    for i in range(3):
        e = h * np.eye(3)[i]
        assert_tree_allclose(
            J[..., i], (f_batch(w + e) - f_batch(w - e)) / (2 * h), rtol=1e-6, atol=1e-7
        )


# --------------------------------------------------------------------------------------------
# transforms


def test_transform_compose_inverse_apply():
    rng = _rng()
    X1, X2 = _random_transform(rng, (5,)), _random_transform(rng, (5,))
    T1, T2 = _homogeneous(X1.R, X1.p), _homogeneous(X2.R, X2.p)
    assert_tree_allclose(X1.as_matrix(), T1, **TOL)
    assert_tree_allclose((X1 @ X2).as_matrix(), T1 @ T2, **TOL)
    assert_tree_allclose(X1.inverse().as_matrix(), np.linalg.inv(T1), **TOL)
    eye = np.broadcast_to(np.eye(4), (5, 4, 4))
    assert_tree_allclose((X1 @ X1.inverse()).as_matrix(), eye, **TOL)
    assert_tree_allclose((X1.inverse() @ X1).as_matrix(), eye, **TOL)
    p = rng.normal(size=(5, 3))
    expected = np.einsum("bij,bj->bi", T1, np.concatenate([p, np.ones((5, 1))], 1))[:, :3]
    assert_tree_allclose(X1.apply(p), expected, **TOL)
    assert_tree_allclose(X1.rotate(p), np.einsum("bij,bj->bi", X1.R, p), **TOL)
    # Broadcasting a single transform over a batch of points.
    X = _random_transform(rng)
    assert_tree_allclose(X.apply(p), p @ np.asarray(X.R).T + np.asarray(X.p), **TOL)
    assert_tree_allclose(jd.Transform.from_matrix(T1).as_matrix(), T1, **TOL)
    identity = jd.Transform.identity()
    assert_tree_allclose(identity.as_matrix(), np.eye(4), atol=0)
    assert_tree_allclose((identity @ X).as_matrix(), X.as_matrix(), **TOL)


def test_transform_constructors():
    rng = _rng()
    axis, angle, p = np.array([1.0, -2.0, 0.5]), 0.7, rng.normal(size=3)
    X = jd.Transform.from_axis_angle(axis, angle, p)  # axis normalised inside
    assert_tree_allclose(X.R, np_rot(axis, angle), **TOL)
    assert_tree_allclose(X.p, p, **TOL)

    q = np.array([0.3, -0.4, 1.2, 0.1])  # not unit: normalised inside
    X = jd.Transform.from_quaternion(q, p)
    assert_tree_allclose(X.R, np_quat_to_rotmat(q), **TOL)
    assert_tree_allclose(jd.Transform.from_quaternion(q).p, np.zeros(3), atol=0)
    assert_tree_allclose(X.quaternion(), q / np.linalg.norm(q), **TOL)

    w = np.array([0.3, 0.2, -1.1])
    assert_tree_allclose(
        jd.Transform.from_rotation_vector(w).R, scipy.linalg.expm(np_skew(w)), **TOL
    )

    roll, pitch, yaw = 0.3, -1.1, 2.5
    X = jd.Transform.from_rpy([roll, pitch, yaw], p)
    expected = np_rot([0, 0, 1], yaw) @ np_rot([0, 1, 0], pitch) @ np_rot([1, 0, 0], roll)
    assert_tree_allclose(X.R, expected, **TOL)
    assert_tree_allclose(X.p, p, **TOL)
    # URDF convention: roll about the fixed x axis first (extrinsic x, y, z).
    assert_tree_allclose(jd.Transform.from_rpy([roll, 0, 0]).R, np_rot([1, 0, 0], roll), **TOL)


def test_transform_dtype_follows_input():
    X = jd.Transform.from_rpy(jnp.array([0.1, 0.2, 0.3], jnp.float32))
    assert X.R.dtype == jnp.float32 and X.p.dtype == jnp.float32
    X = jd.Transform.from_quaternion(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32))
    assert X.as_matrix().dtype == jnp.float32
    assert jd.Transform.identity(jnp.float32).R.dtype == jnp.float32


# --------------------------------------------------------------------------------------------
# spatial vectors


def test_act_motion_matches_plucker_matrix():
    rng = _rng()
    X = _random_transform(rng)
    V = rng.normal(size=(4, 6))
    Xm = _np_motion_matrix(np.asarray(X.R), np.asarray(X.p))
    assert_tree_allclose(X.motion_matrix(), Xm, **TOL)
    assert_tree_allclose(X.act_motion(V), V @ Xm.T, **TOL)
    assert_tree_allclose(X.inverse_act_motion(X.act_motion(V)), V, **TOL)
    assert_tree_allclose(X.inverse_act_motion(V), X.inverse().act_motion(V), **TOL)
    # Composition: (X1 X2) V = X1 (X2 V).
    X2 = _random_transform(rng)
    assert_tree_allclose((X @ X2).act_motion(V), X.act_motion(X2.act_motion(V)), **TOL)


def test_act_force_duality():
    rng = _rng()
    X = _random_transform(rng)
    V, F = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    # Forces transform with X⁻ᵀ ...
    Xf = np.linalg.inv(np.asarray(X.motion_matrix())).T
    assert_tree_allclose(X.act_force(F), F @ Xf.T, **TOL)
    assert_tree_allclose(X.inverse_act_force(X.act_force(F)), F, **TOL)
    assert_tree_allclose(X.inverse_act_force(F), X.inverse().act_force(F), **TOL)
    # ... so that power is frame-independent.
    power = np.sum(np.asarray(X.act_force(F)) * np.asarray(X.act_motion(V)), -1)
    assert_tree_allclose(power, np.sum(F * V, -1), **TOL)


def test_act_force_moves_the_moment_point():
    """A pure force f applied at B's origin has moment p × f about A's origin."""
    X = jd.Transform(np.eye(3), np.array([1.0, 2.0, 3.0]))
    f = np.array([0.0, 0.0, 5.0])
    F_A = X.act_force(np.concatenate([np.zeros(3), f]))
    assert_tree_allclose(F_A, np.concatenate([np.cross([1.0, 2.0, 3.0], f), f]), **TOL)
    # A body spinning about B's origin moves A's origin with w × (Ao − Bo) = p × w.
    w = np.array([0.0, 0.0, 2.0])
    V_A = X.act_motion(np.concatenate([w, np.zeros(3)]))
    assert_tree_allclose(V_A, np.concatenate([w, np.cross(w, -np.array([1.0, 2.0, 3.0]))]), **TOL)


def _twist_matrix(V):
    """4×4 se(3) matrix [[ŵ, v], [0, 0]] of a spatial motion vector."""
    T = np.zeros((4, 4))
    T[:3, :3], T[:3, 3] = np_skew(V[:3]), V[3:]
    return T


def test_motion_cross_is_lie_bracket():
    rng = _rng()
    V, M = rng.normal(size=6), rng.normal(size=6)
    bracket = _twist_matrix(V) @ _twist_matrix(M) - _twist_matrix(M) @ _twist_matrix(V)
    expected = np.concatenate([[bracket[2, 1], bracket[0, 2], bracket[1, 0]], bracket[:3, 3]])
    assert_tree_allclose(jd.motion_cross(V, M), expected, **TOL)
    assert_tree_allclose(motion_cross_matrix(V) @ M, expected, **TOL)
    assert_tree_allclose(jd.motion_cross(V, V), np.zeros(6), **TOL)


def test_force_cross_duality():
    rng = _rng()
    V, M, F = rng.normal(size=(3, 5, 6))
    lhs = np.sum(np.asarray(jd.force_cross(V, F)) * M, -1)
    rhs = -np.sum(F * np.asarray(jd.motion_cross(V, M)), -1)
    assert_tree_allclose(lhs, rhs, **TOL)
    expected = -np.einsum("bji,bj->bi", np.asarray(motion_cross_matrix(V)), F)
    assert_tree_allclose(jd.force_cross(V, F), expected, **TOL)


def test_skew():
    rng = _rng()
    w, u = rng.normal(size=(2, 3))
    assert_tree_allclose(skew(w) @ u, np.cross(w, u), **TOL)


# --------------------------------------------------------------------------------------------
# spatial inertia


def _random_inertia(rng):
    A = rng.normal(size=(3, 3))
    I_C = A @ A.T + 0.1 * np.eye(3)
    return jd.SpatialInertia(rng.uniform(0.5, 3.0), rng.normal(size=3), I_C)


def test_spatial_inertia_apply_and_energy():
    rng = _rng()
    I = _random_inertia(rng)
    V = rng.normal(size=(4, 6))
    M = np.asarray(I.as_matrix())
    assert_tree_allclose(M, M.T, **TOL)
    assert np.all(np.linalg.eigvalsh(M) > 0)
    assert_tree_allclose(I.apply(V), V @ M.T, **TOL)
    # Kinetic energy from the centre of mass: ½ m |v + w × c|² + ½ wᵀ I_C w.
    w, v = V[:, :3], V[:, 3:]
    m, c, I_C = float(I.mass), np.asarray(I.com), np.asarray(I.inertia)
    v_com = v + np.cross(w, c)
    ke = 0.5 * m * np.sum(v_com**2, -1) + 0.5 * np.einsum("bi,ij,bj->b", w, I_C, w)
    assert_tree_allclose(0.5 * np.sum(V * np.asarray(I.apply(V)), -1), ke, **TOL)


def test_spatial_inertia_transform():
    rng = _rng()
    I_B, X_AB = _random_inertia(rng), _random_transform(rng)
    V_B = rng.normal(size=(4, 6))
    I_A = I_B.transform(X_AB)
    V_A = X_AB.act_motion(V_B)
    ke_A = np.sum(np.asarray(V_A) * np.asarray(I_A.apply(V_A)), -1)
    ke_B = np.sum(V_B * np.asarray(I_B.apply(V_B)), -1)
    assert_tree_allclose(ke_A, ke_B, **TOL)
    # As matrices: I_A = X⁻ᵀ I_B X⁻¹ with X the motion transform.
    Xm_inv = np.linalg.inv(np.asarray(X_AB.motion_matrix()))
    assert_tree_allclose(I_A.as_matrix(), Xm_inv.T @ np.asarray(I_B.as_matrix()) @ Xm_inv, **TOL)
    # Momentum transforms as a force.
    assert_tree_allclose(I_A.apply(V_A), X_AB.act_force(I_B.apply(V_B)), **TOL)


def test_spatial_inertia_addition():
    rng = _rng()
    I1, I2 = _random_inertia(rng), _random_inertia(rng)
    total = I1 + I2
    # Parallel-axis theorem: the sum about the origin is the sum of the 6×6 matrices.
    assert_tree_allclose(total.as_matrix(), I1.as_matrix() + I2.as_matrix(), **TOL)
    assert_tree_allclose(total.mass, I1.mass + I2.mass, **TOL)
    assert_tree_allclose(total.com, (I1.mass * I1.com + I2.mass * I2.com) / total.mass, **TOL)
    zero = jd.SpatialInertia.zero()
    assert tree_allclose((I1 + zero).as_matrix(), I1.as_matrix(), **TOL)
    massless = zero + zero
    assert np.all(np.isfinite(massless.com)) and np.all(np.asarray(massless.as_matrix()) == 0)
    # Batched inertias add elementwise.
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), I1, I2)
    assert_tree_allclose((stacked + stacked).as_matrix()[1], (I2 + I2).as_matrix(), **TOL)


def test_skew_is_the_cross_product_matrix_and_checks_its_shape():
    """`skew(w) u = w × u` on batched input (against NumPy), and a clear error otherwise."""
    rng = np.random.default_rng(0)
    w, u = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 3))
    S = skew(jnp.asarray(w))
    assert S.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(
        np.einsum("...ij,...j->...i", S, u), np.cross(w, u), rtol=1e-13, atol=1e-13
    )
    np.testing.assert_array_equal(S, -np.swapaxes(S, -1, -2))
    with pytest.raises(ValueError, match="skew"):
        skew(jnp.ones(4))
