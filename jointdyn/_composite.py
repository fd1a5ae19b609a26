"""`Composite`: joints in series with no body between them."""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._joint import AbstractJoint, JointParams
from ._spatial import Transform, so3_log
from ._traversal import materialized

_FIT_ITERATIONS = 20


class Composite(AbstractJoint):
    """Joints `J₁ … Jₙ` in series, `M` of each coinciding with `F` of the next.

        X_FM = X_F₁M₁(q₁) ⋯ X_FₙMₙ(qₙ)
        q = [q₁; …; qₙ]    v = [v₁; …; vₙ]

    Column block k of `H_FM` is `H_k` re-expressed in F and shifted from `M_k`'s origin to
    `M`'s origin: `[R w; R v + (R w) × (p_FM − p_FMₖ)]`, with `R = R_FFₖ`.
    `params` is the concatenation of the sub-joints' parameters (edit those, not this view).
    """

    joints: tuple[AbstractJoint, ...]

    def __init__(self, joints: Sequence[AbstractJoint]):
        joints = tuple(joints)
        if not joints:
            raise ValueError("`joints` must hold at least one joint")
        for i, j in enumerate(joints):
            if not isinstance(j, AbstractJoint):
                raise ValueError(f"`joints[{i}]` is {type(j).__name__}, not a joint")
        self.joints = joints

    @property
    def nq(self) -> int:  # type: ignore[override]
        return sum(j.nq for j in self.joints)

    @property
    def nv(self) -> int:  # type: ignore[override]
        return sum(j.nv for j in self.joints)

    @property
    def params(self) -> JointParams:  # type: ignore[override]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs), *(j.params for j in self.joints))

    def _split(self, x, sizes):
        return jnp.split(x, np.cumsum(sizes)[:-1])

    def _q(self, q):
        return self._split(q, [j.nq for j in self.joints])

    def _v(self, v):
        return self._split(v, [j.nv for j in self.joints])

    def velocity_bound_linear(self):
        """Part k moves M's origin at `v_k + w_k × (p_FM − p_FMₖ)`, and `‖p_FM − p_FMₖ‖ ≤
        r_k = Σ_{l>k} sup ‖p_{F_l M_l}‖` (the later parts' translations; inf when one
        translates without bound). With Cauchy–Schwarz over the parts' velocities:

            λ = sqrt(Σ_k (λ_lin,k + λ_ang,k r_k)²)

        (an upper bound, exact for one part; inf for e.g. a revolute followed by a
        prismatic, whose lever arm is unbounded)."""
        inf = jnp.full(self.nq, jnp.inf, self.params.damping.dtype)
        return self._velocity_bound_linear_in(-inf, inf)

    def _velocity_bound_linear_in(self, lower, upper):
        lo, hi = self._q(jnp.asarray(lower)), self._q(jnp.asarray(upper))
        terms, r = [], 0.0
        for j, l, u in reversed(list(zip(self.joints, lo, hi, strict=True))):
            ang = j.velocity_bound_angular()
            arm = jnp.where(ang == 0, 0.0, ang * r)  # no 0 · inf
            terms.append((j._velocity_bound_linear_in(l, u) + arm) ** 2)
            r = r + j._translation_bound(l, u)
        return jnp.sqrt(sum(terms))

    def velocity_bound_angular(self):
        """`sqrt(Σ_k λ_ang,k²)`: the angular columns of the parts side by side."""
        return jnp.sqrt(sum(j.velocity_bound_angular() ** 2 for j in self.joints))

    def _translation_bound(self, lower, upper):
        lo, hi = self._q(jnp.asarray(lower)), self._q(jnp.asarray(upper))
        return sum(j._translation_bound(l, u) for j, l, u in zip(self.joints, lo, hi, strict=True))

    def _part_poses(self, q):
        """The parts' `X_FₖMₖ(qₖ)`, each evaluated once (`_traversal.materialized`).

        `X_FM`, `H_FM` and their tangents all read them; left to itself, XLA fused each
        part's `sin`/`cos` and products into every consumer and evaluated them once per
        element read (batched, a 12-body chain of revolute-revolute-prismatic composites:
        RNEA 3.1× and ABA 2.0× faster with this; MuJoCo's humanoid, whose hips, abdomen and
        shoulders are composites, `forward_dynamics` 1.7×; `benchmarks/NOTES.md`, thirtieth
        session)."""
        return [materialized(j.X_FM(qk)) for j, qk in zip(self.joints, self._q(q), strict=True)]

    def X_FM(self, q):
        X = None
        for Xk in self._part_poses(q):
            X = Xk if X is None else X @ Xk
        return X

    def H_FM(self, q):
        X = Transform.identity(q.dtype)  # pose of F_k in F
        blocks = []
        parts = zip(self.joints, self._q(q), self._part_poses(q), strict=True)
        for j, qk, Xk in parts:
            Hk = j.H_FM(qk)
            w, v = X.R @ Hk[:3], X.R @ Hk[3:]
            X = X @ Xk  # pose of M_k in F
            blocks.append((w, v, X.p))
        p_end = X.p
        return jnp.concatenate(
            [jnp.concatenate([w, v + jnp.cross(w.T, p_end - p_k).T], 0) for w, v, p_k in blocks], 1
        )

    def qdot_from_v(self, q, v):
        parts = zip(self.joints, self._q(q), self._v(v), strict=True)
        return jnp.concatenate([j.qdot_from_v(qk, vk) for j, qk, vk in parts])

    def v_from_qdot(self, q, qdot):
        parts = zip(self.joints, self._q(q), self._q(qdot), strict=True)
        return jnp.concatenate([j.v_from_qdot(qk, qdk) for j, qk, qdk in parts])

    def neutral(self):
        return jnp.concatenate([j.neutral() for j in self.joints])

    def integrate(self, q, v):
        parts = zip(self.joints, self._q(q), self._v(v), strict=True)
        return jnp.concatenate([j.integrate(qk, vk) for j, qk, vk in parts])

    def difference(self, q0, q1):
        parts = zip(self.joints, self._q(q0), self._q(q1), strict=True)
        return jnp.concatenate([j.difference(a, b) for j, a, b in parts])

    def integrate_derivatives(self, q, v):
        """Each part moves on its own: block diagonals of the parts' Jacobians."""
        parts = zip(self.joints, self._q(q), self._v(v), strict=True)
        Jq, Jv = zip(*(j.integrate_derivatives(qk, vk) for j, qk, vk in parts), strict=True)
        return jax.scipy.linalg.block_diag(*Jq), jax.scipy.linalg.block_diag(*Jv)

    def difference_derivatives(self, q0, q1):
        """Block diagonals of the parts' Jacobians."""
        parts = zip(self.joints, self._q(q0), self._q(q1), strict=True)
        J0, J1 = zip(*(j.difference_derivatives(a, b) for j, a, b in parts), strict=True)
        return jax.scipy.linalg.block_diag(*J0), jax.scipy.linalg.block_diag(*J1)

    @property
    def n_uniform(self) -> int:
        return sum(j.n_uniform for j in self.joints)

    def configuration_from_uniform(self, u, lower=None, upper=None):
        us = self._split(u, [j.n_uniform for j in self.joints])
        lo = self._q(lower) if lower is not None else [None] * len(self.joints)
        hi = self._q(upper) if upper is not None else [None] * len(self.joints)
        parts = zip(self.joints, us, lo, hi, strict=True)
        return jnp.concatenate([j.configuration_from_uniform(*x) for j, *x in parts])

    def normalize(self, q):
        return jnp.concatenate(
            [j.normalize(qk) for j, qk in zip(self.joints, self._q(q), strict=True)]
        )

    def q_from_X_FM(self, X_FM):
        """Greedy fit joint by joint, then Gauss–Newton on the pose error on the manifold.

        Residual `r(q) = [log(R_target R(q)ᵀ); p_target − p(q)]`; each step solves
        `J δ = −r` in least squares with `J = ∂r(q ⊕ δ)/∂δ` and sets `q ← q ⊕ δ`, with the
        pseudo-inverse `J⁺` (finite where `J` is rank-deficient: redundant joints, e.g. a
        Revolute before a Ball, where `lstsq`'s SVD derivative is NaN).

        Derivatives (in `X_FM` and in the joints' parameters θ) are those of the fitted `q*`
        by the implicit function theorem, not of the iterations: at a pose the joint reaches
        (`r(q*) = 0`), `δq = −J⁺ (∂r/∂X_FM · dX_FM + ∂r/∂θ · dθ)` mapped by `q* ⊕ δ`, the
        minimum-norm change along redundant joints. For a pose off the joint's manifold it is
        the Gauss–Newton part of the least-squares derivative (the `Σ rᵢ ∇²rᵢ` term is left
        out). One linear solve instead of differentiating every iteration: far cheaper to
        compile and to run (figures in `benchmarks/NOTES.md`).
        """
        return _fit(self, X_FM)


