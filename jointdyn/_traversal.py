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
   composite inertias) it is one matrix product with the static ancestor matrix instead
   (`sum_over_ancestors`, `sum_over_subtrees`).

Everything here is NumPy on static topology, cached by `(Topology, joint tree structures)`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from ._linalg import add

if TYPE_CHECKING:  # types only: _model imports this module
    from ._model import Model, Topology


@dataclasses.dataclass(frozen=True, eq=False)
class JointGroup:
    """Bodies whose joints share one pytree structure, with their q and v indices."""

    bodies: np.ndarray  # (n,)
    q_idx: np.ndarray  # (n, nq)
    v_idx: np.ndarray  # (n, nv)


@dataclasses.dataclass(frozen=True, eq=False)
class NvClass:
    """Bodies whose joints have `nv` velocities (`nv ≥ 1`), made of whole joint groups.

    Per-class arrays (hinge matrices `(n, 6, nv)`) need no padding.
    """

    nv: int
    groups: tuple[int, ...]  # indices into `Plan.groups`, concatenated in this order
    bodies: np.ndarray  # (n,)
    dof_idx: np.ndarray  # (n, nv)


@dataclasses.dataclass(frozen=True, eq=False)
class Subset:
    """Bodies of one level and one nv-class (`cls = -1`: bodies whose joint has nv = 0)."""

    cls: int
    nv: int
    bodies: np.ndarray
    level_pos: np.ndarray | None  # positions in the level, a run (None: the whole level)
    dof_idx: np.ndarray  # (n, nv)
    rows: np.ndarray  # positions in level order (`Plan.level_order`)
    class_rows: np.ndarray  # positions in the class's level order (`Plan.class_level_pos`)
    dof_rows: np.ndarray  # (n, nv) positions in level DOF order (`Plan.level_dofs`)


@dataclasses.dataclass(frozen=True, eq=False)
class Level:
    """Bodies of one depth. `parent_pos[i]`: position of body i's parent in the level above;
    `children` (n_above, max children) lists each parent's children (positions in this level,
    padded with n, a zero row; see `sum_to_parents`). The bodies are sorted by nv-class, so the
    subsets, concatenated in order, are the level in order."""

    bodies: np.ndarray
    parent_pos: np.ndarray
    children: np.ndarray
    subsets: tuple[Subset, ...]
    start: int  # offset of the level in level order (see `write_level`)

    @property
    def rows(self) -> np.ndarray:
        """The level's positions in level order."""
        return np.arange(self.start, self.start + len(self.bodies))

    @property
    def parent_rows(self) -> np.ndarray:
        """The positions of the level's parents in level order (level 0: meaningless)."""
        return self.start - len(self.children) + self.parent_pos


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    groups: tuple[JointGroup, ...]
    group_body_inv: np.ndarray  # body order from the concatenation of groups
    group_q_inv: np.ndarray
    group_v_inv: np.ndarray
    classes: tuple[NvClass, ...]
    class_body_inv: np.ndarray  # body order from concat(classes' bodies, nv-0 bodies)
    zero_bodies: np.ndarray  # bodies whose joint has nv = 0
    class_dof_inv: np.ndarray  # DOF order from concat(classes' dof_idx)
    levels: tuple[Level, ...]
    level_order: np.ndarray  # the bodies of every level, concatenated
    level_dofs: np.ndarray  # DOFs of every level and subset, concatenated
    class_level_pos: tuple[np.ndarray, ...]  # per class: its positions, in level order
    level_body_inv: np.ndarray  # body order from the concatenation of levels
    level_dof_inv: np.ndarray  # DOF order from concat over levels and subsets of dof_idx
    dof_body: np.ndarray  # (nv,) body of each DOF
    ancestor: np.ndarray  # (nb, nb): [k, i] = 1 if k is i or an ancestor of i
    ancestor_inv: np.ndarray  # its inverse, I − P (P[k, i] = 1 if k is the parent of i)
    dof_ancestor: np.ndarray  # (nv, nv): [k, l] = 1 if body(k) is body(l) or an ancestor
    parents: np.ndarray  # (nb,) parent body of each body, -1 for the world


def plan(model: Model) -> Plan:
    return _plan(model.topology, tuple(jax.tree.structure(j) for j in model.joints))


def _inverse(order: np.ndarray, n: int) -> np.ndarray:
    inv = np.zeros(n, np.int64)
    inv[order] = np.arange(len(order))
    return inv


