"""MuJoCo models: `load_mjcf`, `from_mujoco`, `qpos`/`qvel` conversion and contact points.

MuJoCo's own compiler (`pip install "jointdyn[mujoco]"`) resolves MJCF (default classes,
includes, compiler options, `fromto`, inertia from geoms, angles in degrees) into an `MjModel`;
`from_mujoco` converts that compiled model, so whatever MuJoCo loads is read the way MuJoCo
reads it. Importing jointdyn never imports `mujoco`.

| MuJoCo | jointdyn |
|---|---|
| `hinge` | `Revolute(axis)`; `q` = `qpos` (the angle from `ref` is put in `X_PF`) |
| `slide` | `Prismatic(axis)`; `q` = `qpos` |
| `ball` | `Ball`; `q` = `qpos` (`[w, x, y, z]`), `v = R qvel` (`w_FM_F`, MuJoCo: child axes) |
| `free` | `Free`; `q = [qw, qx, qy, qz, x, y, z]`, `v = [R w_body; v_world]` |
| several joints in one body | `Composite` of them (one jointdyn joint) |
| body with no joint | welded: inertia merged into the nearest moving ancestor, kept as a frame |
| body `pos`/`quat`, joint `pos`/`axis` | `X_PF`, `X_BM` |
| `body_mass`, `ipos`, `iquat`, diagonal `inertia` | `SpatialInertia(m, ipos, R diag(I) Rᵀ)` |
| `damping` | `damping` |
| `armature` | `armature` (rotor inertia added to the mass matrix) |
| `frictionloss` (hinge, slide) | `friction` (Coulomb `−μ sign(v)`; MuJoCo: a soft constraint) |
| `stiffness`, `springref` | `spring_stiffness`, `spring_reference` |
| `range` (limited hinge, slide) | `position_lower`, `position_upper` (not enforced) |
| `qpos0` (`ref`, a free body's pose) | `default_position` |
| `opt.gravity` (0 with `<flag gravity="disable">`) | `gravity` |
| bodies, sites | frames, under their names |

Joints come in MuJoCo's order: `q` and `v` list them as `qpos` and `qvel` do, with the same
sizes, so `mj_model.jnt_qposadr` and `jnt_dofadr` index `q` and `v` too, and only the
coordinates inside a free or ball joint differ (`from_mujoco_state`, `to_mujoco_state`).

Names follow MuJoCo's; unnamed bodies, joints and sites are named `body{id}`, `joint{id}`,
`site{id}` with MuJoCo's ids. A jointdyn joint made of several MuJoCo joints is named by
theirs joined with `+`. A site named like a body becomes the frame `site:{name}`.

A body's joints move it one after the other, each about its own anchor (MuJoCo's
`mj_kinematics`). They make one `Composite` when the fixed offsets between them can be moved
past the later joints (equal anchors, as in every model seen: a hip's three hinges share
their `pos`; slides have no anchor); otherwise the body is split into a chain of massless
bodies `{body}_part{k}` (named frames), one per group of joints, which has the same dynamics.

Flags that switch a force off in MuJoCo switch it off here: `gravity`, `spring`, `damper`,
`frictionloss` and `constraint` (which holds frictionloss). Left out, with one `UserWarning`
naming every element: actuators, tendons, equality constraints, gravity
compensation, fluid forces, flexes, plugins, the cone limit of a ball joint and the
frictionloss of ball and free joints. Joint limits load as position limits, not enforced;
MuJoCo's contact model is not loaded: `contact_points_from_mujoco` turns the colliding
spheres, capsules and boxes into points for `GroundContact`; `opt.timestep` is not kept
(pass it to `step` or `rollout`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._composite import Composite
from ._joint import AbstractJoint
from ._joints_rotation import Ball, Free
from ._joints_vector import Prismatic, Revolute
from ._model import WORLD, Model, ModelBuilder
from ._spatial import SpatialInertia, quat_normalize, quat_to_rotmat
from ._urdf import _Body, _Inertia, _transform

INSTALL_HINT = 'pip install "jointdyn[mujoco]"'

# mjtJoint
_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_TOL = 1e-9


def _import_mujoco() -> Any:
    try:
        import mujoco
    except ImportError as e:
        raise ImportError(
            f"loading MuJoCo models needs the `mujoco` package: {INSTALL_HINT}"
        ) from e
    return mujoco


# --------------------------------------------------------------------------------------------
# entry points


def load_mjcf(path_or_xml: str | os.PathLike) -> Model:
    """Compile an MJCF file or string with MuJoCo and convert it (`from_mujoco`).

    **Arguments:** `path_or_xml`: a file path, or the MJCF text itself (a string starting with
    `<`). Assets and `<include>` files are found relative to the file (for text, relative to
    the working directory).

    **Returns:** the `Model` (conventions in this module's docstring).

    **Raises:** `ImportError` saying `pip install "jointdyn[mujoco]"` without MuJoCo;
    `ValueError` with MuJoCo's compiler message (element and line) for invalid MJCF.
    """
    mujoco = _import_mujoco()
    is_text = isinstance(path_or_xml, str) and path_or_xml.lstrip().startswith("<")
    try:
        if is_text:
            mj_model = mujoco.MjModel.from_xml_string(path_or_xml)
        else:
            mj_model = mujoco.MjModel.from_xml_path(os.fspath(path_or_xml))
    except ValueError as e:
        raise ValueError(f"MuJoCo could not compile the MJCF: {e}") from None
    return from_mujoco(mj_model)


def from_mujoco(mj_model: Any) -> Model:
    """A `Model` with the dynamics of a compiled MuJoCo model (`mujoco.MjModel`).

    Joints in MuJoCo's order (`q`, `v` as `qpos`, `qvel`, up to the coordinates inside free
    and ball joints: see `from_mujoco_state`); the mapping of every element, and what is left
    out with a warning, is in this module's docstring.

    With contacts and constraints off, `crba`, `rnea` and `forward_dynamics` of this model
    equal MuJoCo's `mj_fullM`, `mj_inverse` and `qacc` in the converted coordinates (tests:
    `tests/test_mujoco.py`, to 1e-9).
    """
    mujoco = _import_mujoco()
    m = mj_model
    flags = int(m.opt.disableflags)
    off = lambda name: bool(flags & int(getattr(mujoco.mjtDisableBit, name)))  # noqa: E731
    switches = dict(
        spring=not off("mjDSBL_SPRING"),
        damper=not off("mjDSBL_DAMPER"),
        frictionloss=not (off("mjDSBL_FRICTIONLOSS") or off("mjDSBL_CONSTRAINT")),
    )
    names = _Names(m)
    left_out = _left_out(m, names, switches["frictionloss"])
    gravity = np.zeros(3) if off("mjDSBL_GRAVITY") else np.array(m.opt.gravity, float)

    bodies: list[_Body] = []
    by_name: dict[str, _Body] = {}
    frames: list[tuple[str, str, np.ndarray]] = []
    # MuJoCo body id -> (jointdyn body holding it, or WORLD; its pose on that body)
    owner: dict[int, tuple[str, np.ndarray]] = {0: (WORLD, np.eye(4))}
    for b in range(1, m.nbody):
        name = names.body[b]
        parent, X_OP = owner[int(m.body_parentid[b])]
        X_OB = X_OP @ _pose(m.body_pos[b], m.body_quat[b])
        inertia = _Inertia(
            float(m.body_mass[b]),
            np.array(m.body_ipos[b], float),
            _rotation(m.body_iquat[b]) @ np.diag(m.body_inertia[b]) @ _rotation(m.body_iquat[b]).T,
        )
        joints = list(range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]))
        if not joints:  # welded to its parent: merged, kept as a frame
            if parent != WORLD:
                by_name[parent].inertia = by_name[parent].inertia + inertia.transform(X_OB)
            owner[b] = (parent, X_OB)
            frames.append((name, parent, X_OB))
            continue
        groups = _groups(m, joints, X_OB, names, switches)
        for k, g in enumerate(groups):
            last = k == len(groups) - 1
            body = _Body(
                name if last else names.unique(f"{name}_part{k}"),
                parent,
                g.joint(),
                "+".join(g.names),
                g.X_PF,
                np.linalg.inv(g.C) if last else np.eye(4),
                inertia if last else _Inertia(0.0, np.zeros(3), np.zeros((3, 3))),
            )
            bodies.append(body)
            by_name[body.name] = body
            parent = body.name
        owner[b] = (name, np.eye(4))
    if not bodies:
        raise ValueError(
            "the MuJoCo model has no joint: nothing moves (a jointdyn Model needs at least one "
            "moving body)"
        )
    for s in range(m.nsite):
        parent, X_OP = owner[int(m.site_bodyid[s])]
        frames.append((names.site[s], parent, X_OP @ _pose(m.site_pos[s], m.site_quat[s])))

    if left_out:
        warnings.warn(
            "from_mujoco: left out (jointdyn cannot represent them yet): " + "; ".join(left_out),
            UserWarning,
            stacklevel=2,
        )
    builder = ModelBuilder(gravity=gravity)
    for body in bodies:
        builder.add_body(
            body.name,
            SpatialInertia(body.inertia.mass, body.inertia.com, body.inertia.I),
            body.parent,
            body.joint,
            body.joint_name,
            _transform(body.X_PF),
            _transform(body.X_BM),
        )
    for name, parent, X in frames:
        builder.add_frame(name, parent, _transform(X))
    # MuJoCo accepts some models whose mass matrix is singular (kept regular by its constraint
    # solver's regularisation): load them (kinematics work) and say so, as load_urdf does.
    return builder.build(singular="warn")


def contact_points_from_mujoco(
    mj_model: Any, model: Model
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The collision geoms of a MuJoCo model as contact spheres `(bodies, positions, radii)`
    for `GroundContact`: `jd.GroundContact(model, *jd.contact_points_from_mujoco(mj_model,
    model), stiffness=...)`, with `model = jd.from_mujoco(mj_model)`.

    A `sphere` gives its centre and radius, a `capsule` a sphere at each end of its segment
    (local z, half-length `size[1]`), a `box` its 8 corners (radius 0). Geoms that collide
    with nothing (`contype = conaffinity = 0`, visual geoms) and geoms on the world or on
    bodies welded to it are skipped; other shapes (cylinders, ellipsoids, meshes, planes on
    moving bodies) are not contact points, and a `UserWarning` counts them. Positions are in
    the frames of the jointdyn bodies that carry the geoms (welded bodies merged).
    """
    m = mj_model
    names = _Names(m)
    frames, parents = model.topology.frame_names, model.topology.frame_parents
    bodies, positions, radii, others = [], [], [], 0
    sphere, capsule, box = 2, 3, 6  # mjtGeom
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
    for g in range(m.ngeom):
        if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue
        name = names.body[int(m.geom_bodyid[g])]
        if name == WORLD:
            continue
        if name not in frames:
            raise ValueError(f"body {name!r} of the MuJoCo model is not a frame of `model`")
        f = frames.index(name)
        if parents[f] < 0:
            continue  # welded to the world: never moves
        kind, size = int(m.geom_type[g]), np.asarray(m.geom_size[g], float)
        if kind == sphere:
            local, r = np.zeros((1, 3)), size[0]
        elif kind == capsule:
            local, r = np.array([[0, 0, -size[1]], [0, 0, size[1]]]), size[0]
        elif kind == box:
            local, r = corners * size, 0.0
        else:
            others += 1
            continue
        X_FG = _pose(m.geom_pos[g], m.geom_quat[g])
        R, p = np.asarray(model.X_BF.R[f]), np.asarray(model.X_BF.p[f])
        for x in local:
            bodies.append(model.topology.body_names[parents[f]])
            positions.append(R @ (X_FG[:3, :3] @ x + X_FG[:3, 3]) + p)
            radii.append(r)
    if others:
        warnings.warn(
            f"{others} colliding geom(s) that are not spheres, capsules or boxes are not "
            "contact points",
            UserWarning,
            stacklevel=2,
        )
    return bodies, np.reshape(np.asarray(positions, float), (-1, 3)), np.asarray(radii, float)


