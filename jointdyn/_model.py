"""`Model`: a kinematic tree of bodies and joints, and `ModelBuilder` to make one in code.

Parameters (inertias, joint parameters, `X_PF`, `X_BM`, frame placements, gravity) are array
leaves, differentiable and free to change without retracing. Topology and names are a static,
hashable `Topology`.
"""

from __future__ import annotations

import dataclasses
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._dtype import floating_arguments
from ._joint import AbstractJoint, JointParams, is_concrete
from ._model_checks import singular_mass_matrix
from ._spatial import SpatialInertia, Transform
from ._traversal import joint_params, map_groups, map_joints, plan

WORLD = "world"


def _with_param(joint: AbstractJoint, name: str, x: Array, q_sized: bool) -> AbstractJoint:
    """`joint` with `params.<name>` = x; a `Composite` (whose `params` is a view) sets its
    sub-joints' parameters, in order."""
    subs = getattr(joint, "joints", None)
    if subs is None:
        return eqx.tree_at(lambda j: getattr(j.params, name), joint, x)
    sizes = np.cumsum([0] + [j.nq if q_sized else j.nv for j in subs])
    new = tuple(
        _with_param(j, name, x[a:b], q_sized)
        for j, a, b in zip(subs, sizes[:-1], sizes[1:], strict=True)
    )
    return eqx.tree_at(lambda j: j.joints, joint, new)


@dataclasses.dataclass(frozen=True)
class Topology:
    """Static structure of a model (hashable: part of the jit cache key, never traced).

    Bodies are numbered so that every parent comes before its children; `parents[i] = -1`
    means body i hangs from the world. Joint i connects body `parents[i]` to body i.
    Frames are named points of attachment: one per body (at its origin) and one per extra frame
    (e.g. URDF links merged by fixed joints); `frame_parents[k]` is the body a frame is fixed on
    (-1 for the world).
    """

    parents: tuple[int, ...]
    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    frame_names: tuple[str, ...]
    frame_parents: tuple[int, ...]
    nqs: tuple[int, ...]
    nvs: tuple[int, ...]

    @property
    def q_offsets(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.nqs)[:-1]]))

    @property
    def v_offsets(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.nvs)[:-1]]))

    @property
    def depths(self) -> tuple[int, ...]:
        d: list[int] = []
        for p in self.parents:
            d.append(0 if p < 0 else d[p] + 1)
        return tuple(d)