def _none_if_iota(idx: np.ndarray, n: int) -> np.ndarray | None:
    return None if len(idx) == n and np.array_equal(idx, np.arange(n)) else idx


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

    # nv-classes: joint groups merged by nv
    by_nv: dict[int, list[int]] = {}
    for gi, g in enumerate(groups):
        by_nv.setdefault(g.v_idx.shape[1], []).append(gi)
    classes = []
    for k in sorted(x for x in by_nv if x > 0):
        gs = tuple(by_nv[k])
        classes.append(
            NvClass(
                k,
                gs,
                np.concatenate([groups[g].bodies for g in gs]),
                np.concatenate([groups[g].v_idx for g in gs]),
            )
        )
    zero_bodies = np.asarray(
        sorted(b for g in by_nv.get(0, []) for b in groups[g].bodies), np.int64
    )
    class_order = np.concatenate([c.bodies for c in classes] + [zero_bodies]).astype(np.int64)
    class_dofs = np.concatenate([c.dof_idx.ravel() for c in classes] + [np.zeros(0, np.int64)])
    where = {}  # body -> (class index, position in class)
    for ci, c in enumerate(classes):
        for pos, b in enumerate(c.bodies):
            where[int(b)] = (ci, pos)

    # depth levels, each split into nv-class subsets
    depths = np.asarray(topo.depths)
    levels, level_dofs = [], []
    class_level = [[] for _ in classes]
    prev_bodies = np.zeros(0, np.int64)
    start = dof_start = 0
    for d in range(int(depths.max()) + 1):
        # a level's bodies sorted by nv-class (nv-0 last): each subset is a run of rows
        bodies = np.nonzero(depths == d)[0]
        rank = [where.get(int(b), (len(classes), 0))[0] for b in bodies]
        bodies = bodies[np.argsort(rank, kind="stable")]
        pos_in_prev = {int(b): k for k, b in enumerate(prev_bodies)}
        parent_pos = np.asarray([pos_in_prev.get(topo.parents[b], -1) for b in bodies], np.int64)
        kids = [np.nonzero(parent_pos == k)[0] for k in range(len(prev_bodies))]
        children = np.full((len(prev_bodies), max([len(x) for x in kids], default=0)), len(bodies))
        for k, x in enumerate(kids):
            children[k, : len(x)] = x
        subsets, cat = [], []  # cat: the subsets' positions, concatenated
        for ci in [*range(len(classes)), -1]:
            pos = np.asarray(
                [i for i, b in enumerate(bodies) if where.get(int(b), (-1, 0))[0] == ci], np.int64
            )
            if len(pos) == 0:
                continue
            sb = bodies[pos]
            class_rows = np.zeros(0, np.int64)
            if ci >= 0:
                cpos = np.asarray([where[int(b)][1] for b in sb], np.int64)
                k = classes[ci].nv
                dof_idx = classes[ci].dof_idx[cpos]
                done = sum(len(x) for x in class_level[ci])
                class_rows = np.arange(done, done + len(sb))
                class_level[ci].append(cpos)
            else:
                k, dof_idx = 0, np.zeros((len(sb), 0), np.int64)
            dof_rows = np.arange(dof_start, dof_start + dof_idx.size).reshape(dof_idx.shape)
            dof_start += dof_idx.size
            subsets.append(
                Subset(
                    ci,
                    k,
                    sb,
                    _none_if_iota(pos, len(bodies)),
                    dof_idx,
                    start + pos,
                    class_rows,
                    dof_rows,
                )
            )
            cat.append(pos)
            level_dofs.append(dof_idx.ravel())
        assert np.array_equal(np.concatenate(cat), np.arange(len(bodies))), "subsets out of order"
        levels.append(Level(bodies, parent_pos, children, tuple(subsets), start))
        start += len(bodies)
        prev_bodies = bodies
    level_order = np.concatenate([lv.bodies for lv in levels])
    level_dofs = np.concatenate(level_dofs + [np.zeros(0, np.int64)])

    dof_body = np.concatenate(
        [np.full(topo.nvs[i], i, np.int64) for i in range(nb)] + [np.zeros(0, np.int64)]
    )
    ancestor = np.zeros((nb, nb))
    for i in range(nb):
        k = i
        while k >= 0:
            ancestor[k, i] = 1.0
            k = topo.parents[k]
    dof_ancestor = ancestor[np.ix_(dof_body, dof_body)]
    ancestor_inv = np.eye(nb)  # A = Σₙ Pⁿ, so A⁻¹ = I − P exactly
    parents = np.asarray(topo.parents, np.int64)
    child = np.flatnonzero(parents >= 0)
    ancestor_inv[parents[child], child] = -1.0

    return Plan(
        groups=tuple(groups),
        group_body_inv=_inverse(order, nb),
        group_q_inv=_inverse(q_cat, nq),
        group_v_inv=_inverse(v_cat, nv),
        classes=tuple(classes),
        class_body_inv=_inverse(class_order, nb),
        zero_bodies=zero_bodies,
        class_dof_inv=_inverse(class_dofs, nv),
        levels=tuple(levels),
        level_order=level_order,
        level_dofs=level_dofs,
        class_level_pos=tuple(np.concatenate(x) for x in class_level),
        level_body_inv=_inverse(level_order, nb),
        level_dof_inv=_inverse(level_dofs, nv),
        dof_body=dof_body,
        ancestor=ancestor,
        ancestor_inv=ancestor_inv,
        dof_ancestor=dof_ancestor,
        parents=parents,
    )


