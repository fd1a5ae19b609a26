"""Models shipped with jointdyn (`jointdyn/models/*.urdf`), loaded by name.

| name | joints | nq / nv |
|---|---|---|
| `double_pendulum` | 2 revolute about y | 2 / 2 |
| `cartpole` | prismatic cart along x, revolute pole about y | 2 / 2 |
| `arm7` | 7 revolute (limits, damping, friction), gripper and tool frames | 7 / 7 |
| `quadruped` | floating trunk, 4 legs × 3 revolute, feet frames | 19 / 18 |
| `humanoid` | floating torso, legs 2 × 6, arms 2 × 4, neck 1, sole/hand/camera frames | 28 / 27 |
"""

from __future__ import annotations

import importlib.resources

from ._model import Model
from ._urdf import load_urdf

# name → floating base
_MODELS: dict[str, bool] = {
    "double_pendulum": False,
    "cartpole": False,
    "arm7": False,
    "quadruped": True,
    "humanoid": True,
}


def list_models() -> tuple[str, ...]:
    """Names of the bundled models, for `load_model`."""
    return tuple(_MODELS)


def load_model(name: str) -> Model:
    """Load bundled model `name` (floating base for `quadruped` and `humanoid`).

    **Raises:** `ValueError` listing the bundled names when `name` is not one of them.
    """
    if name not in _MODELS:
        raise ValueError(f"no bundled model {name!r}; bundled models are {list_models()}")
    text = importlib.resources.files("jointdyn").joinpath("models", f"{name}.urdf").read_text()
    return load_urdf(text, floating_base=_MODELS[name])