class Model(eqx.Module):
    """A kinematic tree: body i is attached to its parent by `joints[i]`.

    The pose of body i in its parent P is `X_PB = X_PF[i] · X_FM(q_i) · X_BM[i]⁻¹`, with F the
    joint's inboard frame fixed on P and M its outboard frame fixed on B. `inertias[i]` is the
    spatial inertia of body i about its origin, in its frame. `X_BF` holds the placement of
    every frame in its body. Gravity is `[0, 0, −9.81]` unless given.

    **Fields:** `joints` (tuple, one per body), `X_PF`, `X_BM`, `X_BF` (stacked `Transform`s),
    `inertias` (stacked `SpatialInertia`), `gravity` (3,), `topology` (static).
    """

    joints: tuple[AbstractJoint, ...]
    X_PF: Transform
    X_BM: Transform
    inertias: SpatialInertia
    X_BF: Transform
    gravity: Float[Array, "3"]
    topology: Topology = eqx.field(static=True)

    # -- sizes and names -----------------------------------------------------------------
    @property
    def nq(self) -> int:
        return sum(self.topology.nqs)

    @property
    def nv(self) -> int:
        return sum(self.topology.nvs)

    @property
    def nbodies(self) -> int:
        return len(self.topology.parents)

    @property
    def parents(self) -> tuple[int, ...]:
        return self.topology.parents

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.topology.joint_names

    @property
    def body_names(self) -> tuple[str, ...]:
        return self.topology.body_names

    @property
    def frame_names(self) -> tuple[str, ...]:
        return self.topology.frame_names

    def _joint_index(self, name: str) -> int:
        return _index(self.topology.joint_names, name, "joint")

    def body_index(self, name: str) -> int:
        return _index(self.topology.body_names, name, "body")

    def frame_index(self, name: str) -> int:
        return _index(self.topology.frame_names, name, "frame")

    def joint(self, name: str) -> AbstractJoint:
        return self.joints[self._joint_index(name)]

    def q_slice(self, joint_name: str) -> slice:
        """Slice of `q` holding the coordinates of `joint_name`."""
        i = self._joint_index(joint_name)
        o = self.topology.q_offsets[i]
        return slice(o, o + self.topology.nqs[i])

    def v_slice(self, joint_name: str) -> slice:
        """Slice of `v` (and `vdot`, `tau`) holding the velocities of `joint_name`."""
        i = self._joint_index(joint_name)
        o = self.topology.v_offsets[i]
        return slice(o, o + self.topology.nvs[i])

    # -- configuration space -------------------------------------------------------------
    @eqx.filter_jit
    def neutral(self) -> Float[Array, " nq"]:
        """Concatenation of each joint's neutral configuration (every `X_FM` is identity)."""
        return map_joints(self, lambda j: j.neutral(), q_out=True)

    @eqx.filter_jit
    def _joint_param(self, name: str) -> Array:
        """The joints' `params.<name>` concatenated into a q- or v-sized vector."""
        return joint_params(self, name)

    def default_position(self) -> Float[Array, " nq"]:
        """Concatenation of each joint's `params.default_position`."""
        return self._joint_param("default_position")

    @floating_arguments  # outside the jit, where lists would be static (a trace per value)
    @eqx.filter_jit
    def integrate(self, q: Float[Array, " nq"], v: Float[Array, " nv"]) -> Float[Array, " nq"]:
        """`q ⊕ v`, joint by joint. **Raises:** `ValueError` when `q` is not (nq,) or `v` not
        (nv,)."""
        check_sizes(self, q=q, v=v)
        return map_joints(self, lambda j, qj, vj: j.integrate(qj, vj), q=q, v=v, q_out=True)

    @floating_arguments  # outside the jit, where lists would be static (a trace per value)
    @eqx.filter_jit
    def difference(self, q0: Float[Array, " nq"], q1: Float[Array, " nq"]) -> Float[Array, " nv"]:
        """`q1 ⊖ q0`, joint by joint. **Raises:** `ValueError` when `q0` or `q1` is not (nq,)."""
        check_sizes(self, q0=q0, q1=q1)
        return map_joints(self, lambda j, a, b: j.difference(a, b), q=q0, q2=q1, v_out=True)

    @floating_arguments  # outside the jit, where lists would be static (a trace per value)
    @eqx.filter_jit
    def integrate_derivatives(
        self, q: Float[Array, " nq"], v: Float[Array, " nv"]
    ) -> tuple[Float[Array, "nv nv"], Float[Array, "nv nv"]]:
        """`(J_q, J_v)` of `q ⊕ v` in the tangent space (Pinocchio's `dIntegrate`, ARG0 and
        ARG1): block diagonal, each joint's `integrate_derivatives` on its block,

            (q ⊕ δq) ⊕ v = (q ⊕ v) ⊕ (J_q δq),    q ⊕ (v + δv) = (q ⊕ v) ⊕ (J_v δv)   (first order).

        **Raises:** `ValueError` when `q` is not (nq,) or `v` not (nv,)."""
        check_sizes(self, q=q, v=v)
        fn = lambda j, qj, vj: j.integrate_derivatives(qj, vj)  # noqa: E731
        return _block_diagonal(self, map_groups(self, fn, q=q, v=v))

    @floating_arguments  # outside the jit, where lists would be static (a trace per value)
    @eqx.filter_jit
    def difference_derivatives(
        self, q0: Float[Array, " nq"], q1: Float[Array, " nq"]
    ) -> tuple[Float[Array, "nv nv"], Float[Array, "nv nv"]]:
        """`(J_q0, J_q1)` of `d = q1 ⊖ q0` in the tangent space (Pinocchio's `dDifference`,
        ARG0 and ARG1): block diagonal, each joint's `difference_derivatives` on its block,

            q1 ⊖ (q0 ⊕ δ) = d + J_q0 δ,    (q1 ⊕ δ) ⊖ q0 = d + J_q1 δ   (first order).

        **Raises:** `ValueError` when `q0` or `q1` is not (nq,)."""
        check_sizes(self, q0=q0, q1=q1)
        fn = lambda j, a, b: j.difference_derivatives(a, b)  # noqa: E731
        return _block_diagonal(self, map_groups(self, fn, q=q0, q2=q1))

    @floating_arguments
    def interpolate(self, q0: Array, q1: Array, t: ArrayLike) -> Float[Array, " nq"]:
        """`q0 ⊕ t (q1 ⊖ q0)`."""
        return self.integrate(q0, t * self.difference(q0, q1))

    @floating_arguments  # outside the jit, where lists would be static (a trace per value)
    @eqx.filter_jit
    def normalize(self, q: Float[Array, " nq"]) -> Float[Array, " nq"]:
        """`q` with each joint's coordinates back on its manifold (unit quaternions, unit
        `[cos, sin]` pairs). **Raises:** `ValueError` when `q` is not (nq,)."""
        check_sizes(self, q=q)
        return normalize_joints(self, q)

    @eqx.filter_jit
    def random_configuration(
        self, key: PRNGKeyArray, lower: ArrayLike | None = None, upper: ArrayLike | None = None
    ) -> Float[Array, " nq"]:
        """Joint-wise uniform samples within `[lower, upper]` (default: position limits).

        One draw of uniforms for all joints (a row per body, as many as the joint with the
        most needs), mapped by each joint's `configuration_from_uniform`: one random number
        generator in the compiled program, not one per joint (a 14-body tree of every joint
        class compiled in a fraction of the time)."""
        limits_lower = self.position_lower()  # also the joints' parameter dtype
        lower = limits_lower if lower is None else jnp.asarray(lower)
        upper = self.position_upper() if upper is None else jnp.asarray(upper)
        check_sizes(self, lower=lower, upper=upper)
        width = max([j.n_uniform for j in self.joints] + [1])
        u = jax.random.uniform(key, (self.nbodies, width), limits_lower.dtype)
        return map_joints(
            self,
            lambda j, uj, lo, hi: j.configuration_from_uniform(uj[: j.n_uniform], lo, hi),
            per_body=u,
            q=lower,
            q2=upper,
            q_out=True,
        )

    def position_lower(self) -> Float[Array, " nq"]:
        """Concatenation of each joint's `params.position_lower`."""
        return self._joint_param("position_lower")

    def position_upper(self) -> Float[Array, " nq"]:
        """Concatenation of each joint's `params.position_upper`."""
        return self._joint_param("position_upper")

    def velocity_limit(self) -> Float[Array, " nv"]:
        """Concatenation of each joint's `params.velocity_limit`."""
        return self._joint_param("velocity_limit")

    def effort_limit(self) -> Float[Array, " nv"]:
        """Concatenation of each joint's `params.effort_limit`."""
        return self._joint_param("effort_limit")

    def armature(self) -> Float[Array, " nv"]:
        """Concatenation of each joint's `params.armature` (rotor inertia per DOF)."""
        return self._joint_param("armature")

    def with_joint_params(self, **vectors: ArrayLike) -> Model:
        """A copy with `JointParams` fields set from model-wide vectors, the inverse of
        `armature()`, `effort_limit()`, …: `model.with_joint_params(armature=a, damping=d)`.

        Each vector has nq entries for the q-sized fields (`position_lower`, `position_upper`,
        `default_position`, `stop_stiffness`, `stop_damping`, `spring_reference`) and nv for the
        others; joint `j` takes its `q_slice`/`v_slice`. Differentiable and jit-safe (values may
        be traced); concrete values are validated as `JointParams.create` does.
        """
        q_sized = {"position_lower", "position_upper", "default_position"}
        q_sized |= {"stop_stiffness", "stop_damping", "spring_reference"}
        known = set(JointParams.__dataclass_fields__)
        joints = list(self.joints)
        for name, x in vectors.items():
            if name not in known:
                raise ValueError(f"unknown joint parameter {name!r}; known: {sorted(known)}")
            n = self.nq if name in q_sized else self.nv
            x = jnp.asarray(x)
            if x.shape != (n,):
                raise ValueError(f"`{name}` must have shape ({n},), got {x.shape}")
            x = x.astype(jnp.result_type(getattr(joints[0].params, name).dtype, x.dtype))
            for i, jname in enumerate(self.joint_names):
                s = self.q_slice(jname) if name in q_sized else self.v_slice(jname)
                joints[i] = _with_param(joints[i], name, x[s], name in q_sized)
        for j in joints:
            j.params.validate()
        return eqx.tree_at(lambda m: m.joints, self, tuple(joints))

    def total_mass(self) -> Float[Array, ""]:
        return jnp.sum(self.inertias.mass)