def assemble_bodies(p: Plan, per_class: list, like) -> jnp.ndarray:
    """Per-class rows (n_k, ...) → (nb, ...) in body order; nv-0 bodies get zeros."""
    parts = list(per_class)
    if len(p.zero_bodies):
        parts.append(jnp.zeros((len(p.zero_bodies),) + like.shape[1:], like.dtype))
    return take(jnp.concatenate(parts), p.class_body_inv)


def assemble_dofs(p: Plan, per_class: list, dtype) -> jnp.ndarray:
    """Per-class (n_k, k) values → (nv,) in DOF order."""
    if not per_class:
        return jnp.zeros(0, dtype)
    return take(jnp.concatenate([x.reshape(-1) for x in per_class]), p.class_dof_inv)


def take(tree, idx):
    """`x[idx]` on the leading axis of every leaf of `tree`, for a static index array `idx`
    (any shape: the result has shape `idx.shape + x.shape[1:]`); `idx` None means all rows.

    Consecutive rows become a static slice and one repeated row a broadcast, which XLA fuses
    into every consumer; other indices gather. A gather is a kernel of its own wherever its
    result has several consumers: slicing model leaves and within-level selections took panda
    `aba` at batch 1 from 127 to 112 kernels. Concatenations of several slices were tried
    too: more LLVM IR, slower compiles. See `gather` for where a gather is better.
    """
    if idx is None:
        return tree
    idx = np.asarray(idx)
    flat = idx.reshape(-1)
    n = len(flat)
    start = int(flat[0]) if n else 0
    if n and np.array_equal(flat, np.arange(start, start + n)):

        def rows(x):
            full = (start, n) == (0, x.shape[0])
            return x if full else jax.lax.slice_in_dim(x, start, start + n)

    elif n and (flat == start).all():

        def rows(x):
            return jnp.broadcast_to(jax.lax.slice_in_dim(x, start, start + 1), (n,) + x.shape[1:])

    else:

        def rows(x):
            return _gather_rows(x, flat)

    return _map_rows(tree, idx, rows)


def _gather_rows(x, flat: np.ndarray):
    """`x[flat]` (static in-range row indices) as one `lax.gather`: the same program as NumPy-style
    indexing, which also traces an index normalisation (4 equations per gather, ~5× the trace
    time; there are ~170 gathers in talos `aba`)."""
    if np.size(flat) == 0:  # no rows (a model without degrees of freedom); older JAX rejects the
        # gather of a size-1 slice from an empty array even with no indices
        return jnp.zeros((0,) + x.shape[1:], x.dtype)
    dnums = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(range(1, x.ndim)), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    return jax.lax.gather(
        x,
        np.asarray(flat, np.int32)[:, None],
        dnums,
        (1,) + x.shape[1:],
        indices_are_sorted=bool(np.all(np.diff(flat) >= 0)),
        unique_indices=len(np.unique(flat)) == len(flat),
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )


def _map_rows(tree, idx: np.ndarray, rows: Callable):
    """`rows(x)` (the rows `idx.reshape(-1)` of `x`) for every leaf, shaped `idx.shape + …`."""
    return jax.tree.map(lambda x: rows(x).reshape(idx.shape + x.shape[1:]), tree)


def gather(tree, idx: np.ndarray):
    """`x[idx]` on the leading axis of every leaf, always as a gather (`idx` of any shape).

    A gather's result is computed once, in a kernel of its own; a slice is fused into each
    consumer. Two places want the former:

    - results passed from one depth level to the next (`parents_of`, `sum_to_parents`, ABA's
      down pass). A chain of levels joined by slices fuses into kernels that recompute the
      levels above for every consumer: talos `jit(vmap(aba))` emitted 6.7 MB of LLVM IR with
      `take` between levels, 5.1 MB with this.
    - each joint group's coordinates (`map_groups`). Sliced, they made batched RNEA ~10 %
      slower (talos, `batched` at batch 4096, interleaved runs).
    """
    idx = np.asarray(idx)
    flat = idx.reshape(-1)
    return _map_rows(tree, idx, lambda x: _gather_rows(x, flat))


