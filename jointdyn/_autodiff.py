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
    with _setting("enabled", bool(enabled), True):
        yield


@contextlib.contextmanager
def _setting(name: str, value, default) -> Iterator[None]:
    """This thread's `_state.<name>` set to `value` inside, restored after."""
    old = getattr(_state, name, default)
    setattr(_state, name, value)
    try:
        yield
    finally:
        setattr(_state, name, old)


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


#: How many tangents mapped at once (at fixed primals) count as "many": rules may then
#: compute full Jacobians once instead of one tangent per lane (`tangent_only_lanes`).
MANY_TANGENTS = 5


@contextlib.contextmanager
def tangent_lanes_hint(lanes: int) -> Iterator[None]:
    """Rules traced inside see `lanes` from `tangent_only_lanes` (for any tangent that is not a
    symbolic zero): `jit_unless_traced` sets it around a jitted call under an un-jitted
    `jax.jacfwd`, whose rule is traced by the jitted call's own JVP, where the lanes no longer
    show on the tracers. `lanes = 0` leaves the setting as it is."""
    if not lanes:
        yield
        return
    with _setting("lanes", int(lanes), 0):
        yield


def jacfwd_lanes(tracers) -> int:
    """The lanes to pass on (`tangent_lanes_hint`) into a program whose rules are traced by a
    JVP of its own (a jitted call, `jd.batched`'s chunks) when it is called with these
    argument tracers: `tangent_only_lanes` of their `jax.jvp` tangents and primals (`tangent`,
    `primal`) when at least `MANY_TANGENTS`, else 0."""
    pairs = [(getattr(x, "primal", x), getattr(x, "tangent", None)) for x in tracers]
    lanes = tangent_only_lanes([p for p, _ in pairs], [t for _, t in pairs])
    return lanes if lanes >= MANY_TANGENTS else 0


def tangent_only_lanes(primals, tangents) -> int:
    """How many lanes a `vmap` maps some of `tangents` over while every primal is constant
    along it (as `jax.jacfwd` does: one lane per input coordinate), seen from inside a
    `custom_jvp` rule; 0 when no such `vmap` is there.

    JAX has no public way to ask this: it is read from the tangents' batching tracers (their
    trace, `batch_dim` and `val`), and is 0 whenever those attributes are missing. A rule may
    use it only to choose between two ways of computing the same tangent (say, full Jacobians
    once instead of one tangent sweep per lane), never to change what it computes. Inside
    `tangent_lanes_hint(n)`, at least `n` for any tangent that is not a symbolic zero.
    """
    Tracer = jax.core.Tracer
    hint = getattr(_state, "lanes", 0)
    traces = {
        id(getattr(x, "_trace", None)) for x in jax.tree.leaves(primals) if isinstance(x, Tracer)
    }
    lanes = 0
    for t in jax.tree.leaves(tangents, is_leaf=lambda x: x is None or is_zero(x)):
        if t is None or is_zero(t) or not isinstance(t, Tracer):
            continue
        lanes = max(lanes, hint)
        trace, axis, val = (getattr(t, a, None) for a in ("_trace", "batch_dim", "val"))
        if trace is None or id(trace) in traces or type(axis) is not int:
            continue
        shape = getattr(val, "shape", ())
        if 0 <= axis < len(shape):
            lanes = max(lanes, int(shape[axis]))
    return lanes


def instantiate(t, like):
    """`t`, or zeros shaped like `like` where `t` is a symbolic zero."""
    return jax.numpy.zeros_like(like) if is_zero(t) else t