#: State arguments of size nq (configurations and their bounds); every other state argument
#: (`v`, `vdot`, `tau`, …) has size nv.
_CONFIGURATIONS = frozenset({"q", "q0", "q1", "q_reference", "lower", "upper"})


def check_sizes(model: Model, **xs) -> None:
    """`ValueError` naming the first argument whose shape is not (nq,) (`q`, `q0`, `q1`,
    `q_reference`, `lower`, `upper`), (nbodies, 6) (`f_ext`, `F_Bo_W` per body) or (nv,) (any other name);
    None is skipped. Shapes are static, so under `jit` this runs once, when traced: a wrong
    size never reaches the computation (where JAX's clamped indexing would give a silently
    wrong answer)."""
    for name, x in xs.items():
        if x is None:
            continue
        if name == "f_ext":
            if jnp.shape(x) != (model.nbodies, 6):
                raise ValueError(
                    f"`f_ext` must have shape ({model.nbodies}, 6) (F_Bo_W per body), got "
                    f"{jnp.shape(x)}"
                )
            continue
        n = model.nq if name in _CONFIGURATIONS else model.nv
        if jnp.shape(x) != (n,):
            raise ValueError(f"`{name}` must have shape ({n},), got {jnp.shape(x)}")


def _block_diagonal(model: Model, outs: list) -> tuple[Array, Array]:
    """Two nv×nv block-diagonal matrices from per-group stacks of blocks `(A (n, k, k), B …)`
    (`map_groups` order), placed at each joint's DOFs by one static gather."""
    nv, groups = model.nv, plan(model).groups
    pos, size = np.full((nv, nv), -1, np.int64), 0
    for g in groups:
        n, k = g.v_idx.shape
        pos[g.v_idx[:, :, None], g.v_idx[:, None, :]] = size + np.arange(n * k * k).reshape(n, k, k)
        size += n * k * k
    pos[pos < 0] = size  # off the blocks: the zero appended below
    result = []
    for i in range(2):
        blocks = [o[i].reshape(-1) for o, g in zip(outs, groups, strict=True) if g.v_idx.size]
        dtype = jnp.result_type(*blocks) if blocks else jnp.result_type(float)
        flat = jnp.concatenate(blocks + [jnp.zeros(1, dtype)])
        result.append(flat[pos])
    return result[0], result[1]