def materialized(tree):
    """`tree` unchanged, but computed once, in a kernel of their own, and so are its tangents
    and cotangents under JAX's transformations: the identity as a `lax.custom_linear_solve`
    whose solve (and transpose) is a row gather of all rows, so that the value is a gather
    (see `gather`) and reverse mode transposes it into a gather again, not a scatter-add.

    Reverse mode sums a value's cotangent over all its uses (a chain of adds), and XLA fuses
    that chain into every kernel that reads the cotangent, recomputing it per output element.
    A gather stops that (see `gather`); `lax.optimization_barrier` on the same values changed
    nothing on XLA:CPU. Used on the pose rule's tangents (`_kinematics._poses_jvp`), whose
    cotangents sum a dozen uses and fed the reverse pass's largest kernel (7.3 % of the g1
    `aba` gradient's time; 3.7 % after, plus 3 % for the gathers). g1, batch 4096, 2 CPU
    devices, `jax.grad` of `Σ batched(alg)²` ÷ the forward, both programs in one process
    (30 alternating rounds, minima), without → with, two processes: `aba` in every input
    5.30 / 5.06 → 5.14 / 5.07, in `(q, v, tau)` 3.91 / 3.88 → 3.77 / 3.68; `rnea` 5.39 / 5.42
    → 5.36 / 5.30, in `(q, v, vdot)` 3.98 / 3.97 → 3.91 / 3.90 (`benchmarks/NOTES.md`).
    Also on the joints' local poses (`joint_terms`), where XLA otherwise evaluated each
    joint's `sin`/`cos` once per element read.
    """

    def one(x):
        if getattr(x, "ndim", 0) == 0 or x.shape[0] == 0:
            return x
        rows = np.arange(x.shape[0])
        return jax.lax.custom_linear_solve(
            lambda y: y, x, lambda _, b: _gather_rows(b, rows), symmetric=True
        )

    return jax.tree.map(one, tree)


def concat(trees):
    return jax.tree.map(lambda *xs: jnp.concatenate(xs), *trees)


def stacked_group(model: Model, g: JointGroup):
    """The joints of group `g` stacked into one joint with batched leaves."""
    joints = [model.joints[int(i)] for i in g.bodies]
    if len(joints) == 1:
        return jax.tree.map(lambda x: x[None], joints[0])
    return jax.tree.map(lambda *xs: jnp.stack(xs), *joints)


def map_groups(model: Model, fn: Callable, *, per_body=None, q=None, q2=None, v=None) -> list:
    """`[vmap(fn)(stacked joints of g, [per_body_g], [q_g], [q2_g], [v_g]) for g in groups]`.

    Joint leaves are stacked only where a group has several joints and `fn` takes arguments
    besides the joint: a stack is one equation per leaf (dozens per joint: limits, damping,
    axes, ...) and its transpose as many again, most of them for leaves `fn` never reads.
    A single joint is passed unbatched (`in_axes=None`); a function of the joint alone is
    evaluated joint by joint and only its outputs stacked."""
    outs = []
    for g in plan(model).groups:
        args = []
        if per_body is not None:
            args.append(take(per_body, g.bodies))
        args += [gather(x, g.q_idx) for x in (q, q2) if x is not None]
        if v is not None:
            args.append(gather(v, g.v_idx))
        if not args:  # a function of the joint alone: stack its outputs, not the joints
            joints = [model.joints[int(i)] for i in g.bodies]
            outs.append(jax.tree.map(lambda *xs: jnp.stack(xs), *map(fn, joints)))
        elif len(g.bodies) == 1:  # one joint, unbatched under the map over the arguments
            joint = model.joints[int(g.bodies[0])]
            outs.append(jax.vmap(fn, in_axes=(None,) + (0,) * len(args))(joint, *args))
        else:
            outs.append(jax.vmap(fn)(stacked_group(model, g), *args))
    return outs


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
    outs = map_groups(model, fn, per_body=per_body, q=q, q2=q2, v=v)
    if q_out or v_out:
        flat = jnp.concatenate([o.reshape(-1) for o in outs])
        return take(flat, p.group_q_inv if q_out else p.group_v_inv)
    return take(concat(outs), p.group_body_inv)