# --------------------------------------------------------------------------------------------
# state conversion


def from_mujoco_state(
    model: Model, qpos: Float[Array, " nq"], qvel: Float[Array, " nv"]
) -> tuple[Float[Array, " nq"], Float[Array, " nv"]]:
    """MuJoCo's `(qpos, qvel)` as jointdyn's `(q, v)` for a model made by `from_mujoco`.

    Joint by joint, in order: hinge and slide coordinates are equal; a free joint's

        q = [qw, qx, qy, qz, x, y, z]        from  qpos = [x, y, z, qw, qx, qy, qz]
        v = [R w_body; v_world]              from  qvel = [v_world; w_body]

    (`R` the rotation of the normalised quaternion, `w` the angular velocity, `v_world` the
    velocity of the body's origin), and a ball joint's `q = qpos`, `v = R qvel` (MuJoCo's
    angular velocity is in the child's axes, jointdyn's `w_FM_F` in the parent-side frame).

    The map of `qvel` is orthogonal and depends on `qpos` only, so it also converts
    accelerations (`qacc`: `Ṙ w_body = R (w_body × w_body) = 0`) and generalized forces
    (`qfrc_*`, which pair with `qvel` in power): `v̇ = from_mujoco_state(model, qpos, qacc)[1]`.
    One sample; batch with `jax.vmap`.
    """
    qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
    _check(model, qpos, qvel, "qpos", "qvel")
    q, v = [], []
    for kind, qa, va, nq, nv in _parts(model):
        qj, vj = qpos[qa : qa + nq], qvel[va : va + nv]
        if kind == "free":
            R = quat_to_rotmat(quat_normalize(qj[3:]))
            qj = jnp.concatenate([qj[3:], qj[:3]])
            vj = jnp.concatenate([R @ vj[3:], vj[:3]])
        elif kind == "ball":
            vj = quat_to_rotmat(quat_normalize(qj)) @ vj
        q.append(qj)
        v.append(vj)
    return jnp.concatenate(q), jnp.concatenate(v)


