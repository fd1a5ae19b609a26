"""Robots of example-robot-data (installed with Pinocchio) and the maps between our coordinates
and Pinocchio's, for tests that compare the two.

`from robots import ROBOTS, robot_path` (tests/ is on `sys.path` under pytest's default import
mode). `ROBOTS[name] = (path relative to ROBOTS_DIR, floating_base)`.

Pinocchio (`pin`) and `example-robot-data` are test dependencies (`pip install -e ".[test]"`):
a missing one, or a missing robot file, is an error, not a skip, so that no comparison with
Pinocchio can pass by not running.

Coordinates differ in two ways:

- **Joint order.** We number bodies depth-first with children in document order (DESIGN.md);
  Pinocchio (through urdfdom) visits children sorted by joint name. The maps below match
  joints by name.
- **Free joints.** Ours: `q = [qw, qx, qy, qz, x, y, z]`, `v = [w; ṗ]` in the world (F) frame.
  Pinocchio's free flyer: `q = [x, y, z, qx, qy, qz, qw]`, `v = [Rᵀ ṗ; Rᵀ w]` in the body frame.

Continuous joints are `[cos θ, sin θ]` in both.
"""

from pathlib import Path

import numpy as np
import pinocchio


def _robots_dir() -> Path:
    # .../cmeel.prefix/lib/python3.X/site-packages/pinocchio/__init__.py → .../cmeel.prefix
    return Path(pinocchio.__file__).parents[4] / "share" / "example-robot-data" / "robots"


ROBOTS_DIR = _robots_dir()

ROBOTS: dict[str, tuple[str, bool]] = {
    "panda": ("panda_description/urdf/panda.urdf", False),
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "anymal": ("anymal_b_simple_description/robots/anymal.urdf", True),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
    "allegro": ("allegro_hand_description/urdf/allegro_right_hand.urdf", False),
    "g1": ("g1_description/urdf/g1_29dof_rev_1_0.urdf", True),
}


def robot_path(rel: str) -> str:
    """Absolute path of a file of example-robot-data (which must be installed)."""
    path = ROBOTS_DIR / rel
    assert path.is_file(), f"example-robot-data file {path} is missing: pip install -e '.[test]'"
    return str(path)


def load_jointdyn(name: str):
    """Our model of `ROBOTS[name]` (loading emits the mimic warning for panda's finger)."""
    import warnings

    import jointdyn as jd

    rel, floating = ROBOTS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return jd.load_urdf(robot_path(rel), floating_base=floating)


def load_pinocchio(name: str):
    """Pinocchio's model of `ROBOTS[name]` (with a free flyer when it is floating)."""
    pin = pinocchio
    rel, floating = ROBOTS[name]
    path = robot_path(rel)
    if floating:
        return pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())
    return pin.buildModelFromUrdf(path)


def _free_rotation(model, q, name) -> np.ndarray:
    from jointdyn._spatial import quat_to_rotmat

    return np.asarray(quat_to_rotmat(np.asarray(q)[model.q_slice(name)][:4]))


def q_to_pinocchio(model, pmodel, q) -> np.ndarray:
    """Pinocchio's configuration equal to our `q`."""
    import jointdyn as jd

    q = np.asarray(q)
    out = np.zeros(pmodel.nq)
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        qj = q[model.q_slice(name)]
        if isinstance(joint, jd.Free):
            qj = np.concatenate([qj[4:], qj[1:4], qj[:1]])
        pj = pmodel.joints[pmodel.getJointId(name)]
        out[pj.idx_q : pj.idx_q + pj.nq] = qj
    return out


def v_to_pinocchio_matrix(model, pmodel, q) -> np.ndarray:
    """`T` (pin nv × our nv) with `v_pin = T v`; forces map back as `tau = Tᵀ tau_pin`."""
    import jointdyn as jd

    T = np.zeros((pmodel.nv, model.nv))
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        s = model.v_slice(name)
        pj = pmodel.joints[pmodel.getJointId(name)]
        block = np.eye(joint.nv)
        if isinstance(joint, jd.Free):
            Rt = _free_rotation(model, q, name).T
            block = np.block([[np.zeros((3, 3)), Rt], [Rt, np.zeros((3, 3))]])
        T[pj.idx_v : pj.idx_v + pj.nv, s] = block
    return T


def vdot_to_pinocchio(model, pmodel, q, v, vdot) -> np.ndarray:
    """Pinocchio's acceleration for our `(q, v, vdot)`: `T vdot + Ṫ v`.

    For a free joint `ẇ_B = Rᵀ ẇ` and `d/dt (Rᵀ ṗ) = Rᵀ p̈ − w_B × (Rᵀ ṗ)`; other joints: `vdot`.
    """
    import jointdyn as jd

    T = v_to_pinocchio_matrix(model, pmodel, q)
    a = T @ np.asarray(vdot)
    v_pin = T @ np.asarray(v)
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        if isinstance(joint, jd.Free):
            i = pmodel.joints[pmodel.getJointId(name)].idx_v
            a[i : i + 3] -= np.cross(v_pin[i + 3 : i + 6], v_pin[i : i + 3])
    return a
