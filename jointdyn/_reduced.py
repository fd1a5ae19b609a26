"""Reduced models: chosen joints locked (welded) at a reference configuration.

Pinocchio's `buildReducedModel(model, joints_to_lock, q_reference)`: every locked joint becomes
a weld at its position in `q_reference`, its body is merged into the nearest body that still
moves (as a URDF fixed joint merges a link), and `q`, `v` lose its coordinates. Users drop
fingers, grippers or a whole arm this way.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._dtype import astype
from ._model import WORLD, Model, ModelBuilder, check_sizes
from ._spatial import SpatialInertia, Transform
from ._urdf import _Inertia


def _locked_bodies(model: Model, locked_joints: Sequence[str | int]) -> np.ndarray:
    """A bool per body: whether its joint is locked. Joints by name or by body index."""
    if isinstance(locked_joints, str | int):
        raise ValueError("`locked_joints` must be a sequence of joint names or body indices")
    names = model.joint_names
    locked = np.zeros(model.nbodies, bool)
    for j in locked_joints:
        if isinstance(j, str):
            if j not in names:
                raise ValueError(f"unknown joint {j!r}; the model's joints are {list(names)}")
            i = names.index(j)
        elif isinstance(j, int | np.integer) and 0 <= j < model.nbodies:
            i = int(j)
        else:
            raise ValueError(f"locked joint {j!r} is neither a joint name nor a body index")
        if locked[i]:
            raise ValueError(f"joint {names[i]!r} is listed twice in `locked_joints`")
        locked[i] = True
    if locked.all():
        raise ValueError("every joint is locked: a reduced model needs one moving body")
    return locked


def _matrices(X: Transform) -> np.ndarray:
    """Stacked `Transform` → (n, 4, 4) homogeneous matrices, float64 on the host."""
    return np.asarray(X.as_matrix(), np.float64)


def reduced_indices(
    model: Model, locked_joints: Sequence[str | int]
) -> tuple[np.ndarray, np.ndarray]:
    """The coordinates that `reduced_model(model, locked_joints, ·)` keeps, in its order:

        q_reduced = q[iq],   v_reduced = v[iv]

    **Returns:** `(iq, iv)`, integer index arrays into the full `q` and `v`.
    """
    keep = ~_locked_bodies(model, locked_joints)
    top = model.topology
    iq = [np.arange(o, o + n) for o, n, k in zip(top.q_offsets, top.nqs, keep, strict=True) if k]
    iv = [np.arange(o, o + n) for o, n, k in zip(top.v_offsets, top.nvs, keep, strict=True) if k]
    return np.concatenate(iq).astype(int), np.concatenate(iv).astype(int)


def expand_configuration(
    model: Model,
    locked_joints: Sequence[str | int],
    q_reduced: Float[Array, " nq_reduced"],
    q_reference: Float[Array, " nq"],
) -> Float[Array, " nq"]:
    """The full model's `q` for a reduced model's `q_reduced`: the locked joints at their
    `q_reference` values, the others from `q_reduced` (differentiable, jit-friendly).
    **Raises:** `ValueError` when `q_reference` is not (nq,) or `q_reduced` not the reduced
    model's (nq_reduced,)."""
    iq, _ = reduced_indices(model, locked_joints)
    check_sizes(model, q_reference=q_reference)
    _check_reduced_size(q_reduced, "q_reduced", len(iq))
    return jnp.asarray(q_reference).at[iq].set(q_reduced)


def _check_reduced_size(x: ArrayLike, name: str, n: int) -> None:
    if jnp.shape(x) != (n,):
        raise ValueError(
            f"`{name}` must have shape ({n},) (the reduced model's), got {jnp.shape(x)}"
        )


def expand_velocity(
    model: Model, locked_joints: Sequence[str | int], v_reduced: Float[Array, " nv_reduced"]
) -> Float[Array, " nv"]:
    """The full model's `v` (or `v̇`, `tau`) for a reduced model's: zero at the locked joints.
    **Raises:** `ValueError` when `v_reduced` is not the reduced model's (nv_reduced,)."""
    _, iv = reduced_indices(model, locked_joints)
    _check_reduced_size(v_reduced, "v_reduced", len(iv))
    v_reduced = jnp.asarray(v_reduced)
    return jnp.zeros(model.nv, v_reduced.dtype).at[iv].set(v_reduced)


