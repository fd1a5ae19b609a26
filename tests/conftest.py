"""Shared fixtures and settings. Tests run in float64 unless they cast to float32 explicitly.

Compilation dominates the suite's time, so the tests compile at XLA's lowest backend
(LLVM) optimisation level, and without XLA:CPU's MLIR fusion emitters
(`--xla_cpu_use_fusion_emitters=false`) and with YNNPACK for matrix products only: what
`jd.jit` compiles with (`jd.compiler_options()`), for every `jax.jit` of the tests too: the
same programs with the same operations, compiled faster (XLA compile of the gradient of
`aba` on a 14-body tree: 13.7-15.9 s with the emitters, 8.5-9.3 s without, on a 2-core CI
machine) and, at the lowest level, run slower, which tests with small inputs do not notice.
The library never sets XLA flags. They are set here, before JAX starts its backend, for this
process and the ones it starts (notebooks, subprocesses); a value already in `XLA_FLAGS` is
kept. Every module's compiled programs are dropped when the
module is done, so they do not pile up in a test worker.

Tracing keeps millions of Python objects alive (jaxprs, tracers, their source information),
and with CPython's default thresholds the cyclic garbage collector scans all of them again
and again (7 030 collections, 11 s, in `test_precision` and `test_gradients_composition`).
The tests collect rarely (at `jointdyn._compile.TRACING_GC_THRESHOLDS`: 155 collections,
0.9 s, the same peak memory; those two modules 65–71 → 55–61 s, the whole suite 9:06–9:10
→ 8:18–8:23 in paired runs) and fully at the end of each module, with its compiled programs.

Under pytest-xdist each worker runs on its own share of the CPUs (`_pin_xdist_worker`).

Oracles built once and run once (rules-off autodiff, Lagrange's equations, finite differences,
`vmap` references) are not compiled: `numpy_eval.py` evaluates their jaxprs with NumPy. So are
the library's own programs where a test checks their values (`numpy_call`, `numpy_jit`): the
arithmetic under test is the traced program's, which XLA compiles as it is, and compiling each
program once to run it once was most of the suite's time. What is about compiling stays
compiled: `jit` and `jd.jit`, `jd.batched` and `batch_last`, `lax.scan` rollouts, dtypes
under `jit`, retrace counts, several devices, the rules under `jit`/`vmap`
(`test_gradients_composition.py`), the notebooks, the demo and the README's code.
"""

import gc
import itertools
import os


def _pin_xdist_worker() -> None:
    """Give each pytest-xdist worker its own share of the CPUs (worker `i` of `n` takes every
    `n`-th CPU from the `i`-th), before JAX starts: XLA then sizes its thread pools and its
    parallel code generation to that share, and the workers' compiles no longer compete for
    (and migrate between) the same cores. With 2 workers on 2 cores, 5 test modules in four
    alternating pairs: 3-16 % less wall time and 4-17 % fewer CPU-seconds, every pair; the
    whole suite 25:28 -> 20:41, 20 % fewer CPU-seconds (benchmarks/NOTES.md, twenty-sixth
    session). Off with `JOINTDYN_TEST_NO_PINNING=1`, and
    when there are fewer CPUs than workers or no `os.sched_setaffinity` (macOS)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if (
        os.environ.get("JOINTDYN_TEST_NO_PINNING")
        or not worker.startswith("gw")
        or count < 2
        or not hasattr(os, "sched_setaffinity")
    ):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= count:
        os.sched_setaffinity(0, cpus[int(worker[2:]) % count :: count])


_pin_xdist_worker()

# Importing jointdyn does not start JAX's backend, so the flags still take effect after it.
from jointdyn._compile import TRACING_GC_THRESHOLDS, xla_flags  # noqa: E402

# `xla_flags()` asks a fresh process which of jointdyn's options this XLA knows (an unknown
# flag in XLA_FLAGS aborts): once per session, in the first pytest process (xdist's
# controller), whose environment the workers and notebook kernels inherit.
if "JOINTDYN_TEST_XLA_FLAGS" not in os.environ:
    os.environ["JOINTDYN_TEST_XLA_FLAGS"] = xla_flags()
for _flag in ["--xla_backend_optimization_level=0", *os.environ["JOINTDYN_TEST_XLA_FLAGS"].split()]:
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

# Tests only: the library itself never flips this flag.
jax.config.update("jax_enable_x64", True)

# For the whole test process, the thresholds jointdyn traces with (CPython's default:
# `(700, 10, 10)`): they also cover JAX's transpositions and the tests' own code.
gc.set_threshold(*TRACING_GC_THRESHOLDS)


# The longest files first (seconds per file on one worker, 2026-11-30), so that the two
# workers of `--dist loadfile` end together: xdist's default order (files with the most tests
# first) handed out the notebooks, one test each, at the end, and one worker ran notebook 04
# (a minute) while the other had finished (42 s apart). Files not listed follow, the ones with
# the most tests first; a stale order costs only balance.
_LONGEST_FIRST = (
    "tests/test_gradients.py",  # 64 s
    "tests/test_batch_last.py",  # 59
    "tests/test_gradients_composition.py",  # 58
    "tests/test_step_derivatives.py",  # 46
    "tests/test_jit.py",  # 42
    "notebooks/04_trajectory_optimisation.ipynb",  # 41
    "tests/test_derivatives.py",  # 40
    "tests/test_dynamics.py",  # 39
    "tests/test_batching.py",  # 36
    "tests/test_joint_transforms.py",  # 33
    "tests/test_optimal_control.py",  # 31
    "tests/test_mujoco.py",  # 29
    "tests/test_simulation.py",  # 28
    "tests/test_reduced.py",  # 26
    "notebooks/02_rollouts.ipynb",  # 23
    "notebooks/01_quickstart.ipynb",  # 22
    "tests/test_demo.py",  # 22
    "tests/test_pinocchio.py",  # 20
    "tests/test_joints.py",  # 18
    "tests/test_scan.py",  # 17
    "tests/test_model_checks.py",  # 16
    "tests/test_model.py",  # 16
    "notebooks/03_identification.ipynb",  # 15
    "tests/test_lagrange.py",  # 15
    "tests/test_readme.py",  # 13
    "tests/test_precision.py",  # 13
    "tests/test_packed.py",  # 13
    "tests/test_spatial.py",  # 12
    "tests/test_inputs.py",  # 12
    "tests/test_armature.py",  # 11
    "tests/test_lie_derivatives.py",  # 11
    "tests/test_regressor.py",  # 11
    "tests/test_velocity_bounds.py",  # 10
)


def pytest_configure(config):
    """xdist keeps the collection's order of files (`pytest_collection_modifyitems` below)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """Files in `_LONGEST_FIRST`'s order, then the others by number of tests (most first);
    the tests of a file keep their order."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    rank = {name: k for k, name in enumerate(_LONGEST_FIRST)}
    order = sorted(files, key=lambda f: (rank.get(f, len(rank)), -len(files[f])))
    items[:] = [item for f in order for item in files[f]]


@pytest.fixture
def getkey():
    """A fresh PRNG key per call, deterministic within a test (seeds 0, 1, 2, ...)."""
    seeds = itertools.count()

    def _getkey():
        return jr.PRNGKey(next(seeds))

    return _getkey


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs():
    """`jax.clear_caches()` after each module: its executables (hundreds of MB for the
    gradient tests) would otherwise stay alive in the worker until the session ends; then a
    full garbage collection (the thresholds above make the automatic ones rare)."""
    yield
    jax.clear_caches()
    gc.collect()
