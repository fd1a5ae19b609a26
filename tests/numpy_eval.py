"""Reference programs evaluated by NumPy: `jax.make_jaxpr`, then each equation by NumPy.

The oracles of the derivative tests (op-by-op autodiff with the rules off, `jax.jacfwd` in
every model leaf, …) are large programs computed once per test. Compiling one with XLA takes
seconds (the 14-body tree's `jax.jacfwd` of `aba` in every input: ~10 000 equations, ~4.5 s
of XLA at the tests' level); evaluating its jaxpr equation by equation with NumPy takes a
fraction of that, and the oracle then shares no compiler with the code it checks.

`numpy_eval(fn, *args)` traces `fn` (`jax.make_jaxpr`) and evaluates the jaxpr. Only the
primitives the tests' references use are implemented; any other raises `NotImplementedError`
with its name (add it here), so nothing is evaluated wrongly without a word. Semantics follow
`jax.lax` (StableHLO): gathers and scatters with clamped starts (`GatherScatterMode.CLIP`,
`PROMISE_IN_BOUNDS`; `FILL_OR_DROP` only where every index is in bounds), `lax.div` rounding
integers toward zero, `select_n` choosing case `k` where the predicate is `k`.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import numpy as np
import scipy.linalg
import scipy.special
from jax.extend import core as jcore


def numpy_eval(fn, *args):
    """`fn(*args)` (a pytree of NumPy arrays) from `fn`'s jaxpr evaluated by NumPy."""
    return _evaluate(*_trace(fn, args), args)