def reduced_model(
    model: Model, locked_joints: Sequence[str | int], q_reference: ArrayLike
) -> Model:
    """`model` with the joints `locked_joints` (names, or body indices) welded at their
    positions in `q_reference` (Pinocchio's `buildReducedModel`).

    A locked joint's body `i` is merged into `s(i)`, the nearest ancestor whose joint is not
    locked (or the world), at its pose there,

        X_{s(i) i} = X_{s(i) λ(i)} · X_PF[i] · X_FM(q_ref,i) · X_BM[i]⁻¹,

    its inertia added to `s(i)`'s (`I_C = Σ I_k + m_k (|d_k|² 1 − d_k d_kᵀ)`, about the merged
    centre of mass; mass merged into the world is dropped, as it cannot move), and its frames
    (its body frame, under the body's name, and the frames fixed on it) moved onto `s(i)`. A
    kept body whose parent is locked hangs from `s(parent)` at `X_{s(λ) λ} · X_PF`. Kept
    bodies keep their joints (parameters, limits, names) and their order; `q` and `v` keep
    their coordinates (`reduced_indices`; `expand_configuration` and `expand_velocity` map
    back). Computed in float64 on the host, then cast to the model's dtype.

    **Raises:** `ValueError` for an unknown or repeated joint, every joint locked, or a
    `q_reference` that is not a finite vector of size `nq`.
    """
    locked = _locked_bodies(model, locked_joints)
    q_ref = np.asarray(q_reference, np.float64)
    if q_ref.shape != (model.nq,) or not np.all(np.isfinite(q_ref)):
        raise ValueError(
            f"`q_reference` must be a finite vector of size nq = {model.nq}, "
            f"got shape {q_ref.shape}"
        )
    top = model.topology
    nb = model.nbodies
    PF, BM, BF = (_matrices(X) for X in (model.X_PF, model.X_BM, model.X_BF))
    # s(i) and X_{s(i) i} for every body (identity for kept bodies)
    surv, T_S = np.arange(nb), [np.eye(4) for _ in range(nb)]
    for i, (joint, p) in enumerate(zip(model.joints, top.parents, strict=True)):
        if not locked[i]:
            continue
        o = top.q_offsets[i]
        X_FM = joint.X_FM(jnp.asarray(q_ref[o : o + joint.nq]))
        T_PB = PF[i] @ _matrices(X_FM) @ np.linalg.inv(BM[i])
        surv[i], T_S[i] = (-1, T_PB) if p < 0 else (surv[p], T_S[p] @ T_PB)

    def inertia(i: int) -> _Inertia:
        I = model.inertias
        return _Inertia(
            float(I.mass[i]), np.asarray(I.com[i], np.float64), np.asarray(I.inertia[i], np.float64)
        )

    merged = {i: inertia(i) for i in range(nb) if not locked[i]}
    for i in range(nb):
        if locked[i] and surv[i] >= 0:
            merged[surv[i]] = merged[surv[i]] + inertia(i).transform(T_S[i])

    b = ModelBuilder(np.asarray(model.gravity, np.float64))
    for i in np.flatnonzero(~locked):
        p = top.parents[i]
        parent = WORLD if p < 0 or surv[p] < 0 else top.body_names[surv[p]]
        T_PF = (np.eye(4) if p < 0 else T_S[p]) @ PF[i]
        m = merged[i]
        b.add_body(
            top.body_names[i],
            SpatialInertia(m.mass, m.com, m.I),
            parent,
            model.joints[i],
            joint_name=top.joint_names[i],
            X_PF=Transform.from_matrix(T_PF),
            X_BM=Transform.from_matrix(BM[i]),
        )
    for k, (name, body) in enumerate(zip(top.frame_names, top.frame_parents, strict=True)):
        if k < nb and not locked[k]:
            continue  # a kept body's own frame: made by the builder
        T_BF = BF[k]
        if body >= 0 and locked[body]:
            T_BF, body = T_S[body] @ T_BF, surv[body]
        b.add_frame(name, WORLD if body < 0 else top.body_names[body], Transform.from_matrix(T_BF))
    return astype(b.build(), jnp.result_type(model.X_PF.p))
