"""Helpers shared by the joint and spatial-algebra tests.

- `tree_allclose` / `assert_tree_allclose`: pytree comparison (structure, shapes, values).
- `JOINT_NAMES` / `make_joint`: one instance of every joint class, with random parameters
  (random unit axes, random perpendicular pairs and triples, random pitch) drawn from a
  fixed seed per name, so a failure is reproducible and its test id names the joint.
- `np_sample_q` / `np_state`: random states drawn with NumPy (no compilation).
- Independent NumPy references for rotations (`np_rot`, `np_quat_to_rotmat`, ...).
"""

import zlib

import jax
import jax.numpy as jnp
import numpy as np

import jointdyn as jd

# --------------------------------------------------------------------------------------------
# comparisons


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-8) -> bool:
    """`True` when `x` and `y` have the same structure, shapes and (close) values."""
    xs, xdef = jax.tree.flatten(x)
    ys, ydef = jax.tree.flatten(y)
    if xdef != ydef:
        return False
    for a, b in zip(xs, ys, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            return False
    return True


def assert_tree_allclose(x, y, *, rtol=1e-5, atol=1e-8, what="") -> None:
    """`assert tree_allclose(x, y)` with the worst error in the message when it fails."""
    if tree_allclose(x, y, rtol=rtol, atol=atol):
        return
    details = []
    for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=False):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            details.append(f"shapes {a.shape} != {b.shape}")
        else:
            err = np.abs(a - b)
            details.append(f"max |diff| {np.max(err, initial=0.0):.3g}")
    raise AssertionError(f"{what}: not close (rtol={rtol}, atol={atol}): {'; '.join(details)}")


def tol(dtype) -> dict:
    """Tolerances for identities that should hold to rounding error in `dtype`."""
    if jnp.dtype(dtype) == jnp.float32:
        return dict(rtol=1e-4, atol=1e-4)
    return dict(rtol=1e-9, atol=1e-9)


def assert_dtype(tree, dtype) -> None:
    for leaf in jax.tree.leaves(tree):
        assert leaf.dtype == jnp.dtype(dtype), f"{leaf.dtype} != {jnp.dtype(dtype)}"


# --------------------------------------------------------------------------------------------
# NumPy references (independent of the library)


def np_skew(w):
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def np_rot(axis, angle):
    """Rodrigues' formula for a rotation by `angle` about `axis` (normalised here)."""
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np_skew(a)
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def np_quat_to_rotmat(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
        ]
    )


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """Uniform random rotation matrix (normalised Gaussian quaternion)."""
    return np_quat_to_rotmat(rng.normal(size=4))


def random_unit(rng: np.random.Generator) -> np.ndarray:
    a = rng.normal(size=3)
    return a / np.linalg.norm(a)


# --------------------------------------------------------------------------------------------
# every joint class

JOINT_NAMES = (
    "weld",
    "revolute",
    "prismatic",
    "screw",
    "revolute_unbounded",
    "cylindrical",
    "universal",
    "gimbal",
    "space_xyz",
    "ball",
    "planar_xy",
    "planar_xz",
    "planar_yz",
    "translational",
    "free",
    "composite_prb",
    "composite_ru",
)

_AXIS_JOINTS = {
    "revolute": jd.Revolute,
    "prismatic": jd.Prismatic,
    "revolute_unbounded": jd.RevoluteUnbounded,
    "cylindrical": jd.Cylindrical,
}
_PLAIN_JOINTS = {
    "weld": jd.Weld,
    "space_xyz": jd.SpaceXYZ,
    "ball": jd.Ball,
    "translational": jd.Translational,
    "free": jd.Free,
}


def _limits(cls, limits):
    """Constructor keywords giving every coordinate of `cls` the bounds `limits = (lo, hi)`;
    none for quaternions and `[cos θ, sin θ]`, whose coordinates carry no position limits."""
    if limits is None or cls in (jd.Ball, jd.RevoluteUnbounded):
        return {}
    lo, hi = limits
    if cls is jd.Free:  # the position only
        return dict(position_lower=[-np.inf] * 4 + [lo] * 3, position_upper=[np.inf] * 4 + [hi] * 3)
    return dict(position_lower=lo, position_upper=hi)