def _index(names: tuple[str, ...], name: str, what: str) -> int:
    """Position of `name` in `names`; `KeyError` listing the names otherwise."""
    try:
        return names.index(name)
    except ValueError:
        raise KeyError(f"no {what} named {name!r}; {what} names are {names}") from None


#: How far from orthonormal (max |RᵀR − I|) a pose's rotation given to `ModelBuilder` may be:
#: rounding of a 6-digit export passes; a scale, shear or reflection does not.
ROTATION_TOL = 1e-4


def _as_transform(X: Transform | None, name: str) -> Transform:
    if X is None:
        return Transform.identity()
    if not isinstance(X, Transform):
        raise ValueError(f"`{name}` must be a jointdyn.Transform, got {type(X).__name__}")
    if X.R.shape != (3, 3) or X.p.shape != (3,):
        raise ValueError(
            f"`{name}` must be a single transform (R 3×3, p 3), got {X.R.shape}, {X.p.shape}"
        )
    if is_concrete(X.R) and is_concrete(X.p):
        R, p = np.asarray(X.R, np.float64), np.asarray(X.p, np.float64)
        if not (np.all(np.isfinite(R)) and np.all(np.isfinite(p))):
            raise ValueError(f"`{name}` must be finite, got R = {R.tolist()}, p = {p.tolist()}")
        error = float(np.abs(R.T @ R - np.eye(3)).max())
        if error > ROTATION_TOL or np.linalg.det(R) < 0:
            raise ValueError(
                f"`{name}.R` must be a rotation matrix (orthonormal, determinant +1), got "
                f"{R.tolist()} (|RᵀR − I| = {error:.2g}, det {np.linalg.det(R):.3g}); build it "
                "with Transform.from_rpy or from a quaternion"
            )
    return X


