"""A model with all its parameters in one flat vector: cheap to pass, easy to optimise.

Passing a `Model` to a jitted function flattens its pytree in Python and hands XLA one buffer
per leaf: about 57 µs per call for panda (109 leaves, two dozen equinox modules), more than the
whole ABA. `pack(model)` moves every array leaf into one vector `theta` and keeps the rest of
the model (tree structure, shapes, topology) as static data, so a call passes a single array:

    packed = jd.pack(model)
    f = jax.jit(jd.aba)
    vdot = f(packed, q, v, tau)  # same result as f(model, q, v, tau)

Every public algorithm accepts a `PackedModel` wherever it takes a `Model`; it is unpacked
inside the trace (static slices of `theta`: no work at run time). New parameter values with the
same structure (`pack(other_model)`, `eqx.tree_at(lambda m: m.theta, ...)`) never retrace.

`theta` is also the flat parameter vector that system identification wants: a gradient with
respect to a `PackedModel` is a `PackedModel` whose `theta` is the gradient, and
`grad.unpack()` lays it out as a `Model`.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


@dataclasses.dataclass(frozen=True)
class PackLayout:
    """Where each leaf of the model lives in `theta` (static, hashable: part of jit's cache key)."""

    treedef: jax.tree_util.PyTreeDef
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


class PackedModel(eqx.Module):
    """A `Model` whose array leaves are stored end to end in one vector `theta`.

    **Fields:** `theta` (n,), every leaf of the model raveled in `jax.tree.leaves` order, in one
    floating dtype; `layout` (static) the model's tree structure and leaf shapes.
    Make one with `pack(model)`; `unpack()` gives the `Model` back (its leaves in `theta`'s dtype).
    """

    theta: Float[Array, " n"]
    layout: PackLayout = eqx.field(static=True)

    def unpack(self):
        """The `Model`: leaf k is the k-th consecutive piece of `theta`, `size_k` long, reshaped
        to `shape_k` (`split_leaves`).

        Inside a trace the slices are static and XLA reads them in place. `theta` may carry
        leading batch axes (a batch of models): each leaf keeps them in front.
        """
        lay, theta = self.layout, self.theta
        if theta.shape[-1:] != (lay.size,):
            raise ValueError(
                f"PackedModel.theta has shape {theta.shape}; its layout needs a last axis of "
                f"{lay.size}"
            )
        split = _split if isinstance(theta, jax.core.Tracer) else _split_jitted
        return jax.tree.unflatten(lay.treedef, split(lay, theta))


def _split(layout: PackLayout, theta: Array) -> list[Array]:
    """`theta`'s slices, one per leaf of `layout` (leading batch axes kept in front)."""
    return split_leaves(theta, layout.shapes)


def split_leaves(theta: Array, shapes) -> list[Array]:
    """`theta`'s consecutive pieces along its last axis, reshaped to `shapes` (leading batch
    axes kept in front): one `split`, whose transpose is one concatenation (slices transpose
    to a padded copy of the whole vector per leaf, summed). Shared with `jd.batched`."""
    lead = theta.shape[:-1]
    cuts = np.cumsum([math.prod(s) for s in shapes])[:-1]
    pieces = jnp.split(theta, cuts, axis=-1)
    return [x.reshape(lead + tuple(s)) for x, s in zip(pieces, shapes, strict=True)]


def _concatenate(leaves: list[Array], dtype) -> Array:
    """The leaves raveled, cast to `dtype` and joined (the inverse of `split_leaves`)."""
    return jnp.concatenate([x.astype(dtype).reshape(-1) for x in leaves])


# Outside a trace, one compiled program per layout (per leaf shapes for `pack`) instead of a
# slice, reshape or cast compiled for each leaf (a 14-body tree's `unpack`: ~280 → 1).
_split_jitted = jax.jit(_split, static_argnums=0)
_concatenate_jitted = jax.jit(_concatenate, static_argnums=1)


def pack(model) -> PackedModel:
    """`model` (a `Model`, or any pytree of floating arrays) as a `PackedModel`.

    Leaves of different floating dtypes are promoted to one (`jnp.result_type`); `unpack`
    returns them all in that dtype. Raises `ValueError` for a leaf that is not a floating array
    (it could not round-trip through a float vector), naming the leaf.
    """
    if isinstance(model, PackedModel):
        return model
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(model)
    leaves = []
    for path, x in path_leaves:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(
                f"pack: leaf {jax.tree_util.keystr(path)} has dtype {x.dtype}; only floating "
                "arrays can be packed"
            )
        leaves.append(x)
    if not leaves:
        raise ValueError("pack: the model has no array leaves")
    dtype = jnp.result_type(*leaves)
    traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
    theta = (_concatenate if traced else _concatenate_jitted)(leaves, dtype)
    return PackedModel(theta, PackLayout(treedef, tuple(x.shape for x in leaves)))


def unpacked(x):
    """`x.unpack()` for a `PackedModel`, `x` itself otherwise."""
    return x.unpack() if isinstance(x, PackedModel) else x
