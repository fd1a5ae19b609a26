"""Inertial parameters: the ten numbers per body that the dynamics are linear in, and a map
from unconstrained vectors onto the physically consistent ones (log-Cholesky).

**Order** (Pinocchio's `Inertia.toDynamicParameters()`), per body, about the body origin in
body axes:

    π = [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]

with `c` the centre of mass and `I = I_C + m (|c|² 1 − c cᵀ)` the rotational inertia about the
body origin (parallel-axis theorem; `I_C` about the centre of mass, what `SpatialInertia`
stores). Inverse dynamics is linear in `π` (see `regressor`).

**Physical consistency** (Wensing, Kim & Slotine 2017). A body is physical when it is a
non-negative mass density: exactly when its pseudo-inertia

    J = [[Σ, h], [hᵀ, m]],   Σ = ½ tr(I) 1 − I,   h = m c       (4×4, symmetric)

is positive semi-definite (`J = ∫ [p; 1][p; 1]ᵀ dm`). `J ≻ 0` implies `m > 0` and the triangle
inequality of the principal moments about the centre of mass.

**Log-Cholesky** (Rucker & Wensing 2022). Any `θ = [α, d₁, d₂, d₃, s₁₂, s₂₃, s₁₃, t₁, t₂, t₃]`
of ℝ¹⁰ gives a positive-definite `J = U Uᵀ` with

    U = e^α [[e^{d₁}, s₁₂, s₁₃, t₁],
             [0,     e^{d₂}, s₂₃, t₂],
             [0,     0,     e^{d₃}, t₃],
             [0,     0,     0,      1 ]]

and every `J ≻ 0` comes from exactly one `θ` (the upper-triangular Cholesky factor with a
positive diagonal is unique). So `m = e^{2α}`, `h = e^{2α} t`, and gradient steps in `θ` never
leave the physical bodies. Massless bodies (`J` singular) are the boundary: they have no `θ`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._compile import accepts_packed
from ._joint import is_concrete
from ._linalg import identity
from ._model import Model, _check_inertia
from ._spatial import SpatialInertia, parallel_axis


def _sym(i: Array) -> Array:
    """`[I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]` (…, 6) → the symmetric 3×3 matrix."""
    xx, xy, yy, xz, yz, zz = (i[..., k] for k in range(6))
    return jnp.stack(
        [jnp.stack([xx, xy, xz], -1), jnp.stack([xy, yy, yz], -1), jnp.stack([xz, yz, zz], -1)],
        -2,
    )


def _unsym(I: Array) -> Array:
    """The symmetric 3×3 matrix → `[I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]` (its upper triangle)."""
    return jnp.stack(
        [I[..., 0, 0], I[..., 0, 1], I[..., 1, 1], I[..., 0, 2], I[..., 1, 2], I[..., 2, 2]], -1
    )


def _parallel_axis(m: Array, c: Array) -> Array:
    """`m (|c|² 1 − c cᵀ)` (…, 3, 3)."""
    return m[..., None, None] * parallel_axis(c)


@accepts_packed
def inertial_parameters(model: Model) -> Float[Array, "nbodies 10"]:
    """The inertial parameters of every body, in body order (see the module's docstring):

        πᵢ = [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]

    about body i's origin, in its axes, `I = I_C + m (|c|² 1 − c cᵀ)`: row i equals Pinocchio's
    `model.inertias[joint_i].toDynamicParameters()`. Differentiable; the inverse is
    `with_inertial_parameters`.
    """
    I = model.inertias
    m, c = I.mass, I.com
    I_O = I.inertia + _parallel_axis(m, c)
    return jnp.concatenate([m[:, None], m[:, None] * c, _unsym(I_O)], -1)


def _as_matrix_pi(model: Model, pi: ArrayLike) -> Array:
    pi = jnp.asarray(pi)
    nb = model.nbodies
    if pi.shape == (10 * nb,):
        pi = pi.reshape(nb, 10)
    if pi.shape != (nb, 10):
        raise ValueError(
            f"`pi` must have shape ({nb}, 10) or ({10 * nb},) (10 inertial parameters per "
            f"body), got {pi.shape}"
        )
    if not jnp.issubdtype(pi.dtype, jnp.floating):
        pi = pi.astype(jnp.result_type(float))
    return pi


def _ten(x: ArrayLike, name: str) -> Array:
    """`x` as an array of 10-vectors (…, 10), or a `ValueError` naming it (a shorter last axis
    was read past its end: JAX clamps the index)."""
    x = jnp.asarray(x)
    if x.shape[-1:] != (10,):
        raise ValueError(f"`{name}` must have shape (..., 10), got {x.shape}")
    return x


def spatial_inertias(pi: Float[Array, "... 10"]) -> SpatialInertia:
    """Inertial parameters → `SpatialInertia` (mass, centre of mass, inertia about it):

    c = h / m,   I_C = I − (|h|² 1 − h hᵀ) / m       (c = 0, I_C = I for m = 0)
    """
    m, h = pi[..., 0], pi[..., 1:4]
    pos = m > 0
    safe_m = jnp.where(pos, m, 1.0)
    c = jnp.where(pos[..., None], h / safe_m[..., None], 0.0)
    I_O = _sym(pi[..., 4:])
    return SpatialInertia(m, c, I_O - _parallel_axis(m, c))


@accepts_packed
def with_inertial_parameters(model: Model, pi: Float[Array, "nbodies 10"]) -> Model:
    """`model` with the inertias of `pi` (nbodies, 10) (or flat, (10·nbodies,)), the inverse
    of `inertial_parameters`: `with_inertial_parameters(m, inertial_parameters(m))` is `m` to
    rounding (`c = h/m`, `I_C = I − (|h|² 1 − h hᵀ)/m`; a massless body gets `c = 0`).

    Differentiable and jittable. When `pi` is concrete (not traced) every body is checked:
    **Raises** `ValueError` naming the body whose parameters no body can have (negative mass,
    a first moment without mass, a rotational inertia about the centre of mass that is not
    positive semi-definite or breaks the triangle inequality), or for a wrong shape.
    """
    pi = _as_matrix_pi(model, pi)
    inertia = spatial_inertias(pi)
    if is_concrete(pi):
        _check_physical(model, np.asarray(pi), inertia)
    return eqx.tree_at(lambda m: m.inertias, model, inertia)


def _check_physical(model: Model, pi: np.ndarray, inertia: SpatialInertia) -> None:
    for i, name in enumerate(model.body_names):
        m, h = float(pi[i, 0]), pi[i, 1:4]
        scale = max(1.0, float(np.abs(pi[i]).max()))
        if m <= 0 and np.abs(h).max() > 1e-12 * scale:
            raise ValueError(
                f"body {name!r}: first moment m·c = {h} without mass (m = {m}) is not physical"
            )
        _check_inertia(jax.tree.map(lambda x, i=i: x[i], inertia), name)


# --------------------------------------------------------------------------------------------
# log-Cholesky parametrisation (Rucker & Wensing 2022)


@jax.jit
def inertial_parameters_from_log_cholesky(theta: Float[Array, "... 10"]) -> Float[Array, "... 10"]:
    """The physically consistent inertial parameters of log-Cholesky coordinates (…, 10):

        θ = [α, d₁, d₂, d₃, s₁₂, s₂₃, s₁₃, t₁, t₂, t₃]  ↦  J = U Uᵀ  ↦  π

    with `U` as in the module's docstring, `m = J₄₄`, `h = J₁:₃,₄`, `Σ = J₁:₃,₁:₃`, `I = tr(Σ) 1 − Σ`.
    Every `θ` gives a body with `m > 0` and positive-definite pseudo-inertia (so a positive
    definite `I_C` with strict triangle inequality): gradient descent in `θ` stays physical.
    Smooth (entire) in `θ`; broadcasts over leading axes.
    """
    theta = _ten(theta, "theta")
    a, d1, d2, d3, s12, s23, s13, t1, t2, t3 = (theta[..., k] for k in range(10))
    e1, e2, e3 = jnp.exp(d1), jnp.exp(d2), jnp.exp(d3)
    # rows of U / e^α
    r1 = (e1, s12, s13, t1)
    r2 = (0.0, e2, s23, t2)
    r3 = (0.0, 0.0, e3, t3)

    def dot(x, y):
        return sum(xi * yi for xi, yi in zip(x, y, strict=True))

    s = jnp.exp(2 * a)
    S11, S22, S33 = dot(r1, r1), dot(r2, r2), dot(r3, r3)
    S12, S13, S23 = dot(r1, r2), dot(r1, r3), dot(r2, r3)
    tr = S11 + S22 + S33
    out = [
        jnp.ones_like(a),
        t1,
        t2,
        t3,
        tr - S11,
        -S12,
        tr - S22,
        -S13,
        -S23,
        tr - S33,
    ]
    return s[..., None] * jnp.stack(out, -1)


def log_cholesky_from_inertial_parameters(pi: Float[Array, "... 10"]) -> Float[Array, "... 10"]:
    """The inverse of `inertial_parameters_from_log_cholesky`: the log-Cholesky coordinates of
    physically consistent inertial parameters with positive-definite pseudo-inertia (…, 10).

    `J = [[Σ, h], [hᵀ, m]]` is factored as `U Uᵀ` with `U` upper triangular (a Cholesky
    factorisation from the last row and column up), and `α = log U₄₄`, `dᵢ = log(Uᵢᵢ / U₄₄)`,
    `s_ij = U_ij / U₄₄`, `tᵢ = U_i4 / U₄₄ = cᵢ`.

    **Raises:** `ValueError` (concrete input) naming the rows that have no coordinates: a
    massless body or a pseudo-inertia that is not positive definite (traced input gives NaN).
    """
    theta = _log_cholesky(_ten(pi, "pi"))
    if is_concrete(theta):
        bad = ~np.all(np.isfinite(np.asarray(theta)), axis=-1)
        if np.any(bad):
            rows = [tuple(int(x) for x in r) for r in np.argwhere(bad)]
            raise ValueError(
                f"inertial parameters at index {rows[:8]} have no log-Cholesky coordinates: "
                "the pseudo-inertia is not positive definite (massless, planar or non-physical)"
            )
    return theta


@jax.jit
def _log_cholesky(pi: Array) -> Array:
    m, h = pi[..., 0], pi[..., 1:4]
    I_O = _sym(pi[..., 4:])
    eye = identity(3, pi.dtype)
    Sigma = 0.5 * jnp.trace(I_O, axis1=-2, axis2=-1)[..., None, None] * eye - I_O
    nan = jnp.asarray(jnp.nan, pi.dtype)

    def sqrt(x):  # NaN (not 0) for a non-positive pivot
        return jnp.where(x > 0, jnp.sqrt(jnp.where(x > 0, x, 1.0)), nan)

    u44 = sqrt(m)
    u4 = h / u44[..., None]  # U[0:3, 3]
    S = Sigma - u4[..., :, None] * u4[..., None, :]  # Σ − h hᵀ/m: Σ about the centre of mass
    u33 = sqrt(S[..., 2, 2])
    u13, u23 = S[..., 0, 2] / u33, S[..., 1, 2] / u33
    u22 = sqrt(S[..., 1, 1] - u23 * u23)
    u12 = (S[..., 0, 1] - u13 * u23) / u22
    u11 = sqrt(S[..., 0, 0] - u13 * u13 - u12 * u12)
    return jnp.stack(
        [
            jnp.log(u44),
            jnp.log(u11 / u44),
            jnp.log(u22 / u44),
            jnp.log(u33 / u44),
            u12 / u44,
            u23 / u44,
            u13 / u44,
            u4[..., 0] / u44,
            u4[..., 1] / u44,
            u4[..., 2] / u44,
        ],
        -1,
    )


def pseudo_inertia(pi: Float[Array, "... 10"]) -> Float[Array, "... 4 4"]:
    """`J = [[Σ, h], [hᵀ, m]]`, `Σ = ½ tr(I) 1 − I` (…, 4, 4): a body is physical iff `J ⪰ 0`."""
    pi = _ten(pi, "pi")
    m, h = pi[..., 0], pi[..., 1:4]
    I_O = _sym(pi[..., 4:])
    eye = identity(3, I_O.dtype)
    Sigma = 0.5 * jnp.trace(I_O, axis1=-2, axis2=-1)[..., None, None] * eye - I_O
    top = jnp.concatenate([Sigma, h[..., :, None]], -1)
    bottom = jnp.concatenate([h, m[..., None]], -1)[..., None, :]
    return jnp.concatenate([top, bottom], -2)
