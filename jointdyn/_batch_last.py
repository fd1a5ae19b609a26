"""`batch_last`: a `vmap` whose batch axis is the **last** axis of every array.

`jax.vmap` puts the batch axis first, and XLA:CPU keeps row-major layouts, so every kernel of
a `jit(vmap(aba))` loops over the batch around a fully unrolled, scalar body: the per-sample
arrays (a 6-vector, a 6×6 block) are too short for SIMD. With the batch axis last, the
innermost loop of every kernel runs over consecutive samples, and LLVM vectorises it.

`batch_last(fn)` traces `fn` once for a single sample and evaluates the jaxpr equation by
equation on arrays that carry the batch as a trailing axis: each primitive is bound again with
its parameters extended by that axis (`slice` gets one more `(0, B, 1)`, `gather` one more
offset dimension, `dot_general` keeps a constant matrix as a product with all samples at once,
…). Values that do not depend on a mapped argument (the model) stay unbatched. A primitive
without a rule here is evaluated under `jax.vmap` with its batch axis moved first and back:
always correct, only slower.

The result is ordinary JAX code: it composes with `jit`, `grad`, `jvp` and `vmap`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax import lax
from jax.extend import core as jex_core

from ._autodiff import instantiate, is_zero

_ELEMENTWISE = frozenset(
    """abs acos acosh add add_any and asin asinh atan atan2 atanh cbrt ceil clamp convert_element_type
    copy copy_p cos cosh div eq erf erf_inv erfc exp exp2 expm1 floor ge gt imag integer_pow
    is_finite le log log1p logistic lt max min mul ne neg nextafter not or pow real reduce_precision
    rem round rsqrt select_n sign sin sinh sqrt square sub tan tanh xor""".split()
)
_SAME_AXES = frozenset(
    "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or argmax argmin "
    "cumsum cumprod cummax cummin cumlogsumexp squeeze split unstack rev".split()
)

_SCATTER = frozenset(
    "dimension_numbers indices_are_sorted unique_indices mode update_jaxpr update_consts".split()
)
#: The parameters each rule below reads or rewrites, as JAX 0.7.2–0.10 name them. A parameter
#: not listed here may change what an axis means: `batch_last` then raises instead of
#: guessing (a JAX upgrade fails loudly, not with wrong numbers). Elementwise primitives and
#: calls (`jit`, `pjit`) carry no axis parameters and are not checked.
_KNOWN_PARAMS: dict[str, frozenset] = {
    "broadcast_in_dim": frozenset({"shape", "broadcast_dimensions", "sharding"}),
    "reshape": frozenset({"new_sizes", "dimensions", "sharding"}),
    "slice": frozenset({"start_indices", "limit_indices", "strides"}),
    "concatenate": frozenset({"dimension"}),
    "stack": frozenset({"axis"}),
    "pad": frozenset({"padding_config"}),
    "transpose": frozenset({"permutation"}),
    "dynamic_update_slice": frozenset(),
    "dynamic_slice": frozenset({"slice_sizes"}),
    "gather": frozenset(
        "dimension_numbers slice_sizes indices_are_sorted unique_indices mode fill_value".split()
    ),
    "scatter-add": _SCATTER,
    "scatter_add": _SCATTER,
    "scatter": _SCATTER,
    "dot_general": frozenset(
        {"dimension_numbers", "precision", "preferred_element_type", "out_sharding"}
    ),
    "custom_jvp_call": frozenset({"call_jaxpr", "jvp_jaxpr_fun", "num_consts", "symbolic_zeros"}),
    "custom_linear_solve": frozenset({"const_lengths", "jaxprs"}),
    **{
        n: frozenset({"axes", "out_sharding"})
        for n in "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or".split()
    },
    "argmax": frozenset({"axes", "index_dtype"}),
    "argmin": frozenset({"axes", "index_dtype"}),
    **{n: frozenset({"axis", "reverse"}) for n in _SAME_AXES if n.startswith("cum")},
    "squeeze": frozenset({"dimensions"}),
    "split": frozenset({"sizes", "axis"}),
    "unstack": frozenset({"axis"}),
    "rev": frozenset({"dimensions"}),
}


def _check_params(eqn) -> None:
    """`NotImplementedError` for a parameter that `_rule` does not know (see `_KNOWN_PARAMS`)."""
    known = _KNOWN_PARAMS.get(eqn.primitive.name)
    if known is None:
        return
    unknown = sorted(set(eqn.params) - known)
    if unknown:
        raise NotImplementedError(
            f"batch_last: primitive {eqn.primitive.name!r} has parameter(s) {unknown} that this "
            f"version of jointdyn does not know (JAX {jax.__version__} is newer than the JAX "
            "jointdyn was tested with?). Use jax.vmap, or jd.batched(..., layout='batch_first'), "
            "and please report it."
        )


def batch_last(fn: Callable, in_axes: int | None | Sequence[int | None] = -1) -> Callable:
    """`jax.vmap(fn, in_axes, out_axes=-1)` for mapped axes that are the last axis.

    **Arguments:**
    - `fn`: a function of one sample (e.g. `jointdyn.rnea`), returning arrays or a pytree.
    - `in_axes`: per positional argument (or one for all), `-1` (every array leaf is mapped
      over its last axis) or `None` (shared, e.g. the model).

    **Returns:** a function of the same arguments whose outputs carry the batch as their last
    axis.
    """

    def wrapped(*args):
        axes = _axes(args, in_axes)
        for a in axes:
            if a not in (-1, None):
                raise ValueError(f"`in_axes` entries must be -1 or None, got {a!r}")
        trees = [jax.tree.flatten(x) if a == -1 else None for x, a in zip(args, axes, strict=True)]
        leaves = [y for t in trees if t is not None for y in t[0]]
        B = _mapped_size(leaves, -1, "`in_axes` -1", "last-axis")

        def one_sample(*flat):
            """`fn` of one sample; unmapped arguments are closed over, so concrete stay concrete."""
            it = iter(flat)
            return fn(
                *[
                    x if t is None else jax.tree.unflatten(t[1], [next(it) for _ in t[0]])
                    for x, t in zip(args, trees, strict=True)
                ]
            )

        spec = [_spec(y) for y in leaves]
        closed, out_shape = jax.make_jaxpr(one_sample, return_shape=True)(*spec)
        outs = _eval(closed.jaxpr, closed.consts, [(y, True) for y in leaves], B)
        outs = [x if b else _full(x, False, B) for x, b in outs]
        return jax.tree.unflatten(jax.tree.structure(out_shape), outs)

    return wrapped


def _axes(args, in_axes) -> tuple:
    """`in_axes` as one entry per positional argument (shared with `batched`)."""
    axes = in_axes if isinstance(in_axes, Sequence) else (in_axes,) * len(args)
    if len(axes) != len(args):
        raise ValueError(f"`in_axes` has {len(axes)} entries for {len(args)} arguments")
    return tuple(axes)


def _mapped_size(leaves: list, axis: int, where: str, label: str) -> int:
    """The one size of the mapped `leaves` along `axis` (shared with `batched`).
    **Raises:** `ValueError` for a scalar leaf, sizes that differ, or no mapped leaf."""
    if any(np.ndim(y) == 0 for y in leaves):
        raise ValueError(f"a mapped argument ({where}) has a scalar leaf: no axis to map over")
    sizes = {np.shape(y)[axis] for y in leaves}
    if len(sizes) != 1:
        raise ValueError(
            f"mapped arguments ({where}) must share one {label} size, got {sorted(sizes)}"
        )
    (size,) = sizes
    return size


def _spec(x) -> jax.ShapeDtypeStruct:
    """The abstract value of one sample of the mapped leaf `x`."""
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape[:-1], aval.dtype, weak_type=aval.weak_type)


def _full(x, batched: bool, B: int, shape: tuple | None = None):
    """`x` as a batched array of unbatched shape `shape` (default: its own)."""
    s = tuple(np.shape(x)[:-1] if batched else np.shape(x))
    shape = s if shape is None else tuple(shape)
    if batched and s == shape:
        return x
    dims = tuple(range(len(shape) - len(s), len(shape)))
    if batched:
        return lax.broadcast_in_dim(x, shape + (B,), dims + (len(shape),))
    return lax.broadcast_in_dim(x, shape + (B,), dims)


def _eval(jaxpr, consts, args, B: int):
    env: dict = {}

    def read(v):
        if isinstance(v, jex_core.Literal):
            return v.val, False
        return env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = (c, False)
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if not any(b for _, b in ins):
            out = _bind_as_traced(eqn, *[x for x, _ in ins])
            outs = [(o, False) for o in (out if eqn.primitive.multiple_results else [out])]
        else:
            outs = _rule(eqn, ins, B)
            for v, (o, b) in zip(eqn.outvars, outs, strict=True):
                want = tuple(v.aval.shape) + ((B,) if b else ())
                if np.shape(o) != want:  # a rule's bug: fail here, not with wrong numbers
                    raise AssertionError(
                        f"batch_last: {eqn.primitive.name} gave {np.shape(o)}, expected {want}"
                    )
        for v, o in zip(eqn.outvars, outs, strict=True):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _rule(eqn, ins, B: int) -> list:
    _check_params(eqn)
    name = eqn.primitive.name
    p = dict(eqn.params)
    bind = eqn.primitive.bind
    xs = [x for x, _ in ins]
    bs = [b for _, b in ins]

    def one(y):
        return [(y, True)]

    if name in _ELEMENTWISE:
        shape = eqn.outvars[0].aval.shape
        return one(bind(*[_full(x, b, B, shape) for x, b in ins], **p))
    if name in _SAME_AXES:
        out = bind(xs[0], **p)
        return [(o, True) for o in out] if eqn.primitive.multiple_results else one(out)
    if name == "broadcast_in_dim":
        p["shape"] = tuple(p["shape"]) + (B,)
        p["broadcast_dimensions"] = tuple(p["broadcast_dimensions"]) + (len(p["shape"]) - 1,)
        p["sharding"] = None
        return one(bind(xs[0], *xs[1:], **p))
    if name == "reshape" and p.get("dimensions") is None and len(xs) == 1:
        p["new_sizes"] = tuple(p["new_sizes"]) + (B,)
        p["sharding"] = None
        return one(bind(xs[0], **p))
    if name == "slice":
        p["start_indices"] = tuple(p["start_indices"]) + (0,)
        p["limit_indices"] = tuple(p["limit_indices"]) + (B,)
        if p.get("strides") is not None:
            p["strides"] = tuple(p["strides"]) + (1,)
        return one(bind(xs[0], **p))
    if name in ("concatenate", "stack"):
        return one(bind(*[_full(x, b, B) for x, b in ins], **p))
    if name == "pad" and not bs[1]:
        p["padding_config"] = tuple(p["padding_config"]) + ((0, 0, 0),)
        return one(bind(xs[0], xs[1], **p))
    if name == "transpose":
        p["permutation"] = tuple(p["permutation"]) + (len(p["permutation"]),)
        return one(bind(xs[0], **p))
    if name == "dynamic_update_slice" and not any(bs[2:]):
        return one(bind(_full(xs[0], bs[0], B), _full(xs[1], bs[1], B), *xs[2:], _zero_like(xs[2])))
    if name == "dynamic_slice" and not any(bs[1:]):
        p["slice_sizes"] = tuple(p["slice_sizes"]) + (B,)
        return one(bind(xs[0], *xs[1:], _zero_like(xs[1]), **p))
    if name == "gather" and bs[0] and not bs[1]:
        dn = p["dimension_numbers"]
        if not dn.operand_batching_dims:
            out_rank = len(eqn.outvars[0].aval.shape)
            p["dimension_numbers"] = dn._replace(offset_dims=tuple(dn.offset_dims) + (out_rank,))
            p["slice_sizes"] = tuple(p["slice_sizes"]) + (B,)
            return one(bind(xs[0], xs[1], **p))
    if name in ("scatter-add", "scatter_add", "scatter") and not bs[1]:
        dn = p["dimension_numbers"]
        if not dn.operand_batching_dims:
            upd_rank = len(eqn.invars[2].aval.shape)
            p["dimension_numbers"] = dn._replace(
                update_window_dims=tuple(dn.update_window_dims) + (upd_rank,)
            )
            return one(bind(_full(xs[0], bs[0], B), xs[1], _full(xs[2], bs[2], B), **p))
    if name == "dot_general":
        return one(_dot_general(eqn, ins, B))
    if name == "custom_jvp_call":
        return _custom_jvp_call(eqn, ins, B)
    if name == "custom_linear_solve":
        return _custom_linear_solve(eqn, ins, B)
    if name in ("jit", "pjit", "closed_call", "core_call"):
        sub = p.get("jaxpr", p.get("call_jaxpr"))
        inner = getattr(sub, "jaxpr", sub)
        consts = getattr(sub, "consts", ())
        return _eval(inner, consts, ins, B)
    return _fallback(eqn, ins)


def _custom_jvp_call(eqn, ins, B: int) -> list:
    """A `jax.custom_jvp` function (jointdyn's `aba` rule, …) with the batch axis last: a new
    `custom_jvp` whose primal evaluates the call's jaxpr batch-last and whose rule evaluates
    the original rule's jaxpr batch-last, so the rule is used by an outer `jvp`/`grad`. Every
    output is batched; symbolic-zero tangents stay symbolic for a rule that takes them
    (`symbolic_zeros=True`) and are zeros for one that does not, as JAX does."""
    call, nc = eqn.params["call_jaxpr"], eqn.params["num_consts"]
    jvp_jaxpr_fun = eqn.params["jvp_jaxpr_fun"]
    symbolic = eqn.params["symbolic_zeros"]
    bs = [b for _, b in ins]
    n_out = len(eqn.outvars)

    def primal(*xs):
        outs = _eval(call.jaxpr, call.consts, list(zip(xs, bs, strict=True)), B)
        return [_full(o, b, B) for o, b in outs]

    def rule(primals, tangents):
        if not symbolic:
            tangents = [instantiate(t, x) for x, t in zip(primals, tangents, strict=True)]
        zeros = [is_zero(t) for t in tangents[nc:]]
        jaxpr, consts, out_zeros = jvp_jaxpr_fun.call_wrapped(*zeros)
        args = list(zip(primals[nc:], bs[nc:], strict=True))
        args += [(t, b) for t, b, z in zip(tangents[nc:], bs[nc:], zeros, strict=True) if not z]
        outs = [_full(o, b, B) for o, b in _eval(jaxpr, consts, args, B)]
        out, nz = outs[:n_out], iter(outs[n_out:])
        dout = [
            jax.numpy.zeros_like(o) if z else next(nz) for o, z in zip(out, out_zeros, strict=True)
        ]
        return out, dout

    fn = jax.custom_jvp(primal)
    fn.defjvp(rule, symbolic_zeros=True)
    return [(o, True) for o in fn(*[x for x, _ in ins])]


def _custom_linear_solve(eqn, ins, B: int) -> list:
    """`lax.custom_linear_solve` (ABA's `M⁻¹` in its rule) with the batch axis last: the
    primitive bound again with its four jaxprs (matvec, vecmat, solve, transpose solve)
    traced batch-last, so that JAX's own rules (the transpose is the transpose solve, not the
    solve's ops transposed) keep working on the result."""
    lengths, jaxprs = eqn.params["const_lengths"], eqn.params["jaxprs"]
    n_consts = sum(lengths)
    consts, rhs = ins[:n_consts], [_full(x, b, B) for x, b in ins[n_consts:]]
    specs = [jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x)) for x in rhs]
    new, start = [], 0
    for jx, n in zip(jaxprs, lengths, strict=True):
        cs, start = consts[start : start + n], start + n
        if jx is None:
            new.append(None)
            continue

        def fn(*args, jx=jx, bs=tuple(b for _, b in cs)):
            pairs = list(zip(args[: len(bs)], bs, strict=True))
            pairs += [(x, True) for x in args[len(bs) :]]
            return [_full(o, b, B) for o, b in _eval(jx.jaxpr, jx.consts, pairs, B)]

        cspecs = [jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x)) for x, _ in cs]
        new.append(jax.make_jaxpr(fn)(*cspecs, *specs))
    out = eqn.primitive.bind(
        *[x for x, _ in consts], *rhs, const_lengths=lengths, jaxprs=type(jaxprs)(*new)
    )
    return [(o, True) for o in out]


