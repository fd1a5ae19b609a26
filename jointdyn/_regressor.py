"""The joint-torque regressor: inverse dynamics as a linear map of the parameters.

    rnea(q, v, v̇) = Y(q, v, v̇) π  +  Y_J(v, v̇) [armature; damping; friction] − …

`regressor` gives `Y` (nv, 10·nbodies) for the bodies' inertial parameters `π`
(`inertial_parameters(model).ravel()`, Pinocchio's `computeJointTorqueRegressor`).
`joint_regressor` gives the joint columns `Y_J` (nv, 3·nv) for the parameters of
`joint_parameters(model)`, `[armature (nv), damping (nv), friction (nv)]`, in that order.

**Why a second function rather than a flag on `regressor`.** The two have different
parameter vectors (one block per body, one per DOF) that live in different places of the
`Model` (`inertias`, `JointParams`), and a flag would change `regressor`'s output shape. Keeping
them apart, each with its own `…_parameters` / `with_…_parameters` pair, keeps
`regressor(...) @ inertial_parameters(model).ravel() = rnea(...)` an identity of the bodies
alone; the full identification matrix is the concatenation:

    Y_full = [regressor(m, q, v, v̇), joint_regressor(m, q, v, v̇)]                (nv, 10 nb + 3 nv)
    Y_full @ [inertial_parameters(m).ravel(); joint_parameters(m)]
        = rnea(m, q, v, v̇) − joint_forces(m, q, v)                      (springs and stops 0)

that is, the motor torque `tau` of `forward_dynamics(m, q, v, tau) = v̇`: `armature ⊙ v̇` is part
of `rnea`, and the passive force `−damping ⊙ v − friction ⊙ sign(v)` is what the motor must
overcome. Joint springs and limit stops are not linear in these parameters: they are not
columns (subtract `joint_forces` of a model holding only them, if a model has them).

**How `Y` is computed** (on RNEA's structure, not by differentiating `rnea`). One forward
pass gives every body's spatial velocity `v_B = [ω; u]` and acceleration `a_B = [α; a]`
(gravity included as the base acceleration), in body axes at the body origin. The body's net
force there is linear in its parameters, `f_B = A(v_B, a_B) π_B` with (Atkeson 1986)

    A = [[0,          −[a + ω×u]×,     L(α) + [ω]× L(ω)],
         [a + ω×u,   [α]× + [ω]×[ω]×,  0              ]]          (6×10)

(`L(x) ι = I x` for `ι = [I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`). Each `A` is moved to the
world origin, `W_B = X_WB* A` (force transform), and joint k feels the forces of the bodies
its body supports: `Y[k, body i] = S_kᵀ W_i` if body(k) is i or an ancestor of i, else 0 (the
static ancestor matrix of the plan; `S_k` the world hinge columns of `joint_terms`).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from ._compile import accepts_packed, jit_unless_traced
from ._dtype import astype
from ._kinematics import _dtype, dof_columns, hinge_times, joint_terms
from ._linalg import cross
from ._model import Model, check_sizes
from ._spatial import motion_cross
from ._traversal import plan, sum_over_ancestors


def body_regressor(w: Array, u: Array, alpha: Array, a: Array) -> Float[Array, "... 6 10"]:
    """`A(v, a)` (…, 6, 10): the net spatial force `[n; f] = I a + v ×* I v` on a body with
    spatial velocity `[w; u]` and spatial acceleration `[alpha; a]` (all at its origin, in one
    frame) as a linear map of its inertial parameters `π` expressed in that frame."""
    z = jnp.zeros_like(w[..., 0])
    lin = a + cross(w, u)  # column of m, and the first moment's torque term
    x, y, zz = lin[..., 0], lin[..., 1], lin[..., 2]
    # −[lin]× : n = h × lin = −lin × h
    nh = [[z, zz, -y], [-zz, z, x], [y, -x, z]]
    # [α]× + [w]×[w]× : f = α × h + w × (w × h)
    ax, ay, az = alpha[..., 0], alpha[..., 1], alpha[..., 2]
    wx, wy, wz = w[..., 0], w[..., 1], w[..., 2]
    fh = [
        [-(wy * wy + wz * wz), wx * wy - az, wx * wz + ay],
        [wx * wy + az, -(wx * wx + wz * wz), wy * wz - ax],
        [wx * wz - ay, wy * wz + ax, -(wx * wx + wy * wy)],
    ]

    # L(x) ι = I x for ι = [xx, xy, yy, xz, yz, zz]
    def L(v0, v1, v2):
        return [[v0, v1, z, v2, z, z], [z, v0, v1, z, v2, z], [z, z, z, v0, v1, v2]]

    La = L(ax, ay, az)
    Lw = L(wx, wy, wz)
    # [w]× L(w): row r = (w × column)_r
    wL = [
        [wy * Lw[2][c] - wz * Lw[1][c] for c in range(6)],
        [wz * Lw[0][c] - wx * Lw[2][c] for c in range(6)],
        [wx * Lw[1][c] - wy * Lw[0][c] for c in range(6)],
    ]
    rows = []
    for r in range(3):
        rows.append([z, *nh[r], *(La[r][c] + wL[r][c] for c in range(6))])
    for r in range(3):
        rows.append([lin[..., r], *fh[r], z, z, z, z, z, z])
    return jnp.stack([jnp.stack(row, -1) for row in rows], -2)


@jit_unless_traced
def regressor(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    vdot: Float[Array, " nv"],
) -> Float[Array, "nv nbodies*10"]:
    """The joint-torque regressor `Y(q, v, v̇)` (nv, 10·nbodies): inverse dynamics is linear in
    the bodies' inertial parameters,

        Y(q, v, v̇) @ inertial_parameters(model).ravel() = rnea(model, q, v, v̇)

    (with the model's armature zero; see `joint_regressor` for the armature, viscous and
    Coulomb friction columns). Columns `10 i … 10 i + 9` belong to body i, in the order of
    `inertial_parameters`. Equal to Pinocchio's `computeJointTorqueRegressor` (bodies in body
    order, velocities in our coordinates). Built on RNEA's structure (see the module's
    docstring): one pass for the bodies' velocities and accelerations, one 6×10 block per body,
    one product with the hinge columns masked by the ancestor matrix.
    Stacked over samples (`jd.batched(jd.regressor, (None, 0, 0, 0))`), it gives the
    identification matrix.
    """
    check_sizes(model, q=q, v=v, vdot=vdot)
    model = astype(model, _dtype(q, v, vdot))
    p = plan(model)
    t = joint_terms(model, q, v)
    dtype = t.V.dtype
    a0 = jnp.concatenate([jnp.zeros(3, dtype), -model.gravity.astype(dtype)])
    aJ = hinge_times(p, t.S, vdot) + t.cJ + motion_cross(t.V, t.vJ)
    A = a0 + sum_over_ancestors(p, aJ)  # spatial accelerations at the world origin, world axes
    R, pos = t.X_WB.R, t.X_WB.p
    Rt = jnp.swapaxes(R, -1, -2)

    def to_body(X):  # world Plücker at the origin → body axes at the body origin
        ang = X[:, :3]
        return _mv(Rt, ang), _mv(Rt, X[:, 3:] + cross(ang, pos))

    w, u = to_body(t.V)
    alpha, a = to_body(A)
    Ab = body_regressor(w, u, alpha, a)  # (nb, 6, 10), body frame
    # forces to the world origin: [R n + p × R f; R f]
    n_W = jnp.einsum("bij,bjk->bik", R, Ab[:, :3])
    f_W = jnp.einsum("bij,bjk->bik", R, Ab[:, 3:])
    n_W = n_W + cross(pos[:, :, None], f_W, axis=1)
    W = jnp.concatenate([n_W, f_W], 1)  # (nb, 6, 10)
    nb = model.nbodies
    Sd = dof_columns(p, t.S).astype(dtype)  # (6, nv)
    Y = (Sd.T @ jnp.swapaxes(W, 0, 1).reshape(6, nb * 10)).reshape(model.nv, nb, 10)
    mask = jnp.asarray(p.ancestor[p.dof_body, :], dtype)  # (nv, nb)
    return (Y * mask[:, :, None]).reshape(model.nv, nb * 10)


def _mv(M: Array, x: Array) -> Array:
    return jnp.einsum("bij,bj->bi", M, x)


@jit_unless_traced
def joint_regressor(
    model: Model,
    q: Float[Array, " nq"],
    v: Float[Array, " nv"],
    vdot: Float[Array, " nv"],
) -> Float[Array, "nv 3*nv"]:
    """The joint columns of the regressor (nv, 3·nv): `[diag(v̇), diag(v), diag(sign v)]`, for
    the parameters `joint_parameters(model) = [armature; damping; friction]`, so that

        regressor(m, q, v, v̇) @ inertial_parameters(m).ravel()
          + joint_regressor(m, q, v, v̇) @ joint_parameters(m)  =  rnea(m, q, v, v̇) − joint_forces(m, q, v)

    for a model without joint springs and limit stops: the motor torque that produces `v̇`
    under `forward_dynamics`. `q` is unused (kept so both regressors take the same arguments).
    """
    check_sizes(model, q=q, v=v, vdot=vdot)
    dtype = _dtype(q, v, vdot)
    v, vdot = v.astype(dtype), vdot.astype(dtype)
    return jnp.concatenate([jnp.diag(vdot), jnp.diag(v), jnp.diag(jnp.sign(v))], 1)


_JOINT_FIELDS = ("armature", "damping", "friction")


@accepts_packed
def joint_parameters(model: Model) -> Float[Array, " 3*nv"]:
    """`[armature (nv); damping (nv); friction (nv)]` of every DOF in DOF order, the parameters
    of `joint_regressor`'s columns (from each joint's `JointParams`)."""
    return jnp.concatenate([model._joint_param(f) for f in _JOINT_FIELDS])


@accepts_packed
def with_joint_parameters(model: Model, x: Float[Array, " 3*nv"]) -> Model:
    """`model` with the armature, damping and Coulomb friction of `x` (3·nv,) in the order of
    `joint_parameters` (the inverse of it; `Model.with_joint_params` with the three fields).
    Differentiable; concrete values are validated by `JointParams` (**Raises** `ValueError` for
    negative ones, or a wrong shape)."""
    x = jnp.asarray(x)
    nv = model.nv
    if x.shape != (3 * nv,):
        raise ValueError(
            f"`x` must have shape ({3 * nv},) ([armature; damping; friction], nv each), got "
            f"{x.shape}"
        )
    return model.with_joint_params(**dict(zip(_JOINT_FIELDS, x.reshape(3, nv), strict=True)))
