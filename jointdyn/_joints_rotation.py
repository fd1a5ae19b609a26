"""Joints whose velocity is not `q̇`: `RevoluteUnbounded`, `SpaceXYZ`, `Ball`, `Free`.

Angular velocities here are `w_FM_F` (measured in F, expressed in F), so configuration updates
multiply on the left: `R(q ⊕ v) = exp([w]×) R(q)`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._joint import AbstractJoint, JointParams, sample_box, unit_axis
from ._joints_vector import _spatial_columns, angle_about
from ._linalg import identity
from ._spatial import (
    Transform,
    cos_sin,
    cs_axis_to_rotmat,
    project_to_rotation,
    quat_conjugate,
    quat_exp,
    quat_log,
    quat_multiply,
    quat_normalize,
    quat_to_rotmat,
    rotmat_to_quat,
    skew,
    so3_exp,
    so3_log,
    unit_or,
)

SPACE_XYZ_SINGULARITY = 1e-3


def _quat_rate(quat: Float[Array, "4"], w_F: Float[Array, "3"]) -> Float[Array, "4"]:
    """`q̇ = ½ [0; w] ⊗ q` for an angular velocity expressed in F (left-multiplying)."""
    return 0.5 * quat_multiply(jnp.concatenate([jnp.zeros(1, w_F.dtype), w_F]), quat)


def _w_from_quat_rate(quat: Float[Array, "4"], qdot: Float[Array, "4"]) -> Float[Array, "3"]:
    """`w = 2 vec(q̇ ⊗ q*)`: the left inverse of `_quat_rate` for unit `q`."""
    return 2.0 * quat_multiply(qdot, quat_conjugate(quat))[1:]


def _so3_jacobian_coefficients(w: Float[Array, "3"]):
    """`(α, β, γ)` of the left Jacobian of SO(3) and its inverse, `θ = |w|`:

        J_l(w)   = 1 + α [w]× + β [w]×²,     α = (1 − cos θ)/θ²,  β = (θ − sin θ)/θ³
        J_l(w)⁻¹ = 1 − ½ [w]× + γ [w]×²,     γ = (1 − (θ/2) cot(θ/2))/θ²

    Taylor branches `α ≈ ½ − θ²/24`, `β ≈ ⅙ − θ²/120`, `γ ≈ 1/12 + θ²/720` near zero with the
    double-`where` trick (finite values and derivatives at `w = 0`); `γ` is finite for `θ < 2π`.
    """
    t2 = jnp.sum(w * w)
    small = t2 < jnp.finfo(w.dtype).eps ** 0.5
    t2s = jnp.where(small, 1.0, t2)
    t = jnp.sqrt(t2s)
    alpha = jnp.where(small, 0.5 - t2 / 24.0, (1.0 - jnp.cos(t)) / t2s)
    beta = jnp.where(small, 1.0 / 6.0 - t2 / 120.0, (t - jnp.sin(t)) / (t2s * t))
    half = 0.5 * t
    gamma = jnp.where(
        small, 1.0 / 12.0 + t2 / 720.0, (1.0 - half * jnp.cos(half) / jnp.sin(half)) / t2s
    )
    return alpha, beta, gamma


def so3_left_jacobian(w: Float[Array, "3"]) -> Float[Array, "3 3"]:
    """`J_l(w)`, with `exp([w + δ]×) = exp([J_l(w) δ]×) exp([w]×) + o(δ)`."""
    alpha, beta, _ = _so3_jacobian_coefficients(w)
    K = skew(w)
    return identity(3, dtype=w.dtype) + alpha * K + beta * (K @ K)


def so3_left_jacobian_inverse(w: Float[Array, "3"]) -> Float[Array, "3 3"]:
    """`J_l(w)⁻¹`, with `log(exp([δ]×) exp([w]×)) = w + J_l(w)⁻¹ δ + o(δ)` (`|w| < 2π`)."""
    _, _, gamma = _so3_jacobian_coefficients(w)
    K = skew(w)
    return identity(3, dtype=w.dtype) - 0.5 * K + gamma * (K @ K)


def _rotation_integrate_derivatives(w: Float[Array, "3"]):
    """`R⁺ = exp([w]×) R`: `(exp([w]×), J_l(w))` (`exp([w]×) exp([δ]×) = exp([R_w δ]×) exp([w]×)`)."""
    return so3_exp(w), so3_left_jacobian(w)


def _rotation_difference_derivatives(d: Float[Array, "3"]):
    """`d = log(R₁ R₀ᵀ)`: `(−J_l(d)⁻ᵀ, J_l(d)⁻¹)` (`J_l(d)⁻ᵀ = J_r(d)⁻¹ = J_l(−d)⁻¹`)."""
    inv = so3_left_jacobian_inverse(d)
    return -inv.T, inv


def _block_diag(A: Array, B: Array) -> Array:
    z = jnp.zeros((A.shape[0], B.shape[1]), A.dtype)
    return jnp.block([[A, z], [z.T, B]])


def _uniform_quaternion(u: Array) -> Array:
    """A quaternion uniform on SO(3) from three uniforms in `[0, 1)` (Shoemake 1992), `w ≥ 0`:
    `[√(1−u₀) sin 2πu₁, √(1−u₀) cos 2πu₁, √u₀ sin 2πu₂, √u₀ cos 2πu₂]`, reordered."""
    a, b = jnp.sqrt(1.0 - u[0]), jnp.sqrt(u[0])
    t1, t2 = 2 * jnp.pi * u[1], 2 * jnp.pi * u[2]
    q = jnp.stack([b * jnp.cos(t2), a * jnp.sin(t1), a * jnp.cos(t1), b * jnp.sin(t2)])
    return q * jnp.where(q[0] < 0, -1.0, 1.0)


def _unit_cs(q: Array) -> Array:
    """`[cos θ, sin θ] = q / |q|`, or `[1, 0]` (θ = 0) for `q = 0`."""
    return unit_or(q, jnp.asarray([1.0, 0.0], q.dtype))


class RevoluteUnbounded(AbstractJoint):
    """Unbounded rotation about `axis`, stored as `q = [cos θ, sin θ]` (no wrap-around).

    X_FM = (c 1 + s [a]× + (1 − c) a aᵀ, 0)    H_FM = [a; 0]
    q̇ = [−s, c] θ̇        v = −s q̇₀ + c q̇₁

    `X_FM` reads `[c, s] = q / |q|` (as Drake and MuJoCo normalise): a drifted `q` is still a
    rotation, and nothing that depends on `q` through `X_FM` changes along `q`'s radial rate.
    `q = 0` reads as θ = 0.
    """

    nq: ClassVar[int] = 2
    nv: ClassVar[int] = 1
    constant_hinge_at_F: ClassVar[bool] = True
    axis: Float[Array, "3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, axis: ArrayLike = (0.0, 0.0, 1.0), **params: Any):
        self.axis = unit_axis(axis)
        self.params = JointParams.create(2, 1, jnp.array([1.0, 0.0]), **params)

    def X_FM(self, q):
        c, s = _unit_cs(q)  # on the unit circle: invariant along q's radial rate
        R = cs_axis_to_rotmat(self.axis, c, s)
        return Transform(R, jnp.zeros(3, R.dtype))

    def H_FM(self, q):
        dt = jnp.result_type(q, self.axis)
        return _spatial_columns(self.axis.astype(dt)[:, None], None, 1, dt)

    def qdot_from_v(self, q, v):
        return jnp.stack([-q[1], q[0]]) * v[0]

    def v_from_qdot(self, q, qdot):
        return (-q[1] * qdot[0] + q[0] * qdot[1])[None]

    def neutral(self):
        return jnp.array([1.0, 0.0], self.axis.dtype)

    def integrate(self, q, v):
        c, s = jnp.cos(v[0]), jnp.sin(v[0])
        return jnp.stack([q[0] * c - q[1] * s, q[1] * c + q[0] * s])

    def difference(self, q0, q1):
        return jnp.arctan2(q0[0] * q1[1] - q0[1] * q1[0], q0[0] * q1[0] + q0[1] * q1[1])[None]

    def integrate_derivatives(self, q, v):
        """Angles add: `(1, 1)`."""
        one = jnp.ones((1, 1), jnp.result_type(q, v))
        return one, one

    def difference_derivatives(self, q0, q1):
        """Angles subtract: `(−1, 1)`."""
        one = jnp.ones((1, 1), jnp.result_type(q0, q1))
        return -one, one

    n_uniform: ClassVar[int] = 1

    def configuration_from_uniform(self, u, lower=None, upper=None):
        """Uniform angle; the limits (on `[cos θ, sin θ]`) are ignored."""
        t = jnp.pi * (2 * u[0].astype(self.axis.dtype) - 1)
        return jnp.stack([jnp.cos(t), jnp.sin(t)])

    def normalize(self, q):
        return _unit_cs(q)

    def q_from_X_FM(self, X_FM):
        t = angle_about(self.axis, X_FM.R)
        return jnp.stack([jnp.cos(t), jnp.sin(t)])


class SpaceXYZ(AbstractJoint):
    """Three rotations about the axes of F: `R_FM = Rz(θ₃) Ry(θ₂) Rx(θ₁)`; `v = w_FM_F`.

    Drake's `SpaceXYZMobilizer`. `H_FM = [1; 0]` is constant. The angle rates are

        θ̇₁ = (cz w₀ + sz w₁) / cy
        θ̇₂ = −sz w₀ + cz w₁
        θ̇₃ = w₂ + sy θ̇₁          (cy = cos θ₂, sy = sin θ₂, cz = cos θ₃, sz = sin θ₃)

    so `N(q)` is singular where `cos θ₂ = 0` (gimbal lock). With `check_singularity=True`
    (the default) `qdot_from_v` raises through `eqx.error_if` when `|cos θ₂| < 1e-3`, as Drake
    does; with `False` it returns the unguarded (possibly huge) rates.
    """

    nq: ClassVar[int] = 3
    nv: ClassVar[int] = 3
    constant_hinge_at_F: ClassVar[bool] = True
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)
    check_singularity: bool = eqx.field(static=True)

    def __init__(self, check_singularity: bool = True, **params: Any):
        self.check_singularity = bool(check_singularity)
        self.params = JointParams.create(3, 3, jnp.zeros(3), **params)

    @staticmethod
    def _rotation(q):
        eye = identity(3, dtype=q.dtype)
        c, s = cos_sin(q)
        Rx = cs_axis_to_rotmat(eye[0], c[0], s[0])
        Ry = cs_axis_to_rotmat(eye[1], c[1], s[1])
        Rz = cs_axis_to_rotmat(eye[2], c[2], s[2])
        return Rz @ Ry @ Rx

    @staticmethod
    def _angles(R):
        a = jnp.arctan2(R[2, 1], R[2, 2])
        b = jnp.arctan2(-R[2, 0], jnp.sqrt(R[0, 0] ** 2 + R[1, 0] ** 2))
        c = jnp.arctan2(R[1, 0], R[0, 0])
        return jnp.stack([a, b, c])

    def X_FM(self, q):
        R = self._rotation(q)
        return Transform(R, jnp.zeros(3, R.dtype))

    def H_FM(self, q):
        return _spatial_columns(identity(3, dtype=q.dtype), None, 3, q.dtype)

    def qdot_from_v(self, q, v):
        cy, sy = jnp.cos(q[1]), jnp.sin(q[1])
        cz, sz = jnp.cos(q[2]), jnp.sin(q[2])
        if self.check_singularity:
            cy = eqx.error_if(
                cy,
                jnp.abs(cy) < SPACE_XYZ_SINGULARITY,
                "SpaceXYZ.qdot_from_v: |cos θ₂| < 1e-3, the map from w_FM to angle rates is "
                "singular (gimbal lock); use Ball or reparametrise",
            )
        t1 = (cz * v[0] + sz * v[1]) / cy
        t2 = -sz * v[0] + cz * v[1]
        t3 = v[2] + sy * t1
        return jnp.stack([t1, t2, t3])

    def v_from_qdot(self, q, qdot):
        """`w = E(q) θ̇`, `E = [Rz Ry eₓ, Rz e_y, e_z]` (never singular)."""
        cy, sy = jnp.cos(q[1]), jnp.sin(q[1])
        cz, sz = jnp.cos(q[2]), jnp.sin(q[2])
        w0 = cz * cy * qdot[0] - sz * qdot[1]
        w1 = sz * cy * qdot[0] + cz * qdot[1]
        w2 = -sy * qdot[0] + qdot[2]
        return jnp.stack([w0, w1, w2])

    def neutral(self):
        return jnp.zeros(3, self.params.position_lower.dtype)

    def integrate(self, q, v):
        """`R(q') = exp([v]×) R(q)`; the angles of `q'` are unwrapped to lie nearest `q`.

        Every rotation has two angle triples, `(θ₁, θ₂, θ₃)` and `(θ₁ + π, π − θ₂, θ₃ + π)`;
        `_angles` returns the one with `|θ₂| ≤ π/2`, so the nearer of the two (each unwrapped
        by 2π) is kept: then `integrate(q, 0) = q` for every `q`, `|θ₂| > π/2` included.
        """
        ang = self._angles(so3_exp(v) @ self._rotation(q))
        twin = jnp.stack([ang[0] + jnp.pi, jnp.pi - ang[1], ang[2] + jnp.pi])
        ang, twin = (x + 2 * jnp.pi * jnp.round((q - x) / (2 * jnp.pi)) for x in (ang, twin))
        return jnp.where(jnp.sum((ang - q) ** 2) <= jnp.sum((twin - q) ** 2), ang, twin)

    def difference(self, q0, q1):
        """`log(R(q1) R(q0)ᵀ)`, the `w_FM_F` carrying q0 to q1 in unit time."""
        return so3_log(self._rotation(q1) @ self._rotation(q0).T)

    def integrate_derivatives(self, q, v):
        """As `Ball`'s: the tangent space is `w_FM_F` at `R(q)` (`R(q ⊕ v) = exp([v]×) R(q)`)."""
        return _rotation_integrate_derivatives(v.astype(jnp.result_type(q, v)))

    def difference_derivatives(self, q0, q1):
        """As `Ball`'s, at `d = log(R(q1) R(q0)ᵀ)`."""
        return _rotation_difference_derivatives(self.difference(q0, q1))

    def configuration_from_uniform(self, u, lower=None, upper=None):
        p = self.params
        lower = p.position_lower if lower is None else jnp.asarray(lower, p.position_lower.dtype)
        upper = p.position_upper if upper is None else jnp.asarray(upper, p.position_upper.dtype)
        return sample_box(u, lower, upper, jnp.pi)

    def normalize(self, q):
        return q

    def q_from_X_FM(self, X_FM):
        """Drake's `SetFromRotationMatrix`: project to the nearest rotation, then extract angles."""
        return self._angles(project_to_rotation(X_FM.R))


