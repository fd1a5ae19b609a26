"""Identification helpers: the identifiable parameter combinations of a stacked regressor, and
least-squares fits with or without physical consistency.

A stacked regressor `Y` (N, p) (rows: the DOFs of many samples, `jd.batched(jd.regressor, …)`
reshaped to `(S·nv, p)`, possibly with `joint_regressor`'s columns) and measured torques `τ` (N,)
define the fit `min ‖Y π − τ‖²`. `Y` is always rank-deficient (a fixed base never moves some
bodies' masses, a revolute joint only feels a body's inertia about its axis, …): only the
**base parameters** `β = K π` (r of them) are identifiable, and `Y π = Y_b β` with `Y_b` r
columns of `Y` (Gautier 1990; QR with column pivoting).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._inertial_parameters import (
    _log_cholesky,
    inertial_parameters_from_log_cholesky,
    pseudo_inertia,
)
from ._precision import full_precision


def _rows(Y: ArrayLike, name: str = "Y") -> Array:
    Y = jnp.asarray(Y)
    if Y.ndim < 2:
        raise ValueError(f"`{name}` must have shape (..., p) with at least 2 axes, got {Y.shape}")
    return Y.reshape(-1, Y.shape[-1])


class BaseParameters(NamedTuple):
    """The identifiable combinations of a stacked regressor (see `base_parameters`).

    - `independent` (r,): the columns of `Y` that stay (base columns), as NumPy indices.
    - `dependent` (p − r,): the other columns.
    - `combination` (r, p): `K`, with base parameters `β = K π` and `Y π = Y[:, independent] β`
      for every `π`. `K[:, independent] = 1`; `K[:, dependent]` says how much of each
      dependent parameter each base parameter carries (entries below the tolerance are 0).
    """

    independent: np.ndarray
    dependent: np.ndarray
    combination: np.ndarray

    @property
    def rank(self) -> int:
        return len(self.independent)

    def base_regressor(self, Y: ArrayLike) -> Array:
        """`Y[..., independent]`: the regressor of the base parameters."""
        return jnp.asarray(Y)[..., self.independent]

    @full_precision
    def from_full(self, pi: ArrayLike) -> Array:
        """`β = K π` (…, r): the base parameters of full parameters `π` (…, p)."""
        return jnp.asarray(pi) @ jnp.asarray(self.combination).T

    def to_full(self, beta: ArrayLike) -> Array:
        """One `π` with `K π = β` (the dependent parameters zero): `Y π = Y_b β`."""
        beta = jnp.asarray(beta)
        p = len(self.independent) + len(self.dependent)
        out = jnp.zeros(beta.shape[:-1] + (p,), beta.dtype)
        return out.at[..., self.independent].set(beta)


def base_parameters(Y: Float[ArrayLike, "... p"], *, rtol: float = 1e-8) -> BaseParameters:
    """The base parameters of a stacked regressor `Y` (…, p) (leading axes are flattened into
    rows): QR with column pivoting, `Y P = Q [R₁ R₂]`, rank `r = #{i : |Rᵢᵢ| > rtol·|R₁₁|}`;
    then the dependent columns are `Y_d = Y_b R₁⁻¹ R₂`, so that

        Y π = Y_b (π_b + R₁⁻¹ R₂ π_d) = Y_b β,    β = K π,   K = [1 | R₁⁻¹ R₂] Pᵀ

    Columns that vanish (parameters that no sample moves) are dependent with a zero column of
    `K`. The rank decision needs concrete values: call outside `jit`. Use samples that excite
    the robot (random states do); too few rows, or too little motion, hide combinations.

    **Arguments:** `rtol`: relative tolerance of the rank decision (default 1e-8, for float64
    regressors of exact dynamics; raise it for noisy or float32 data).
    **Returns:** a `BaseParameters`.
    """
    Y = np.asarray(_rows(Y), dtype=np.float64)
    p = Y.shape[1]
    _, R, perm = jax.scipy.linalg.qr(jnp.asarray(Y), mode="economic", pivoting=True)
    R, perm = np.asarray(R), np.asarray(perm)
    d = np.abs(np.diag(R))
    r = int(np.sum(d > rtol * d.max())) if d.size and d.max() > 0 else 0
    ind, dep = perm[:r], perm[r:]
    B = np.linalg.solve(R[:r, :r], R[:r, r:]) if r else np.zeros((0, p - r))
    B[np.abs(B) < 1e3 * np.finfo(float).eps * max(1.0, np.abs(B).max(initial=0.0))] = 0.0
    K = np.zeros((r, p))
    K[np.arange(r), ind] = 1.0
    K[:, dep] = B
    order = np.argsort(ind)  # base parameters in column order, easier to read
    return BaseParameters(ind[order], np.sort(dep), K[order])


def is_physical(pi: Float[ArrayLike, "... 10"], tol: float = 1e-10) -> Array:
    """Whether inertial parameters (…, 10) describe a body: `m ≥ 0` and the pseudo-inertia
    `J ⪰ 0` (smallest eigenvalue ≥ −tol·max(1, ‖J‖)). Returns a bool array (…)."""
    J = pseudo_inertia(jnp.asarray(pi))
    ev = jnp.linalg.eigvalsh(J)
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(J), axis=(-2, -1)))
    return ev[..., 0] >= -tol * scale


@full_precision
def least_squares(
    Y: Float[ArrayLike, "... p"],
    tau: Float[ArrayLike, "..."],
    *,
    prior: Float[ArrayLike, " p"] | None = None,
    physical: bool = False,
    nbodies: int | None = None,
    iterations: int = 100,
) -> Float[Array, " p"]:
    """Parameters `π` (p,) that fit the torques: `min ‖Y π − τ‖²`.

    **Unconstrained** (`physical=False`): of all least-squares solutions, the one nearest to
    `prior` (0 if none): `π = π₀ + Y⁺ (τ − Y π₀)`. Its base parameters (`base_parameters`) are
    the identifiable ones; the rest is the prior's. Nothing stops a body from being non-physical.

    **Physically consistent** (`physical=True`): the first `10·nbodies` entries are the bodies'
    inertial parameters, written as `π(θ)` with log-Cholesky coordinates
    (`inertial_parameters_from_log_cholesky`), so every body stays physical; the remaining
    entries (e.g. `joint_parameters`: armature, damping, friction) are kept ≥ 0. The fit starts
    at `prior` (required: physical bodies, e.g. the nominal model's) and runs `iterations`
    Levenberg–Marquardt steps on `r(θ, x) = R π(θ, x) − Qᵀ τ` (`Y = Q R`: no `YᵀY`, whose
    condition number is squared), with damping `μ (diag(JᵀJ) + 10⁻³ mean diag(JᵀJ))`, `μ`
    adapted per step; each step is projected onto `x ≥ 0` and kept only if it lowers the cost.
    The floor `10⁻³ mean diag(JᵀJ)` keeps the directions that the data does not see from
    taking huge steps: the parameters that no torque depends on stay near the prior's. With
    them held there, some base parameters may be reachable only approximately by physical
    bodies (the notebook's noise-free arm: all 62 within 1 %, worst absolute error 1e-5).
    A body with zero mass in `prior` stays massless (it has no log-Cholesky coordinates).

    **Arguments:** `Y` (…, p) stacked regressor (leading axes flattened), `tau` (…) the matching
    torques; `nbodies` (physical only) the number of bodies (default `p // 10` when `p` is a
    multiple of 10).
    **Returns:** `π` (p,).
    """
    Yr = _rows(Y)
    t = jnp.asarray(tau).reshape(-1)
    n, p = Yr.shape
    if t.shape != (n,):
        raise ValueError(
            f"`tau` must have the shape of `Y` without its last axis, {jnp.shape(Y)[:-1]}, got "
            f"{jnp.shape(tau)}"
        )
    dtype = jnp.result_type(Yr, t, float)
    Yr, t = Yr.astype(dtype), t.astype(dtype)
    pi0 = jnp.zeros(p, dtype) if prior is None else jnp.asarray(prior, dtype)
    if pi0.shape != (p,):
        raise ValueError(f"`prior` must have shape ({p},), got {pi0.shape}")
    if not physical:
        return _least_squares(Yr, t, pi0)
    if prior is None:
        raise ValueError("`physical=True` needs a `prior` (physical bodies) to start from")
    if nbodies is None:
        if p % 10:
            raise ValueError(f"`nbodies` is needed: p = {p} is not a multiple of 10")
        nbodies = p // 10
    if not 0 <= 10 * nbodies <= p:
        raise ValueError(f"`nbodies` must be in [0, {p // 10}], got {nbodies}")
    body = np.asarray(pi0[: 10 * nbodies]).reshape(nbodies, 10)
    massive = body[:, 0] > 0
    ok = np.asarray(is_physical(body))
    if not np.all(ok):
        raise ValueError(f"`prior`: bodies {np.nonzero(~ok)[0].tolist()} are not physical")
    if np.any(np.asarray(pi0[10 * nbodies :]) < 0):
        raise ValueError("`prior`: the joint parameters (after the bodies') must be >= 0")
    theta0 = _log_cholesky(jnp.asarray(body[massive], dtype))
    if not np.all(np.isfinite(np.asarray(theta0))):
        raise ValueError(
            "`prior`: a body with mass has a singular pseudo-inertia (a point or a flat body); "
            "give it some inertia"
        )
    return _physical_fit(Yr, t, pi0, theta0, np.nonzero(massive)[0], nbodies, iterations)


@jax.jit
def _least_squares(Y: Array, t: Array, pi0: Array) -> Array:
    return pi0 + jnp.linalg.lstsq(Y, t - Y @ pi0)[0]


def _physical_fit(Y, t, pi0, theta0, massive, nbodies, iterations):
    return _lm(Y, t, pi0, theta0, tuple(int(i) for i in massive), nbodies, iterations)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _lm(Y, t, pi0, theta0, massive, nbodies, iterations):
    Q, R = jnp.linalg.qr(Y, mode="reduced")
    Qt = Q.T @ t
    idx = np.asarray(massive, np.int64)
    nm = len(idx)

    def params(z):
        theta, x = z[: 10 * nm].reshape(nm, 10), z[10 * nm :]
        bodies = pi0[: 10 * nbodies].reshape(nbodies, 10)
        bodies = bodies.at[idx].set(inertial_parameters_from_log_cholesky(theta))
        return jnp.concatenate([bodies.reshape(-1), x])

    def residual(z):
        return R @ params(z) - Qt

    def cost(z):
        r = residual(z)
        return 0.5 * jnp.dot(r, r)

    def project(z):
        return z.at[10 * nm :].set(jnp.maximum(z[10 * nm :], 0.0))

    def step(_, state):
        z, mu, c = state
        r = residual(z)
        J = jax.jacfwd(residual)(z)
        JtJ = J.T @ J
        g = J.T @ r
        d = jnp.diag(JtJ)
        D = d + 1e-3 * jnp.mean(d)  # floor: unseen directions move little
        dz = -jnp.linalg.solve(JtJ + mu * jnp.diag(D), g)
        z_new = project(z + dz)
        c_new = cost(z_new)
        better = c_new < c
        z = jnp.where(better, z_new, z)
        c = jnp.where(better, c_new, c)
        mu = jnp.where(better, jnp.maximum(mu / 3.0, 1e-12), mu * 4.0)
        return z, mu, c

    z0 = jnp.concatenate([theta0.reshape(-1), pi0[10 * nbodies :]])
    z, _, _ = jax.lax.fori_loop(0, iterations, step, (z0, jnp.asarray(1e-3, Y.dtype), cost(z0)))
    return params(z)