def numpy_call(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` evaluated by NumPy: the array leaves of the arguments traced, the
    rest (strings, Python numbers, static fields) passed as they are, as `jax.jit` would with
    them static. For a library function called once by a test (`jd.step_derivatives(...)`),
    where a direct call would compile it."""
    dynamic, static = eqx.partition((args, kwargs), eqx.is_array)

    def call(dynamic):
        a, k = eqx.combine(dynamic, static)
        return fn(*a, **k)

    return numpy_eval(call, dynamic)


def numpy_jit(fn):
    """`fn` traced once per structure, shapes and dtypes of its arguments (as `jax.jit`
    caches: what `fn` closes over is read at the first trace), then evaluated by NumPy.
    `wrapped.jaxpr(*args)` is the (closed) jaxpr it evaluates for such arguments."""
    cache: dict = {}

    def traced(args):
        leaves, treedef = jax.tree.flatten(args)
        key = (treedef, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves))
        if key not in cache:
            cache[key] = _trace(fn, args)
        return cache[key]

    @functools.wraps(fn)
    def wrapped(*args):
        return _evaluate(*traced(args), args)

    wrapped.jaxpr = lambda *args: traced(args)[0]
    return wrapped


def central_differences(fn, x, directions, eps: float):
    """`(fn(x + eps d) − fn(x − eps d)) / (2 eps)` for each row `d` of `directions`: one
    `vmap` over the rows, evaluated by NumPy (a finite-difference oracle, not compiled)."""

    def one(d):
        return (fn(x + eps * d) - fn(x - eps * d)) / (2 * eps)

    return numpy_eval(jax.vmap(one), directions)


def _trace(fn, args):
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    return closed, jax.tree.structure(out_shape)


def _evaluate(closed, out_tree, args):
    flat = [np.asarray(x) for x in jax.tree.leaves(args)]
    out = eval_jaxpr(closed.jaxpr, [np.asarray(c) for c in closed.consts], flat)
    return jax.tree.unflatten(out_tree, out)


def eval_jaxpr(jaxpr, consts, args) -> list:
    env: dict = {}

    def read(x):
        return x.val if isinstance(x, jcore.Literal) else env[x]

    for var, val in zip(jaxpr.constvars, consts, strict=True):
        env[var] = val
    for var, val in zip(jaxpr.invars, args, strict=True):
        env[var] = val
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        rule = _RULES.get(name)
        if rule is None:
            raise NotImplementedError(f"numpy_eval: no rule for primitive {name!r}")
        ins = [np.asarray(read(x)) for x in eqn.invars]
        out = rule(*ins, **eqn.params)
        outs = out if eqn.primitive.multiple_results else [out]
        for var, val in zip(eqn.outvars, outs, strict=True):
            val = np.asarray(val)
            dtype, shape = _layout(var.aval)
            if val.dtype != dtype:
                val = val.astype(dtype)
            if val.shape != shape:
                raise AssertionError(f"numpy_eval: {name} gave shape {val.shape}, not {shape}")
            env[var] = val
    return [np.asarray(read(x)) for x in jaxpr.outvars]


def _layout(aval):
    """NumPy dtype and shape of a value: a threefry key array is its uint32 data `(..., 2)`
    (structural operations on key arrays, which would need the trailing axis, then fail on
    the shape check)."""
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.prng_key):
        return np.dtype(np.uint32), (*aval.shape, 2)
    return aval.dtype, aval.shape


def _closed(closed, *args) -> list:
    return eval_jaxpr(closed.jaxpr, [np.asarray(c) for c in closed.consts], list(args))


# --------------------------------------------------------------------------------------------
# rules


def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    new = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        new[d] = x.shape[i]
    return np.broadcast_to(x.reshape(new), shape)


def _div(x, y):
    if np.issubdtype(x.dtype, np.integer):
        return np.trunc(x / y).astype(x.dtype)
    return x / y


def _slice(x, start_indices, limit_indices, strides=None):
    strides = strides or (1,) * x.ndim
    return x[
        tuple(slice(s, e, k) for s, e, k in zip(start_indices, limit_indices, strides, strict=True))
    ]


def _split(x, sizes, axis):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _dot_general(x, y, dimension_numbers, preferred_element_type=None, **_):
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ls = [next(letters) for _ in range(x.ndim)]
    rs = [next(letters) for _ in range(y.ndim)]
    for a, b in zip(lc, rc, strict=True):
        rs[b] = ls[a]
    for a, b in zip(lb, rb, strict=True):
        rs[b] = ls[a]
    free_l = [ls[i] for i in range(x.ndim) if i not in lc and i not in lb]
    free_r = [rs[i] for i in range(y.ndim) if i not in rc and i not in rb]
    out = "".join([ls[i] for i in lb] + free_l + free_r)
    dtype = preferred_element_type or np.result_type(x, y)
    return np.einsum(f"{''.join(ls)},{''.join(rs)}->{out}", x, y).astype(dtype)


def _clamp_starts(starts, dims, operand_shape, slice_sizes):
    """Clamp each start vector entry to `[0, operand_shape[d] − slice_sizes[d]]`."""
    lo = np.zeros(len(dims), np.int64)
    hi = np.array([operand_shape[d] - slice_sizes[d] for d in dims], np.int64)
    return np.clip(starts.astype(np.int64), lo, hi)


def _window_index(operand_shape, indices, shape, window_dims, skipped, start_map, batching, mode):
    """The operand index of every element of a gather's output (a scatter's updates), as a
    tuple of arrays of `shape`: `start + window offset`, where `shape`'s dims are the index
    batch dims and the `window_dims` (operand dims not in `skipped`, in order); `start_map`
    maps the start vector to operand dims; `batching` pairs (operand dim, index batch dim)."""
    ndim = len(shape)
    window_operand_dims = [d for d in range(len(operand_shape)) if d not in skipped]
    sizes = [1] * len(operand_shape)
    for d, od in zip(window_dims, window_operand_dims, strict=True):
        sizes[od] = shape[d]
    batch_dims = [d for d in range(ndim) if d not in window_dims]
    starts = indices.reshape(-1, indices.shape[-1])
    if "FILL" in str(mode):
        hi = np.array([operand_shape[d] - sizes[d] for d in start_map])
        if np.any(starts < 0) or np.any(starts > hi):
            raise NotImplementedError("numpy_eval: out-of-bounds indices with FILL_OR_DROP")
    starts = _clamp_starts(starts, start_map, operand_shape, sizes)
    starts = starts.reshape(*indices.shape[:-1], -1)
    grid = np.indices(shape, sparse=True)
    at_batch = tuple(grid[d] for d in batch_dims)  # broadcastable batch coordinates
    batch_of = dict(batching)
    index = []
    for d in range(len(operand_shape)):
        i = np.zeros((1,) * ndim, np.int64)
        if d in start_map:
            i = i + starts[..., start_map.index(d)][at_batch]
        if d in batch_of:
            i = i + grid[batch_dims[batch_of[d]]]
        if d in window_operand_dims:
            i = i + grid[window_dims[window_operand_dims.index(d)]]
        index.append(np.broadcast_to(i, shape))
    return tuple(index)


def _gather(operand, indices, dimension_numbers, slice_sizes, mode=None, **_):
    dn = dimension_numbers
    skipped = (*dn.collapsed_slice_dims, *dn.operand_batching_dims)
    offset_sizes = [n for d, n in enumerate(slice_sizes) if d not in skipped]
    shape = list(indices.shape[:-1])
    for d, n in zip(dn.offset_dims, offset_sizes, strict=True):
        shape.insert(d, n)  # offset dims in increasing order: each lands where it says
    batching = zip(dn.operand_batching_dims, dn.start_indices_batching_dims, strict=True)
    index = _window_index(
        operand.shape, indices, shape, dn.offset_dims, skipped, dn.start_index_map, batching, mode
    )
    return operand[index]


def _scatter_index(operand, indices, updates, dn, mode):
    """The operand index of every update element (a tuple of arrays of `updates.shape`)."""
    skipped = (*dn.inserted_window_dims, *dn.operand_batching_dims)
    batching = zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims, strict=True)
    start_map = tuple(dn.scatter_dims_to_operand_dims)
    return _window_index(
        operand.shape,
        indices,
        updates.shape,
        dn.update_window_dims,
        skipped,
        start_map,
        batching,
        mode,
    )


def _scatter(operand, indices, updates, dimension_numbers, mode=None, **_):
    out = operand.copy()
    out[_scatter_index(operand, indices, updates, dimension_numbers, mode)] = updates
    return out


def _scatter_add(operand, indices, updates, dimension_numbers, mode=None, **_):
    out = operand.copy()
    np.add.at(out, _scatter_index(operand, indices, updates, dimension_numbers, mode), updates)
    return out


def _dynamic_slice(x, *starts, slice_sizes):
    s = _clamp_starts(np.array(starts), range(x.ndim), x.shape, slice_sizes)
    return x[tuple(slice(a, a + n) for a, n in zip(s, slice_sizes, strict=True))]


def _dynamic_update_slice(x, update, *starts):
    s = _clamp_starts(np.array(starts), range(x.ndim), x.shape, update.shape)
    out = x.copy()
    out[tuple(slice(a, a + n) for a, n in zip(s, update.shape, strict=True))] = update
    return out


def _pad(x, value, padding_config):
    out = x
    for axis, (lo, hi, interior) in enumerate(padding_config):
        if interior:
            n = out.shape[axis]
            shape = list(out.shape)
            shape[axis] = n + (n - 1) * interior if n else 0
            spread = np.full(shape, value, out.dtype)
            idx = [slice(None)] * out.ndim
            idx[axis] = slice(None, None, interior + 1)
            spread[tuple(idx)] = out
            out = spread
        cut = [slice(None)] * out.ndim
        cut[axis] = slice(max(-lo, 0), out.shape[axis] - max(-hi, 0))
        out = out[tuple(cut)]
        widths = [(0, 0)] * out.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        out = np.pad(out, widths, constant_values=value)
    return out


def _select_n(which, *cases):
    if len(cases) == 1:
        return cases[0]
    return np.choose(which.astype(np.int64), np.broadcast_arrays(*cases))


def _iota(dtype, shape, dimension, **_):
    shape_1 = [1] * len(shape)
    shape_1[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(shape_1), shape)


def _custom_linear_solve(*args, const_lengths, jaxprs):
    n = sum(const_lengths)
    consts, b = args[:n], args[n:]
    offset = const_lengths.matvec + const_lengths.vecmat
    solve_consts = consts[offset : offset + const_lengths.solve]
    return _closed(jaxprs.solve, *solve_consts, *b)


def _scan(*args, jaxpr, num_consts, num_carry, length, reverse, **_):
    consts, xs = args[:num_consts], args[num_consts + num_carry :]
    carry = list(args[num_consts : num_consts + num_carry])
    ys = [None] * length
    for i in range(length - 1, -1, -1) if reverse else range(length):
        out = _closed(jaxpr, *consts, *carry, *(x[i] for x in xs))
        carry, ys[i] = out[:num_carry], out[num_carry:]
    y_vars = jaxpr.jaxpr.outvars[num_carry:]
    stacked = [
        np.stack([y[j] for y in ys]) if length else np.zeros((0, *v.aval.shape), v.aval.dtype)
        for j, v in enumerate(y_vars)
    ]
    return [*carry, *stacked]


def _while(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cc, bc = args[:cond_nconsts], args[cond_nconsts : cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts :])
    while bool(_closed(cond_jaxpr, *cc, *carry)[0]):
        carry = _closed(body_jaxpr, *bc, *carry)
    return carry


def _cond(index, *args, branches, **_):
    return _closed(branches[int(index)], *args)


def _lu(a):
    """LAPACK's `getrf` (partial pivoting), as XLA:CPU calls it: `(lu, pivots, permutation)`,
    each matrix of the batch on its own (a singular one factorises as LAPACK leaves it)."""
    m, n = a.shape[-2:]
    lu = np.empty_like(a)
    pivots = np.empty((*a.shape[:-2], min(m, n)), np.int32)
    permutation = np.empty((*a.shape[:-2], m), np.int32)
    (getrf,) = scipy.linalg.lapack.get_lapack_funcs(("getrf",), (a,))
    for i in np.ndindex(a.shape[:-2]):
        lu[i], piv, _ = getrf(a[i])
        perm = np.arange(m)
        for k, p in enumerate(piv):  # row k swapped with row p, in order
            perm[[k, p]] = perm[[p, k]]
        pivots[i], permutation[i] = piv, perm
    return [lu, pivots, permutation]


def _cholesky(a, **_):
    """Lower Cholesky factor of each matrix of the batch; NaN where one is not positive
    definite (XLA:CPU's result there)."""
    out = np.empty_like(a)
    for i in np.ndindex(a.shape[:-2]):
        try:
            out[i] = np.linalg.cholesky(a[i])
        except np.linalg.LinAlgError:
            out[i] = np.nan
    return out


def _svd(a, full_matrices, compute_uv, subset_by_index=None, algorithm=None):
    """`s` or `(s, u, vᵀ)` (LAPACK's `gesdd` through NumPy, XLA:CPU's default driver)."""
    if subset_by_index not in (None, (0, min(a.shape[-2:]))) or algorithm not in (None,):
        raise NotImplementedError(f"numpy_eval: svd with {subset_by_index=}, {algorithm=}")
    if not compute_uv:
        return [np.linalg.svd(a, compute_uv=False)]
    u, s, vt = np.linalg.svd(a, full_matrices=full_matrices)
    return [s, u, vt]


def _triangular_solve(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """`op(a) x = b` (`left_side`) or `x op(a) = b`, `op` the transpose where `transpose_a`:
    each matrix of the batch by back substitution (`scipy.linalg.solve_triangular`)."""
    solve_triangular = scipy.linalg.solve_triangular
    if conjugate_a:
        a = np.conj(a)
    x = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], b.dtype)
    for i in np.ndindex(x.shape[:-2]):
        ai, bi = a[i] if a.ndim > 2 else a, b[i] if b.ndim > 2 else b
        if left_side:
            x[i] = solve_triangular(
                ai, bi, trans=int(transpose_a), lower=lower, unit_diagonal=unit_diagonal
            )
        else:  # x op(a) = b  ⇔  op(a)ᵀ xᵀ = bᵀ
            x[i] = solve_triangular(
                ai, bi.T, trans=1 - int(transpose_a), lower=lower, unit_diagonal=unit_diagonal
            ).T
    return x


def _sort(*operands, dimension, is_stable, num_keys):
    """Sorted along `dimension` by the first operand (stable), the others permuted alike."""
    if num_keys != 1:
        raise NotImplementedError(f"numpy_eval: sort with num_keys={num_keys}")
    order = np.argsort(operands[0], axis=dimension, kind="stable")
    return [np.take_along_axis(x, order, axis=dimension) for x in operands]


# --- random numbers: JAX's threefry2x32 keys (`jax_threefry_partitionable`, the default) ---
# A key is its raw data here: uint32 `(..., 2)`; the key-typed primitives act on that.


def _threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 block cipher (20 rounds), as `jax._src.prng.threefry2x32_p`."""
    k1, k2, x1, x2 = np.broadcast_arrays(*(np.asarray(a, np.uint32) for a in (k1, k2, x1, x2)))
    ks = [k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA)]
    rotations = [(13, 15, 26, 6), (17, 29, 16, 24)]
    x = [x1 + ks[0], x2 + ks[1]]
    with np.errstate(over="ignore"):
        for i in range(5):
            for r in rotations[i % 2]:
                x[0] = x[0] + x[1]
                x[1] = (x[1] << np.uint32(r)) | (x[1] >> np.uint32(32 - r))
                x[1] = x[0] ^ x[1]
            x[0] = x[0] + ks[(i + 1) % 3]
            x[1] = x[1] + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x


def _counts(shape):
    """`iota_2x32_shape`: the row-major index of each entry as (high, low) 32-bit words."""
    index = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
    return (index >> np.uint64(32)).astype(np.uint32), index.astype(np.uint32)


def _blocks(keys, shape):
    """Threefry of every key of `keys (..., 2)` with the counts of `shape`: two words of
    shape `keys.shape[:-1] + shape` (the ciphers broadcast over keys and counts)."""
    expand = (...,) + (None,) * len(shape)
    return _threefry2x32(keys[..., 0][expand], keys[..., 1][expand], *_counts(shape))


def _random_check(impl):
    if "fry" not in str(impl) or not jax.config.jax_threefry_partitionable:
        raise NotImplementedError(f"numpy_eval: random keys of {impl} (threefry, partitionable)")


def _random_wrap(data, impl):
    _random_check(impl)
    return data


def _random_seed(seeds, impl):
    """`threefry_seed`: the key `[seed >> 32, seed & 0xFFFFFFFF]` of an integer seed."""
    _random_check(impl)
    high = (
        (seeds.view(np.uint64) >> np.uint64(32)).astype(np.uint32)
        if seeds.dtype.itemsize == 8
        else np.zeros(seeds.shape, np.uint32)
    )
    return np.stack([high, seeds.astype(np.uint32)], -1)


def _random_bits(keys, bit_width, shape):
    """64 bits: the two words of each block; fewer: their xor, truncated."""
    b1, b2 = _blocks(keys, shape)
    if bit_width == 64:
        return (b1.astype(np.uint64) << np.uint64(32)) | b2.astype(np.uint64)
    return (b1 ^ b2).astype(f"uint{bit_width}")


def _random_split(keys, shape):
    return np.stack(_blocks(keys, shape), -1)


def _random_fold_in(keys, msgs):
    """`threefry_2x32(key, [0, msg])`: the new key is the block of the count `(0, msg)`."""
    return np.stack(_threefry2x32(keys[..., 0], keys[..., 1], np.uint32(0), msgs), -1)


def _shift_right_logical(x, y):
    """Zeros shifted in (also for signed `x`); 0 for shifts of the whole width or more."""
    bits = 8 * x.dtype.itemsize
    unsigned = np.dtype(f"uint{bits}")
    y = np.broadcast_to(y, np.broadcast_shapes(np.shape(x), np.shape(y))).astype(unsigned)
    shifted = x.view(unsigned) >> np.minimum(y, bits - 1)
    return np.where(y >= bits, 0, shifted).astype(unsigned).view(x.dtype)


def _bitcast_convert_type(x, new_dtype):
    if np.dtype(new_dtype).itemsize != x.dtype.itemsize:
        raise NotImplementedError("numpy_eval: bitcast between types of different sizes")
    return x.view(new_dtype)


def _round(x, rounding_method):
    if "EVEN" in str(rounding_method) or rounding_method == 1:
        return np.round(x)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)  # away from zero


def _platform_index(platforms, **_):
    """The branch `lax.platform_dependent` takes on CPU (its entry naming "cpu", else None's)."""
    for i, names in enumerate(platforms):
        if names is not None and "cpu" in names:
            return np.int32(i)
    return np.int32(platforms.index(None))


def _unary(f):
    return lambda x, **_: f(x)


def _binary(f):
    return lambda x, y, **_: f(x, y)


_RULES = {
    "add": _binary(np.add),
    "add_any": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_div),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "pow": _binary(np.power),
    "atan2": _binary(np.arctan2),
    "rem": _binary(np.fmod),
    "and": _binary(np.bitwise_and),  # logical on booleans, bitwise on integers
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "shift_left": _binary(np.left_shift),
    "shift_right_logical": _binary(_shift_right_logical),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "neg": _unary(np.negative),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tan": _unary(np.tan),
    "asin": _unary(np.arcsin),
    "acos": _unary(np.arccos),
    "atan": _unary(np.arctan),
    "sinh": _unary(np.sinh),
    "cosh": _unary(np.cosh),
    "tanh": _unary(np.tanh),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: 1.0 / np.sqrt(x)),
    "abs": _unary(np.abs),
    "sign": _unary(np.sign),
    "floor": _unary(np.floor),
    "round": _round,
    "ceil": _unary(np.ceil),
    "not": _unary(np.invert),  # logical on booleans, bitwise on integers
    "is_finite": _unary(np.isfinite),
    "stop_gradient": _unary(lambda x: x),
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "optimization_barrier": lambda *xs: list(xs),
    "device_put": lambda *xs, **_: [np.copy(x) for x in xs],
    "integer_pow": lambda x, y: x**y,
    "square": _unary(np.square),
    "logistic": _unary(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "clamp": lambda lo, x, hi: np.clip(x, lo, hi),
    "bitcast_convert_type": _bitcast_convert_type,
    "erf_inv": _unary(scipy.special.erfinv),
    "random_wrap": _random_wrap,
    "random_seed": _random_seed,
    "random_unwrap": _unary(lambda x: x),
    "random_bits": _random_bits,
    "random_split": _random_split,
    "random_fold_in": _random_fold_in,
    "convert_element_type": lambda x, new_dtype, **_: x.astype(new_dtype),
    "reshape": lambda x, new_sizes, **_: x.reshape(new_sizes),
    "squeeze": lambda x, dimensions: np.squeeze(x, tuple(dimensions)),
    "expand_dims": lambda x, dimensions: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation: np.transpose(x, permutation),
    "broadcast_in_dim": _broadcast_in_dim,
    "reduce_sum": lambda x, axes, **_: np.sum(x, tuple(axes)),
    "reduce_max": lambda x, axes, **_: np.max(x, tuple(axes)),
    "reduce_min": lambda x, axes, **_: np.min(x, tuple(axes)),
    "reduce_prod": lambda x, axes, **_: np.prod(x, tuple(axes)),
    "reduce_and": lambda x, axes, **_: np.all(x, tuple(axes)),
    "reduce_or": lambda x, axes, **_: np.any(x, tuple(axes)),
    "argmax": lambda x, axes, index_dtype: np.argmax(x, axes[0]).astype(index_dtype),
    "argmin": lambda x, axes, index_dtype: np.argmin(x, axes[0]).astype(index_dtype),
    "cumsum": lambda x, axis, reverse: (
        np.flip(np.cumsum(np.flip(x, axis), axis), axis) if reverse else np.cumsum(x, axis)
    ),
    "concatenate": lambda *xs, dimension: np.concatenate(xs, dimension),
    "stack": lambda *xs, axis: np.stack(xs, axis),
    "unstack": lambda x, axis: list(np.moveaxis(x, axis, 0)),
    "tile": lambda x, reps: np.tile(x, reps),
    "split": _split,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "pad": _pad,
    "gather": _gather,
    "scatter": _scatter,
    "scatter-add": _scatter_add,
    "scatter_add": _scatter_add,
    "dot_general": _dot_general,
    "lu": _lu,
    "cholesky": _cholesky,
    "svd": _svd,
    # equinox's `error_if`: a reduction over the whole (batched) predicate, and the callback
    # that raises, called as JAX would call it
    "unvmap_any": lambda x: np.any(x),
    "unvmap_all": lambda x: np.all(x),
    "unvmap_max": lambda x: np.max(x),
    "pure_callback": lambda *xs, callback, **_: list(callback(*xs)),
    "triangular_solve": _triangular_solve,
    "sort": _sort,
    "select_n": _select_n,
    "iota": _iota,
    "jit": lambda *xs, jaxpr, **_: _closed(jaxpr, *xs),
    "pjit": lambda *xs, jaxpr, **_: _closed(jaxpr, *xs),
    "custom_jvp_call": lambda *xs, call_jaxpr, **_: _closed(call_jaxpr, *xs),
    "custom_vjp_call": lambda *xs, call_jaxpr, **_: _closed(call_jaxpr, *xs),
    "custom_linear_solve": _custom_linear_solve,
    "scan": _scan,
    "while": _while,
    "cond": _cond,
    "platform_index": _platform_index,
}