class Ball(AbstractJoint):
    """Spherical joint: `q` a unit quaternion `[w, x, y, z]` (R_FM), `v = w_FM_F`.

    X_FM = (R(q / |q|), 0)    H_FM = [1; 0]    q̇ = ½ [0; w] ⊗ q    q ⊕ w = exp(w) ⊗ q

    `X_FM` normalises `q` (as Drake and MuJoCo do): a drifted `q` is still a rotation, and
    nothing that depends on `q` through `X_FM` changes along `q`'s radial rate. `q = 0` reads
    as the identity (as MuJoCo does), with zero derivative rather than NaN.
    """

    nq: ClassVar[int] = 4
    nv: ClassVar[int] = 3
    constant_hinge_at_F: ClassVar[bool] = True
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, **params: Any):
        self.params = JointParams.create(4, 3, jnp.array([1.0, 0.0, 0.0, 0.0]), **params)

    def X_FM(self, q):
        R = quat_to_rotmat(quat_normalize(q))  # invariant along q's radial rate
        return Transform(R, jnp.zeros(3, R.dtype))

    def H_FM(self, q):
        return _spatial_columns(identity(3, dtype=q.dtype), None, 3, q.dtype)

    def qdot_from_v(self, q, v):
        return _quat_rate(q, v)

    def v_from_qdot(self, q, qdot):
        return _w_from_quat_rate(q, qdot)

    def neutral(self):
        return jnp.array([1.0, 0.0, 0.0, 0.0], self.params.position_lower.dtype)

    def integrate(self, q, v):
        return quat_multiply(quat_exp(v), q)

    def difference(self, q0, q1):
        return quat_log(quat_multiply(q1, quat_conjugate(q0)))

    def integrate_derivatives(self, q, v):
        """`q ⊕ w = exp(w) ⊗ q`: `(exp([w]×), J_l(w))` (see `AbstractJoint`)."""
        return _rotation_integrate_derivatives(v.astype(jnp.result_type(q, v)))

    def difference_derivatives(self, q0, q1):
        """`d = log(q1 ⊗ q0*)`: `(−J_l(d)⁻ᵀ, J_l(d)⁻¹)`."""
        return _rotation_difference_derivatives(self.difference(q0, q1))

    n_uniform: ClassVar[int] = 3

    def configuration_from_uniform(self, u, lower=None, upper=None):
        """Uniform on SO(3) (limits on quaternion coordinates are ignored)."""
        return _uniform_quaternion(u.astype(self.params.position_lower.dtype))

    def normalize(self, q):
        return quat_normalize(q)

    def q_from_X_FM(self, X_FM):
        return rotmat_to_quat(project_to_rotation(X_FM.R))


