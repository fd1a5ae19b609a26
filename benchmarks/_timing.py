"""Timing helpers of the benchmark scripts (no JAX here: `tests/test_benchmark_timing.py`
imports this module alone, with a fake clock)."""

from __future__ import annotations

import statistics
import time
from typing import Any


def _block(fn, n: int = 1) -> float:
    """Seconds per call of `n` back-to-back calls of `fn`."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def _calls_lasting(target_s: float, t: float) -> int:
    """How many calls of `t` seconds last about `target_s` (1 to 100 000)."""
    return max(1, min(100_000, int(target_s / max(t, 1e-7))))


def time_call(
    fn, max_repeats: int, budget_s: float, min_repeats: int = 3, warm: bool = False
) -> dict[str, Any]:
    """Seconds per call of `fn` (which blocks until its result is ready): median of repeats.

    A warm-up call first (unless `warm`: the caller made it; then the first call only sizes the
    repeats); each repeat runs `fn` `number` times, enough to last ~20 ms; as many repeats
    (between `min_repeats` and `max_repeats`) as fit in `budget_s`.
    """
    t = _block(fn)  # warm-up, or (warm) a sizing call
    if not warm and t < 0.02:
        t = min(t, _block(fn))
    number = _calls_lasting(0.02, t)
    repeats = int(budget_s / (t * number + 1e-9))
    repeats = max(min_repeats, min(max_repeats, repeats))
    samples = [_block(fn, number) for _ in range(repeats)]
    return {"median": statistics.median(samples), "min": min(samples), "samples": samples}


def paired_ratio(
    jd_fn, jd_per_call: int, pin_fn, pin_per_call: int, budget_s: float, rounds: int = 15
) -> float:
    """Median over rounds of (jointdyn s/sample) / (Pinocchio s/sample), the two timed back to
    back within each round (~50 ms each, the first of the pair alternating between rounds).

    On a machine whose speed drifts (other virtual machines on the host), separate medians can
    be taken in a fast and a slow minute; a paired ratio sees the same minute on both sides.
    `jd_fn` / `pin_fn` block until done and compute `*_per_call` samples per call; both are
    warm (called at least once before). Each block starts with one untimed call: the first
    call after the other library ran finds cold caches and sleeping threads. Without it, one
    run read RNEA 16-21 % above the plain ratio (blocks of 2-8 calls); with it, the paired
    ratio still differs from the plain one both ways (panda RNEA +11 %, talos -19 %).
    """

    def sized(fn):  # blocks of ~50 ms: each library's thread pool wakes once per block
        t = min(_block(fn), _block(fn))
        return _calls_lasting(0.05, t), t

    (n_jd, t_jd), (n_pin, t_pin) = sized(jd_fn), sized(pin_fn)
    per_round = (n_jd + 1) * t_jd + (n_pin + 1) * t_pin
    rounds = max(3, min(rounds, int(2 * budget_s / (per_round + 1e-9))))

    def per_sample(fn, n, per_call):
        fn()  # untimed: the first call after the other library's block finds cold caches
        return _block(fn, n) / per_call

    ratios = []
    for i in range(rounds):
        if i % 2:
            p = per_sample(pin_fn, n_pin, pin_per_call)
            j = per_sample(jd_fn, n_jd, jd_per_call)
        else:
            j = per_sample(jd_fn, n_jd, jd_per_call)
            p = per_sample(pin_fn, n_pin, pin_per_call)
        ratios.append(j / p)
    return statistics.median(ratios)
