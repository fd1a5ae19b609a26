"""Bounds on how fast bodies move for a given joint speed (HPP's velocity bounds, chained).

Path planners check a motion for collisions continuously by bounding how far any body can
move while `q` changes by a bounded amount: with `‖v_B‖ ≤ λ_B ‖v‖` for every configuration,
a body moves at most `λ_B · ‖Δq‖` (in the tangent metric) along a path of length `‖Δq‖`.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._compile import jit_unless_traced
from ._model import Model


@jit_unless_traced
def body_velocity_bounds(
    model: Model, q_range: tuple[ArrayLike, ArrayLike] | None = None
) -> tuple[Float[Array, " nb"], Float[Array, " nb"]]:
    """Constants `(λ_lin, λ_ang)` per body with, for every `q` in `q_range` and every `v`,

        ‖v_WBo‖ ≤ λ_lin,B ‖v‖,    ‖w_WB‖ ≤ λ_ang,B ‖v‖

    (`v_WBo` the velocity of the body's origin, `w_WB` its angular velocity, in the world).

    The body's twist is the sum of its ancestors' joint twists: joint j moves the body's
    origin at `v_Mⱼ + w_j × (p_B − p_Mⱼ)`, with `‖v_Mⱼ‖ ≤ λ_lin,j ‖v_j‖` and `‖w_j‖ ≤ λ_ang,j
    ‖v_j‖` (`joint.velocity_bound_linear/angular`), and `‖p_B − p_Mⱼ‖ ≤ d_jB`, the length of
    the chain from `M_j` to B: `‖p_{X_BM,j}‖`, then for every later joint k on the way
    `‖p_{X_PF,k}‖ + t_k + ‖p_{X_BM,k}‖` (`t_k` a bound on joint k's translation over
    `q_range`; rotations do not change lengths). Summing over the ancestors and applying
    Cauchy–Schwarz to `Σ_j c_j ‖v_j‖`:

        λ_ang,B = sqrt(Σ_j λ_ang,j²),    λ_lin,B = sqrt(Σ_j (λ_lin,j + λ_ang,j d_jB)²)

    Exact for a single revolute joint whose body origin lies off the axis at right angles
    (`λ_lin = d`), and for a prismatic one (`λ_lin = 1`).

    **Arguments:** `q_range` `(lower, upper)`, two `nq` vectors bounding the configurations
    considered (only translation coordinates matter); None: the model's position limits.
    A translation without finite bound makes the bounds of the bodies below any rotating
    joint above it infinite.

    **Returns:** `(λ_lin, λ_ang)`, two `(nbodies,)` arrays.
    """
    if q_range is None:
        lower, upper = model.position_lower(), model.position_upper()
    else:
        lower, upper = (jnp.asarray(x) for x in q_range)
        if lower.shape != (model.nq,) or upper.shape != (model.nq,):
            raise ValueError(
                f"`q_range` must be two vectors of size nq = {model.nq}, "
                f"got shapes {lower.shape} and {upper.shape}"
            )
    top = model.topology
    lin, ang, seg, arm = [], [], [], []  # per joint: λ_lin, λ_ang, segment length, |p_BM|
    for i, (joint, o) in enumerate(zip(model.joints, top.q_offsets, strict=True)):
        lo, hi = lower[o : o + joint.nq], upper[o : o + joint.nq]
        lin.append(joint._velocity_bound_linear_in(lo, hi))
        ang.append(joint.velocity_bound_angular())
        arm.append(jnp.linalg.norm(model.X_BM.p[i]))
        seg.append(jnp.linalg.norm(model.X_PF.p[i]) + joint._translation_bound(lo, hi) + arm[i])
    out_lin, out_ang = [], []
    for b in range(model.nbodies):
        path = [b]
        while top.parents[path[-1]] >= 0:
            path.append(top.parents[path[-1]])
        path.reverse()  # root ... b
        terms_lin, terms_ang = [], []
        for n, j in enumerate(path):
            d = arm[j] + sum((seg[k] for k in path[n + 1 :]), 0.0)
            lever = jnp.where(ang[j] == 0, 0.0, ang[j] * d)  # no 0 · inf
            terms_lin.append((lin[j] + lever) ** 2)
            terms_ang.append(ang[j] ** 2)
        out_lin.append(jnp.sqrt(sum(terms_lin)))
        out_ang.append(jnp.sqrt(sum(terms_ang)))
    return jnp.stack(out_lin), jnp.stack(out_ang)