class Free(AbstractJoint):
    """Six degrees of freedom: `q = [qw, qx, qy, qz, x, y, z]`, `v = [w_FM_F; v_FMo_F]`.

        X_FM = (R(quat / |quat|), p)    H_FM = 1₆    q̇ = [½ [0; w] ⊗ quat; v]
        q ⊕ v = [exp(w) ⊗ quat; p + v]     (SO(3) × R³ with velocities in F)

    Position limits apply to `x, y, z` only (entries 4..6). `X_FM` normalises `quat`, as
    `Ball` does.
    """

    nq: ClassVar[int] = 7
    nv: ClassVar[int] = 6
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (1.0, 1.0)
    translation_coordinates: ClassVar[tuple[int, ...]] = (4, 5, 6)

    def __init__(self, **params: Any):
        neutral = jnp.array([1.0, 0, 0, 0, 0, 0, 0])
        self.params = JointParams.create(7, 6, neutral, **params)

    def X_FM(self, q):
        return Transform(quat_to_rotmat(quat_normalize(q[:4])), q[4:])

    def H_FM(self, q):
        return identity(6, dtype=q.dtype)

    def qdot_from_v(self, q, v):
        return jnp.concatenate([_quat_rate(q[:4], v[:3]), v[3:]])

    def v_from_qdot(self, q, qdot):
        return jnp.concatenate([_w_from_quat_rate(q[:4], qdot[:4]), qdot[4:]])

    def neutral(self):
        return jnp.array([1.0, 0, 0, 0, 0, 0, 0], self.params.position_lower.dtype)

    def integrate(self, q, v):
        return jnp.concatenate([quat_multiply(quat_exp(v[:3]), q[:4]), q[4:] + v[3:]])

    def difference(self, q0, q1):
        dq = quat_log(quat_multiply(q1[:4], quat_conjugate(q0[:4])))
        return jnp.concatenate([dq, q1[4:] - q0[4:]])

    def integrate_derivatives(self, q, v):
        """SO(3) × R³: `(diag(exp([w]×), 1), diag(J_l(w), 1))` (not SE(3)'s Jacobians)."""
        dt = jnp.result_type(q, v)
        Jq, Jv = _rotation_integrate_derivatives(v[:3].astype(dt))
        return _block_diag(Jq, identity(3, dtype=dt)), _block_diag(Jv, identity(3, dtype=dt))

    def difference_derivatives(self, q0, q1):
        """SO(3) × R³: `(diag(−J_l(d)⁻ᵀ, −1), diag(J_l(d)⁻¹, 1))`, `d` the rotation part."""
        dt = jnp.result_type(q0, q1)
        J0, J1 = _rotation_difference_derivatives(self.difference(q0, q1)[:3])
        eye = identity(3, dtype=dt)
        return _block_diag(J0, -eye), _block_diag(J1, eye)

    n_uniform: ClassVar[int] = 6

    def configuration_from_uniform(self, u, lower=None, upper=None):
        """Uniform rotation; position uniform in the limits (entries 4..6, ±1 where infinite)."""
        p = self.params
        dt = p.position_lower.dtype
        lower = p.position_lower if lower is None else jnp.asarray(lower, dt)
        upper = p.position_upper if upper is None else jnp.asarray(upper, dt)
        pos = sample_box(u[3:], lower[4:], upper[4:], 1.0)
        return jnp.concatenate([_uniform_quaternion(u[:3].astype(dt)), pos])

    def normalize(self, q):
        return jnp.concatenate([quat_normalize(q[:4]), q[4:]])

    def q_from_X_FM(self, X_FM):
        return jnp.concatenate([rotmat_to_quat(project_to_rotation(X_FM.R)), X_FM.p])