def to_mujoco_state(
    model: Model, q: Float[Array, " nq"], v: Float[Array, " nv"]
) -> tuple[Float[Array, " nq"], Float[Array, " nv"]]:
    """jointdyn's `(q, v)` as MuJoCo's `(qpos, qvel)`: the inverse of `from_mujoco_state`
    (`qvel = Rᵀ v` for the rotations); converts `v̇` to `qacc` and `tau` to `qfrc_*` too."""
    q, v = jnp.asarray(q), jnp.asarray(v)
    _check(model, q, v, "q", "v")
    qpos, qvel = [], []
    for kind, qa, va, nq, nv in _parts(model):
        qj, vj = q[qa : qa + nq], v[va : va + nv]
        if kind == "free":
            R = quat_to_rotmat(quat_normalize(qj[:4]))
            qj = jnp.concatenate([qj[4:], qj[:4]])
            vj = jnp.concatenate([vj[3:], R.T @ vj[:3]])
        elif kind == "ball":
            vj = quat_to_rotmat(quat_normalize(qj)).T @ vj
        qpos.append(qj)
        qvel.append(vj)
    return jnp.concatenate(qpos), jnp.concatenate(qvel)


def _check(model: Model, a: Array, b: Array, na: str, nb: str) -> None:
    if a.shape != (model.nq,) or b.shape != (model.nv,):
        raise ValueError(
            f"`{na}` and `{nb}` must have shapes ({model.nq},) and ({model.nv},), got "
            f"{a.shape} and {b.shape} (one sample; batch with jax.vmap)"
        )


