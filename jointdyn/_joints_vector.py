"""Joints whose configuration space is a vector space and whose velocity is `v = q̇`.

`Weld`, `Revolute`, `Prismatic`, `Screw`, `Cylindrical`, `Universal`, `Gimbal`, `Planar`,
`Translational`. For all of them `N(q) = 1`, `q ⊕ v = q + v`, `q1 ⊖ q0 = q1 − q0`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._joint import AbstractJoint, JointParams, is_concrete, sample_box, unit_axis
from ._linalg import identity
from ._spatial import (
    Transform,
    axis_angle_to_rotmat,
    cos_sin,
    cs_axis_to_rotmat,
    project_to_rotation,
)

_PERPENDICULAR_TOL = 1e-6


def _dtype(*xs) -> Any:
    return jnp.result_type(*xs)


def _zeros3(dtype) -> Array:
    return jnp.zeros(3, dtype)


def angle_about(axis: Float[Array, "3"], R: Float[Array, "3 3"]) -> Float[Array, ""]:
    """Angle θ maximising `tr(R(axis, θ)ᵀ R)`: the best rotation about `axis` fitting `R`.

    `θ = atan2(2 aᵀ vee(R), tr R − aᵀ R a)`; exact when `R` is a rotation about `axis`.
    """
    r = jnp.stack([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    return jnp.arctan2(axis @ r, jnp.trace(R) - axis @ R @ axis)


def _spatial_columns(rot: Array | None, trans: Array | None, nv: int, dtype) -> Array:
    """Stack 3×nv rotational and translational blocks (None = zeros) into a 6×nv hinge matrix."""
    z = jnp.zeros((3, nv), dtype)
    return jnp.concatenate([z if rot is None else rot, z if trans is None else trans], 0)


def _check_perpendicular(axes: list[Array], names: list[str]) -> None:
    if not all(is_concrete(a) for a in axes):
        return
    for i in range(len(axes)):
        for j in range(i + 1, len(axes)):
            d = float(np.dot(np.asarray(axes[i]), np.asarray(axes[j])))
            if abs(d) > _PERPENDICULAR_TOL:
                raise ValueError(
                    f"`{names[i]}` and `{names[j]}` must be perpendicular (dot product {d:.3g})"
                )


class AbstractVectorJoint(AbstractJoint):
    """Shared implementation for joints with `v = q̇` on a vector space.

    `angular` marks which coordinates are angles (sampled in ±π when unbounded; translations
    in ±1).
    """

    angular: eqx.AbstractClassVar[tuple[bool, ...]]

    def qdot_from_v(self, q, v):
        return v

    def v_from_qdot(self, q, qdot):
        return qdot

    def neutral(self):
        return jnp.zeros(self.nq, self.params.position_lower.dtype)

    def integrate(self, q, v):
        return q + v

    def difference(self, q0, q1):
        return q1 - q0

    def integrate_derivatives(self, q, v):
        """`q ⊕ v = q + v`: `(1, 1)`."""
        eye = identity(self.nv, dtype=jnp.result_type(q, v))
        return eye, eye

    def difference_derivatives(self, q0, q1):
        """`q1 ⊖ q0 = q1 − q0`: `(−1, 1)`."""
        eye = identity(self.nv, dtype=jnp.result_type(q0, q1))
        return -eye, eye

    def normalize(self, q):
        return q

    def configuration_from_uniform(self, u, lower=None, upper=None):
        p = self.params
        lower = p.position_lower if lower is None else jnp.asarray(lower, p.position_lower.dtype)
        upper = p.position_upper if upper is None else jnp.asarray(upper, p.position_upper.dtype)
        half = jnp.where(jnp.asarray(self.angular), jnp.pi, 1.0).astype(lower.dtype)
        return sample_box(u, lower, upper, half)


class Weld(AbstractVectorJoint):
    """No relative motion: `X_FM = identity`, nq = nv = 0."""

    nq: ClassVar[int] = 0
    nv: ClassVar[int] = 0
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = ()
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 0.0)

    def __init__(self, **params: Any):
        self.params = JointParams.create(0, 0, jnp.zeros(0), **params)

    def X_FM(self, q):
        return Transform.identity(_dtype(q, self.params.damping))

    def H_FM(self, q):
        return jnp.zeros((6, 0), _dtype(q, self.params.damping))

    def q_from_X_FM(self, X_FM):
        return jnp.zeros(0, X_FM.R.dtype)


class Revolute(AbstractVectorJoint):
    """Rotation by angle `q` about `axis` (right-hand rule), fixed in both F and M.

    X_FM = (R(a, θ), 0)    H_FM = [a; 0]    Ḣ_FM = 0
    """

    nq: ClassVar[int] = 1
    nv: ClassVar[int] = 1
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = (True,)
    axis: Float[Array, "3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, axis: ArrayLike = (0.0, 0.0, 1.0), **params: Any):
        self.axis = unit_axis(axis)
        self.params = JointParams.create(1, 1, jnp.zeros(1), **params)

    def X_FM(self, q):
        R = axis_angle_to_rotmat(self.axis, q[0])
        return Transform(R, _zeros3(R.dtype))

    def H_FM(self, q):
        dt = _dtype(q, self.axis)
        return _spatial_columns(self.axis.astype(dt)[:, None], None, 1, dt)

    def q_from_X_FM(self, X_FM):
        return angle_about(self.axis, X_FM.R)[None]


class Prismatic(AbstractVectorJoint):
    """Translation by `q` along `axis`.

    X_FM = (1, a q)    H_FM = [0; a]
    """

    nq: ClassVar[int] = 1
    nv: ClassVar[int] = 1
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = (False,)
    axis: Float[Array, "3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (1.0, 0.0)
    translation_coordinates: ClassVar[tuple[int, ...]] = (0,)

    def __init__(self, axis: ArrayLike = (0.0, 0.0, 1.0), **params: Any):
        self.axis = unit_axis(axis)
        self.params = JointParams.create(1, 1, jnp.zeros(1), **params)

    def X_FM(self, q):
        dt = _dtype(q, self.axis)
        return Transform(identity(3, dtype=dt), self.axis * q[0])

    def H_FM(self, q):
        dt = _dtype(q, self.axis)
        return _spatial_columns(None, self.axis.astype(dt)[:, None], 1, dt)

    def q_from_X_FM(self, X_FM):
        return (self.axis @ X_FM.p)[None]


class Screw(AbstractVectorJoint):
    """Rotation by angle `q` about `axis` coupled to translation `pitch · q` along it.

    X_FM = (R(a, θ), h θ a)    H_FM = [a; h a]    (h = pitch, metres per radian)
    """

    nq: ClassVar[int] = 1
    nv: ClassVar[int] = 1
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = (True,)
    axis: Float[Array, "3"]
    pitch: Float[Array, ""]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, axis: ArrayLike = (0.0, 0.0, 1.0), pitch: ArrayLike = 0.0, **params: Any):
        self.axis = unit_axis(axis)
        if np.shape(pitch) != ():
            raise ValueError(f"`pitch` must be a scalar, got shape {np.shape(pitch)}")
        self.pitch = jnp.asarray(pitch, dtype=self.axis.dtype)
        if is_concrete(self.pitch) and not np.isfinite(float(self.pitch)):
            raise ValueError(f"`pitch` must be finite, got {float(self.pitch)}")
        self.params = JointParams.create(1, 1, jnp.zeros(1), **params)

    def X_FM(self, q):
        R = axis_angle_to_rotmat(self.axis, q[0])
        return Transform(R, self.pitch * q[0] * self.axis)

    def H_FM(self, q):
        dt = _dtype(q, self.axis)
        a = self.axis.astype(dt)[:, None]
        return _spatial_columns(a, self.pitch * a, 1, dt)

    def velocity_bound_linear(self):
        """`|pitch|`: `v_FMo = h a θ̇` (see `AbstractJoint.velocity_bound_linear`)."""
        return jnp.abs(self.pitch)

    def _translation_bound(self, lower, upper):
        m = jnp.maximum(jnp.abs(lower[0]), jnp.abs(upper[0]))
        return jnp.where(self.pitch == 0, 0.0, jnp.abs(self.pitch) * m)

    def q_from_X_FM(self, X_FM):
        theta = angle_about(self.axis, X_FM.R)
        d = self.axis @ X_FM.p
        # Among θ + 2πk (same rotation) pick the k whose translation h θ is closest to d.
        safe_h = jnp.where(self.pitch == 0, 1.0, self.pitch)
        k = jnp.where(self.pitch == 0, 0.0, jnp.round((d / safe_h - theta) / (2 * jnp.pi)))
        return (theta + 2 * jnp.pi * k)[None]


class Cylindrical(AbstractVectorJoint):
    """Rotation `q[0]` about and translation `q[1]` along one `axis`.

    X_FM = (R(a, q₀), q₁ a)    H_FM = [[a, 0]; [0, a]]
    """

    nq: ClassVar[int] = 2
    nv: ClassVar[int] = 2
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = (True, False)
    axis: Float[Array, "3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (1.0, 1.0)
    translation_coordinates: ClassVar[tuple[int, ...]] = (1,)

    def __init__(self, axis: ArrayLike = (0.0, 0.0, 1.0), **params: Any):
        self.axis = unit_axis(axis)
        self.params = JointParams.create(2, 2, jnp.zeros(2), **params)

    def X_FM(self, q):
        return Transform(axis_angle_to_rotmat(self.axis, q[0]), q[1] * self.axis)

    def H_FM(self, q):
        dt = _dtype(q, self.axis)
        a = self.axis.astype(dt)[:, None]
        z = jnp.zeros((3, 1), dt)
        return _spatial_columns(jnp.concatenate([a, z], 1), jnp.concatenate([z, a], 1), 2, dt)

    def q_from_X_FM(self, X_FM):
        return jnp.stack([angle_about(self.axis, X_FM.R), self.axis @ X_FM.p])


def _rotation_basis(a1: Array, a2: Array) -> Array:
    """Right-handed orthonormal basis `B = [a1, a2, a1 × a2]` (columns)."""
    return jnp.stack([a1, a2, jnp.cross(a1, a2)], 1)


def _xyz_body_angles(Rp: Array) -> Array:
    """Angles (a, b, c) with `Rp ≈ Rx(a) Ry(b) Rz(c)`, `b ∈ [−π/2, π/2]`."""
    a = jnp.arctan2(-Rp[1, 2], Rp[2, 2])
    b = jnp.arctan2(Rp[0, 2], jnp.sqrt(Rp[0, 0] ** 2 + Rp[0, 1] ** 2))
    c = jnp.arctan2(-Rp[0, 1], Rp[0, 0])
    return jnp.stack([a, b, c])


class Universal(AbstractVectorJoint):
    """Two perpendicular pins in series: about `axis1` (fixed in F), then `axis2` (fixed in M).

    R_FM = R(a₁, q₀) R(a₂, q₁)    H_FM = [[a₁, R(a₁, q₀) a₂]; 0]
    """

    nq: ClassVar[int] = 2
    nv: ClassVar[int] = 2
    angular: ClassVar[tuple[bool, ...]] = (True, True)
    axis1: Float[Array, "3"]
    axis2: Float[Array, "3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(
        self, axis1: ArrayLike = (1.0, 0.0, 0.0), axis2: ArrayLike = (0.0, 1.0, 0.0), **params: Any
    ):
        self.axis1 = unit_axis(axis1, "axis1")
        self.axis2 = unit_axis(axis2, "axis2")
        _check_perpendicular([self.axis1, self.axis2], ["axis1", "axis2"])
        self.params = JointParams.create(2, 2, jnp.zeros(2), **params)

    def _rotations(self, q):
        """`R(a₁, q₀)`, `R(a₂, q₁)` from one `cos_sin` of both angles (the hinge matrix and
        the pose share them)."""
        c, s = cos_sin(q)
        return cs_axis_to_rotmat(self.axis1, c[0], s[0]), cs_axis_to_rotmat(self.axis2, c[1], s[1])

    def X_FM(self, q):
        R1, R2 = self._rotations(q)
        R = R1 @ R2
        return Transform(R, _zeros3(R.dtype))

    def H_FM(self, q):
        R1, _ = self._rotations(q)
        rot = jnp.stack([self.axis1.astype(R1.dtype), R1 @ self.axis2], 1)
        return _spatial_columns(rot, None, 2, R1.dtype)

    def q_from_X_FM(self, X_FM):
        """`a₂` is fixed in M and moved by the first pin only: `R_FM a₂ = cos q₀ a₂ +
        sin q₀ (a₁ × a₂)` gives `q₀` for any `q₁` (an Euler-angle split would lose |q₁| > π/2);
        then `q₁` is the best rotation about `a₂` fitting `R(a₁, q₀)ᵀ R_FM`."""
        u = X_FM.R @ self.axis2
        q0 = jnp.arctan2(jnp.cross(self.axis1, self.axis2) @ u, self.axis2 @ u)
        R1 = axis_angle_to_rotmat(self.axis1, q0)
        return jnp.stack([q0, angle_about(self.axis2, R1.T @ X_FM.R)])


class Gimbal(AbstractVectorJoint):
    """Three perpendicular pins in series about `axes[0]`, `axes[1]`, `axes[2]` (default x, y, z).

    R_FM = R(a₁, q₀) R(a₂, q₁) R(a₃, q₂)
    H_FM = [[a₁, R₁ a₂, R₁ R₂ a₃]; 0]      (rank-deficient at gimbal lock, |cos q₁| = 0)
    """

    nq: ClassVar[int] = 3
    nv: ClassVar[int] = 3
    angular: ClassVar[tuple[bool, ...]] = (True, True, True)
    axes: Float[Array, "3 3"]
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (0.0, float(np.sqrt(2.0)))

    def __init__(
        self, axes: ArrayLike = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)), **params: Any
    ):
        if np.shape(axes) != (3, 3):
            raise ValueError(f"`axes` must be three 3-vectors (3×3), got shape {np.shape(axes)}")
        rows = [unit_axis(jnp.asarray(axes)[i], f"axes[{i}]") for i in range(3)]
        _check_perpendicular(rows, ["axes[0]", "axes[1]", "axes[2]"])
        self.axes = jnp.stack(rows)
        self.params = JointParams.create(3, 3, jnp.zeros(3), **params)

    def _partials(self, q):
        """`R₁`, `R₁ R₂`, `R₁ R₂ R₃` (`Rᵢ = R(aᵢ, qᵢ₋₁)`) from one `cos_sin` of the angles."""
        c, s = cos_sin(q)
        R1, R2, R3 = (cs_axis_to_rotmat(self.axes[i], c[i], s[i]) for i in range(3))
        R12 = R1 @ R2
        return R1, R12, R12 @ R3

    def X_FM(self, q):
        R = self._partials(q)[2]
        return Transform(R, _zeros3(R.dtype))

    def H_FM(self, q):
        R1, R12, _ = self._partials(q)
        rot = jnp.stack([self.axes[0].astype(R1.dtype), R1 @ self.axes[1], R12 @ self.axes[2]], 1)
        return _spatial_columns(rot, None, 3, R1.dtype)

    def q_from_X_FM(self, X_FM):
        a1, a2, a3 = self.axes
        s = a3 @ jnp.cross(a1, a2)  # ±1: handedness of the third axis
        B = _rotation_basis(a1, a2)
        ang = _xyz_body_angles(B.T @ project_to_rotation(X_FM.R) @ B)
        return ang * jnp.stack([jnp.ones_like(s), jnp.ones_like(s), s])


_PLANES = {"xy": (0, 1, 2), "xz": (0, 2, 1), "yz": (1, 2, 0)}


class Planar(AbstractVectorJoint):
    """Translation in a plane of F and rotation about its normal: `q = [x, y, θ]`.

    `plane` is "xy" (translate along x, y; rotate about z), "xz" (x, z; about y) or "yz"
    (y, z; about x). With `t₁, t₂` the in-plane unit axes and `n` the rotation axis:

        X_FM = (R(n, θ), x t₁ + y t₂)    H_FM = [[0, 0, n]; [t₁, t₂, 0]]
    """

    nq: ClassVar[int] = 3
    nv: ClassVar[int] = 3
    angular: ClassVar[tuple[bool, ...]] = (False, False, True)
    plane: str = eqx.field(static=True)
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (1.0, 1.0)
    translation_coordinates: ClassVar[tuple[int, ...]] = (0, 1)

    def __init__(self, plane: str = "xy", **params: Any):
        if plane not in _PLANES:
            raise ValueError(f"`plane` must be one of {sorted(_PLANES)}, got {plane!r}")
        self.plane = plane
        self.params = JointParams.create(3, 3, jnp.zeros(3), **params)

    def _axes(self, dtype):
        i, j, k = _PLANES[self.plane]
        eye = identity(3, dtype=dtype)
        return eye[i], eye[j], eye[k]

    def X_FM(self, q):
        t1, t2, n = self._axes(q.dtype)
        return Transform(axis_angle_to_rotmat(n, q[2]), q[0] * t1 + q[1] * t2)

    def H_FM(self, q):
        t1, t2, n = self._axes(q.dtype)
        z = jnp.zeros(3, q.dtype)
        return _spatial_columns(jnp.stack([z, z, n], 1), jnp.stack([t1, t2, z], 1), 3, q.dtype)

    def q_from_X_FM(self, X_FM):
        t1, t2, n = self._axes(X_FM.R.dtype)
        return jnp.stack([t1 @ X_FM.p, t2 @ X_FM.p, angle_about(n, X_FM.R)])


class Translational(AbstractVectorJoint):
    """Free translation: `q = p_FM = [x, y, z]`.

    X_FM = (1, q)    H_FM = [0; 1]
    """

    nq: ClassVar[int] = 3
    nv: ClassVar[int] = 3
    constant_hinge_at_F: ClassVar[bool] = True
    angular: ClassVar[tuple[bool, ...]] = (False, False, False)
    params: JointParams
    velocity_bounds: ClassVar[tuple[float, float]] = (1.0, 0.0)
    translation_coordinates: ClassVar[tuple[int, ...]] = (0, 1, 2)

    def __init__(self, **params: Any):
        self.params = JointParams.create(3, 3, jnp.zeros(3), **params)

    def X_FM(self, q):
        return Transform(identity(3, dtype=q.dtype), q)

    def H_FM(self, q):
        return _spatial_columns(None, identity(3, dtype=q.dtype), 3, q.dtype)

    def q_from_X_FM(self, X_FM):
        return X_FM.p
