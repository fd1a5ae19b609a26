"""How the tree is traversed: joint-class groups and depth levels (static, computed once).

Two lessons from MJX's `scan.body_tree` and Brax shape this module:

1. **Joint-local work is grouped by joint class, not by body.** `X_FM`, `H_FM`, `Ḣ_FM v` depend
   only on a joint's own coordinates, so all joints of one class (one pytree structure) are
   stacked and evaluated with one `vmap`, whatever their depth. The traced program grows with
   the number of joint classes, not bodies.
2. **Tree propagation runs by depth level.** Bodies of one depth are processed together, their
   parents' results gathered from the level above (going down) or their results summed into
   the level above with a 0/1 matrix (going up). Sequential steps grow with the depth.
   Where a quantity is a plain sum over ancestors or descendants (velocities, RNEA forces,
   composite inertias) it is one matrix product with the static ancestor matrix instead.

Everything here is NumPy on static topology, cached by `(Topology, joint tree structures)`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._model import Model, Topology


@dataclasses.dataclass(frozen=True, eq=False)
class JointGroup:
    """Bodies whose joints share one pytree structure, with their q and v indices."""

    bodies: np.ndarray  # (n,)
    q_idx: np.ndarray  # (n, nq)
    v_idx: np.ndarray  # (n, nv)


@dataclasses.dataclass(frozen=True, eq=False)
class Level:
    """Bodies of one depth; `parent_pos[i]` is the position of body i's parent in the level
    above; `v_idx` (n, nv_max) indexes v padded with one trailing zero (index `nv`)."""

    bodies: np.ndarray
    parent_pos: np.ndarray
    nv_max: int
    v_idx: np.ndarray
    to_parent: np.ndarray  # (n_above, n) 0/1 matrix summing children into parents


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    groups: tuple[JointGroup, ...]
    group_body_inv: np.ndarray  # body order from the concatenation of groups
    group_q_inv: np.ndarray
    group_v_inv: np.ndarray
    levels: tuple[Level, ...]
    level_body_inv: np.ndarray  # body order from the concatenation of levels
    level_dof_pos: np.ndarray  # DOF order from the concatenation of levels' (n, nv_max) blocks
    nv_max: int  # largest joint nv (at least 1)
    body_v_idx: np.ndarray  # (nb, nv_max) into v padded with a trailing zero
    dof_pos: np.ndarray  # (nv,) position of each DOF in the flattened (nb, nv_max) layout
    dof_body: np.ndarray  # (nv,) body of each DOF
    ancestor: np.ndarray  # (nb, nb): [k, i] = 1 if k is i or an ancestor of i
    dof_ancestor: np.ndarray  # (nv, nv): [k, l] = 1 if body(k) is body(l) or an ancestor


def plan(model: Model) -> Plan:
    return _plan(model.topology, tuple(jax.tree.structure(j) for j in model.joints))


@functools.lru_cache(maxsize=256)
def _plan(topo: Topology, structures: tuple) -> Plan:
    nb = len(topo.parents)
    nq, nv = sum(topo.nqs), sum(topo.nvs)
    qo, vo = topo.q_offsets, topo.v_offsets

    # joint-class groups, in order of first appearance
    keys: dict = {}
    for i, s in enumerate(structures):
        keys.setdefault(s, []).append(i)
    groups = []
    for bodies in keys.values():
        b = np.asarray(bodies, dtype=np.int64)
        q_idx = np.asarray([np.arange(qo[i], qo[i] + topo.nqs[i]) for i in bodies], np.int64)
        v_idx = np.asarray([np.arange(vo[i], vo[i] + topo.nvs[i]) for i in bodies], np.int64)
        groups.append(JointGroup(b, q_idx.reshape(len(b), -1), v_idx.reshape(len(b), -1)))
    order = np.concatenate([g.bodies for g in groups])
    q_cat = np.concatenate([g.q_idx.ravel() for g in groups])
    v_cat = np.concatenate([g.v_idx.ravel() for g in groups])

    # per-body padded v indices
    nv_max = max(1, max(topo.nvs))
    body_v_idx = np.full((nb, nv_max), nv, np.int64)
    for i in range(nb):
        body_v_idx[i, : topo.nvs[i]] = np.arange(vo[i], vo[i] + topo.nvs[i])
    dof_body = np.concatenate(
        [np.full(topo.nvs[i], i, np.int64) for i in range(nb)] + [np.zeros(0, np.int64)]
    )
    dof_pos = np.concatenate(
        [i * nv_max + np.arange(topo.nvs[i]) for i in range(nb)] + [np.zeros(0, np.int64)]
    )

    # depth levels
    depths = np.asarray(topo.depths)
    levels, flat_dof = [], []
    offset = 0
    prev_bodies = np.zeros(0, np.int64)
    for d in range(int(depths.max()) + 1):
        bodies = np.nonzero(depths == d)[0]
        pos_in_prev = {int(b): k for k, b in enumerate(prev_bodies)}
        parent_pos = np.asarray([pos_in_prev.get(topo.parents[b], -1) for b in bodies], np.int64)
        lv_max = max(1, max(topo.nvs[b] for b in bodies))
        v_idx = body_v_idx[bodies, :lv_max]
        to_parent = np.zeros((len(prev_bodies), len(bodies)))
        if d > 0:
            to_parent[parent_pos, np.arange(len(bodies))] = 1.0
        levels.append(Level(bodies, parent_pos, lv_max, v_idx, to_parent))
        flat_dof.append(v_idx.ravel())
        offset += v_idx.size
        prev_bodies = bodies
    flat_dof = np.concatenate(flat_dof)
    level_dof_pos = np.zeros(nv, np.int64)
    for pos, k in enumerate(flat_dof):
        if k < nv:
            level_dof_pos[k] = pos
    level_order = np.concatenate([lv.bodies for lv in levels])

    ancestor = np.zeros((nb, nb))
    for i in range(nb):
        k = i
        while k >= 0:
            ancestor[k, i] = 1.0
            k = topo.parents[k]
    dof_ancestor = ancestor[np.ix_(dof_body, dof_body)]

    return Plan(
        groups=tuple(groups),
        group_body_inv=np.argsort(order),
        group_q_inv=np.argsort(q_cat) if nq else np.zeros(0, np.int64),
        group_v_inv=np.argsort(v_cat) if nv else np.zeros(0, np.int64),
        levels=tuple(levels),
        level_body_inv=np.argsort(level_order),
        level_dof_pos=level_dof_pos,
        nv_max=nv_max,
        body_v_idx=body_v_idx,
        dof_pos=dof_pos,
        dof_body=dof_body,
        ancestor=ancestor,
        dof_ancestor=dof_ancestor,
    )


def take(tree, idx):
    """Index the leading axis of every leaf of `tree`."""
    return jax.tree.map(lambda x: x[idx], tree)


def concat(trees):
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *trees)


def stacked_group(model: Model, g: JointGroup):
    """The joints of group `g` stacked into one joint with batched leaves."""
    joints = [model.joints[int(i)] for i in g.bodies]
    if len(joints) == 1:
        return jax.tree.map(lambda x: x[None], joints[0])
    return jax.tree.map(lambda *xs: jnp.stack(xs), *joints)


def map_joints(
    model: Model,
    fn: Callable,
    *,
    per_body=None,
    q=None,
    q2=None,
    v=None,
    q_out: bool = False,
    v_out: bool = False,
):
    """Apply `fn(joint, [per_body_i], [q_i], [q2_i], [v_i])` to every joint, one `vmap` per class.

    With `q_out`/`v_out` the per-joint outputs are concatenated into a flat q- or v-vector;
    otherwise they are returned stacked along a leading body axis, in body order.
    """
    p = plan(model)
    outs = []
    for g in p.groups:
        args = [stacked_group(model, g)]
        if per_body is not None:
            args.append(take(per_body, g.bodies))
        for x in (q, q2):
            if x is not None:
                args.append(x[g.q_idx])
        if v is not None:
            args.append(v[g.v_idx])
        outs.append(jax.vmap(fn)(*args))
    if q_out or v_out:
        flat = jnp.concatenate([o.reshape(-1) for o in outs])
        return flat[p.group_q_inv if q_out else p.group_v_inv]
    return take(concat(outs), p.group_body_inv)