def joint_params(model: Model, name: str) -> jnp.ndarray:
    """Every joint's `params.<name>` concatenated in body order: a q-sized vector for the
    fields with one entry per coordinate, a v-sized one for the others (a model's coordinates
    and velocities follow body order). One `concatenate`, where `map_joints` would gather and
    permute per joint class; a `Composite` contributes its sub-joints' fields."""

    def parts(joint) -> list:
        subs = getattr(joint, "joints", None)  # Composite: its own `params` concatenates all
        if subs is not None:
            return [x for j in subs for x in parts(j)]
        return [getattr(joint.params, name)]

    return jnp.concatenate([x for j in model.joints for x in parts(j)])


def write_level(buf, lv: Level, x):
    """Rows of level `lv` written into `buf` (every body, level order) at `lv.start`.

    A level loop that keeps each level's result only as its own array, and concatenates them at
    the end, lets XLA fuse all levels into the concatenation and recompute the whole chain of
    ancestors for each output element (quadratic in the depth). Writing each level into a
    buffer with `dynamic_update_slice`, and reading parents back with `parents_of`, keeps every
    level a separate, linear-cost step (see `_kinematics._poses` for why two buffers).
    """
    return jax.tree.map(lambda a, y: jax.lax.dynamic_update_slice_in_dim(a, y, lv.start, 0), buf, x)


def parents_of(buf, lv: Level):
    """The rows of `lv`'s parents, read from a `write_level` buffer."""
    return gather(buf, lv.parent_rows)


def sum_to_parents(lv: Level, x: jnp.ndarray) -> jnp.ndarray:
    """`y_k = Σ_{children c of k} x_c`: rows of level `lv` (n, ...) summed into the level above.

    Static gathers and adds (one fused loop), not a product with a 0/1 matrix: XLA:CPU runs
    small batched products as separate, slow kernels.
    """
    ch = lv.children
    if ch.shape[1] == 0:
        return jnp.zeros((ch.shape[0],) + x.shape[1:], x.dtype)
    if (ch < len(lv.bodies)).all():  # every parent has a child: no padding row needed
        xp = x
    else:
        xp = jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)])
    out = gather(xp, ch[:, 0])
    for k in range(1, ch.shape[1]):
        out = add(out, gather(xp, ch[:, k]))
    return out


def sum_over_ancestors(p: Plan, x):
    """`Σ_{k ⪯ i} x_k` for every body `i` (its ancestors and itself): `Aᵀ x`, with `A` the
    static ancestor matrix (`A[k, i] = 1` if `k ⪯ i`), over `x`'s leading (body) axis."""
    return _static_product(p.ancestor.T, p.ancestor_inv.T, x)


def sum_over_subtrees(p: Plan, x):
    """`Σ_{j ⪰ i} x_j` for every body `i` (its subtree, itself included): `A x`."""
    return _static_product(p.ancestor, p.ancestor_inv, x)


def _static_product(M: np.ndarray, M_inv: np.ndarray, x):
    """`M x` over `x`'s leading axis, for a static 0/1 matrix `M` (an ancestor matrix or its
    transpose), as a `lax.custom_linear_solve` whose solve is `M b` and whose transpose solve
    is `Mᵀ ḡ`, so that reverse mode multiplies by the constant from the left, as the forward
    does. JAX's own transpose of `M x` is `dot_general(ḡ, M)` followed by a transpose: on
    XLA:CPU a copy of the cotangent with its body axis made minor, which in a batch-last chunk
    moves the samples off the minor axis (no SIMD; ~12 % of the kernel time of g1's batched
    `aba` gradient). With this form, `jax.grad` of batched `aba` / `rnea` (batch 4096, 2 CPU
    devices, paired against the forward) went from 5.7–6.0× to 4.7–4.9× the forward on g1,
    5.8 → 5.0× (panda `aba`), 6.4 → 5.0× (talos `aba`), 5.9 → 5.3× (talos `rnea`);
    `benchmarks/NOTES.md`. `matvec` is `M_inv`, what the solve inverts (JAX differentiates
    through it only where it closes over traced values, which this one does not)."""
    dtype = x.dtype

    def product(A):
        A = jnp.asarray(A, dtype)
        return lambda y: jnp.tensordot(A, y, 1, precision=jax.lax.Precision.HIGHEST)

    return jax.lax.custom_linear_solve(
        product(M_inv), x, lambda _, b: product(M)(b), lambda _, g: product(M.T)(g)
    )
