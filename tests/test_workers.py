"""The test workers' CPU shares (`conftest._pin_xdist_worker`)."""

import os

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
COUNT = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))


@pytest.mark.skipif(
    not WORKER.startswith("gw")
    or COUNT < 2
    or not hasattr(os, "sched_getaffinity")
    or bool(os.environ.get("JOINTDYN_TEST_NO_PINNING")),
    reason="pinning applies to pytest-xdist workers only (-n 2 or more)",
)
def test_each_worker_runs_on_its_own_share_of_the_cpus():
    """Worker `i` of `n` runs on every `n`-th CPU from the `i`-th of those the process may
    use: at most `⌈cpus / n⌉` of them, `n` apart (so the workers' shares are disjoint)."""
    mine = sorted(os.sched_getaffinity(0))
    cpus = os.cpu_count() or 1
    if cpus < COUNT:
        pytest.skip(f"{cpus} CPUs for {COUNT} workers: not pinned")
    assert 0 < len(mine) <= -(-cpus // COUNT), mine
    assert all(b - a >= COUNT for a, b in zip(mine, mine[1:], strict=False)), mine
