"""Analytic derivatives of the contact forces' joint forces, for `step_derivatives`.

The ground contact (`_contact`) acts on sphere `i` of body `b_i` with the wrench about the world
origin, world axes,

    F_i = [p_P × f; f],   f = law(p_P, v_P),   p_P = p_C − r e_z,   v_P = v_b + ω_b × p_P,

(`p_C` the sphere's centre, fixed on the body; `V_b = [ω_b; v_b]` the body's world Plücker
velocity), and on the joints with `Q_s = S_sᵀ F^c_body(s)`, `F^c_j = Σ_{i: b_i ⪰ j} F_i` (the
wrenches of the subtree). In world coordinates, as in `_derivatives` (Carpentier & Mansard):
moving DOF d of body `j` (`q ⊕ ε e_d`) moves the subtree of `j` rigidly with the world twist
`ξ = S_d`, so for a body `b ⪰ j`

    δp_C = ξ_ω × p_C + ξ_v,   δV_b = ξ × V_b + w_d,   w_d = δvJ_d − ξ × V_j,

(`δvJ_d`: the derivative of joint j's own `S q̇`, zero for joints whose hinge is constant in
their inboard frame), and `δS_s = ξ × S_s` for `body(s) ≻ j`, the joint's own `δS_s` for `s` in
joint `j`. Hence, with `G_p = ∂F_i/∂p_C`, `G_V = ∂F_i/∂V_b` (a 6×9 Jacobian per sphere, by
forward mode on the force law alone),

    ∂Q_s/∂q_d = S_sᵀ Σ_{i: b_i ⪰ body(s), b_i ⪰ body(d)} (G_p δp_C + G_V δV_b)
              + [body(d) ≺ body(s)] (ξ × S_s)ᵀ F^c_body(s) + [s, d in one joint] (δS_s)ᵀ F^c
    ∂Q_s/∂v_d = S_sᵀ Σ_{i: b_i ⪰ body(s), b_i ⪰ body(d)} G_V S_d.

One pass of joint terms and a few (nv, 6, nv) products, instead of forward-mode autodiff of
the kinematics in `2nv` directions: the contact part of `step_derivatives` with contact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._contact import GroundContact, force_law, lowest_points
from ._derivatives import _own_partials
from ._dtype import astype
from ._kinematics import dof_columns, joint_terms
from ._linalg import cross
from ._model import Model
from ._spatial import force_cross_matrix, motion_cross
from ._traversal import plan, sum_over_subtrees, take


def _wrenches(contact: GroundContact, p_C, V):
    """`F_i = [p_P × f; f]` (n, 6) from the spheres' centres `p_C` (n, 3) and their bodies'
    world Plücker velocities `V` (n, 6)."""
    p_P = lowest_points(contact, p_C)
    f = force_law(contact, p_P, V[:, 3:] + cross(V[:, :3], p_P))
    return jnp.concatenate([cross(p_P, f), f], -1)


def contact_joint_force_derivatives(
    model: Model, contact: GroundContact, q, v
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`Q_c = Σ_i J_iᵀ f_i` (nv), the contact forces' joint forces (as
    `external_joint_forces(model, q, contact_forces(model, contact, q, v))`), and its
    Jacobians `(∂Q_c/∂q, ∂Q_c/∂v)` (nv × nv, q in the tangent space), analytic (module
    docstring)."""
    dtype = jnp.result_type(q, v)
    model, contact = astype((model, contact), dtype)
    nv, nb = model.nv, model.nbodies
    p, t = plan(model), joint_terms(model, q, v)
    idx = np.asarray(contact.bodies)
    p_C = take(t.X_WB, idx).apply(contact.positions)
    V = t.V[idx]
    F = _wrenches(contact, p_C, V)

    # G = ∂F_i/∂(p_C, V_b) per sphere (n, 6, 9): the law is pointwise, so one tangent per
    # input coordinate, the same for every sphere, gives every sphere's column at once
    eye = jnp.eye(9, dtype=dtype)
    G = jax.vmap(
        lambda e: jax.jvp(
            lambda a, b: _wrenches(contact, a, b),
            (p_C, V),
            (jnp.broadcast_to(e[:3], p_C.shape), jnp.broadcast_to(e[3:], V.shape)),
        )[1],
        out_axes=2,
    )(eye)
    G_p, G_V = G[..., :3], G[..., 3:]

    def to_bodies(x):  # per-sphere (n, …) → subtree sums per body (nb, …)
        return sum_over_subtrees(p, jnp.zeros((nb,) + x.shape[1:], dtype).at[idx].add(x))

    db = p.dof_body
    xi = dof_columns(p, t.S).T  # (nv, 6): ξ_d = S_d
    on = jnp.asarray(p.ancestor[db][:, idx].T, dtype)  # (n, nv): b_i ⪰ body(d)
    Fc = to_bodies(F)
    dvJ, *_, own = _own_partials(model, p, t, q, v, jnp.zeros_like(v), Fc)
    w = dvJ - motion_cross(xi, t.V[db])  # (nv, 6)
    dp = cross(xi[None, :, :3], p_C[:, None]) + xi[None, :, 3:]  # (n, nv, 3)
    dV = motion_cross(xi[None], V[:, None]) + w[None]  # (n, nv, 6)
    dF_q = jnp.einsum("nij,ndj->nid", G_p, dp) + jnp.einsum("nij,ndj->nid", G_V, dV)
    dF_v = jnp.einsum("nij,dj->nid", G_V, xi)
    dFc = to_bodies(jnp.concatenate([dF_q, dF_v], -1) * jnp.tile(on, 2)[:, None])[db]
    dQ = jnp.einsum("sk,skd->sd", xi, dFc)  # (nv, 2nv)

    # S moves with the subtree: (ξ_d × S_s)ᵀ F^c = −S_sᵀ X(F^c) ξ_d, body(d) ≺ body(s)
    below = jnp.asarray(p.dof_ancestor.T * (db[:, None] != db[None, :]), bool)
    moved = -jnp.einsum("sk,skl,dl->sd", xi, force_cross_matrix(Fc[db]), xi)
    dQ_dq = dQ[:, :nv] + jnp.where(below, moved, 0.0)
    if own is not None:
        dQ_dq = dQ_dq + own
    return jnp.einsum("sk,sk->s", xi, Fc[db]), dQ_dq, dQ[:, nv:]