def _parts(model: Model) -> list[tuple[str, int, int, int, int]]:
    """(kind, q offset, v offset, nq, nv) of every joint, composites opened."""
    out = []
    for joint, qa, va in zip(
        model.joints, model.topology.q_offsets, model.topology.v_offsets, strict=True
    ):
        for j in joint.joints if isinstance(joint, Composite) else (joint,):
            kind = "free" if isinstance(j, Free) else "ball" if isinstance(j, Ball) else "other"
            out.append((kind, qa, va, j.nq, j.nv))
            qa, va = qa + j.nq, va + j.nv
    return out


# --------------------------------------------------------------------------------------------
# bodies and joints


@dataclasses.dataclass
class _Group:
    """Joints in series that make one jointdyn joint: `X = X_PF · J₁ ⋯ Jₙ · C`."""

    X_PF: np.ndarray
    joints: list[AbstractJoint] = dataclasses.field(default_factory=list)
    names: list[str] = dataclasses.field(default_factory=list)
    C: np.ndarray = dataclasses.field(default_factory=lambda: np.eye(4))

    def joint(self) -> AbstractJoint:
        return self.joints[0] if len(self.joints) == 1 else Composite(self.joints)


def _groups(m: Any, joints: list[int], X_OB: np.ndarray, names: _Names, switches: dict):
    """A body's joints as groups of joints in series (usually one).

    MuJoCo moves the body by each joint in turn about its anchor `p` (body frame so far):
    `T(p) R(a, θ − ref) T(−p)` for a hinge, `T(a (d − ref))` for a slide, `T(p) R(quat) T(−p)`
    for a ball, and a free joint sets the pose in the world. Writing each as
    `pre · J(q) · post` (`R(a, θ − ref) = R(a, −ref) R(a, θ)`), the fixed part `C` between two
    joints moves past the next joint as `C J(q) = J'(q) C` with `J' = C J C⁻¹`: a slide along
    `R_C a`, a hinge about `R_C a` when `C`'s translation is along that axis, a ball when `C`
    is the identity. Where it cannot, a new group (a massless body) starts.
    """
    if m.jnt_type[joints[0]] == _FREE:  # MuJoCo: alone, in a body of the world
        j = joints[0]
        return [_Group(np.eye(4), [_make_joint(m, j, None, switches)], [names.joint[j]])]
    groups: list[_Group] = []
    C = X_OB
    for j in joints:
        kind, p, a = int(m.jnt_type[j]), np.array(m.jnt_pos[j]), np.array(m.jnt_axis[j])
        a = a / np.linalg.norm(a)
        ref = float(m.qpos0[m.jnt_qposadr[j]])
        if kind == _HINGE:
            pre, post = _translation(p) @ _axis_angle(a, -ref), _translation(-p)
        elif kind == _SLIDE:
            pre, post = _translation(-ref * a), np.eye(4)
        else:  # ball
            pre, post = _translation(p), _translation(-p)
        C = C @ pre
        if groups and _passes(C, kind, a):
            g = groups[-1]
        else:
            g = _Group(C)
            groups.append(g)
            C = np.eye(4)
        g.joints.append(_make_joint(m, j, C[:3, :3] @ a, switches))
        g.names.append(names.joint[j])
        C = C @ post
        g.C = C
    return groups


