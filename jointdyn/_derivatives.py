"""Derivatives of forward dynamics with respect to the state and the torques.

Differentiating `RNEA(q, v, ABA(q, v, τ)) = τ` gives (Carpentier & Mansard, RSS 2018)

    ∂v̇/∂q = −M⁻¹ ∂RNEA/∂q,   ∂v̇/∂v = −M⁻¹ ∂RNEA/∂v,   ∂v̇/∂τ = M⁻¹,

with RNEA's partials taken at `v̇ = ABA(q, v, τ)`. RNEA is cheaper to differentiate than ABA
(no articulated inertias, no per-joint inverses), so this costs one ABA, one CRBA, one Cholesky
factorisation of `M`, and forward-mode RNEA along the `2 nv` tangent directions at once:
about 10× less than `jax.jacrev(aba)` and 2–4× less than `jax.jacfwd(aba)` (see benchmarks/).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve
from jaxtyping import Array, Float

from ._dynamics import _check_sizes, aba, crba, rnea
from ._model import Model


class ABADerivatives(eqx.Module):
    """Output of `aba_derivatives`. The q-derivative is in the tangent space:
    `dvdot_dq[:, k] = d/dε v̇(q ⊕ ε e_k)` at `ε = 0` (`⊕` is `Model.integrate`)."""

    vdot: Float[Array, " nv"]
    dvdot_dq: Float[Array, "nv nv"]
    dvdot_dv: Float[Array, "nv nv"]
    dvdot_dtau: Float[Array, "nv nv"]  # = M(q)⁻¹


@jax.jit
def rnea_derivatives(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    vdot: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> tuple[Float[Array, "nv nv"], Float[Array, "nv nv"]]:
    """`(∂τ/∂q, ∂τ/∂v)` of `rnea` (q in the tangent space; `∂τ/∂v̇ = M(q)` is `crba`).

    Forward mode along all `2 nv` directions at once (`jax.jacfwd`).
    """
    _check_sizes(model, q=q, v=v, vdot=vdot)

    def tau(dq, dv):
        return rnea(model, model.integrate(q, dq), v + dv, vdot, f_ext)

    zero = jnp.zeros_like(v)
    return jax.jacfwd(tau, argnums=(0, 1))(zero, zero)


@jax.jit
def aba_derivatives(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    tau: Float[Array, " nv"],
    f_ext: Float[Array, "nb 6"] | None = None,
) -> ABADerivatives:
    """`v̇ = aba(q, v, tau, f_ext)` and its derivatives in `q` (tangent space), `v` and `tau`.

        ∂v̇/∂q = −M⁻¹ ∂RNEA/∂q,   ∂v̇/∂v = −M⁻¹ ∂RNEA/∂v,   ∂v̇/∂τ = M⁻¹   (RNEA at v̇)

    (Pinocchio's `computeABADerivatives`.) `f_ext` is held fixed as `F_Bo_W`, like in `aba`.
    """
    vdot = aba(model, q, v, tau, f_ext)
    dtau_dq, dtau_dv = rnea_derivatives(model, q, v, vdot, f_ext)
    L = jnp.linalg.cholesky(crba(model, q))
    n = model.nv
    rhs = jnp.concatenate([jnp.eye(n, dtype=L.dtype), -dtau_dq, -dtau_dv], 1)
    sol = cho_solve((L, True), rhs)
    return ABADerivatives(vdot, sol[:, n : 2 * n], sol[:, 2 * n :], sol[:, :n])