class ModelBuilder:
    """Build a `Model` in code.

    ```python
    b = jd.ModelBuilder()
    b.add_body("upper", SpatialInertia(1.0, [0, 0, -0.5], 0.01 * jnp.eye(3)),
               parent="world", joint=jd.Revolute([0, 1, 0]), joint_name="shoulder")
    b.add_body("lower", ..., parent="upper", joint=jd.Revolute([0, 1, 0]),
               X_PF=jd.Transform.from_rpy([0, 0, 0], [0, 0, -1]))
    model = b.build()
    ```
    Bodies are numbered in the order they are added; a parent must be added before its
    children.
    """

    def __init__(self, gravity: ArrayLike = (0.0, 0.0, -9.81)):
        g = np.asarray(gravity, dtype=float)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise ValueError(f"`gravity` must be a finite 3-vector, got {gravity!r}")
        self._gravity = g
        self._bodies: list[dict] = []
        self._frames: list[tuple[str, int, Transform]] = []

    def _resolve(self, parent: int | str, what: str) -> int:
        if isinstance(parent, str):
            if parent == WORLD:
                return -1
            names = [b["name"] for b in self._bodies]
            if parent not in names:
                raise ValueError(f"{what}: unknown parent body {parent!r}")
            return names.index(parent)
        if not -1 <= parent < len(self._bodies):
            raise ValueError(f"{what}: parent index {parent} does not name an added body")
        return int(parent)

    def _names_in_use(self) -> set[str]:
        return {b["name"] for b in self._bodies} | {f[0] for f in self._frames} | {WORLD}

    def add_body(
        self,
        name: str,
        inertia: SpatialInertia,
        parent: int | str,
        joint: AbstractJoint,
        joint_name: str | None = None,
        X_PF: Transform | None = None,
        X_BM: Transform | None = None,
        *,
        check_inertia: bool = True,
    ) -> int:
        """Add body `name` hanging from `parent` (a body name, index, or "world") by `joint`.

        **Arguments:** `inertia` about the body origin in body axes; `X_PF` pose of the joint's
        inboard frame F in the parent; `X_BM` pose of its outboard frame M in the new body
        (both default to identity); `check_inertia=False` accepts a rotational inertia that no
        body has (not positive semi-definite, or breaking the triangle inequality), as
        Pinocchio does; shapes, finiteness and a non-negative mass are always checked.
        **Returns:** the body's index.
        """
        if name in self._names_in_use():
            raise ValueError(f"body name {name!r} is already used")
        if not isinstance(joint, AbstractJoint):
            raise ValueError(
                f"`joint` of body {name!r} must be a joint, got {type(joint).__name__}"
            )
        if not isinstance(inertia, SpatialInertia):
            raise ValueError(f"`inertia` of body {name!r} must be a SpatialInertia")
        jname = joint_name or f"{name}_joint"
        if jname in {b["joint_name"] for b in self._bodies}:
            raise ValueError(f"joint name {jname!r} is already used")
        _check_inertia(inertia, name, physical=check_inertia)
        self._bodies.append(
            dict(
                name=name,
                inertia=inertia,
                parent=self._resolve(parent, f"body {name!r}"),
                joint=joint,
                joint_name=jname,
                X_PF=_as_transform(X_PF, "X_PF"),
                X_BM=_as_transform(X_BM, "X_BM"),
            )
        )
        return len(self._bodies) - 1

    def add_frame(self, name: str, parent: int | str, X_BF: Transform | None = None) -> int:
        """Add a named frame fixed on body `parent` (or "world") at pose `X_BF`."""
        if name in self._names_in_use():
            raise ValueError(f"frame name {name!r} is already used")
        self._frames.append(
            (name, self._resolve(parent, f"frame {name!r}"), _as_transform(X_BF, "X_BF"))
        )
        return len(self._bodies) + len(self._frames) - 1

    def build(self, *, singular: str = "raise") -> Model:
        """The `Model`.

        A joint that moves bodies with no mass and no rotational inertia about it, or joints
        that move along the same directions, make the mass matrix singular: `aba` would divide
        by zero. With `singular="raise"` (default) that is a `ValueError` naming the joints and
        bodies; with `"warn"` a `UserWarning` and the model is built (kinematics, `rnea` and
        `crba` are fine; lock those joints, `forward_dynamics(..., locked=...)` or
        `reduced_model`, to simulate). Checked at a generic configuration, so a model singular
        only at special configurations builds.
        """
        if singular not in ("raise", "warn"):
            raise ValueError(f'`singular` must be "raise" or "warn", got {singular!r}')
        if not self._bodies:
            raise ValueError("a model needs at least one body")
        b = self._bodies
        frame_names = tuple(x["name"] for x in b) + tuple(f[0] for f in self._frames)
        frame_parents = tuple(range(len(b))) + tuple(f[1] for f in self._frames)
        X_BF = [Transform.identity() for _ in b] + [f[2] for f in self._frames]
        topology = Topology(
            parents=tuple(x["parent"] for x in b),
            body_names=tuple(x["name"] for x in b),
            joint_names=tuple(x["joint_name"] for x in b),
            frame_names=frame_names,
            frame_parents=frame_parents,
            nqs=tuple(x["joint"].nq for x in b),
            nvs=tuple(x["joint"].nv for x in b),
        )
        inertias = [
            SpatialInertia(
                jnp.asarray(x["inertia"].mass, jnp.result_type(float)),
                jnp.asarray(x["inertia"].com, jnp.result_type(float)),
                jnp.asarray(x["inertia"].inertia, jnp.result_type(float)),
            )
            for x in b
        ]
        model = Model(
            joints=tuple(x["joint"] for x in b),
            X_PF=_stack_trees([x["X_PF"] for x in b]),
            X_BM=_stack_trees([x["X_BM"] for x in b]),
            inertias=_stack_trees(inertias),
            X_BF=_stack_trees(X_BF),
            gravity=jnp.asarray(self._gravity, jnp.result_type(float)),
            topology=topology,
        )
        problem = singular_mass_matrix(model)
        if problem is not None:
            advice = (
                "lock these joints to simulate (forward_dynamics(..., locked=...) or reduced_model)"
            )
            if singular == "raise":
                raise ValueError(
                    f"{problem}. Give the bodies an inertia, weld the joint, or build with "
                    f'singular="warn" and {advice}'
                )
            warnings.warn(f"{problem}; {advice}", UserWarning, stacklevel=3)
        return model