def make_joint(name: str, dtype=jnp.float64, limits=None) -> jd.AbstractJoint:
    """The joint called `name` with random parameters from a seed fixed by `name`.

    `limits = (lo, hi)` bounds every coordinate that can be bounded (for `Free`, its position).
    """
    rng = np.random.default_rng(zlib.crc32(name.encode()))

    def build(cls, *args):
        return cls(*args, **_limits(cls, limits))

    def universal():
        Q = random_rotation(rng)  # its columns: a random perpendicular pair
        return build(jd.Universal, Q[:, 0], Q[:, 1])

    if name in _PLAIN_JOINTS:
        joint = build(_PLAIN_JOINTS[name])
    elif name in _AXIS_JOINTS:
        joint = build(_AXIS_JOINTS[name], random_unit(rng))
    elif name.startswith("planar_"):
        joint = build(jd.Planar, name.removeprefix("planar_"))
    elif name == "screw":
        joint = build(jd.Screw, random_unit(rng), rng.normal())
    elif name == "universal":
        joint = universal()
    elif name == "gimbal":
        # A left-handed triple (third axis −a₁ × a₂) to exercise that sign as well.
        Q = random_rotation(rng)
        joint = build(jd.Gimbal, np.stack([Q[:, 0], Q[:, 1], -Q[:, 2]]))
    elif name == "composite_prb":
        parts = [jd.Prismatic, jd.Revolute]
        joint = jd.Composite([*(build(c, random_unit(rng)) for c in parts), build(jd.Ball)])
    elif name == "composite_ru":
        joint = jd.Composite([build(jd.Revolute, random_unit(rng)), universal()])
    else:
        raise ValueError(name)
    return jd.astype(joint, dtype)


# --------------------------------------------------------------------------------------------
# states

# SpaceXYZ is sampled with |θ₂| ≤ 1.2 (|cos θ₂| ≥ 0.36), away from its singularity.
SPACE_XYZ_THETA2 = 1.2


def np_sample_q(joint: jd.AbstractJoint, rng: np.random.Generator) -> np.ndarray:
    """A random configuration drawn with NumPy from the coordinates of DESIGN.md.

    Independent of `random_configuration` (which has tests of its own) and cheap: no
    compilation. Vector coordinates in ±π (SpaceXYZ: |θ₂| ≤ 1.2), uniform rotations.
    """
    if isinstance(joint, jd.Composite):
        return np.concatenate([np_sample_q(j, rng) for j in joint.joints])
    if isinstance(joint, jd.Ball):
        return _np_quat(rng)
    if isinstance(joint, jd.Free):
        return np.concatenate([_np_quat(rng), rng.uniform(-1, 1, 3)])
    if isinstance(joint, jd.RevoluteUnbounded):
        t = rng.uniform(-np.pi, np.pi)
        return np.array([np.cos(t), np.sin(t)])
    q = rng.uniform(-np.pi, np.pi, joint.nq)
    if isinstance(joint, jd.SpaceXYZ):
        q[1] = rng.uniform(-SPACE_XYZ_THETA2, SPACE_XYZ_THETA2)
    return q


def _np_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def np_state(joint: jd.AbstractJoint, rng: np.random.Generator, dtype=np.float64):
    """`(q, q1, v, vdot, F)` as NumPy arrays: two configurations, `|v| ≤ 1` per entry (so a
    rotation vector stays below π), a random acceleration and a random spatial force."""
    q, q1 = np_sample_q(joint, rng), np_sample_q(joint, rng)
    v = rng.uniform(-1, 1, joint.nv)
    vdot, F = rng.normal(size=joint.nv), rng.normal(size=6)
    return tuple(np.asarray(x, dtype) for x in (q, q1, v, vdot, F))


