"""Loading checks (issue 28): physically invalid inertias (`check_inertia`), one warning for all
mimic joints, and joints that move nothing with inertia (a singular mass matrix), on
example-robot-data's robots and on small models built here."""

import warnings

import jax
import numpy as np
import pinocchio as pin
import pytest
from robots import ROBOTS_DIR, q_to_pinocchio, v_to_pinocchio_matrix

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

ROMEO = "romeo_description/urdf/"
#: Robots that load only with check_inertia=False (inertias that no rigid body has).
NEEDS_NO_INERTIA_CHECK = {ROMEO + "romeo_small.urdf", ROMEO + "romeo_laas_small.urdf"}
#: Robots with no moving joint (quadrotor bodies): they load with floating_base=True.
NO_MOVING_JOINT = {
    "hector_description/robots/quadrotor_base.urdf",
    "iris_description/robots/iris_simple.urdf",
}
#: Robots whose massless links are moved by joints: they load with a warning naming them.
MASSLESS_MOVED = {ROMEO + "romeo.urdf", ROMEO + "romeo_laas_small.urdf"}


def _load(path, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jd.load_urdf(path, **kwargs)
    return model, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _pinocchio_urdfs() -> list[str]:
    """Every URDF of example-robot-data that Pinocchio loads (relative paths)."""
    assert ROBOTS_DIR is not None and ROBOTS_DIR.is_dir(), "example-robot-data is not installed"
    out = []
    for f in sorted(ROBOTS_DIR.rglob("*.urdf")):
        try:
            pin.buildModelFromUrdf(str(f))
        except (RuntimeError, ValueError):
            continue
        out.append(str(f.relative_to(ROBOTS_DIR)))
    return out


def test_every_robot_that_pinocchio_loads_loads():
    urdfs = _pinocchio_urdfs()
    assert len(urdfs) >= 68, urdfs
    assert NEEDS_NO_INERTIA_CHECK | NO_MOVING_JOINT | MASSLESS_MOVED <= set(urdfs)
    for rel in urdfs:
        path = str(ROBOTS_DIR / rel)
        kwargs = {"floating_base": rel in NO_MOVING_JOINT}
        if rel in NEEDS_NO_INERTIA_CHECK:
            with pytest.raises(ValueError, match="pass check_inertia=False"):
                jd.load_urdf(path, **kwargs)
            kwargs["check_inertia"] = False
        model, messages = _load(path, **kwargs)
        assert model.nv > 0, rel
        singular = [m for m in messages if "mass matrix is singular" in m]
        assert len(singular) == (rel in MASSLESS_MOVED), (rel, messages)


@pytest.mark.parametrize("rel", sorted(NEEDS_NO_INERTIA_CHECK))
def test_check_inertia_false_loads_as_pinocchio(rel):
    """One warning lists every offending link; the dynamics are Pinocchio's (`rnea`, `crba`)."""
    path = str(ROBOTS_DIR / rel)
    with pytest.raises(ValueError, match="triangle inequality.*check_inertia=False"):
        jd.load_urdf(path)
    model, messages = _load(path, check_inertia=False)
    inertia = [m for m in messages if m.startswith("check_inertia=False")]
    assert len(inertia) == 1, messages
    n_links = inertia[0].count("link '")
    assert n_links >= 1 and f": {n_links} link(s)" in inertia[0], inertia[0]

    pmodel = pin.buildModelFromUrdf(path)
    data = pmodel.createData()
    rng = np.random.default_rng(0)
    q = np.asarray(model.random_configuration(jax.random.PRNGKey(3)))
    v, a = rng.normal(size=model.nv), rng.normal(size=model.nv)
    qp = q_to_pinocchio(model, pmodel, q)
    T = v_to_pinocchio_matrix(model, pmodel, q)  # a permutation for these fixed-base robots
    tau_pin = pin.rnea(pmodel, data, qp, T @ v, T @ a)
    np.testing.assert_allclose(jd.rnea(model, q, v, a), T.T @ tau_pin, rtol=1e-9, atol=1e-9)
    M_pin = pin.crba(pmodel, data, qp)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    np.testing.assert_allclose(jd.crba(model, q), T.T @ M_pin @ T, rtol=1e-9, atol=1e-9)


def test_mimic_joints_one_warning():
    path = str(ROBOTS_DIR / "talos_data/robots/talos_full_v2.urdf")
    _, messages = _load(path, floating_base=True)
    mimic = [m for m in messages if "<mimic>" in m]
    assert len(mimic) == 1, messages
    assert mimic[0].startswith("12 <mimic> joint(s)") and mimic[0].count("(mimics ") == 12


# -- a joint that moves nothing with inertia ---------------------------------------------------

_INERTIA = jd.SpatialInertia(1.0, [0.0, 0.0, -0.4], np.diag([0.02, 0.03, 0.01]))
_MASSLESS = jd.SpatialInertia(0.0, np.zeros(3), np.zeros((3, 3)))
_POINT = jd.SpatialInertia(0.5, np.zeros(3), np.zeros((3, 3)))


def _arm(*tail):
    """A revolute link with inertia, then the `(name, inertia, joint, X_PF)` bodies of `tail`."""
    b = jd.ModelBuilder()
    b.add_body("upper", _INERTIA, "world", jd.Revolute([0, 1, 0]), joint_name="shoulder")
    parent = "upper"
    for name, inertia, joint, X_PF in tail:
        b.add_body(name, inertia, parent, joint, joint_name=f"{name}_joint", X_PF=X_PF)
        parent = name
    return b


_DOWN = jd.Transform.from_rpy([0, 0, 0], [0, 0, -0.8])


@pytest.mark.parametrize(
    "tail, named",
    [
        # a massless leaf on a revolute joint: the case that made aba return inf
        ([("tip", _MASSLESS, jd.Revolute([1, 0, 0]), _DOWN)], ["tip_joint", "'tip'"]),
        # a massless link carrying a massless link: both joints are named
        (
            [("a", _MASSLESS, jd.Prismatic([0, 0, 1]), _DOWN), ("b", _MASSLESS, jd.Ball(), None)],
            ["a_joint", "b_joint", "'a', 'b'"],
        ),
        # a point mass on a ball joint at its centre: no inertia about any axis
        ([("ball", _POINT, jd.Ball(), _DOWN)], ["ball_joint"]),
        # a point mass turning about an axis through it
        ([("spin", _POINT, jd.Revolute([0, 0, 1]), _DOWN)], ["spin_joint"]),
    ],
)
def test_no_inertia_about_a_joint_is_refused(tail, named):
    with pytest.raises(ValueError, match="mass matrix is singular") as info:
        _arm(*tail).build()
    for text in named:
        assert text in str(info.value), str(info.value)
    with pytest.warns(UserWarning, match="mass matrix is singular"):
        model = _arm(*tail).build(singular="warn")
    # the documented way to simulate it: lock the offending joints
    locked = np.array([False] + [True] * (model.nbodies - 1))  # per joint
    q = model.neutral()
    vdot = jd.forward_dynamics(model, q, np.zeros(model.nv), np.zeros(model.nv), locked=locked)
    assert np.all(np.isfinite(vdot))
    # what the check prevents: unlocked, forward dynamics divides by zero
    assert not np.all(np.isfinite(jd.aba(model, q, np.zeros(model.nv), np.zeros(model.nv))))


def test_joints_moving_along_one_line_are_refused():
    tail = [
        ("slide1", _MASSLESS, jd.Prismatic([0, 0, 1]), _DOWN),
        ("slide2", _POINT, jd.Prismatic([0, 0, 1]), None),
    ]
    # each slide moves the point mass (no zero diagonal), but both along the same line
    with pytest.raises(ValueError, match=r"\['slide1_joint', 'slide2_joint'\].*same directions"):
        _arm(*tail).build()


def test_models_singular_only_somewhere_build():
    """A point mass that sits on a revolute axis at q = 0 only (its own joint swings it off):
    M(0) is singular, M(q) is not for other q; build() accepts the model."""
    b = jd.ModelBuilder()
    b.add_body("turn", _MASSLESS, "world", jd.Revolute([0, 0, 1]))
    bob = jd.SpatialInertia(0.5, [0.0, 0.0, -1.0], np.zeros((3, 3)))
    b.add_body("bob", bob, "turn", jd.Revolute([1, 0, 0]))
    model = b.build()
    M0 = np.asarray(jd.crba(model, model.neutral()))
    assert np.linalg.eigvalsh(M0).min() < 1e-12  # singular at q = 0: the bob sits on z
    q = np.array([0.0, 0.3])
    assert np.linalg.eigvalsh(np.asarray(jd.crba(model, q))).min() > 1e-3


def test_massless_leaf_in_urdf_warns_and_names_it():
    urdf = """<robot name="r">
      <link name="base"/>
      <link name="arm"><inertial><mass value="1"/><origin xyz="0 0 -0.5"/>
        <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
      <link name="finger"/>
      <joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/>
        <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <joint name="knuckle" type="revolute"><parent link="arm"/><child link="finger"/>
        <origin xyz="0 0 -1"/><axis xyz="0 1 0"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
    </robot>"""
    with pytest.warns(UserWarning, match=r"joint 'knuckle' moves bodies \('finger'\)"):
        jd.load_urdf(urdf)
