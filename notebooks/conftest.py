"""XLA flags for the notebook kernels (nbmake starts one per notebook; it inherits this
process's environment, and `tests/conftest.py` may have set `XLA_FLAGS` in it already).

Every kernel compiles with jointdyn's XLA:CPU options (`jd.compiler_options()`, as the tests
do, as `XLA_FLAGS` from `jointdyn._compile.xla_flags()`). The backend (LLVM) optimisation
level is chosen per notebook: level 0 (as the tests) where the notebook mostly compiles,
XLA's default where it mostly runs large batches. Measured on the 2-core machine, each
notebook's cells run as one script on one core (2026-11-29): 02 (2 048 × 500 RK4 steps) 23 s
at the default level against 30 s at level 0; 04 (its 1 000 problems now in chunks of 8, which
compile more than they run) 38 s at level 0 against 50 s at the default; 01 20 s against 37 s,
03 14 s at level 0.
"""

import os

from jointdyn._compile import xla_flags

_LEVEL_0 = "--xla_backend_optimization_level=0"
#: Notebooks that mostly run large batches: their kernels compile at XLA's default level.
_AT_DEFAULT_LEVEL = {"02_rollouts.ipynb"}
_saved: dict[str, str | None] = {}


def pytest_runtest_setup(item):
    flags = os.environ.get("XLA_FLAGS")
    _saved[item.nodeid] = flags
    flags = (flags or "").split()
    if "JOINTDYN_TEST_XLA_FLAGS" not in os.environ:  # set by tests/conftest.py in a full run
        os.environ["JOINTDYN_TEST_XLA_FLAGS"] = xla_flags()
    for flag in os.environ["JOINTDYN_TEST_XLA_FLAGS"].split():
        if not any(f.startswith(flag.split("=")[0] + "=") for f in flags):
            flags.append(flag)
    if item.path.name in _AT_DEFAULT_LEVEL:
        flags = [f for f in flags if f != _LEVEL_0]
    elif not any(f.startswith("--xla_backend_optimization_level=") for f in flags):
        flags.append(_LEVEL_0)
    os.environ["XLA_FLAGS"] = " ".join(flags)


def pytest_runtest_teardown(item):
    flags = _saved.pop(item.nodeid, None)
    if flags is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = flags
