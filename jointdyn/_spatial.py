"""Spatial algebra: rotations, rigid transforms, spatial vectors and spatial inertia.

Conventions (see DESIGN.md):

- Spatial motion vectors are `[w; v]` (rotational part first), spatial forces `[n; f]`
  (torque about the reference point first).
- `X_AB` is the pose of frame B in frame A: `p_A = X_AB.apply(p_B)`.
- Quaternions are `[w, x, y, z]`.

Everything here is a pure function of arrays and broadcasts over leading batch axes where it
says so. Functions with a singular point (`so3_exp`, `so3_log`, `quat_exp`) use a Taylor branch
and the double-`where` trick so reverse-mode derivatives are finite at zero angle.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._linalg import add, cross, identity, matmul, matvec, mul, parts, rmatvec, sub
from ._traversal import materialized

# --------------------------------------------------------------------------------------------
# small vector helpers


def skew(w: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """`[w]×`, the matrix with `[w]× u = w × u`: its nine entries concatenated and reshaped
    (seven equations; three nested stacks of scalars traced 26)."""
    w = jnp.asarray(w)
    if w.ndim == 0 or w.shape[-1] != 3:
        raise ValueError(f"skew: expected a (..., 3) array, got shape {w.shape}")
    x, y, z = parts(w, -1)
    o = jnp.zeros_like(x)
    entries = jnp.concatenate([o, -z, y, z, o, -x, -y, x, o], -1)
    return entries.reshape(w.shape[:-1] + (3, 3))


def parallel_axis(c: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """`|c|² 1 − c cᵀ`: the rotational inertia of a unit point mass at `c` about the origin
    (the parallel-axis term; times the mass, it moves an inertia from the centre of mass)."""
    eye = identity(3, c.dtype)
    return sub(
        mul(jnp.sum(mul(c, c), -1)[..., None, None], eye), mul(c[..., :, None], c[..., None, :])
    )


def vee(S: Float[Array, "... 3 3"]) -> Float[Array, "... 3"]:
    """Inverse of `skew` applied to the skew part: `vee(S) = ½[S32 − S23, S13 − S31, S21 − S12]`."""
    return 0.5 * jnp.stack(
        [S[..., 2, 1] - S[..., 1, 2], S[..., 0, 2] - S[..., 2, 0], S[..., 1, 0] - S[..., 0, 1]], -1
    )


def _as_float(x: ArrayLike) -> Array:
    """An array of `x`, promoted to JAX's default float dtype if it is not floating already."""
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def _safe_norm_sq(x: Float[Array, "... n"]) -> Float[Array, "..."]:
    return jnp.sum(x * x, axis=-1)


# --------------------------------------------------------------------------------------------
# SO(3)