def _zero_like(index):
    """A zero start index of `index`'s integer type (the batch axis is taken whole)."""
    return np.zeros((), jax.numpy.result_type(index))


def _dot_general(eqn, ins, B: int):
    """`dot_general` with the batch axis last. One operand batched: one product with all samples
    at once (a constant matrix times `(…, B)` data is a plain GEMM). Both batched: products of
    slices summed over the contraction (`_batched_contraction`), elementwise across samples."""
    (lhs, lb), (rhs, rb) = ins
    p = dict(eqn.params)
    if p.get("out_sharding") is not None:
        p["out_sharding"] = None
    if lb and rb:
        out = _batched_contraction(lhs, rhs, p["dimension_numbers"])
        return out.astype(eqn.outvars[0].aval.dtype)
    if rb:  # rhs's batch axis is its last free axis: the output's last axis
        return eqn.primitive.bind(lhs, rhs, **p)
    # lhs's free axes come before rhs's: move the batch axis last
    (lc, rc), (lbd, rbd) = p["dimension_numbers"]
    out_rank = len(eqn.outvars[0].aval.shape)
    pos = out_rank - (rhs.ndim - len(rc) - len(rbd))
    out = eqn.primitive.bind(lhs, rhs, **p)
    return lax.transpose(out, [i for i in range(out_rank + 1) if i != pos] + [pos])


