"""Checks `ModelBuilder.build()` runs on a whole tree: a joint must move something with inertia.

A joint whose subtree has no mass and no rotational inertia about it (a massless leaf on a
revolute joint, a point mass on a ball joint, two prismatic joints along one line) makes the
joint-space mass matrix `M(q)` singular, and `aba` would return `inf` without a word. MuJoCo
refuses such a model at compile time; so does `build()` (`load_urdf` warns instead: real
robots such as romeo have massless finger links, fine for kinematics and inverse dynamics).

The test is NumPy on one generic configuration `q* = neutral ⊕ δ` (δ fixed, pseudo-random):
`det M(q)` is analytic in `q`, so a mass matrix singular at `q*` is singular almost everywhere
(a model singular only at special configurations, such as a point mass on an axis at `q = 0`,
passes). `M = Σ_b J_bᵀ I_b J_b`, with body inertias `I_b` and joint motion subspaces
`J_b` all in world axes about the world origin.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

from ._traversal import plan

#: Relative size below which a DOF's own inertia `M_kk` counts as zero: a massless subtree
#: gives an exact 0, and real robots' smallest links stay above 1e-12 of the largest.
DIAGONAL_TOL = 1e-14
#: Smallest eigenvalue of `D^-1/2 M D^-1/2` (unit diagonal) below which DOFs with inertia of
#: their own still move together with none (e.g. two prismatic joints along one line).
CORRELATION_TOL = 1e-10


def _spatial_inertia_world(mass, com, inertia, X_WB: np.ndarray) -> np.ndarray:
    """6×6 inertia `[ω; v]` about the world origin in world axes of a body at `X_WB`
    (`com` in body axes, `inertia` about the centre of mass in body axes)."""
    R, p = X_WB[:3, :3], X_WB[:3, 3]
    c = R @ com + p
    C = np.array([[0, -c[2], c[1]], [c[2], 0, -c[0]], [-c[1], c[0], 0]])
    I_com = R @ inertia @ R.T  # `inertia` is about the centre of mass
    top = np.hstack([I_com - mass * C @ C, mass * C])
    bottom = np.hstack([-mass * C, mass * np.eye(3)])
    return np.vstack([top, bottom])


def _motion_world(H_F: np.ndarray, X_WF: np.ndarray, p_WMo: np.ndarray) -> np.ndarray:
    """Columns `[ω; v at Mo]` in F axes → `[ω; v at the world origin]` in world axes."""
    R = X_WF[:3, :3]
    w = R @ H_F[:3]
    v = R @ H_F[3:] + np.cross(p_WMo, w, axis=0)  # v_O = v_Mo + ω × (O − Mo)
    return np.vstack([w, v])


def _matrices(X) -> np.ndarray:
    """Stacked `Transform` → (n, 4, 4) NumPy (no JAX op: a new model size compiles nothing)."""
    R, p = np.asarray(X.R, float), np.asarray(X.p, float)
    T = np.zeros(R.shape[:-2] + (4, 4))
    T[..., :3, :3], T[..., :3, 3], T[..., 3, 3] = R, p, 1.0
    return T


#: `_joint_at`'s compiled programs, by joint structure: held here, so that `jax.clear_caches()`
#: (which test suites and long-running services call) does not make every later build compile
#: its joint classes again (~15 programs, ~2 s, for a tree of every class). A few kB each.
_JOINT_AT: dict = {}


def _joint_at_traced(joint, dv):
    q = joint.integrate(joint.neutral(), dv)
    return joint.X_FM(q).as_matrix(), joint.H_FM(q)


def _joint_at(joint, dv):
    """`X_FM` (4×4) and `H_FM` at `neutral ⊕ dv`: compiled once per joint class and structure
    (and process), so that a build costs microseconds per joint instead of eager dispatch of
    each op."""
    dv = np.asarray(dv, np.float64)
    dynamic, static = eqx.partition(joint, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    static_leaves, static_def = jax.tree.flatten(static)
    key = (
        treedef,
        static_def,
        tuple(static_leaves),
        tuple((np.shape(x), np.dtype(x.dtype)) for x in leaves),
        dv.shape,
    )
    try:
        compiled = _JOINT_AT.get(key)
    except TypeError:  # an unhashable static leaf: compiled by `jax.jit`'s own cache
        return eqx.filter_jit(_joint_at_traced)(joint, dv)
    if compiled is None:

        def at(dynamic, dv):
            return _joint_at_traced(eqx.combine(dynamic, static), dv)

        compiled = _JOINT_AT[key] = jax.jit(at).lower(dynamic, dv).compile()
    return compiled(dynamic, dv)


def mass_matrix_at_generic_configuration(model) -> np.ndarray:
    """`M(q*)` in NumPy (float64), `q*` a fixed generic configuration (see the module)."""
    rng = np.random.default_rng(0)
    topo = model.topology
    nb = len(topo.parents)
    X_PF, X_BM = _matrices(model.X_PF), _matrices(model.X_BM)
    mass = np.asarray(model.inertias.mass, float)
    com = np.asarray(model.inertias.com, float)
    inertia = np.asarray(model.inertias.inertia, float)
    X_WB = np.zeros((nb, 4, 4))
    columns: list[np.ndarray] = []  # per body: its joint's motion subspace, world, (6, nv_i)
    for i, joint in enumerate(model.joints):
        X_FM, H = _joint_at(joint, rng.uniform(-0.7, 0.7, joint.nv))
        X_FM = np.asarray(X_FM, float)
        parent = topo.parents[i]
        X_WP = np.eye(4) if parent < 0 else X_WB[parent]
        X_WF = X_WP @ X_PF[i]
        X_WM = X_WF @ X_FM
        X_WB[i] = X_WM @ np.linalg.inv(X_BM[i])
        H = np.asarray(H, float).reshape(6, joint.nv)
        columns.append(_motion_world(H, X_WF, X_WM[:3, 3]))
    offsets = np.cumsum((0,) + tuple(topo.nvs))
    ancestor = plan(model).ancestor  # [k, i] = 1 if k is i or an ancestor of i
    M = np.zeros((offsets[-1], offsets[-1]))
    for b in range(nb):
        I_b = _spatial_inertia_world(mass[b], com[b], inertia[b], X_WB[b])
        J = np.zeros((6, offsets[-1]))
        for k in np.flatnonzero(ancestor[:, b]):  # b and its ancestors
            J[:, offsets[k] : offsets[k + 1]] = columns[k]
        M += J.T @ I_b @ J
    armature = [np.asarray(j.params.armature, float) for j in model.joints]
    return M + np.diag(np.concatenate(armature + [np.zeros(0)]))


def singular_mass_matrix(model) -> str | None:
    """Why `M(q)` is singular (naming the joints and the bodies they move), or `None`."""
    topo = model.topology
    if sum(topo.nvs) == 0:
        return None
    M = mass_matrix_at_generic_configuration(model)
    d = np.diag(M).copy()
    dof_body = np.repeat(np.arange(len(topo.parents)), topo.nvs)
    empty = sorted({int(dof_body[k]) for k in np.flatnonzero(d <= DIAGONAL_TOL * d.max())})
    if empty:
        parts = []
        for body in empty:
            subtree = np.flatnonzero(plan(model).ancestor[body])
            moved = ", ".join(repr(topo.body_names[k]) for k in subtree)
            parts.append(f"joint {topo.joint_names[body]!r} moves bodies ({moved})")
        return (
            "; ".join(parts) + " with no mass and no rotational inertia about the joint: the "
            "mass matrix is singular and forward dynamics would divide by zero"
        )
    s = 1.0 / np.sqrt(d)
    w, V = np.linalg.eigh(s[:, None] * M * s[None, :])
    if w[0] < CORRELATION_TOL:
        dofs = np.flatnonzero(np.abs(V[:, 0]) > 1e-6)
        joints = sorted({topo.joint_names[int(dof_body[k])] for k in dofs})
        return (
            f"joints {joints} move their bodies along the same directions (the mass matrix is "
            f"singular: smallest eigenvalue {w[0]:.1e} relative to its diagonal), so forward "
            "dynamics cannot tell their accelerations apart"
        )
    return None
