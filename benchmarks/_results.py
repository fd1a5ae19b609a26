"""What a run of `run.py` is set to and what it collects.

- `Settings`: the run's options, as `run.py` parses them (a worker process gets them as JSON);
- `empty_results()`: the results dict that the measurements fill and `_tables.render` reads;
- `record(res, key, item)` adds one result; in a worker process (`stream_to_parent()` called)
  it also prints the record on stdout, prefixed with `RECORD_PREFIX`, for the parent to collect;
- `log(msg)`: progress, printed at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

RECORD_PREFIX = "@@record "
WORKER = False  # True in a worker: records also go to stdout for the parent


@dataclass
class Settings:
    """The options of a run (`run.py --help`)."""

    robots: list[str]
    batches: list[int]
    dtypes: list[str]
    algorithms: list[str]
    repeats: int
    budget_s: float
    threads: int
    derivatives: bool
    deriv_modes: list[str]
    deriv_batches: list[int]
    deriv_budget_s: float
    mjx: bool
    quick: bool
    impl: str = "vmap"
    compiler_options: bool = True
    cold_repeats: int = 3


def log(msg: str) -> None:
    print(msg, flush=True)


def stream_to_parent() -> None:
    """In a worker process: every later `record` also goes to stdout for the parent."""
    global WORKER
    WORKER = True


def record(res: dict, key: str, item) -> None:
    """Add `item` to `res[key]`: a list, or a dict when `item` is `(name, value)`."""
    if isinstance(res[key], dict):
        res[key][item[0]] = item[1]
    else:
        res[key].append(item)
    if WORKER:
        print(RECORD_PREFIX + json.dumps({"key": key, "item": item}, default=str), flush=True)


def empty_results() -> dict[str, Any]:
    return {
        "robots": {},
        "pin_single": {},
        "latency": {},
        "rows": [],
        "derivatives": [],
        "mjx": [],
        "cold_compile": [],
    }
