"""Compliant contact of spheres fixed on bodies with a ground half-space.

A contact sphere `C` of radius `r` sits at `p_BC` on body B. Against the ground `z ≤ h`, its
lowest point `P = p_C − r e_z` penetrates by `δ = h − (z_C − r)`. Normal force, the
Hunt–Crossley nonlinear spring-damper (Hunt & Crossley 1975; Hertz's exponent `n = 3/2` for a
sphere):

    f_n = max(0, δ₊ⁿ (k + d δ̇)),   δ₊ = max(δ, 0),   δ̇ = −ż_P,

zero out of contact (`δ ≤ 0`), continuous at first touch (the damping term is scaled by `δⁿ`
too, so no force jumps at impact) and never pulling (the `max`: a fast separation does not
glue). Tangential force, regularised Coulomb friction (Drake's and jaxsim's smooth friction):

    f_t = −μ f_n v_t / √(|v_t|² + ε²),

with `v_t` the horizontal velocity of `P` and `ε` (`friction_velocity`) the speed under which
friction turns viscous; `|f_t| < μ f_n` always, `→ μ f_n` for `|v_t| ≫ ε`. Every parameter is an
array leaf (scalar, or one value per sphere): stiffness, damping, friction, the spheres'
positions and radii and the ground height can all be identified by gradient. The gradient is
finite everywhere: at `δ = 0`, `δ₊ⁿ` has derivative 0 (`n > 1`) and is evaluated on a safe
branch, never as `0ⁿ⁻¹` of a negative number.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._dtype import astype, floating_arguments
from ._joint import is_concrete
from ._kinematics import forward_kinematics
from ._linalg import cross
from ._model import Model
from ._precision import full_precision
from ._traversal import take


class GroundContact(eqx.Module):
    """Contact spheres on bodies against the ground half-space `z ≤ height` (module docstring
    for the force law).

    **Fields:** `bodies` (static, the body index of each sphere), `positions` (n, 3) sphere
    centres in body frames, `radii` (n,), `stiffness` `k` [N/mⁿ], `damping` `d` [N·s/mⁿ⁺¹],
    `friction` `μ`, `friction_velocity` `ε` [m/s] (each a scalar or one per sphere), `height`
    of the ground [m], `exponent` `n` (static).
    """

    bodies: tuple[int, ...] = eqx.field(static=True)
    positions: Float[Array, "n 3"]
    radii: Float[Array, " n"]
    stiffness: Float[Array, "*n"]
    damping: Float[Array, "*n"]
    friction: Float[Array, "*n"]
    friction_velocity: Float[Array, "*n"]
    height: Float[Array, ""]
    exponent: float = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        bodies: Sequence[str | int],
        positions: ArrayLike,
        radii: ArrayLike = 0.0,
        *,
        stiffness: ArrayLike = 1e6,
        damping: ArrayLike = 1e7,
        friction: ArrayLike = 1.0,
        friction_velocity: ArrayLike = 1e-2,
        height: ArrayLike = 0.0,
        exponent: float = 1.5,
    ):
        """**Arguments:** the `model` (to resolve body names); `bodies`, one body name or index
        per sphere; `positions` (n, 3) of the sphere centres in their bodies' frames; `radii`
        (a scalar or (n,)); the force-law parameters (scalars or (n,)). The defaults hold a
        10 kg body on four spheres with ~2 mm penetration, damped (ζ ≈ 0.5 about rest).

        **Raises:** `ValueError` naming the argument for an unknown body, misshapen arrays,
        a NaN or infinite entry, a negative radius, stiffness, damping, friction or friction
        velocity, `exponent < 1`.
        """
        names = model.topology.body_names
        index = []
        for b in bodies:
            if isinstance(b, str):
                if b not in names:
                    raise ValueError(f"`bodies`: unknown body {b!r}; bodies are {names}")
                index.append(names.index(b))
            elif isinstance(b, int | np.integer) and 0 <= int(b) < len(names):
                index.append(int(b))
            else:
                raise ValueError(
                    f"`bodies`: {b!r} is neither a body name nor an index < {len(names)}"
                )
        n = len(index)
        if n == 0:
            raise ValueError("`bodies` is empty: a contact needs at least one sphere")
        positions = jnp.asarray(positions, jnp.result_type(float))
        if positions.shape != (n, 3):
            raise ValueError(f"`positions` must have shape ({n}, 3), got {positions.shape}")
        self.bodies = tuple(index)
        self.positions = _finite(positions, "positions")
        self.radii = _per_sphere(radii, n, "radii")
        self.stiffness = _per_sphere(stiffness, n, "stiffness")
        self.damping = _per_sphere(damping, n, "damping")
        self.friction = _per_sphere(friction, n, "friction")
        self.friction_velocity = _per_sphere(friction_velocity, n, "friction_velocity", True)
        self.height = _finite(jnp.asarray(height, jnp.result_type(float)), "height")
        if self.height.shape != ():
            raise ValueError(f"`height` must be a scalar, got shape {self.height.shape}")
        if not exponent >= 1.0:
            raise ValueError(f"`exponent` must be ≥ 1 (3/2: Hertz), got {exponent}")
        self.exponent = float(exponent)

    @property
    def npoints(self) -> int:
        return len(self.bodies)


def _finite(a: Array, name: str) -> Array:
    """`a`, or a `ValueError` naming it when a concrete entry is NaN or infinite."""
    if is_concrete(a) and not np.all(np.isfinite(np.asarray(a))):
        raise ValueError(f"`{name}` must be finite, got {np.asarray(a)}")
    return a


def _per_sphere(x: ArrayLike, n: int, name: str, positive: bool = False) -> Array:
    """A scalar or (n,) finite, non-negative (or positive) parameter, as an array."""
    a = jnp.asarray(x, jnp.result_type(float))
    if a.shape not in ((), (n,)):
        raise ValueError(f"`{name}` must be a scalar or have shape ({n},), got {a.shape}")
    _finite(a, name)
    if is_concrete(a):
        values = np.asarray(a)
        if np.any(values <= 0) if positive else np.any(values < 0):
            sign = "positive" if positive else "non-negative"
            raise ValueError(f"`{name}` must be {sign}, got {values}")
    return a


@floating_arguments
@full_precision
def contact_point_forces(
    model: Model, contact: GroundContact, q: Float[Array, " nq"], v: Float[Array, " nv"]
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """The ground's force on each sphere, world axes, `[f_x, f_y, f_n]` (n, 3), and the world
    position of its lowest point `P` (n, 3), where the force acts (module docstring)."""
    f, p_P, _ = _point_forces(model, contact, q, v)
    return f, p_P


def _point_forces(model, contact, q, v):
    """`contact_point_forces` and the origins of the spheres' bodies (n, 3), all from one pass
    of forward kinematics."""
    contact = astype(contact, jnp.result_type(q, v))
    kin = forward_kinematics(model, q, v)
    idx = np.asarray(contact.bodies)
    X = take(kin.X_WB, idx)
    V = kin.V_WB[idx]
    p_P = lowest_points(contact, X.apply(contact.positions))
    v_P = V[:, 3:] + cross(V[:, :3], p_P - X.p)
    return force_law(contact, p_P, v_P), p_P, X.p


def lowest_points(contact: GroundContact, p_C: Array) -> Array:
    """`p_P = p_C − r e_z` (n, 3): the spheres' lowest points from their centres `p_C`."""
    radii = jnp.broadcast_to(contact.radii, (contact.npoints,))
    return p_C - radii[:, None] * jnp.array([0.0, 0.0, 1.0], p_C.dtype)