def so3_exp(w: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """Rodrigues: `exp([w]×) = I + (sin θ/θ)[w]× + ((1 − cos θ)/θ²)[w]×²`, `θ = |w|`.

    Taylor branch below `θ² < eps` with the double-`where` trick: finite gradients at `w = 0`.
    """
    t2 = _safe_norm_sq(w)
    eps = jnp.finfo(w.dtype).eps
    small = t2 < eps**0.5
    t2s = jnp.where(small, 1.0, t2)
    t = jnp.sqrt(t2s)
    a = jnp.where(small, 1.0 - t2 / 6.0, jnp.sin(t) / t)
    b = jnp.where(small, 0.5 - t2 / 24.0, (1.0 - jnp.cos(t)) / t2s)
    K = skew(w)
    eye = identity(3, w.dtype)
    return eye + a[..., None, None] * K + b[..., None, None] * matmul(K, K)


def cos_sin(angle: Float[Array, "..."]) -> tuple[Array, Array]:
    """`(cos θ, sin θ)`, evaluated once in a kernel of their own (`_traversal.materialized`).

    A joint's rotation, hinge matrix and their tangents all read the same `cos θ` and `sin θ`;
    left to itself, XLA fuses the `sin`/`cos` into each consumer and evaluates them once per
    element read: a 12-body `Gimbal` chain's batched RNEA spent a third of its time in libm,
    with ~24 evaluations per angle (`benchmarks/NOTES.md`, thirtieth session)."""
    cs = materialized(jnp.stack([jnp.cos(angle), jnp.sin(angle)]))
    return cs[0], cs[1]


def axis_angle_to_rotmat(axis: Float[Array, "... 3"], angle: Float[Array, "..."]) -> Array:
    """`R(a, θ) = cos θ I + sin θ [a]× + (1 − cos θ) a aᵀ` for a unit axis `a` (no singularity)."""
    c, s = jnp.cos(angle)[..., None, None], jnp.sin(angle)[..., None, None]
    return cs_axis_to_rotmat(axis, c, s)


def cs_axis_to_rotmat(axis: Array, c: Array, s: Array) -> Array:
    """Rotation about unit `axis` given `c = cos θ`, `s = sin θ` (each broadcastable to (...,1,1))."""
    eye = identity(3, axis.dtype)
    aaT = mul(axis[..., :, None], axis[..., None, :])
    return add(add(mul(c, eye), mul(s, skew(axis))), mul(sub(1.0, c), aaT))


def so3_log(R: Float[Array, "... 3 3"]) -> Float[Array, "... 3"]:
    """Rotation vector `w` with `so3_exp(w) = R`, `|w| ≤ π`, via the quaternion of `R`."""
    return quat_log(rotmat_to_quat(R))


def project_to_rotation(A: Float[Array, "... 3 3"], iterations: int = 12) -> Array:
    """Nearest rotation to `A` (orthogonal polar factor) by Newton's iteration `A ← ½(A + A⁻ᵀ)`.

    Converges quadratically for inputs near a rotation; differentiable everywhere `A` is
    invertible (unlike an SVD, whose gradient is undefined at repeated singular values).
    """
    for _ in range(iterations):
        A = 0.5 * (A + jnp.swapaxes(jnp.linalg.inv(A), -1, -2))
    return A


def rpy_to_rotmat(rpy: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """URDF roll-pitch-yaw: `R = Rz(yaw) Ry(pitch) Rx(roll)`."""
    ex, ey, ez = (jnp.eye(3, dtype=rpy.dtype)[i] for i in range(3))
    Rx = axis_angle_to_rotmat(ex, rpy[..., 0])
    Ry = axis_angle_to_rotmat(ey, rpy[..., 1])
    Rz = axis_angle_to_rotmat(ez, rpy[..., 2])
    return Rz @ Ry @ Rx


# --------------------------------------------------------------------------------------------
# unit quaternions [w, x, y, z]


def quat_multiply(a: Float[Array, "... 4"], b: Float[Array, "... 4"]) -> Float[Array, "... 4"]:
    """Hamilton product `a ⊗ b` (so that `R(a ⊗ b) = R(a) R(b)`)."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = sub(mul(aw, bw), jnp.sum(mul(av, bv), -1, keepdims=True))
    v = add(add(mul(aw, bv), mul(bw, av)), cross(av, bv))
    return jnp.concatenate([w, v], -1)


def quat_conjugate(q: Float[Array, "... 4"]) -> Float[Array, "... 4"]:
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def quat_to_rotmat(q: Float[Array, "... 4"]) -> Float[Array, "... 3 3"]:
    """Rotation matrix of a unit quaternion `[w, x, y, z]`."""
    w, x, y, z = parts(q, -1, False)
    r00 = sub(1.0, mul(2.0, add(mul(y, y), mul(z, z))))
    r01 = mul(2.0, sub(mul(x, y), mul(w, z)))
    r02 = mul(2.0, add(mul(x, z), mul(w, y)))
    r10 = mul(2.0, add(mul(x, y), mul(w, z)))
    r11 = sub(1.0, mul(2.0, add(mul(x, x), mul(z, z))))
    r12 = mul(2.0, sub(mul(y, z), mul(w, x)))
    r20 = mul(2.0, sub(mul(x, z), mul(w, y)))
    r21 = mul(2.0, add(mul(y, z), mul(w, x)))
    r22 = sub(1.0, mul(2.0, add(mul(x, x), mul(y, y))))
    return jnp.stack(
        [
            jnp.stack([r00, r01, r02], -1),
            jnp.stack([r10, r11, r12], -1),
            jnp.stack([r20, r21, r22], -1),
        ],
        -2,
    )


def rotmat_to_quat(R: Float[Array, "... 3 3"]) -> Float[Array, "... 4"]:
    """Unit quaternion with `w ≥ 0` of a rotation matrix (Shepperd's method, branch by `where`)."""
    m00, m11, m22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = m00 + m11 + m22
    cands = jnp.stack(
        [
            jnp.stack(
                [
                    1 + tr,
                    R[..., 2, 1] - R[..., 1, 2],
                    R[..., 0, 2] - R[..., 2, 0],
                    R[..., 1, 0] - R[..., 0, 1],
                ],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 2, 1] - R[..., 1, 2],
                    1 + m00 - m11 - m22,
                    R[..., 0, 1] + R[..., 1, 0],
                    R[..., 0, 2] + R[..., 2, 0],
                ],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 0, 2] - R[..., 2, 0],
                    R[..., 0, 1] + R[..., 1, 0],
                    1 - m00 + m11 - m22,
                    R[..., 1, 2] + R[..., 2, 1],
                ],
                -1,
            ),
            jnp.stack(
                [
                    R[..., 1, 0] - R[..., 0, 1],
                    R[..., 0, 2] + R[..., 2, 0],
                    R[..., 1, 2] + R[..., 2, 1],
                    1 - m00 - m11 + m22,
                ],
                -1,
            ),
        ],
        -2,
    )  # (..., 4, 4): row k is 4·q_k·q
    diag = jnp.stack([1 + tr, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    k = jnp.argmax(diag, axis=-1)
    pick = jnp.arange(4) == k[..., None]  # one-hot, not a gather: batch_last has no rule for
    row = jnp.sum(jnp.where(pick[..., None], cands, 0.0), axis=-2)  # data-dependent indices
    q = row / jnp.linalg.norm(row, axis=-1, keepdims=True)
    return q * jnp.where(q[..., :1] < 0, -1.0, 1.0)


def quat_exp(w: Float[Array, "... 3"]) -> Float[Array, "... 4"]:
    """Quaternion of the rotation vector `w`: `[cos(θ/2), sin(θ/2) w/θ]`, Taylor near 0."""
    t2 = _safe_norm_sq(w)
    eps = jnp.finfo(w.dtype).eps
    small = t2 < eps**0.5
    t = jnp.sqrt(jnp.where(small, 1.0, t2))
    c = jnp.where(small, 1.0 - t2 / 8.0, jnp.cos(0.5 * t))
    s = jnp.where(small, 0.5 - t2 / 48.0, jnp.sin(0.5 * t) / t)
    return jnp.concatenate([c[..., None], s[..., None] * w], -1)


def quat_log(q: Float[Array, "... 4"]) -> Float[Array, "... 3"]:
    """Rotation vector of a unit quaternion, `|w| ≤ π` (shortest rotation; sign of `q` ignored)."""
    q = q * jnp.where(q[..., :1] < 0, -1.0, 1.0)
    qw, qv = q[..., 0], q[..., 1:]
    n2 = _safe_norm_sq(qv)
    eps = jnp.finfo(q.dtype).eps
    small = n2 < eps**0.5
    n = jnp.sqrt(jnp.where(small, 1.0, n2))
    # θ = 2 atan2(|qv|, qw);  w = θ qv / |qv|;  Taylor: 2/qw (1 − n²/(3 qw²))
    qw_safe = jnp.where(small, qw, 1.0)
    scale = jnp.where(
        small, 2.0 / qw_safe * (1.0 - n2 / (3.0 * qw_safe**2)), 2.0 * jnp.arctan2(n, qw) / n
    )
    return scale[..., None] * qv


def unit_or(x: Array, fallback: ArrayLike) -> Array:
    """`x / |x|` along the last axis, or `fallback` where `x = 0` (there the derivative is
    zero, not NaN)."""
    n2 = jnp.sum(x * x, axis=-1, keepdims=True)
    nonzero = n2 > 0
    return jnp.where(nonzero, x / jnp.sqrt(jnp.where(nonzero, n2, 1.0)), fallback)


def quat_normalize(q: Float[Array, "... 4"]) -> Float[Array, "... 4"]:
    """`q / |q|`; the identity `[1, 0, 0, 0]` for `q = 0` (MuJoCo's convention), with a zero
    derivative there rather than NaN."""
    return unit_or(q, jnp.asarray([1.0, 0.0, 0.0, 0.0], q.dtype))


# --------------------------------------------------------------------------------------------
# rigid transforms


class Transform(eqx.Module):
    """Rigid transform `X_AB = (R_AB, p_AB)`: `p_A = R_AB p_B + p_AB`.

    Leaves `R` (..., 3, 3) and `p` (..., 3) may carry leading batch axes; every method
    broadcasts over them. Compose with `@`: `X_AC = X_AB @ X_BC`.
    """

    R: Float[Array, "... 3 3"]
    p: Float[Array, "... 3"]

    def __init__(self, R: ArrayLike, p: ArrayLike):
        self.R = jnp.asarray(R)
        self.p = jnp.asarray(p)

    # constructors ------------------------------------------------------------------------
    @staticmethod
    def identity(dtype=None) -> Transform:
        dtype = dtype or jnp.result_type(float)
        return Transform(identity(3, dtype), jnp.zeros(3, dtype=dtype))

    @staticmethod
    def from_quaternion(quat: ArrayLike, p: ArrayLike | None = None) -> Transform:
        """From a unit quaternion `[w, x, y, z]` (normalised here) and a translation."""
        quat = quat_normalize(_as_float(quat))
        p = (
            jnp.zeros(quat.shape[:-1] + (3,), quat.dtype)
            if p is None
            else jnp.asarray(p, quat.dtype)
        )
        return Transform(quat_to_rotmat(quat), p)

    @staticmethod
    def from_axis_angle(axis: ArrayLike, angle: ArrayLike, p: ArrayLike | None = None) -> Transform:
        """Rotation by `angle` about `axis` (normalised here), then a translation."""
        axis = _as_float(axis)
        axis = axis / jnp.linalg.norm(axis, axis=-1, keepdims=True)
        R = axis_angle_to_rotmat(axis, jnp.asarray(angle, axis.dtype))
        p = jnp.zeros(R.shape[:-2] + (3,), R.dtype) if p is None else jnp.asarray(p, R.dtype)
        return Transform(R, p)

    @staticmethod
    def from_rotation_vector(w: ArrayLike, p: ArrayLike | None = None) -> Transform:
        """`R = exp([w]×)` (finite gradients at `w = 0`), then a translation."""
        w = _as_float(w)
        R = so3_exp(w)
        p = jnp.zeros(w.shape, w.dtype) if p is None else jnp.asarray(p, w.dtype)
        return Transform(R, p)

    @staticmethod
    def from_rpy(rpy: ArrayLike, xyz: ArrayLike | None = None) -> Transform:
        """URDF `<origin rpy xyz>`: `R = Rz(yaw) Ry(pitch) Rx(roll)`, `p = xyz`."""
        rpy = _as_float(rpy)
        p = jnp.zeros(rpy.shape, rpy.dtype) if xyz is None else jnp.asarray(xyz, rpy.dtype)
        return Transform(rpy_to_rotmat(rpy), p)

    @staticmethod
    def from_matrix(T: ArrayLike) -> Transform:
        T = jnp.asarray(T)
        return Transform(T[..., :3, :3], T[..., :3, 3])

    # group operations ----------------------------------------------------------------------
    def __matmul__(self, other: Transform) -> Transform:
        """`X_AC = X_AB @ X_BC`: `R_AC = R_AB R_BC`, `p_AC = p_AB + R_AB p_BC`."""
        return Transform(matmul(self.R, other.R), add(self.p, matvec(self.R, other.p)))

    def inverse(self) -> Transform:
        """`X_BA = X_AB⁻¹ = (R_ABᵀ, −R_ABᵀ p_AB)`."""
        return Transform(jnp.swapaxes(self.R, -1, -2), -rmatvec(self.R, self.p))

    def apply(self, p_B: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
        """`p_A = R_AB p_B + p_AB`."""
        return add(matvec(self.R, p_B), self.p)

    def rotate(self, u_B: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
        return matvec(self.R, u_B)

    def as_matrix(self) -> Float[Array, "... 4 4"]:
        """Homogeneous 4×4 matrix."""
        top = jnp.concatenate([self.R, self.p[..., :, None]], -1)
        bottom = jnp.broadcast_to(
            jnp.array([0.0, 0.0, 0.0, 1.0], self.R.dtype), top.shape[:-2] + (1, 4)
        )
        return jnp.concatenate([top, bottom], -2)

    def quaternion(self) -> Float[Array, "... 4"]:
        return rotmat_to_quat(self.R)

    # action on spatial vectors ----------------------------------------------------------------
    def act_motion(self, V_B: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
        """Re-express and shift a motion vector from B to A: `[R w; R v + p × R w]`."""
        w = self.rotate(V_B[..., :3])
        v = self.rotate(V_B[..., 3:]) + cross(self.p, w)
        return jnp.concatenate([w, v], -1)

    def inverse_act_motion(self, V_A: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
        """`X_AB⁻¹` acting on a motion vector: `[Rᵀ w; Rᵀ(v − p × w)]`."""
        w, v = V_A[..., :3], V_A[..., 3:]
        wr = rmatvec(self.R, w)
        vr = rmatvec(self.R, v - cross(self.p, w))
        return jnp.concatenate([wr, vr], -1)

    def act_force(self, F_B: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
        """Re-express and shift a force from B to A: `[R n + p × R f; R f]`."""
        f = self.rotate(F_B[..., 3:])
        n = self.rotate(F_B[..., :3]) + cross(self.p, f)
        return jnp.concatenate([n, f], -1)

    def inverse_act_force(self, F_A: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
        """`X_AB⁻¹` acting on a force: `[Rᵀ(n − p × f); Rᵀ f]`."""
        n, f = F_A[..., :3], F_A[..., 3:]
        nr = rmatvec(self.R, n - cross(self.p, f))
        fr = rmatvec(self.R, f)
        return jnp.concatenate([nr, fr], -1)

    def motion_matrix(self) -> Float[Array, "... 6 6"]:
        """6×6 matrix of `act_motion`: `[[R, 0], [[p]× R, R]]`."""
        z = jnp.zeros_like(self.R)
        pR = skew(self.p) @ self.R
        return jnp.concatenate(
            [jnp.concatenate([self.R, z], -1), jnp.concatenate([pR, self.R], -1)], -2
        )


def rotate_spatial(R: Float[Array, "... 3 3"], V: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
    """Re-express a spatial vector without shifting its point: `[R a; R b]`."""
    return jnp.concatenate(
        [
            matvec(R, V[..., :3]),
            matvec(R, V[..., 3:]),
        ],
        -1,
    )


def motion_cross(V: Float[Array, "... 6"], M: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
    """Spatial motion cross product `V ×ₘ M = [w × m_w; w × m_v + v × m_w]`."""
    w, v = V[..., :3], V[..., 3:]
    mw, mv = M[..., :3], M[..., 3:]
    return jnp.concatenate([cross(w, mw), cross(w, mv) + cross(v, mw)], -1)


def force_cross(V: Float[Array, "... 6"], F: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
    """Spatial force cross product `V ×* F = [w × n + v × f; w × f]` (`= −(V ×ₘ)ᵀ F`)."""
    w, v = V[..., :3], V[..., 3:]
    n, f = F[..., :3], F[..., 3:]
    return jnp.concatenate([cross(w, n) + cross(v, f), cross(w, f)], -1)


def motion_cross_matrix(V: Float[Array, "... 6"]) -> Float[Array, "... 6 6"]:
    """6×6 matrix of `V ×ₘ`: `[[ŵ, 0], [v̂, ŵ]]`."""
    W, Vh = skew(V[..., :3]), skew(V[..., 3:])
    z = jnp.zeros_like(W)
    return jnp.concatenate([jnp.concatenate([W, z], -1), jnp.concatenate([Vh, W], -1)], -2)


def force_cross_matrix(F: Float[Array, "... 6"]) -> Float[Array, "... 6 6"]:
    """6×6 matrix `X(F)` with `X(F) V = V ×* F`: `−[[n̂, f̂], [f̂, 0]]` for `F = [n; f]`."""
    N, Fh = skew(F[..., :3]), skew(F[..., 3:])
    z = jnp.zeros_like(N)
    return -jnp.concatenate([jnp.concatenate([N, Fh], -1), jnp.concatenate([Fh, z], -1)], -2)


# --------------------------------------------------------------------------------------------
# spatial inertia


class SpatialInertia(eqx.Module):
    """Spatial inertia of a body about the origin of the frame it is expressed in.

    `mass` m, `com` c (centre of mass in that frame) and `inertia` `I_C` (rotational inertia
    about the centre of mass, axes of that frame). About the origin:

        I_o = [[I_C − m [c]×[c]×,  m [c]×],
               [−m [c]×,           m 1  ]]

    so that the momentum of a body moving with spatial velocity `V = [w; v]` is `I_o V`.
    Leaves may carry leading batch axes.
    """

    mass: Float[Array, "..."]
    com: Float[Array, "... 3"]
    inertia: Float[Array, "... 3 3"]

    def __init__(self, mass: ArrayLike, com: ArrayLike, inertia: ArrayLike):
        self.mass = jnp.asarray(mass)
        self.com = jnp.asarray(com)
        self.inertia = jnp.asarray(inertia)

    @staticmethod
    def zero(dtype=None) -> SpatialInertia:
        dtype = dtype or jnp.result_type(float)
        return SpatialInertia(jnp.zeros((), dtype), jnp.zeros(3, dtype), jnp.zeros((3, 3), dtype))

    def as_matrix(self) -> Float[Array, "... 6 6"]:
        m = self.mass[..., None, None]
        C = skew(self.com)
        eye = identity(3, self.com.dtype)
        top = jnp.concatenate([self.inertia - m * (C @ C), m * C], -1)
        bottom = jnp.concatenate([-m * C, m * eye], -1)
        return jnp.concatenate([top, bottom], -2)

    def apply(self, V: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
        """Momentum about the origin: `L = m (v + w × c)`, `h = I_o V = [I_C w + c × L; L]`."""
        w, v = V[..., :3], V[..., 3:]
        m = self.mass[..., None]
        c = self.com
        lin = m * (v + cross(w, c))
        ang = matvec(self.inertia, w) + cross(c, lin)
        return jnp.concatenate([ang, lin], -1)

    def transform(self, X_AB: Transform) -> SpatialInertia:
        """Re-express an inertia given in B (about Bo) in A (about Ao): `c_A = X_AB c`, `R I Rᵀ`."""
        return SpatialInertia(
            self.mass,
            X_AB.apply(self.com),
            matmul(matmul(X_AB.R, self.inertia), jnp.swapaxes(X_AB.R, -1, -2)),
        )

    def __add__(self, other: SpatialInertia) -> SpatialInertia:
        """Inertia of two bodies rigidly joined (both expressed in the same frame).

        `m = m₁ + m₂`, `c = (m₁c₁ + m₂c₂)/m`, `I_C = Σ I_k + m_k(|d_k|² 1 − d_k d_kᵀ)`, `d_k = c_k − c`.
        A massless sum keeps `c = 0`.
        """
        m = self.mass + other.mass
        safe_m = jnp.where(m > 0, m, 1.0)
        c = (self.mass[..., None] * self.com + other.mass[..., None] * other.com) / safe_m[
            ..., None
        ]
        c = jnp.where((m > 0)[..., None], c, 0.0)
        return SpatialInertia(m, c, self._shifted(c) + other._shifted(c))

    def _shifted(self, c: Array) -> Array:
        return self.inertia + self.mass[..., None, None] * parallel_axis(self.com - c)