def _stack_trees(trees: list):
    """Leafwise stack of same-structured trees of concrete arrays (what `ModelBuilder` holds:
    it reads every value with NumPy), on the host: eager `jnp.stack` compiles a program per
    count, shape and dtype of its inputs, so each model build ran a few tiny compiles (587 in
    a test session, 8 s of XLA). `jax.device_put`, not `jnp.asarray`, which compiles a copy
    program per shape. The dtype is `jnp.stack`'s (`jnp.result_type` of the leaves)."""

    def one(*leaves):
        dtype = jnp.result_type(*leaves)
        return jax.device_put(np.stack([np.asarray(x, dtype) for x in leaves]))

    return jax.tree.map(one, *trees)


def _check_inertia(inertia: SpatialInertia, name: str, physical: bool = True) -> None:
    """`ValueError` for a negative/non-finite mass, a misshapen or (with `physical`) a
    non-physical rotational inertia."""
    m = np.asarray(inertia.mass, dtype=float)
    c = np.asarray(inertia.com, dtype=float)
    I = np.asarray(inertia.inertia, dtype=float)
    if m.shape != () or c.shape != (3,) or I.shape != (3, 3):
        raise ValueError(f"inertia of body {name!r}: expected mass (), com (3,), inertia (3,3)")
    if not (np.isfinite(m) and np.all(np.isfinite(c)) and np.all(np.isfinite(I))):
        raise ValueError(f"inertia of body {name!r} has non-finite values")
    if m < 0:
        raise ValueError(f"body {name!r} has negative mass {float(m)}")
    if not physical:
        return
    eps = (
        float(np.finfo(np.asarray(inertia.inertia).dtype).eps)
        if np.issubdtype(np.asarray(inertia.inertia).dtype, np.floating)
        else 1e-16
    )
    check_rotational_inertia(I, f"body {name!r}", tol=max(1e-10, 64 * eps))


def check_rotational_inertia(I: np.ndarray, where: str, tol: float = 1e-10) -> None:
    """Symmetric, positive semi-definite, principal moments obeying the triangle inequality."""
    scale = max(1.0, float(np.abs(I).max()))
    if np.abs(I - I.T).max() > max(1e-9, tol) * scale:
        raise ValueError(f"{where}: rotational inertia is not symmetric")
    ev = np.linalg.eigvalsh(0.5 * (I + I.T))
    if ev.min() < -tol * scale:
        raise ValueError(
            f"{where}: rotational inertia is not positive semi-definite (eigenvalues {ev})"
        )
    a, b, c = ev
    if a + b < c - tol * scale:
        raise ValueError(
            f"{where}: principal moments {ev} break the triangle inequality (I1 + I2 >= I3)"
        )


def normalize_joints(model: Model, q: Array) -> Array:
    """`Model.normalize` without its jit, for use inside traced code: every joint's
    `normalize` (unit quaternions, `[cos, sin]`) on its coordinates."""
    return map_joints(model, lambda j, qj: j.normalize(qj), q=q, q_out=True)
