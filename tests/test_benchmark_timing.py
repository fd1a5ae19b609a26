"""The benchmark's timing helpers (`benchmarks/_timing.py`) on a fake clock: what they compute
from the times they read, with no real timing involved."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "_timing.py"
_spec = importlib.util.spec_from_file_location("_bench_timing", _PATH)
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)


class FakeClock:
    def __init__(self, monkeypatch):
        self.t = 0.0
        monkeypatch.setattr(timing.time, "perf_counter", lambda: self.t)

    def costing(self, seconds):
        """A callable that advances the clock by `seconds(i)` on its i-th call."""
        calls = [0]

        def fn():
            self.t += seconds(calls[0])
            calls[0] += 1

        return fn


def test_paired_ratio_divides_per_sample_times(monkeypatch):
    clock = FakeClock(monkeypatch)
    jd = clock.costing(lambda i: 4e-3)  # 4 ms a call of 1000 samples: 4 µs a sample
    pin = clock.costing(lambda i: 1e-6)  # 1 µs a call of one sample
    assert timing.paired_ratio(jd, 1000, pin, 1, budget_s=1.0) == pytest.approx(4.0)


def test_paired_ratio_follows_drift_on_both_sides(monkeypatch):
    """The machine slows down 3× partway through. Timing one side fully before the other (as
    separate medians do) would divide a fast time by a slow one; a paired round sees one speed
    on both sides, except the one round the change falls in."""
    clock = FakeClock(monkeypatch)

    def drifting(cost):
        def fn():
            clock.t += cost * (3.0 if clock.t > 0.35 else 1.0)

        return fn

    r = timing.paired_ratio(drifting(2e-3), 100, drifting(1e-5), 1, budget_s=10.0)
    assert r == pytest.approx(2e-3 / 100 / 1e-5, rel=0.01)
    # the unpaired reading of the same clock: one side before the change, the other after
    jd, pin = drifting(2e-3), drifting(1e-5)
    clock.t = 0.0
    t_jd = timing.time_call(jd, 15, 0.5)["median"] / 100
    t_pin = timing.time_call(pin, 15, 0.5)["median"]
    assert t_jd / t_pin == pytest.approx(2 / 3, rel=0.01)


def test_paired_ratio_rounds_within_budget(monkeypatch):
    clock = FakeClock(monkeypatch)
    n = {"jd": 0, "pin": 0}

    def jd():
        n["jd"] += 1
        clock.t += 0.01

    def pin():
        n["pin"] += 1
        clock.t += 0.01

    timing.paired_ratio(jd, 1, pin, 1, budget_s=0.37, rounds=15)
    # blocks of 5 timed calls (~50 ms) and one untimed call each side:
    # ⌊2·0.37 s / 0.12 s⌋ = 6 rounds, plus 2 sizing calls
    assert n["jd"] == n["pin"] == 2 + 6 * (1 + 5)


def test_time_call_median_and_min(monkeypatch):
    clock = FakeClock(monkeypatch)
    costs = [0.05, 0.05, 0.04, 0.06, 0.03, 0.05]  # warm-up, then one call per repeat
    fn = clock.costing(lambda i: costs[i])
    r = timing.time_call(fn, max_repeats=5, budget_s=1.0)
    assert r["samples"] == pytest.approx([0.05, 0.04, 0.06, 0.03, 0.05])
    assert r["median"] == pytest.approx(0.05) and r["min"] == pytest.approx(0.03)