def _passes(C: np.ndarray, kind: int, a: np.ndarray) -> bool:
    """Whether `C J(q) C⁻¹` is a joint of the same kind (see `_groups`)."""
    t = C[:3, 3]
    scale = max(1.0, float(np.abs(t).max()))
    if kind == _SLIDE:
        return True
    if kind == _HINGE:
        return float(np.linalg.norm(np.cross(t, C[:3, :3] @ a))) < _TOL * scale
    return float(np.abs(C - np.eye(4)).max()) < _TOL * scale


def _make_joint(m: Any, j: int, axis: np.ndarray | None, switches: dict) -> AbstractJoint:
    """The jointdyn joint of MuJoCo joint `j` (parameters in jointdyn's coordinates)."""
    kind = int(m.jnt_type[j])
    qa, da = int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])
    nq, nv = {_FREE: (7, 6), _BALL: (4, 3), _SLIDE: (1, 1), _HINGE: (1, 1)}[kind]
    damping = np.array(m.dof_damping[da : da + nv], float) if switches["damper"] else np.zeros(nv)
    armature = np.array(m.dof_armature[da : da + nv], float)
    stiffness = float(m.jnt_stiffness[j]) if switches["spring"] else 0.0
    q0 = np.array(m.qpos0[qa : qa + nq], float)
    qs = np.array(m.qpos_spring[qa : qa + nq], float)
    params: dict[str, Any] = dict(spring_stiffness=stiffness)
    if kind == _FREE:
        swap_q = lambda x: np.concatenate([x[3:], x[:3]])  # noqa: E731
        params |= dict(
            damping=np.concatenate([damping[3:], damping[:3]]),
            armature=np.concatenate([armature[3:], armature[:3]]),
            default_position=swap_q(q0),
            spring_reference=swap_q(qs),
        )
        return Free(**params)
    params |= dict(damping=damping, armature=armature, default_position=q0, spring_reference=qs)
    if kind == _BALL:
        return Ball(**params)
    if switches["frictionloss"]:
        params["friction"] = float(m.dof_frictionloss[da])
    if m.jnt_limited[j]:
        params |= dict(position_lower=m.jnt_range[j, 0], position_upper=m.jnt_range[j, 1])
    return Revolute(axis, **params) if kind == _HINGE else Prismatic(axis, **params)


