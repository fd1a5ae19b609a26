"""The joint interface (`AbstractJoint`) and the parameters every joint carries (`JointParams`).

A joint connects an inboard frame F (fixed on the parent body) to an outboard frame M (fixed on
the child body). With `q` (nq) and `v` (nv) its configuration and generalized velocity
(Drake's mobilizer, `multibody/tree/mobilizer.h`):

    X_FM(q)                          across-joint pose
    V_FM = H_FM(q) v                 spatial velocity of M in F, expressed in F, at Mo: [w; v_Mo]
    A_FM = H_FM(q) v̇ + Ḣ_FM(q, v) v  spatial acceleration (classical: a_Mo = d/dt v_Mo in F)
    q̇ = N(q) v,   v = N⁺(q) q̇
    tau = H_FMᵀ F_Mo_F               generalized force of a spatial force on M at Mo, in F

so that power is preserved: `(H_FMᵀ F)·v = F·(H_FM v)`.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._spatial import Transform


def sample_box(
    u: Array, lower: ArrayLike, upper: ArrayLike, default_half_range: ArrayLike
) -> Array:
    """`lo + u (hi − lo)`: uniforms `u ∈ [0, 1)` mapped into `[lower, upper]`, infinite bounds
    replaced by `∓default_half_range`."""
    lower, upper = jnp.asarray(lower), jnp.asarray(upper)
    half = jnp.asarray(default_half_range, lower.dtype)
    lo = jnp.where(
        jnp.isfinite(lower), lower, jnp.where(jnp.isfinite(upper), upper - 2 * half, -half)
    )
    hi = jnp.where(
        jnp.isfinite(upper), upper, jnp.where(jnp.isfinite(lower), lower + 2 * half, half)
    )
    # clipped: never past a bound by rounding
    return jnp.clip(lo + u.astype(lower.dtype) * (hi - lo), lo, hi)


def _float_dtype():
    return jnp.result_type(float)


def is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def as_param(value, shape: tuple[int, ...], name: str) -> Array:
    """A float parameter leaf broadcast to `shape`; `ValueError` naming `name` if it cannot be."""
    arr = jnp.asarray(value, dtype=_float_dtype()) if is_concrete(value) else value
    if is_concrete(arr) and not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(_float_dtype())
    try:
        return jnp.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(
            f"parameter `{name}` has shape {tuple(np.shape(value))}; expected {shape} "
            "or something that broadcasts to it"
        ) from None


def unit_axis(axis: ArrayLike, name: str = "axis") -> Array:
    """Normalise a 3-vector axis; `ValueError` naming `name` when zero, non-finite or misshapen."""
    if np.shape(axis) != (3,):
        raise ValueError(f"`{name}` must be a 3-vector, got shape {np.shape(axis)}")
    a = as_param(axis, (3,), name)
    if is_concrete(a):
        an = np.asarray(a, dtype=np.float64)
        if not np.all(np.isfinite(an)):
            raise ValueError(f"`{name}` must be finite, got {an}")
        if np.linalg.norm(an) < 1e-12:
            raise ValueError(f"`{name}` must be non-zero, got {an}")
    return a / jnp.linalg.norm(a)


def stop_force(q: Array, qdot: Array, lower: Array, upper: Array, k: Array, b: Array) -> Array:
    """Limit-stop forces on coordinates, entry by entry (`AbstractJoint.passive_force`):

    f = min(0, −k (q − upper) − b q̇)   where q > upper
        max(0, −k (q − lower) − b q̇)   where q < lower,   0 inside.
    """
    above = q > upper
    below = q < lower
    hi = jnp.where(above, q - upper, 0.0)
    lo = jnp.where(below, q - lower, 0.0)
    f_hi = jnp.where(above, jnp.minimum(0.0, -k * hi - b * qdot), 0.0)
    f_lo = jnp.where(below, jnp.maximum(0.0, -k * lo - b * qdot), 0.0)
    return f_hi + f_lo


def viscous_and_coulomb(v: Array, damping: Array, friction: Array) -> Array:
    """`−d ⊙ v − μ ⊙ sign(v)`: joint damping and Coulomb friction, entry by entry."""
    return -damping * v - friction * jnp.sign(v)


class JointParams(eqx.Module):
    """Physical parameters of a joint, all differentiable array leaves.

    Sizes: `position_lower`, `position_upper`, `default_position`, `stop_stiffness`,
    `stop_damping`, `spring_reference` have nq entries (one per coordinate);
    `velocity_limit`, `acceleration_limit`, `effort_limit`, `damping`, `friction`,
    `spring_stiffness`, `armature` have nv entries. Limits default to ±inf, the others to 0;
    `default_position` and `spring_reference` to the joint's neutral.

    The joint spring (MuJoCo's `stiffness` and `springref`) pulls towards the configuration
    `spring_reference` with `tau = −spring_stiffness ⊙ (q ⊖ spring_reference)` (see
    `AbstractJoint.passive_force`); it is named apart from the limit stops' `stop_stiffness`,
    which act only outside the position limits.

    `armature` is the reflected inertia of a rotor driving each DOF (`J_rotor · gear²`;
    Pinocchio's `model.armature`, MuJoCo's `armature`): it adds `diag(armature)` to the mass
    matrix, `armature ⊙ v̇` to inverse dynamics and `½ Σ armature ⊙ v²` to the kinetic energy.

    For a quaternion's coordinates (Ball, Free) position limits and limit stops have no
    meaning and must stay infinite/zero.
    """

    position_lower: Float[Array, " nq"]
    position_upper: Float[Array, " nq"]
    velocity_limit: Float[Array, " nv"]
    acceleration_limit: Float[Array, " nv"]
    effort_limit: Float[Array, " nv"]
    default_position: Float[Array, " nq"]
    damping: Float[Array, " nv"]
    friction: Float[Array, " nv"]
    stop_stiffness: Float[Array, " nq"]
    stop_damping: Float[Array, " nq"]
    spring_stiffness: Float[Array, " nv"]
    spring_reference: Float[Array, " nq"]
    armature: Float[Array, " nv"]

    @staticmethod
    def create(
        nq: int,
        nv: int,
        neutral: Array,
        *,
        position_lower: ArrayLike = -jnp.inf,
        position_upper: ArrayLike = jnp.inf,
        velocity_limit: ArrayLike = jnp.inf,
        acceleration_limit: ArrayLike = jnp.inf,
        effort_limit: ArrayLike = jnp.inf,
        default_position: ArrayLike | None = None,
        damping: ArrayLike = 0.0,
        friction: ArrayLike = 0.0,
        stop_stiffness: ArrayLike = 0.0,
        stop_damping: ArrayLike = 0.0,
        spring_stiffness: ArrayLike = 0.0,
        spring_reference: ArrayLike | None = None,
        armature: ArrayLike = 0.0,
    ) -> JointParams:
        """Validate and broadcast; raises `ValueError` naming the offending argument."""
        p = JointParams(
            position_lower=as_param(position_lower, (nq,), "position_lower"),
            position_upper=as_param(position_upper, (nq,), "position_upper"),
            velocity_limit=as_param(velocity_limit, (nv,), "velocity_limit"),
            acceleration_limit=as_param(acceleration_limit, (nv,), "acceleration_limit"),
            effort_limit=as_param(effort_limit, (nv,), "effort_limit"),
            default_position=as_param(
                neutral if default_position is None else default_position, (nq,), "default_position"
            ),
            damping=as_param(damping, (nv,), "damping"),
            friction=as_param(friction, (nv,), "friction"),
            stop_stiffness=as_param(stop_stiffness, (nq,), "stop_stiffness"),
            stop_damping=as_param(stop_damping, (nq,), "stop_damping"),
            spring_stiffness=as_param(spring_stiffness, (nv,), "spring_stiffness"),
            spring_reference=as_param(
                neutral if spring_reference is None else spring_reference, (nq,), "spring_reference"
            ),
            armature=as_param(armature, (nv,), "armature"),
        )
        p.validate()
        return p

    def validate(self) -> None:
        """Raise `ValueError` for NaN position limits (±inf is no limit), a non-finite default
        position or spring reference, lower > upper, or negative (or NaN) limits, damping,
        friction, stiffness, armature."""
        leaves = jax.tree.leaves(self)
        if not all(is_concrete(x) for x in leaves):
            return
        lo, hi = np.asarray(self.position_lower), np.asarray(self.position_upper)
        for name, x in (("position_lower", lo), ("position_upper", hi)):
            if np.any(np.isnan(x)):
                raise ValueError(f"`{name}` must not be NaN (±inf for no limit), got {x}")
        for name in ("default_position", "spring_reference"):
            x = np.asarray(getattr(self, name))
            if not np.all(np.isfinite(x)):
                raise ValueError(f"`{name}` must be finite, got {x}")
        if np.any(lo > hi):
            raise ValueError(f"position_lower {lo} is above position_upper {hi}")
        for name in (
            "velocity_limit",
            "acceleration_limit",
            "effort_limit",
            "damping",
            "friction",
            "stop_stiffness",
            "stop_damping",
            "spring_stiffness",
            "armature",
        ):
            x = np.asarray(getattr(self, name))
            if np.any(np.isnan(x)) or np.any(x < 0):
                raise ValueError(f"`{name}` must be non-negative, got {x}")


class AbstractJoint(eqx.Module):
    """A joint between inboard frame F (on the parent) and outboard frame M (on the child).

    Subclasses are final and implement every abstract method; the concrete methods below are
    written once, in terms of the abstract ones.
    """

    nq: eqx.AbstractClassVar[int]
    nv: eqx.AbstractClassVar[int]
    params: eqx.AbstractVar[JointParams]
    # True when the hinge matrix shifted to Fo, `[H_w; H_v + p_FM × H_w]`, does not depend on q
    # and `Ḣ v − [0; w × v_Mo]` is zero (revolute, prismatic, screw, weld): the dynamics
    # derivatives then skip the joint's own terms. Checked in tests/test_derivatives.py.
    constant_hinge_at_F: ClassVar[bool] = False
    # (linear, angular) velocity bounds, constants of the class (see `velocity_bound_linear`),
    # and which q entries are translations along orthonormal directions of F
    velocity_bounds: ClassVar[tuple[float, float]]
    translation_coordinates: ClassVar[tuple[int, ...]] = ()

    # -- kinematics ------------------------------------------------------------------------
    @abc.abstractmethod
    def X_FM(self, q: Float[Array, " nq"]) -> Transform:
        """Across-joint pose of M in F."""

    @abc.abstractmethod
    def H_FM(self, q: Float[Array, " nq"]) -> Float[Array, "6 nv"]:
        """Hinge matrix (motion subspace, in F, at Mo): `V_FM = H_FM(q) v`."""

    @abc.abstractmethod
    def qdot_from_v(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, " nq"]:
        """`q̇ = N(q) v`."""

    @abc.abstractmethod
    def v_from_qdot(self, q: Float[Array, " nq"], qdot: Float[Array, " nq"]) -> Float[Array, " nv"]:
        """`v = N⁺(q) q̇` (left inverse of `qdot_from_v`)."""

    # -- configuration space (a Lie group) ------------------------------------------------
    @abc.abstractmethod
    def neutral(self) -> Float[Array, " nq"]:
        """Configuration with `X_FM = identity`."""

    @abc.abstractmethod
    def integrate(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, " nq"]:
        """`q ⊕ v`: the configuration reached from `q` moving at constant `v` for unit time."""

    @abc.abstractmethod
    def difference(self, q0: Float[Array, " nq"], q1: Float[Array, " nq"]) -> Float[Array, " nv"]:
        """`q1 ⊖ q0`: the `v` with `integrate(q0, v) = q1` (shortest, for rotations)."""

    @abc.abstractmethod
    def integrate_derivatives(
        self, q: Float[Array, " nq"], v: Float[Array, " nv"]
    ) -> tuple[Float[Array, "nv nv"], Float[Array, "nv nv"]]:
        """`(J_q, J_v)`, the Jacobians of `q⁺ = q ⊕ v` in the tangent space (Pinocchio's
        `dIntegrate`, ARG0 and ARG1, in this library's tangent space):

            (q ⊕ δq) ⊕ v = q⁺ ⊕ (J_q δq + o(δq)),    q ⊕ (v + δv) = q⁺ ⊕ (J_v δv + o(δv)).

        Vector spaces: `(1, 1)`. Rotations moved on the left, `R⁺ = exp([v]×) R` (Ball,
        SpaceXYZ, the rotation of Free): `(exp([v]×), J_l(v))`, `J_l` the left Jacobian of SO(3).
        """

    @abc.abstractmethod
    def difference_derivatives(
        self, q0: Float[Array, " nq"], q1: Float[Array, " nq"]
    ) -> tuple[Float[Array, "nv nv"], Float[Array, "nv nv"]]:
        """`(J_q0, J_q1)`, the Jacobians of `d = q1 ⊖ q0` in the tangent space (Pinocchio's
        `dDifference`, ARG0 and ARG1, in this library's tangent space):

            q1 ⊖ (q0 ⊕ δ) = d + J_q0 δ + o(δ),    (q1 ⊕ δ) ⊖ q0 = d + J_q1 δ + o(δ).

        Vector spaces: `(−1, 1)`. Rotations, `d = log(R₁ R₀ᵀ)`: `(−J_l(d)⁻ᵀ, J_l(d)⁻¹)`.
        """

    def random_configuration(
        self, key: PRNGKeyArray, lower: ArrayLike | None = None, upper: ArrayLike | None = None
    ) -> Float[Array, " nq"]:
        """Uniform sample within `[lower, upper]` (default: the position limits).

        Infinite bounds are replaced by ±π for angles and ±1 for translations; rotations
        (quaternions, `[cos θ, sin θ]`) are sampled uniformly. One draw of `n_uniform`
        uniforms, mapped by `configuration_from_uniform`.
        """
        dtype = self.params.position_lower.dtype
        return self.configuration_from_uniform(
            jax.random.uniform(key, (self.n_uniform,), dtype), lower, upper
        )

    @property
    def n_uniform(self) -> int:
        """How many uniforms in `[0, 1)` `configuration_from_uniform` reads (default `nq`)."""
        return self.nq

    @abc.abstractmethod
    def configuration_from_uniform(
        self,
        u: Float[Array, " n_uniform"],
        lower: ArrayLike | None = None,
        upper: ArrayLike | None = None,
    ) -> Float[Array, " nq"]:
        """The configuration that `random_configuration` draws, from `n_uniform` uniforms in
        `[0, 1)`: `Model.random_configuration` draws every joint's uniforms at once (one random
        number generator call per model, not one per joint: a fraction of the compile time)."""

    @abc.abstractmethod
    def normalize(self, q: Float[Array, " nq"]) -> Float[Array, " nq"]:
        """Project `q` back onto the configuration manifold (unit quaternions, unit [c, s])."""

    @abc.abstractmethod
    def q_from_X_FM(self, X_FM: Transform) -> Float[Array, " nq"]:
        """Coordinates whose pose best reproduces `X_FM` (its projection onto the joint's motions)."""

    # -- concrete, written once ------------------------------------------------------------
    def velocity_bound_linear(self) -> Float[Array, ""]:
        """HPP's `upperBoundLinearVelocity`: the smallest constant `λ` with

            ‖v_FMo‖ ≤ λ ‖v‖      for every q and v

        (`v_FMo` the velocity of M's origin in F, the lower half of `V_FM = H_FM(q) v`), i.e.
        `λ = sup_q ‖H_v(q)‖₂`. Revolute, ball, universal, gimbal, SpaceXYZ, unbounded
        revolute, weld: 0 (M's origin is on every axis); prismatic, cylindrical, planar,
        translational, free: 1 (unit, orthonormal translation columns); screw: |pitch|;
        composite: see `Composite`. Bounds are with respect to `v` (the velocity of
        `integrate`), which for SpaceXYZ and gimbal angles is not `q̇`."""
        return jnp.asarray(self.velocity_bounds[0], self.params.damping.dtype)

    def _velocity_bound_linear_in(self, lower: Array, upper: Array) -> Array:
        """`velocity_bound_linear` over the box `lower ≤ q ≤ upper` only (a composite's
        depends on how far its later parts translate; the others' is the constant)."""
        return self.velocity_bound_linear()

    def _translation_bound(self, lower: Array, upper: Array) -> Array:
        """A bound on `‖p_FM(q)‖` over the box `lower ≤ q ≤ upper` (inf where a
        translation is unbounded): `‖(max(|lᵢ|, |uᵢ|))ᵢ‖` over `translation_coordinates`,
        exact for translations along orthonormal directions; 0 for pure rotations."""
        idx = np.asarray(self.translation_coordinates, int)
        dt = self.params.damping.dtype
        if idx.size == 0:
            return jnp.zeros((), dt)
        m = jnp.maximum(jnp.abs(jnp.asarray(lower, dt)[idx]), jnp.abs(jnp.asarray(upper, dt)[idx]))
        return jnp.sqrt(jnp.sum(m**2))

    def velocity_bound_angular(self) -> Float[Array, ""]:
        """HPP's `upperBoundAngularVelocity`: the smallest `λ` with `‖w_FM‖ ≤ λ ‖v‖` for
        every q, `λ = sup_q ‖H_w(q)‖₂`. Prismatic, translational, weld: 0; one rotation
        axis, or orthonormal rotation columns (revolute, screw, cylindrical, planar,
        universal, ball, SpaceXYZ, free): 1; gimbal: `√2` (columns `a₁, R₁a₂, R₁R₂a₃` have
        Gram matrix `[[1, 0, s], [0, 1, 0], [s, 0, 1]]`, `s = ±sin q₁`, largest eigenvalue
        `1 + |s| ≤ 2`, reached at gimbal lock)."""
        return jnp.asarray(self.velocity_bounds[1], self.params.damping.dtype)

    def V_FM(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, "6"]:
        """`V_FM = H_FM(q) v = [w_FM_F; v_FMo_F]`."""
        return self.H_FM(q) @ v

    def Hdot_FM(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, "6 nv"]:
        """`Ḣ_FM = ∂H_FM/∂q · q̇` along `q̇ = N(q) v` (exactly zero, symbolically, for constant H)."""
        qdot = self.qdot_from_v(q, v)
        return jax.jvp(self.H_FM, (q,), (qdot,))[1]

    def A_FM(
        self, q: Float[Array, " nq"], v: Float[Array, " nv"], vdot: Float[Array, " nv"]
    ) -> Float[Array, "6"]:
        """`A_FM = H_FM v̇ + Ḣ_FM v = [α_FM_F; a_FMo_F]` (classical acceleration of Mo in F)."""
        return self.H_FM(q) @ vdot + self.Hdot_FM(q, v) @ v

    def project_force(
        self, q: Float[Array, " nq"], F_Mo_F: Float[Array, "6"]
    ) -> Float[Array, " nv"]:
        """`tau = H_FMᵀ F_Mo_F`."""
        return self.H_FM(q).T @ F_Mo_F

    def interpolate(
        self, q0: Float[Array, " nq"], q1: Float[Array, " nq"], t: Float[ArrayLike, ""]
    ) -> Float[Array, " nq"]:
        """Geodesic interpolation `q0 ⊕ t (q1 ⊖ q0)`; `t = 0` gives q0, `t = 1` gives q1."""
        return self.integrate(q0, t * self.difference(q0, q1))

    def passive_force(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, " nv"]:
        """Generalized passive force: damping, Coulomb friction, the joint spring and limit stops.

            tau = −d ⊙ v − μ ⊙ sign(v) − k ⊙ (q ⊖ q_ref) + N(q)ᵀ f_stop

        The spring (`k = spring_stiffness`, `q_ref = spring_reference`) uses the joint's own
        `difference`: `k (q − q_ref)` for angles and translations; for a `Ball` (and the
        rotation of a `Free`) `k log(R_FM R_refᵀ)`, the rotation vector from the reference to
        `R_FM` in F, which is MuJoCo's ball and free joint spring with equal entries of `k`
        (its potential is `½ k ‖q ⊖ q_ref‖²`, added by `potential_energy`).

        Limit stops (Simulation Construction Set) are spring-dampers on the coordinates that act
        only outside `[lower, upper]` and only push back:

            f_stop = min(0, −k (q − upper) − b q̇)   where q > upper
                     max(0, −k (q − lower) − b q̇)   where q < lower,   q̇ = N(q) v

        and `N(q)ᵀ` maps them to generalized forces with the power they do (`f·q̇ = (Nᵀ f)·v`).
        """
        p = self.params
        f_q = stop_force(
            q,
            self.qdot_from_v(q, v),
            p.position_lower,
            p.position_upper,
            p.stop_stiffness,
            p.stop_damping,
        )
        return self.stop_and_spring_force(q, f_q) + viscous_and_coulomb(v, p.damping, p.friction)

    def stop_and_spring_force(
        self, q: Float[Array, " nq"], f_q: Float[Array, " nq"]
    ) -> Float[Array, " nv"]:
        """The joint-specific part of `passive_force`: `N(q)ᵀ f_q − k ⊙ (q ⊖ q_ref)`, the
        coordinate forces `f_q` (limit stops, `stop_force`) mapped to generalized forces, and
        the joint spring."""
        zero = jnp.zeros(self.nv, q.dtype)
        tau_stop = jax.vjp(lambda vv: self.qdot_from_v(q, vv), zero)[1](f_q)[0]
        p = self.params
        return tau_stop - p.spring_stiffness * self.difference(p.spring_reference, q)

    def clip_position(self, q: Float[Array, " nq"]) -> Float[Array, " nq"]:
        """Clip coordinates to the position limits."""
        return jnp.clip(q, self.params.position_lower, self.params.position_upper)
