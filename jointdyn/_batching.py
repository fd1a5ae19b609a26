"""`batched`: `vmap` that keeps its working set in cache and uses SIMD on CPU.

A `jit(vmap(aba))` over 4096 states materialises every intermediate (say 30 bodies × 6×6 ×
4096 × 8 bytes = 35 MB) in main memory; on a CPU the algorithm then runs at memory speed.
Evaluating it a few dozen samples at a time (a `lax.map` over chunks) keeps the intermediates
in cache: measured 2–4× faster per sample at batch 4096 on a 2-core AVX-512 machine.
Each chunk is evaluated with its samples along the **last** axis (`batch_last`), so that
every kernel's innermost loop runs over consecutive samples and is vectorised: a further
1.3–1.5× on talos RNEA and ABA (one device, float64, chunks of 32). On GPUs the whole batch
should run at once, so there `batched` is `vmap`.

With several local devices (GPUs, or CPU devices made with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`, one per core) the batch is also split
across them with `shard_map`, so every core works on its share. The shared arguments (the
model) enter the split as one vector per dtype, so that reverse mode sums their cotangents
over the devices in one all-reduce rather than one per leaf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._autodiff import jacfwd_lanes, tangent_lanes_hint
from ._batch_last import _axes, _mapped_size, batch_last
from ._compile import _traced_with_collections_deferred, _tracers
from ._packed import _concatenate, split_leaves

CPU_CHUNK_SIZE = 32


def batched(
    fn: Callable,
    in_axes: int | None | Sequence[int | None] = 0,
    chunk_size: int | None | str = "auto",
    shard: bool = True,
    layout: str = "auto",
) -> Callable:
    """`jax.vmap(fn, in_axes)` over leading axes, evaluated `chunk_size` samples at a time.

    **Arguments:**
    - `fn`: a single-sample function such as `jointdyn.aba`.
    - `in_axes`: `0` (map this argument's leading axis) or `None` (shared, e.g. the model), per
      positional argument or one for all. Only leading-axis mapping is supported.
    - `chunk_size`: samples per chunk; `"auto"` picks 32 on CPU and no chunking (a plain
      `vmap`) on other backends; `None` never chunks.
    - `shard`: split the batch across all local devices of the default backend when there are
      several and the batch size is a multiple of their number.
    - `layout`: how a chunk is evaluated. `"batch_last"`: the chunk's samples along the last
      axis of every array (`jointdyn.batch_last`; SIMD across samples on CPU); a batch that is
      not a multiple of `chunk_size` is padded with copies of its last sample, whose results
      are dropped. `"batch_first"`: `jax.vmap` of the chunk (a `lax.map` with `batch_size`).
      `"auto"`: `"batch_last"` on CPU, `"batch_first"` elsewhere. Ignored without chunks.

    **Returns:** a function of the same arguments whose outputs have a leading batch axis.
    It composes with `jit`, `grad` and `vmap` (it is `lax.map`, a `scan` over chunks).

    **Raises** (when called): `ValueError` for `in_axes` other than 0 / None, mapped arguments
    of different batch sizes or with a scalar leaf, a `chunk_size` that is not a positive int,
    None or `"auto"`, an unknown `layout`.
    """

    def wrapped(*args: Any):
        axes = _axes(args, in_axes)
        for a in axes:
            if a not in (0, None):
                raise ValueError(f"`in_axes` entries must be 0 or None, got {a!r}")
        mapped = [y for x, a in zip(args, axes, strict=True) if a == 0 for y in jax.tree.leaves(x)]
        _mapped_size(mapped, 0, "`in_axes` 0", "leading-axis (batch)")
        size = chunk_size
        if not (
            size in ("auto", None)
            or (isinstance(size, int | np.integer) and not isinstance(size, bool) and size >= 1)
        ):
            raise ValueError(f"`chunk_size` must be a positive int, None or 'auto', got {size!r}")
        on_cpu = jax.default_backend() == "cpu"
        if size == "auto":
            size = CPU_CHUNK_SIZE if on_cpu else None
        if layout not in ("auto", "batch_last", "batch_first"):
            raise ValueError(
                f"`layout` must be 'auto', 'batch_last' or 'batch_first', got {layout!r}"
            )
        last = layout == "batch_last" or (layout == "auto" and on_cpu)

        def local(*args):
            if size is None:
                return jax.vmap(fn, in_axes=tuple(axes))(*args)
            if last:
                return _chunks_batch_last(fn, args, axes, int(size))
            mapped = tuple(x for x, a in zip(args, axes, strict=True) if a == 0)
            return jax.lax.map(lambda xs: fn(*_fill(args, axes, xs)), mapped, batch_size=int(size))

        mesh = _mesh(args, axes) if shard else None
        # under `jax.jacfwd` (tangent lanes at fixed primals) the chunks' program is
        # differentiated before it is mapped: the rules traced for it are told the lanes
        with tangent_lanes_hint(jacfwd_lanes(_tracers(args, {}))):
            if mesh is None:
                return local(*args)
            # The shared arguments' floating leaves enter as one vector per dtype: reverse
            # mode sums their cotangents over the devices (`psum`), and XLA:CPU's all-reduce
            # costs ~0.1 ms per array it sums (g1's model has ~430 leaves; the gradient of
            # batched `forward_dynamics` in the joints' parameters summed 270 arrays per call,
            # 1.5 forward passes of its 4096 samples: benchmarks/NOTES.md, 31st session).
            packed, rest, unpack = _pack_shared(args, axes)
            mapped = tuple(x for x, a in zip(args, axes, strict=True) if a == 0)

            def sharded(packed, rest, mapped):
                return local(*unpack(packed, rest, mapped))

            # check_vma=False: `batch_last` binds primitives itself, without the `pvary` that
            # JAX's own wrappers insert where a per-shard value meets a replicated one; no
            # collectives.
            return jax.shard_map(
                sharded,
                mesh=mesh,
                in_specs=(PartitionSpec(), PartitionSpec(), PartitionSpec("batch")),
                out_specs=PartitionSpec("batch"),
                check_vma=False,
            )(packed, rest, mapped)

    wrapped = _traced_with_collections_deferred(wrapped)
    wrapped.__doc__ = f"Batched `{getattr(fn, '__name__', 'fn')}` (see `jointdyn.batched`)."
    return wrapped


#: Results go batch-first inside each chunk when at least this many bytes per sample...
_IN_CHUNK_LEAF = 8192
#: ...and all the results of the call together at least this many (`_chunks_batch_last`).
_IN_CHUNK_TOTAL = 16384


def _chunks_batch_last(fn: Callable, args: tuple, axes: tuple, size: int):
    """`vmap(fn)` over the leading axis of the mapped `args`, as a `lax.map` over chunks of
    `size` samples, each evaluated by `batch_last` (samples moved to the last axis and back).
    The batch is padded to a multiple of `size` with copies of its last sample."""
    n = jax.tree.leaves([x for x, a in zip(args, axes, strict=True) if a == 0])[0].shape[0]
    if n == 0:
        return jax.vmap(fn, in_axes=axes)(*args)
    last_axes = tuple(-1 if a == 0 else None for a in axes)
    if n <= size:  # one chunk

        def moved(x):
            return jnp.moveaxis(x, 0, -1)

        xs = [jax.tree.map(moved, x) if a == 0 else x for x, a in zip(args, axes, strict=True)]
        return jax.tree.map(lambda y: jnp.moveaxis(y, -1, 0), batch_last(fn, last_axes)(*xs))
    chunks = -(-n // size)
    pad = chunks * size - n

    def split(x):  # (n, ...) → (chunks, ..., size)
        if pad:
            x = jnp.concatenate([x, jnp.broadcast_to(x[-1:], (pad,) + x.shape[1:])])
        return jnp.moveaxis(x.reshape((chunks, size) + x.shape[1:]), 1, -1)

    # Large results go back to batch-first inside each chunk, while in cache, so that
    # `lax.map` stacks them straight into the output's layout: transposing the stacked
    # (chunks, ..., size) result afterwards writes a second output-sized buffer, for the talos
    # regressor at batch 4096 2 x 411 MB and half of the call's time in page faults (solo12:
    # 25 % faster in chunk; `aba_derivatives` on g1 and talos 15 %). But a transpose inside the
    # loop is fused into the stacking `dynamic-update-slice` (strided, scalar), which costs
    # more where the outputs are few: g1 and talos `crba` (one 10-12 KB matrix) ran 1.4-1.5x
    # slower in chunk. So: results of at least `_IN_CHUNK_LEAF` bytes per sample, when all
    # the results together have at least `_IN_CHUNK_TOTAL` (benchmarks/NOTES.md, 35th
    # session). Small results (aba's v̇) are transposed once at the end (10-15 % faster on
    # panda than per chunk).
    def nbytes(leaves_shapes) -> int:  # bytes of a chunk's results (`size` samples)
        return sum(math.prod(shape) * jnp.dtype(dtype).itemsize for shape, dtype in leaves_shapes)

    def decide(leaves_shapes):  # per result: batch-first inside the chunk?
        many = nbytes(leaves_shapes) >= _IN_CHUNK_TOTAL * size
        return [many and nbytes([x]) >= _IN_CHUNK_LEAF * size for x in leaves_shapes]

    def one(xs):
        out = batch_last(fn, last_axes)(*_fill(args, axes, xs))
        leaves, tree = jax.tree.flatten(out)
        first = decide([(x.shape, x.dtype) for x in leaves])
        moved = [jnp.moveaxis(x, -1, 0) if f else x for x, f in zip(leaves, first, strict=True)]
        return jax.tree.unflatten(tree, moved)

    def join_all(out):  # (chunks, size, ...) or (chunks, ..., size) → (n, ...)
        leaves, tree = jax.tree.flatten(out)
        first = decide([(x.shape[1:], x.dtype) for x in leaves])
        joined = []
        for y, f in zip(leaves, first, strict=True):
            if not f:
                y = jnp.moveaxis(y, -1, 1)
            y = y.reshape((chunks * size,) + y.shape[2:])
            joined.append(y[:n] if pad else y)
        return jax.tree.unflatten(tree, joined)

    mapped = [jax.tree.map(split, x) for x, a in zip(args, axes, strict=True) if a == 0]

    # Reverse mode recomputes each chunk (`jax.checkpoint`) rather than stacking its
    # residuals: with the differentiation rules, g1's ABA gradient at batch 1024 costs 18.8x
    # the forward without, 4.7-5.1x with (benchmarks/NOTES.md, 34th session). Inside
    # `lax.map` (a scan) the CSE barrier is not needed (JAX's advice for scan bodies), and
    # without it XLA fuses the recomputation better: panda aba gradient 6.2x -> 5.3x.
    return join_all(jax.lax.map(jax.checkpoint(one, prevent_cse=False), mapped))


def _pack_shared(args: tuple, axes: tuple):
    """`(packed, rest, unpack)`: the floating array leaves of the shared arguments (`axes`
    None) joined into one flat vector per dtype (`packed`; `_packed._concatenate`), their
    other leaves (`rest`), and `unpack(packed, rest, mapped)`, the arguments again
    (`mapped`: the mapped ones, in order), the leaves split out of `packed`
    (`_packed.split_leaves`, whose transpose is one concatenation)."""
    shared = [x if a is None else None for x, a in zip(args, axes, strict=True)]
    leaves, treedef = jax.tree.flatten(shared)
    groups: dict = {}  # (dtype, trace) → indices of the leaves joined in one vector
    others = []  # indices of the leaves passed as they are
    for i, x in enumerate(leaves):
        # weak-typed leaves stay apart (packing would make them strong), and so do leaves of
        # different traces (under `jax.grad`, those held by `stop_gradient` beside the
        # differentiated ones), so that a leaf without a tangent does not get one
        if (
            isinstance(x, jax.Array | np.ndarray)
            and jnp.issubdtype(x.dtype, jnp.floating)
            and not jax.typeof(x).weak_type
        ):
            groups.setdefault((str(x.dtype), id(getattr(x, "_trace", None))), []).append(i)
        else:
            others.append(i)
    packed = {
        k: _concatenate([leaves[i] for i in idx], leaves[idx[0]].dtype) for k, idx in groups.items()
    }
    rest = [leaves[i] for i in others]

    def unpack(packed, rest, mapped):
        out = [None] * len(leaves)
        for k, idx in groups.items():
            pieces = split_leaves(packed[k], [np.shape(leaves[i]) for i in idx])
            for i, piece in zip(idx, pieces, strict=True):
                out[i] = piece
        for i, x in zip(others, rest, strict=True):
            out[i] = x
        return _fill(jax.tree.unflatten(treedef, out), axes, mapped)

    return packed, rest, unpack


def _fill(args: tuple, axes: tuple, mapped) -> list:
    """`args` with the mapped ones (`axes` 0) replaced, in order, by `mapped` (a chunk's)."""
    it = iter(mapped)
    return [next(it) if a == 0 else x for x, a in zip(args, axes, strict=True)]


def _mesh(args, axes) -> Mesh | None:
    """The 1-D mesh `batched` splits over: all local devices, when there are several and the
    batch divides among them; else None."""
    devices = jax.local_devices()
    sizes = {jax.tree.leaves(x)[0].shape[0] for x, a in zip(args, axes, strict=True) if a == 0}
    n = sizes.pop() if len(sizes) == 1 else 0
    if not (len(devices) > 1 and n and n % len(devices) == 0):
        return None
    return Mesh(np.asarray(devices), ("batch",))


def device_put_batched(args: Sequence[Any], in_axes: int | None | Sequence[int | None] = 0):
    """`args` placed where `batched(fn, in_axes)` computes on them: mapped arguments split
    along their leading axis over the local devices, shared ones (the model) copied to each.

    Without it a sharded `batched` call re-distributes its inputs on every call (measured
    ~4 ms per call for a 29-DOF model at batch 4096 on 2 CPU devices). Place inputs once,
    e.g. before a rollout loop. With one device (or a
    batch that does not divide among the devices) the arguments are returned unchanged.
    """
    args = tuple(args)
    axes = _axes(args, in_axes)
    mesh = _mesh(args, axes)
    if mesh is None:
        return args
    return tuple(
        jax.device_put(
            x, NamedSharding(mesh, PartitionSpec("batch") if a == 0 else PartitionSpec())
        )
        for x, a in zip(args, axes, strict=True)
    )