def _left_out(m: Any, names: _Names, frictionloss: bool) -> list[str]:
    """Every element of the MuJoCo model that the jointdyn model does not represent."""
    out = []

    def listed(what: str, items: list[str]) -> None:
        if items:
            out.append(f"{len(items)} {what}: {', '.join(items)}")

    listed("actuator(s)", [_name(m, "actuator", i) for i in range(m.nu)])
    listed("tendon(s)", [_name(m, "tendon", i) for i in range(m.ntendon)])
    listed("equality constraint(s)", [_name(m, "equality", i) for i in range(m.neq)])
    listed(
        "body(ies) with gravity compensation",
        [names.body[b] for b in np.flatnonzero(np.asarray(m.body_gravcomp))],
    )
    dof_joint = np.asarray(m.dof_jntid)
    rot = [j for j in range(m.njnt) if m.jnt_type[j] in (_FREE, _BALL)]
    listed("ball joint cone limit(s)", [names.joint[j] for j in rot if m.jnt_limited[j]])
    if frictionloss:
        fl = [
            names.joint[j]
            for j in rot
            if np.any(np.asarray(m.dof_frictionloss)[dof_joint == j] != 0)
        ]
        listed("frictionloss of ball/free joint(s)", fl)
    if m.opt.density > 0 or m.opt.viscosity > 0:
        out.append(f"fluid forces (density {m.opt.density}, viscosity {m.opt.viscosity})")
    listed("flex(es)", [_name(m, "flex", i) for i in range(getattr(m, "nflex", 0))])
    if getattr(m, "nplugin", 0):
        out.append(f"{m.nplugin} plugin instance(s)")
    return out


# --------------------------------------------------------------------------------------------
# names


class _Names:
    """Body, joint and site names: MuJoCo's, generated where empty, unique as frame names."""

    def __init__(self, m: Any):
        self.used: set[str] = {WORLD}
        self.body = [WORLD] + [self.unique(_name(m, "body", b)) for b in range(1, m.nbody)]
        self.joint = [_name(m, "joint", j) for j in range(m.njnt)]
        self.site = []
        for s in range(m.nsite):
            name = _name(m, "site", s)
            self.site.append(self.unique(name if name not in self.used else f"site:{name}"))

    def unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _name(m: Any, what: str, i: int) -> str:
    return getattr(m, what)(i).name or f"{what}{i}"


# --------------------------------------------------------------------------------------------
# poses (float64 NumPy)


def _rotation(quat) -> np.ndarray:
    w, x, y, z = np.asarray(quat, float) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _pose(pos, quat) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = _rotation(quat), pos
    return T


def _translation(p) -> np.ndarray:
    T = np.eye(4)
    T[:3, 3] = p
    return T


def _axis_angle(a: np.ndarray, angle: float) -> np.ndarray:
    """`R(a, θ) = cos θ 1 + sin θ [a]× + (1 − cos θ) a aᵀ`."""
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    T = np.eye(4)
    T[:3, :3] = np.cos(angle) * np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * np.outer(a, a)
    return T
