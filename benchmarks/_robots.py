"""The robots of the benchmarks: example-robot-data files (installed with Pinocchio), loaded by
jointdyn and by Pinocchio, with the same random states in both libraries' coordinates.

- `ROBOTS`: the robots by name (panda, ur5, solo12, g1, talos);
- `load_jointdyn(name)`: jointdyn's model alone (what gradients.py and rollout_gradient.py use);
- `load_robot(name, nmax, threads)`: a `Robot` for `run.py`, with both models, Pinocchio's data
  and `ModelPool`, the coordinate map, and `nmax` random states (configurations, velocities,
  torques, accelerations) in jointdyn's and in Pinocchio's coordinates.

The files are found under `$EXAMPLE_ROBOT_DATA_ROBOTS` when set (a copy of the package's
`robots/` folder: what `gpu.sh` uses on a machine without Pinocchio), else where Pinocchio's
wheel installs them. The caller turns on float64 (`jax.config.update("jax_enable_x64", True)`)
before loading: the states are float64.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

try:  # jointdyn's side alone (load_jointdyn) runs without Pinocchio: see ROBOTS_DIR
    import pinocchio as pin
    from _pinocchio import CoordinateMap
except ImportError:  # pragma: no cover - machines without Pinocchio (gpu.sh)
    pin = None
    CoordinateMap = Any

import jointdyn as jd

if os.environ.get("EXAMPLE_ROBOT_DATA_ROBOTS"):
    ROBOTS_DIR = Path(os.environ["EXAMPLE_ROBOT_DATA_ROBOTS"])
elif pin is not None:
    ROBOTS_DIR = Path(pin.__file__).parents[4] / "share" / "example-robot-data" / "robots"
else:
    raise ImportError("set EXAMPLE_ROBOT_DATA_ROBOTS (no Pinocchio here to find the robots)")

# name: (path under ROBOTS_DIR, floating base)
ROBOTS: dict[str, tuple[str, bool]] = {
    "panda": ("panda_description/urdf/panda.urdf", False),
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "g1": ("g1_description/urdf/g1_29dof_rev_1_0.urdf", True),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
}


@dataclass
class Robot:
    """One robot of `ROBOTS` in both libraries, with the states of the run."""

    name: str
    path: str
    floating: bool
    model: Any
    pmodel: Any
    pdata: Any
    pool: Any
    cmap: CoordinateMap
    states: dict[str, np.ndarray] = field(default_factory=dict)  # ours, float64, (Bmax, n)
    pin_states: dict[str, np.ndarray] = field(default_factory=dict)  # Pinocchio's, (n, Bmax) F

    @property
    def nq(self) -> int:
        return self.model.nq

    @property
    def nv(self) -> int:
        return self.model.nv


def load_jointdyn(name: str) -> jd.Model:
    """jointdyn's model of `ROBOTS[name]` from example-robot-data (shared by the scripts)."""
    rel, floating = ROBOTS[name]
    path = ROBOTS_DIR / rel
    if not path.is_file():
        raise FileNotFoundError(f"example-robot-data file {path} is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # panda's mimic finger joint
        return jd.load_urdf(str(path), floating_base=floating)


def load_robot(name: str, nmax: int, threads: int, seed: int = 0) -> Robot:
    rel, floating = ROBOTS[name]
    path = ROBOTS_DIR / rel
    model = load_jointdyn(name)
    if floating:
        pmodel = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    else:
        pmodel = pin.buildModelFromUrdf(str(path))
    if (pmodel.nq, pmodel.nv) != (model.nq, model.nv):
        raise ValueError(
            f"{name}: nq/nv {model.nq}/{model.nv} vs Pinocchio's {pmodel.nq}/{pmodel.nv}"
        )
    cmap = CoordinateMap.build(model, pmodel)
    robot = Robot(name, str(path), floating, model, pmodel, pmodel.createData(), None, cmap)
    robot.pool = pin.ModelPool(pmodel, threads)

    keys = jax.random.split(jax.random.key(seed), nmax)
    q = np.asarray(jax.vmap(model.random_configuration)(keys), dtype=np.float64)
    if not np.all(np.isfinite(q)):
        warnings.warn(f"{name}: non-finite random configuration; using neutral", stacklevel=2)
        q = np.tile(np.asarray(model.neutral(), dtype=np.float64), (nmax, 1))
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(nmax, model.nv))
    tau = rng.normal(size=(nmax, model.nv))
    vdot = rng.normal(size=(nmax, model.nv))
    robot.states = {"q": q, "v": v, "tau": tau, "vdot": vdot}

    def F(x):  # (B, n) → (n, B), column-major as Pinocchio's parallel API wants
        return np.asfortranarray(x.T)

    robot.pin_states = {
        "q": F(cmap.q(q)),
        "v": F(cmap.motion(q, v)),
        "tau": F(cmap.motion(q, tau)),  # T orthogonal: Tᵀ tau_pin = tau ⇔ tau_pin = T tau
        "a": F(cmap.acceleration(q, v, vdot)),
    }
    return robot


# ---------------------------------------------------------------------------------------------
# jointdyn