def _residual(joint, X_FM, q):
    """`r(q) = [log(R_target R(q)ᵀ); p_target − p(q)]`."""
    X = joint.X_FM(q)
    return jnp.concatenate([so3_log(X_FM.R @ X.R.T), X_FM.p - X.p])


def _residual_jacobian(joint, X_FM, q):
    """`J = ∂r(q ⊕ δ)/∂δ` at `δ = 0`."""
    zero = jnp.zeros(joint.nv, q.dtype)
    return jax.jacfwd(lambda d: _residual(joint, X_FM, joint.integrate(q, d)))(zero)


@eqx.filter_custom_jvp
def _fit(joint, X_FM):
    """`Composite.q_from_X_FM`'s fit (its derivative is `_fit_jvp`, not the iterations')."""
    qs, X_rest = [], X_FM
    for j in joint.joints:
        qk = j.q_from_X_FM(X_rest)
        qs.append(qk)
        X_rest = j.X_FM(qk).inverse() @ X_rest
    q0 = jnp.concatenate(qs)

    def step(_, q):
        r = _residual(joint, X_FM, q)
        delta = -jnp.linalg.pinv(_residual_jacobian(joint, X_FM, q)) @ r
        return joint.normalize(joint.integrate(q, delta))

    return jax.lax.fori_loop(0, _FIT_ITERATIONS, step, q0)


@_fit.def_jvp
def _fit_jvp(primals, tangents):
    """`dq = ∂(q* ⊕ δ)/∂δ · δ` with `δ = −J⁺ dr` and `dr = ∂r/∂(θ, X_FM) · (dθ, dX_FM)` at `q*`."""
    joint, X_FM = primals
    q = _fit(joint, X_FM)
    dyn, static = eqx.partition((joint, X_FM), eqx.is_inexact_array)
    # Tangents: zeros where equinox passes None (not differentiated), none for non-floats.
    d_dyn = jax.tree.map(
        lambda x, t: None if x is None else (jnp.zeros_like(x) if t is None else t),
        dyn,
        eqx.filter(tangents, eqx.is_inexact_array, replace=None),
        is_leaf=lambda x: x is None,
    )

    def residual(d):
        j, X = eqx.combine(d, static)
        return _residual(j, X, q)

    _, dr = jax.jvp(residual, (dyn,), (d_dyn,))
    delta = -jnp.linalg.pinv(_residual_jacobian(joint, X_FM, q)) @ dr
    _, dq = jax.jvp(lambda d: joint.integrate(q, d), (jnp.zeros_like(delta),), (delta,))
    return q, dq
