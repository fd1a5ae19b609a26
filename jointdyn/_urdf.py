"""`load_urdf`: a `Model` from a URDF file or string.

Conventions (the "Model" section of DESIGN.md):

- A joint's `<origin rpy xyz>` is `X_PF`, the pose of the joint frame in the parent link; the
  child link's frame is the joint frame (`X_BM = identity`), so at zero joint coordinates the
  child link sits at the joint origin. `rpy` means `R = Rz(yaw) Ry(pitch) Rx(roll)`.
  (A planar joint whose normal is not z turns F and M alike, `X_PF = X_PJ X_JF`, `X_BM = X_JF`,
  so that the child link still sits at the joint origin, with its own axes, at q = 0.)
- `<inertial>`: `<origin xyz>` is the centre of mass and `<origin rpy>` the axes in which
  `<inertia>` is given, so the body holds `SpatialInertia(mass, xyz, R I Rᵀ)`. No `<inertial>`
  means a massless link.
- Joint types: `revolute` → `Revolute`, `continuous` → `RevoluteUnbounded` (`q = [cos θ, sin θ]`,
  as Pinocchio), `prismatic` → `Prismatic`, `floating` → `Free`, `planar` → `Planar("xy")` in a
  joint frame turned so that its z is the URDF axis (the plane normal), and `fixed` → merged.
  `<axis>` defaults to `(1, 0, 0)`; `<limit>` gives position (default 0, as the URDF spec),
  velocity and effort limits (default ±inf), a missing `<limit>` means no limits; `<dynamics>`
  gives viscous damping and Coulomb friction.
- Topology: the root link is the one link that is no joint's child. Bodies are numbered
  depth-first from it, children in document order. The root is welded to the world (and kept
  as a world frame) or, with `floating_base=True`, a body on a `Free` joint named `root_joint`.
  A root link named `world` is the world itself.
- A fixed joint makes no body: the child link's inertia is added to the nearest moving
  ancestor body and the link stays a frame on that body. Fixed to the world, the inertia is
  dropped (as Pinocchio does). Every link is a frame of the model, under its own name.
- `<mimic>` loads as an independent joint (Pinocchio's default), with one `UserWarning` per
  model listing every mimic joint.
  Visual, collision, material, gazebo, transmission and other non-dynamic elements are skipped.

Malformed input raises `ValueError` naming the link or joint at fault. Rotational inertias are
checked once per body, welded links included (some real URDFs have link inertias that are valid
only in sum); inertias dropped with the world are not checked.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable

import numpy as np

from ._joint import AbstractJoint
from ._joints_rotation import Free, RevoluteUnbounded
from ._joints_vector import Planar, Prismatic, Revolute
from ._model import WORLD, Model, ModelBuilder, check_rotational_inertia
from ._spatial import SpatialInertia, Transform

_INERTIA_ATTRS = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")


@dataclasses.dataclass
class _Inertia:
    """Mass, centre of mass and rotational inertia about it, in float64 (merged exactly)."""

    mass: float
    com: np.ndarray
    I: np.ndarray

    def transform(self, T: np.ndarray) -> _Inertia:
        """The same inertia expressed in the frame in which `T` (4×4) places this one."""
        R = T[:3, :3]
        return _Inertia(self.mass, R @ self.com + T[:3, 3], R @ self.I @ R.T)

    def __add__(self, other: _Inertia) -> _Inertia:
        """Two rigidly joined bodies: `I_C = Σ I_k + m_k (|d_k|² 1 − d_k d_kᵀ)`, `d_k = c_k − c`."""
        m = self.mass + other.mass
        c = (self.mass * self.com + other.mass * other.com) / m if m > 0 else np.zeros(3)
        I = np.zeros((3, 3))
        for part in (self, other):
            d = part.com - c
            I += part.I + part.mass * (d @ d * np.eye(3) - np.outer(d, d))
        return _Inertia(m, c, I)


@dataclasses.dataclass
class _Joint:
    name: str
    parent: str
    child: str
    X_PJ: np.ndarray  # 4×4 pose of the joint frame in the parent link
    joint: AbstractJoint | None  # None for a fixed joint
    X_JF: np.ndarray  # 4×4 pose of the jointdyn F frame in the URDF joint frame (planar only)
    mimic: str | None = None  # the joint it mimics (moving joints only)


@dataclasses.dataclass
class _Body:
    name: str
    parent: str
    joint: AbstractJoint
    joint_name: str
    X_PF: np.ndarray
    X_BM: np.ndarray
    inertia: _Inertia
    merged: list[str] = dataclasses.field(default_factory=list)  # links fixed to this body


# --------------------------------------------------------------------------------------------
# entry point


def load_urdf(
    path_or_xml: str | os.PathLike, floating_base: bool = False, *, check_inertia: bool = True
) -> Model:
    """Load a URDF robot as a `Model` (conventions in this module's docstring).

    **Arguments:**

    - `path_or_xml`: a file path, or the URDF text itself (a string starting with `<`).
    - `floating_base`: attach the root link to the world by a `Free` joint named `root_joint`
      (`q = [qw, qx, qy, qz, x, y, z]`) instead of welding it.
    - `check_inertia`: with `True`, a body whose rotational inertia no rigid body has (not
      positive semi-definite, or principal moments breaking the triangle inequality
      `I1 + I2 >= I3`) raises `ValueError`, as Drake and MuJoCo refuse it. With `False`, the
      robot loads as Pinocchio loads it, inertias as written, with one `UserWarning` listing
      every such link (dynamics stay computable as long as the mass matrix is positive
      definite; energies and contact responses of such a body are not physical).

    **Returns:** the `Model`; its bodies are the links moved by non-fixed joints, its frames
    are all links.

    **Raises:** `ValueError` naming the element at fault for malformed input. A joint that
    moves links with no mass and no inertia (romeo's fingers) loads with a `UserWarning`
    naming it: the mass matrix is singular, `aba` would divide by zero; lock such joints to
    simulate (`ModelBuilder.build(singular=...)`).

    `<mimic>` joints load as independent joints, with one `UserWarning` listing them all.
    """
    robot = _read_robot(path_or_xml)
    links: dict[str, _Inertia] = {}
    for element in robot.findall("link"):
        name = _required(element, "name", "<link>")
        if name in links:
            raise ValueError(f"link {name!r} is defined twice")
        links[name] = _parse_link(element, name)
    if not links:
        raise ValueError(f"robot {robot.get('name')!r} has no <link>")
    joints = [_parse_joint(element, i) for i, element in enumerate(robot.findall("joint"))]
    mimics = [f"{j.name!r} (mimics {j.mimic!r})" for j in joints if j.mimic is not None]
    if mimics:
        warnings.warn(
            f"{len(mimics)} <mimic> joint(s) loaded as independent joints (Pinocchio's default): "
            + ", ".join(mimics),
            UserWarning,
            stacklevel=2,
        )
    root = _check_tree(links, joints)
    bodies, frames = _flatten(root, links, joints, floating_base)
    if not bodies:
        raise ValueError(
            f"robot {robot.get('name')!r} has no moving joint: nothing to simulate "
            "(load it with floating_base=True to let the root link move)"
        )
    builder = ModelBuilder()
    invalid = []
    for b in bodies:
        try:
            _check_body_inertia(b)
        except ValueError as e:
            if check_inertia:
                raise ValueError(
                    f"{e}. To load the robot anyway, inertias as written (as Pinocchio does), "
                    "pass check_inertia=False"
                ) from None
            invalid.append(str(e))
        inertia = SpatialInertia(b.inertia.mass, b.inertia.com, b.inertia.I)
        builder.add_body(
            b.name,
            inertia,
            b.parent,
            b.joint,
            b.joint_name,
            _transform(b.X_PF),
            _transform(b.X_BM),
            check_inertia=check_inertia,
        )
    if invalid:
        warnings.warn(
            f"check_inertia=False: {len(invalid)} link(s) with a rotational inertia that no rigid "
            "body has, loaded as written: " + "; ".join(invalid),
            UserWarning,
            stacklevel=2,
        )
    for name, parent, X in frames:
        builder.add_frame(name, parent, _transform(X))
    return builder.build(singular="warn")


def _read_robot(path_or_xml: str | os.PathLike) -> ET.Element:
    is_text = isinstance(path_or_xml, str) and path_or_xml.lstrip().startswith("<")
    try:
        root = ET.fromstring(path_or_xml.lstrip()) if is_text else ET.parse(path_or_xml).getroot()
    except ET.ParseError as e:
        raise ValueError(f"URDF is not well-formed XML: {e}") from None
    if root.tag != "robot":
        raise ValueError(f"URDF must have a <robot> root element, found <{root.tag}>")
    return root


# --------------------------------------------------------------------------------------------
# elements


def _parse_link(element: ET.Element, name: str) -> _Inertia:
    """`<inertial>` of link `name` (zero when absent), validated."""
    where = f"link {name!r}"
    inertial = element.find("inertial")
    if inertial is None:
        return _Inertia(0.0, np.zeros(3), np.zeros((3, 3)))
    T = _origin(inertial, where)
    mass_element = _child(inertial, "mass", where)
    mass = float(_numbers(mass_element, "value", 1, where)[0])
    if mass < 0:
        raise ValueError(f"{where} has negative mass {mass}")
    inertia_element = _child(inertial, "inertia", where)
    xx, xy, xz, yy, yz, zz = (_numbers(inertia_element, a, 1, where)[0] for a in _INERTIA_ATTRS)
    I = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    R = T[:3, :3]
    return _Inertia(mass, T[:3, 3], R @ I @ R.T)


def _parse_joint(element: ET.Element, index: int) -> _Joint:
    """One `<joint>`: its frame, links and jointdyn joint (`None` when fixed)."""
    name = _required(element, "name", f"<joint> number {index + 1}")
    where = f"joint {name!r}"
    kind = _required(element, "type", where)
    parent = _required(_child(element, "parent", where), "link", f"{where}: <parent>")
    child = _required(_child(element, "child", where), "link", f"{where}: <child>")
    X_PJ = _origin(element, where)
    X_JF = np.eye(4)
    if kind not in _JOINT_MAKERS:
        raise ValueError(
            f"{where} has unknown type {kind!r}; expected one of {sorted(_JOINT_MAKERS)}"
        )
    axis_element = element.find("axis")
    axis = (1.0, 0.0, 0.0) if axis_element is None else _numbers(axis_element, "xyz", 3, where)
    if kind in ("revolute", "continuous", "prismatic", "planar") and np.linalg.norm(axis) < 1e-12:
        raise ValueError(f"{where} has a zero <axis>")
    if kind == "fixed":
        return _Joint(name, parent, child, X_PJ, None, X_JF)
    params = _limits(element, where, kind) | _dynamics(element, where)
    if kind == "planar":
        X_JF[:3, :3] = _rotation_z_to(np.asarray(axis) / np.linalg.norm(axis))
    try:
        joint = _JOINT_MAKERS[kind](axis, params)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    mimic = element.find("mimic")
    mimicked = None if mimic is None else mimic.get("joint", "?")
    return _Joint(name, parent, child, X_PJ, joint, X_JF, mimicked)


def _limits(element: ET.Element, where: str, kind: str) -> dict:
    """Keyword arguments for the joint's limits from `<limit>` (none when absent)."""
    limit = element.find("limit")
    if limit is None or kind in ("floating", "planar"):
        return {}
    get = lambda attr, default: _numbers(limit, attr, 1, where, default, finite=False)[0]  # noqa: E731
    lower, upper = get("lower", 0.0), get("upper", 0.0)
    params = dict(velocity_limit=get("velocity", np.inf), effort_limit=get("effort", np.inf))
    if kind == "continuous":
        return params
    if lower > upper:
        raise ValueError(f"{where}: <limit> lower {lower} is above upper {upper}")
    return params | dict(position_lower=lower, position_upper=upper)


def _dynamics(element: ET.Element, where: str) -> dict:
    dynamics = element.find("dynamics")
    if dynamics is None:
        return {}
    return {attr: _numbers(dynamics, attr, 1, where, 0.0)[0] for attr in ("damping", "friction")}


_JOINT_MAKERS: dict[str, Callable[..., AbstractJoint | None]] = {
    "revolute": lambda axis, p: Revolute(axis, **p),
    "continuous": lambda axis, p: RevoluteUnbounded(axis, **p),
    "prismatic": lambda axis, p: Prismatic(axis, **p),
    "floating": lambda axis, p: Free(**p),
    "planar": lambda axis, p: Planar("xy", **p),
    "fixed": lambda axis, p: None,
}


def _check_body_inertia(body: _Body) -> None:
    """The rotational inertia of a body, its links merged, must be physically valid.

    Checked per body rather than per link: real URDFs (ANYmal's `base`, the Allegro hand's
    fingertips) carry link inertias that break the triangle inequality on their own but make a
    valid body once the links welded to them are added, and only the body's inertia matters.
    """
    where = f"link {body.name!r}"
    if body.merged:
        where += f" (with the links fixed to it: {', '.join(repr(n) for n in body.merged)})"
    check_rotational_inertia(body.inertia.I, where)


# --------------------------------------------------------------------------------------------
# topology


def _check_tree(links: dict[str, _Inertia], joints: list[_Joint]) -> str:
    """Check that the joints make one tree over the links; return its root link."""
    parent_joint: dict[str, _Joint] = {}
    joint_names: set[str] = set()
    for j in joints:
        if j.name in joint_names:
            raise ValueError(f"joint {j.name!r} is defined twice")
        joint_names.add(j.name)
        for role, link in (("parent", j.parent), ("child", j.child)):
            if link not in links:
                raise ValueError(f"joint {j.name!r}: {role} link {link!r} is not defined")
        if j.child in parent_joint:
            raise ValueError(
                f"link {j.child!r} is the child of two joints, {parent_joint[j.child].name!r} "
                f"and {j.name!r} (a URDF is a tree: closed loops are not supported)"
            )
        parent_joint[j.child] = j
    for start in links:  # each link has at most one parent: walk up until the root or a repeat
        path, link = [], start
        while link in parent_joint and link not in path:
            path.append(link)
            link = parent_joint[link].parent
        if link in path:
            loop = path[path.index(link) :]
            names = ", ".join(repr(parent_joint[n].name) for n in loop)
            raise ValueError(
                f"joints {names} form a loop through links {', '.join(map(repr, loop))} "
                "(a URDF is a tree)"
            )
    roots = [name for name in links if name not in parent_joint]
    if len(roots) > 1:
        raise ValueError(f"URDF has several root links {roots}; a robot must be one tree")
    return roots[0]


def _flatten(
    root: str, links: dict[str, _Inertia], joints: list[_Joint], floating_base: bool
) -> tuple[list[_Body], list[tuple[str, str, np.ndarray]]]:
    """Bodies (depth-first, children in document order, fixed joints merged) and extra frames."""
    for name in links:
        if name == WORLD and (name != root or floating_base):
            raise ValueError(
                f"link {WORLD!r} names the world: it may only be the root of a fixed-base robot"
            )
    children: dict[str, list[_Joint]] = {name: [] for name in links}
    for j in joints:
        children[j.parent].append(j)
    bodies: list[_Body] = []
    frames: list[tuple[str, str, np.ndarray]] = []

    def visit(link: str, body: _Body | None, X_BL: np.ndarray) -> None:
        """Walk the subtree of `link`, placed at `X_BL` on `body` (None: the world)."""
        for j in children[link]:
            X_BC = X_BL @ j.X_PJ
            if j.joint is None:
                if body is not None:
                    body.inertia = body.inertia + links[j.child].transform(X_BC)
                    body.merged.append(j.child)
                frames.append((j.child, WORLD if body is None else body.name, X_BC))
                visit(j.child, body, X_BC)
            else:
                parent = WORLD if body is None else body.name
                new = _Body(j.child, parent, j.joint, j.name, X_BC @ j.X_JF, j.X_JF, links[j.child])
                bodies.append(new)
                visit(j.child, new, np.eye(4))

    if floating_base:
        base = _Body(root, WORLD, Free(), "root_joint", np.eye(4), np.eye(4), links[root])
        bodies.append(base)
        visit(root, base, np.eye(4))
    else:
        if root != WORLD:
            frames.append((root, WORLD, np.eye(4)))
        visit(root, None, np.eye(4))
    return bodies, frames


# --------------------------------------------------------------------------------------------
# attributes and numbers


def _required(element: ET.Element, attr: str, where: str) -> str:
    value = element.get(attr)
    if value is None:
        raise ValueError(f"{where} has no {attr!r} attribute")
    return value


def _child(element: ET.Element, tag: str, where: str) -> ET.Element:
    found = element.find(tag)
    if found is None:
        raise ValueError(f"{where}: <{element.tag}> has no <{tag}> element")
    return found


def _numbers(
    element: ET.Element,
    attr: str,
    n: int,
    where: str,
    default: float | tuple | None = None,
    finite: bool = True,
) -> np.ndarray:
    """The `n` numbers of attribute `attr` (or `default`); `ValueError` naming `where`."""
    text = element.get(attr)
    if text is None:
        if default is None:
            raise ValueError(f"{where}: <{element.tag}> has no {attr!r} attribute")
        return np.broadcast_to(np.asarray(default, dtype=float), (n,))
    try:
        values = np.array([float(x) for x in text.split()])
    except ValueError:
        raise ValueError(f"{where}: <{element.tag} {attr}={text!r}> is not numeric") from None
    if values.shape != (n,):
        raise ValueError(
            f"{where}: <{element.tag} {attr}={text!r}> has {values.size} numbers, expected {n}"
        )
    bad = np.isnan(values) | (finite & ~np.isfinite(values))
    if np.any(bad):
        raise ValueError(f"{where}: <{element.tag} {attr}={text!r}> is not finite")
    return values


def _origin(element: ET.Element, where: str) -> np.ndarray:
    """4×4 pose of `<origin xyz rpy>` (identity when absent): `R = Rz(yaw) Ry(pitch) Rx(roll)`."""
    T = np.eye(4)
    origin = element.find("origin")
    if origin is None:
        return T
    roll, pitch, yaw = _numbers(origin, "rpy", 3, where, 0.0)
    T[:3, 3] = _numbers(origin, "xyz", 3, where, 0.0)
    T[:3, :3] = _rot(2, yaw) @ _rot(1, pitch) @ _rot(0, roll)
    return T


def _rot(axis: int, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    R = np.eye(3)
    R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
    return R


def _rotation_z_to(a: np.ndarray) -> np.ndarray:
    """Smallest rotation taking `e_z` to the unit vector `a` (a half turn about x for `−e_z`)."""
    v, c = np.cross([0.0, 0.0, 1.0], a), a[2]
    if c < -1 + 1e-12:
        return np.diag([1.0, -1.0, -1.0])
    K = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)


def _transform(T: np.ndarray) -> Transform:
    return Transform(T[:3, :3], T[:3, 3])