def force_law(contact: GroundContact, p_P: Array, v_P: Array) -> Array:
    """The ground's force `[f_x, f_y, f_n]` (n, 3) on each sphere from the position `p_P` and
    velocity `v_P` (n, 3) of its lowest point (module docstring)."""
    depth = contact.height - p_P[:, 2]
    inside = depth > 0
    safe = jnp.where(inside, depth, 1.0)  # the power is taken on a safe branch
    spring = jnp.where(inside, safe**contact.exponent, 0.0)
    f_n = jnp.maximum(spring * (contact.stiffness - contact.damping * v_P[:, 2]), 0.0)
    v_t = v_P[:, :2]
    slip = jnp.sqrt(jnp.sum(v_t**2, -1) + contact.friction_velocity**2)
    f_t = -(contact.friction * f_n / slip)[:, None] * v_t
    return jnp.concatenate([f_t, f_n[:, None]], -1)


@floating_arguments
@full_precision
def contact_forces(
    model: Model, contact: GroundContact, q: Float[Array, " nq"], v: Float[Array, " nv"]
) -> Float[Array, "nb 6"]:
    """The contact forces as external forces on the bodies, `F_Bo_W` (nbodies, 6): torque
    about each body's origin and force, world axes; pass them as `f_ext` to any algorithm
    (`aba`, `rnea`, `forward_dynamics`), or let `jd.step` add them."""
    f, p_P, p_B = _point_forces(model, contact, q, v)
    F = jnp.concatenate([cross(p_P - p_B, f), f], -1)
    return jnp.zeros((model.nbodies, 6), F.dtype).at[np.asarray(contact.bodies)].add(F)


def contact_points_from_urdf(
    path_or_xml: str | os.PathLike, model: Model
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The `<collision>` spheres of a URDF as `(bodies, positions, radii)` for `GroundContact`:
    `GroundContact(model, *contact_points_from_urdf(path, model), stiffness=...)`.

    A sphere on a link merged into its parent body by a fixed joint is placed on that body.
    Collision shapes other than spheres are not contact points (a `UserWarning` counts them).
    """
    import warnings

    from ._urdf import _origin, _read_robot

    robot = _read_robot(path_or_xml)
    bodies, positions, radii, others = [], [], [], 0
    frames = model.topology.frame_names
    X_BF = model.X_BF
    for link in robot.findall("link"):
        name = link.get("name")
        for col in link.findall("collision"):
            geometry = col.find("geometry")
            sphere = None if geometry is None else geometry.find("sphere")
            if sphere is None:
                others += 1
                continue
            if name not in frames:
                raise ValueError(f"link {name!r} of the URDF is not a frame of `model`")
            f = frames.index(name)
            parent = model.topology.frame_parents[f]
            if parent < 0:
                continue  # on the world: never moves, never in contact with anything that moves
            T = _origin(col, f"<collision> of link {name!r}")
            R, p = np.asarray(X_BF.R[f]), np.asarray(X_BF.p[f])
            bodies.append(model.topology.body_names[parent])
            positions.append(R @ T[:3, 3] + p)
            radii.append(float(sphere.get("radius", "nan")))
    if others:
        warnings.warn(
            f"{others} <collision> shape(s) that are not spheres are not contact points",
            UserWarning,
            stacklevel=2,
        )
    if not bodies:
        raise ValueError("the URDF has no <collision> sphere on a moving link")
    return bodies, np.array(positions), np.array(radii)
