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

from ._contact import GroundContact, contact_points_from_urdf
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
    return load_urdf(_urdf_text(name), floating_base=_MODELS[name])


def load_contact(name: str, model: Model | None = None, **params) -> GroundContact:
    """The ground contact of bundled model `name` from its URDF's `<collision>` spheres (the
    feet of `quadruped` and `humanoid`), with `GroundContact`'s force-law `params`.

    **Raises:** `ValueError` for an unknown name or a model without contact spheres.
    """
    model = load_model(name) if model is None else model
    return GroundContact(model, *contact_points_from_urdf(_urdf_text(name), model), **params)


def _urdf_text(name: str) -> str:
    if name not in _MODELS:
        raise ValueError(f"no bundled model {name!r}; bundled models are {list_models()}")
    return importlib.resources.files("jointdyn").joinpath("models", f"{name}.urdf").read_text()
