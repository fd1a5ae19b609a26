"""Switch and helpers for jointdyn's differentiation rules (see `_dynamics.aba`'s rule).

The dynamics are differentiated with rules built on their structure (`jax.custom_jvp`),
not op by op. `differentiation_rules(False)` turns the rules off, so that the same functions
are differentiated op by op: the tests compare the two.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import jax
from jax.custom_derivatives import SymbolicZero

_state = threading.local()


def rules_enabled() -> bool:
    """Whether jointdyn's differentiation rules are used by functions traced now."""
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def differentiation_rules(enabled: bool = True) -> Iterator[None]:
    """Use (default) or bypass jointdyn's differentiation rules for what is traced inside:

        with jd.differentiation_rules(False):
            g = jax.grad(loss)(model, q)   # op-by-op autodiff of the ABA recursion

    The choice is made when a function is *traced*: a function jitted before keeps the rules
    it was traced with (call `jax.grad`, or a fresh `jax.jit`, inside the block). For tests
    and comparisons; the rules give the same derivatives, faster and with smaller programs.
    """
    old = rules_enabled()
    _state.enabled = bool(enabled)
    try:
        yield
    finally:
        _state.enabled = old


def is_zero(t) -> bool:
    return isinstance(t, SymbolicZero)


def partial_jvp(fn: Callable, primals: tuple, tangents: tuple, primal_out: bool = False):
    """`jax.jvp(fn, primals, tangents)[1]` along the leaves whose tangent is not a
    `SymbolicZero` (the others are held fixed: no tangent work is traced for them).
    Returns None when every tangent is a symbolic zero. With `primal_out`, returns
    `(fn(*primals), tangent or None)`."""
    leaves, tree = jax.tree.flatten(primals)
    tleaves = jax.tree.leaves(tangents, is_leaf=lambda x: x is None or is_zero(x))
    tleaves = [t for t in tleaves if t is not None]
    if len(tleaves) != len(leaves):  # pragma: no cover - a pytree mismatch is a bug here
        raise AssertionError("tangents do not match primals")
    live = [i for i, t in enumerate(tleaves) if not is_zero(t)]
    if not live:
        return (fn(*primals), None) if primal_out else None

    def along(*xs):
        full = list(leaves)
        for i, x in zip(live, xs, strict=True):
            full[i] = x
        return fn(*jax.tree.unflatten(tree, full))

    out, tangent = jax.jvp(along, tuple(leaves[i] for i in live), tuple(tleaves[i] for i in live))
    return (out, tangent) if primal_out else tangent


def instantiate(t, like):
    """`t`, or zeros shaped like `like` where `t` is a symbolic zero."""
    return jax.numpy.zeros_like(like) if is_zero(t) else t