#: Contractions up to this length are unrolled into a sum of products of slices...
_UNROLL_CONTRACTION = 16
#: ...unless the product has at least this many entries per sample (the regressor's
#: `Sᵀ W`, nv × 10·nbodies), where one GEMM per sample, writing its result once and
#: contiguously in the batch-first layout `batched` returns large results in, is faster:
#: talos regressor (38 × 330), batch 4096, 2 devices, 106 → 74 µs per sample. Smaller
#: products stay unrolled: the derivatives' `(38, 12) @ (12, 76)` (2 888 entries, consumed
#: batch-last) ran 3–17 % slower as a GEMM (benchmarks/NOTES.md).
_DOT_OUTPUT = 4096


def _batched_contraction(lhs, rhs, dimension_numbers):
    """`dot_general` of two batch-last operands, as `Σ_k lhs[…, k, …] rhs[…, k, …]`.

    The operands are brought to `(batch…, free…, K, B)` and `(batch…, K, free…, B)` with the
    contraction flattened to one axis `K`; then either `K` products of slices are added
    (elementwise over samples, fused into one vectorised loop) or, for long contractions and
    large products, XLA's batched `dot` (a GEMM per sample) with the samples as its leading
    batch dimension and the result transposed back: the products of `aba_derivatives`
    (`K = nv`) ran 2× slower as a broadcast product reduced over `K`."""
    (lc, rc), (lbd, rbd) = dimension_numbers
    nl, nr = lhs.ndim - 1, rhs.ndim - 1  # sample axis excluded
    lf = [d for d in range(nl) if d not in lc and d not in lbd]
    rf = [d for d in range(nr) if d not in rc and d not in rbd]
    lhs = lax.transpose(lhs, (*lbd, *lf, *lc, nl))
    rhs = lax.transpose(rhs, (*rbd, *rc, *rf, nr))
    nb = len(lbd)
    bshape = lhs.shape[:nb]
    lfs, rfs = lhs.shape[nb : nb + len(lf)], rhs.shape[nb + len(rc) : nb + len(rc) + len(rf)]
    K = int(np.prod([lhs.shape[nb + len(lf) + i] for i in range(len(lc))], dtype=np.int64))
    B = lhs.shape[-1]
    lhs = lhs.reshape((*bshape, *lfs, K, B))
    rhs = rhs.reshape((*bshape, K, *rfs, B))
    out_shape = (*bshape, *lfs, *rfs, B)
    n_out = len(out_shape)
    # where each operand's axes land in the output
    l_dims = (*range(nb + len(lfs)), n_out - 1)
    r_dims = (*range(nb), *range(nb + len(lfs), n_out - 1), n_out - 1)
    if K <= _UNROLL_CONTRACTION and math.prod(out_shape[:-1]) < _DOT_OUTPUT:
        total = None
        for k in range(K):
            a = lax.index_in_dim(lhs, k, nb + len(lfs), keepdims=False)
            b = lax.index_in_dim(rhs, k, nb, keepdims=False)
            term = lax.mul(
                lax.broadcast_in_dim(a, out_shape, l_dims),
                lax.broadcast_in_dim(b, out_shape, r_dims),
            )
            total = term if total is None else lax.add(total, term)
        if total is None:
            return lax.full(out_shape, 0, lhs.dtype)
        return total
    # long contractions: XLA's batched dot, samples moved first and the result's back last
    dn = (((nb + len(lfs),), (nb,)), ((lhs.ndim - 1, *range(nb)), (rhs.ndim - 1, *range(nb))))
    out = lax.dot_general(lhs, rhs, dn)  # (B, batch…, lhs free…, rhs free…)
    return lax.transpose(out, (*range(1, n_out), 0))


def _bind_as_traced(eqn, *args):
    """Bind `eqn`'s primitive again as it was traced. `get_bind_params` returns the bind
    parameters (JAX 0.9.1 and later) or `(subfuns, params)` (earlier JAX)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns = []
    if isinstance(params, tuple):
        subfuns, params = params
    return eqn.primitive.bind(*subfuns, *args, **params)


def _fallback(eqn, ins) -> list:
    """`eqn` under `jax.vmap`, each batched input's last axis moved first and back."""

    def f(*xs):
        return _bind_as_traced(eqn, *xs)

    xs = [jax.numpy.moveaxis(x, -1, 0) if b else x for x, b in ins]
    out = jax.vmap(f, in_axes=[0 if b else None for _, b in ins])(*xs)
    outs = out if eqn.primitive.multiple_results else [out]
    return [(jax.numpy.moveaxis(o, 0, -1), True) for o in outs]