def manifold_residual(joint: jd.AbstractJoint, q: jax.Array) -> jax.Array:
    """How far `q` is from the configuration manifold, from the coordinates in DESIGN.md.

    Unit quaternion (`Ball`, first four entries of `Free`) and unit `[cos θ, sin θ]`
    (`RevoluteUnbounded`); every other coordinate is free. Empty when nothing is constrained.
    """
    if isinstance(joint, jd.Composite):
        sizes = np.cumsum([j.nq for j in joint.joints])[:-1]
        parts = jnp.split(q, sizes)
        return jnp.concatenate(
            [manifold_residual(j, qk) for j, qk in zip(joint.joints, parts, strict=True)]
        )
    if isinstance(joint, jd.Ball | jd.RevoluteUnbounded):
        return (jnp.linalg.norm(q) - 1)[None]
    if isinstance(joint, jd.Free):
        return (jnp.linalg.norm(q[:4]) - 1)[None]
    return jnp.zeros(0, q.dtype)


def vee(W: jax.Array) -> jax.Array:
    """`w` with `W = [w]×` for a skew-symmetric 3×3 `W` (the skew part of a general one)."""
    return 0.5 * jnp.stack([W[2, 1] - W[1, 2], W[0, 2] - W[2, 0], W[1, 0] - W[0, 1]])


def np_pose(joint: jd.AbstractJoint, q: np.ndarray) -> np.ndarray:
    """4×4 `X_FM(q)` computed with NumPy from the joint table of DESIGN.md."""
    q = np.asarray(q, np.float64)
    R, p = np.eye(3), np.zeros(3)
    if isinstance(joint, jd.Composite):
        sizes = np.cumsum([j.nq for j in joint.joints])[:-1]
        T = np.eye(4)
        for j, qk in zip(joint.joints, np.split(q, sizes), strict=True):
            T = T @ np_pose(j, qk)
        return T
    axis = np.asarray(getattr(joint, "axis", np.zeros(3)), np.float64)
    if isinstance(joint, jd.Revolute):
        R = np_rot(axis, q[0])
    elif isinstance(joint, jd.Prismatic):
        p = axis * q[0]
    elif isinstance(joint, jd.Screw):
        R, p = np_rot(axis, q[0]), float(joint.pitch) * q[0] * axis
    elif isinstance(joint, jd.RevoluteUnbounded):
        R = np_rot(axis, np.arctan2(q[1], q[0]))
    elif isinstance(joint, jd.Cylindrical):
        R, p = np_rot(axis, q[0]), q[1] * axis
    elif isinstance(joint, jd.Universal):
        R = np_rot(np.asarray(joint.axis1), q[0]) @ np_rot(np.asarray(joint.axis2), q[1])
    elif isinstance(joint, jd.Gimbal):
        a = np.asarray(joint.axes, np.float64)
        R = np_rot(a[0], q[0]) @ np_rot(a[1], q[1]) @ np_rot(a[2], q[2])
    elif isinstance(joint, jd.SpaceXYZ):
        R = np_rot([0, 0, 1], q[2]) @ np_rot([0, 1, 0], q[1]) @ np_rot([1, 0, 0], q[0])
    elif isinstance(joint, jd.Ball):
        R = np_quat_to_rotmat(q)
    elif isinstance(joint, jd.Planar):
        t1, t2, n = {"xy": (0, 1, 2), "xz": (0, 2, 1), "yz": (1, 2, 0)}[joint.plane]
        e = np.eye(3)
        R, p = np_rot(e[n], q[2]), q[0] * e[t1] + q[1] * e[t2]
    elif isinstance(joint, jd.Translational):
        p = q
    elif isinstance(joint, jd.Free):
        R, p = np_quat_to_rotmat(q[:4]), q[4:]
    elif not isinstance(joint, jd.Weld):
        raise TypeError(type(joint))
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, p
    return T
