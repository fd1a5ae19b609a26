"""`load_urdf` and the bundled models, checked against Pinocchio loading the same files.

Pinocchio orders joints differently (children sorted by joint name, through urdfdom) and
stores free-flyer coordinates differently: `robots.py` maps between the two by joint name.
"""

import importlib.resources
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from numpy_eval import numpy_jit
from robots import (
    ROBOTS,
    q_to_pinocchio,
    robot_path,
    v_to_pinocchio_matrix,
    vdot_to_pinocchio,
)

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

BUNDLED_SIZES = {  # name: (nq, nv, floating)
    "double_pendulum": (2, 2, False),
    "cartpole": (2, 2, False),
    "arm7": (7, 7, False),
    "quadruped": (19, 18, True),
    "humanoid": (28, 27, True),
}
#: Evaluated by NumPy (`numpy_jit`), one trace per model: the values are what is compared.
_fk, _crba, _rnea, _aba, _com = map(
    numpy_jit, (jd.forward_kinematics, jd.crba, jd.rnea, jd.aba, jd.center_of_mass)
)
_random = numpy_jit(lambda model, key: model.random_configuration(key))
_neutral = numpy_jit(lambda model: model.neutral())
CASES = list(ROBOTS) + [f"bundled:{n}" for n in BUNDLED_SIZES]


def _path_and_floating(case: str) -> tuple[str, bool]:
    if case.startswith("bundled:"):
        name = case.removeprefix("bundled:")
        path = importlib.resources.files("jointdyn").joinpath("models", f"{name}.urdf")
        return str(path), BUNDLED_SIZES[name][2]
    rel, floating = ROBOTS[case]
    return robot_path(rel), floating


_CACHE: dict[str, tuple] = {}


def _models(case: str):
    """(ours, Pinocchio's) for a test case, loaded once per session."""
    if case not in _CACHE:
        path, floating = _path_and_floating(case)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # panda's mimic finger
            model = jd.load_urdf(path, floating_base=floating)
        pmodel = (
            pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())
            if floating
            else pin.buildModelFromUrdf(path)
        )
        _CACHE[case] = (model, pmodel)
    return _CACHE[case]


def _state(model, seed):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = _random(model, k1)
    v = jax.random.normal(k2, (model.nv,))
    vdot = jax.random.normal(k3, (model.nv,))
    return q, v, vdot


# --------------------------------------------------------------------------------------------
# against Pinocchio


@pytest.mark.parametrize("case", CASES)
def test_sizes_names_and_mass_match_pinocchio(case):
    model, pmodel = _models(case)
    assert (model.nq, model.nv) == (pmodel.nq, pmodel.nv)
    assert model.nbodies == pmodel.njoints - 1
    assert sorted(model.joint_names) == sorted(pmodel.names[1:])
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        pj = pmodel.joints[pmodel.getJointId(name)]
        assert (joint.nq, joint.nv) == (pj.nq, pj.nv), name
    np.testing.assert_allclose(model.total_mass(), pin.computeTotalMass(pmodel), rtol=1e-12)
    # depth-first order: every parent before its children, with matching parent joints
    for i, parent in enumerate(model.parents):
        assert parent < i
        pparent = pmodel.parents[pmodel.getJointId(model.joint_names[i])]
        expected = "universe" if parent < 0 else model.joint_names[parent]
        assert pmodel.names[pparent] == expected


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("configuration", ["neutral", "random"])
def test_link_frames_match_pinocchio(case, configuration):
    model, pmodel = _models(case)
    q = _neutral(model) if configuration == "neutral" else _state(model, 0)[0]
    X_WF = jax.tree.map(np.asarray, _fk(model, q).X_WF)  # NumPy: no compiled op per index
    data = pmodel.createData()
    pin.framesForwardKinematics(pmodel, data, q_to_pinocchio(model, pmodel, q))
    # every link is a frame of ours, under its name (a root link named "world" is the world)
    links = {f.name for f in pmodel.frames if f.type == pin.FrameType.BODY} - {"world"}
    assert set(model.frame_names) == links
    for k, name in enumerate(model.frame_names):
        oMf = data.oMf[pmodel.getFrameId(name, pin.FrameType.BODY)]
        np.testing.assert_allclose(X_WF.R[k], oMf.rotation, rtol=0, atol=1e-10, err_msg=name)
        np.testing.assert_allclose(X_WF.p[k], oMf.translation, rtol=0, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("bundled:")])
def test_dynamics_match_pinocchio(case):
    """Merged inertias (mass, COM and rotational inertia) through CRBA and RNEA. The robots
    of example-robot-data (`ROBOTS`) are compared, algorithm by algorithm and with the same
    tolerance or tighter, in test_pinocchio.py."""
    model, pmodel = _models(case)
    q, v, vdot = _state(model, 1)
    data = pmodel.createData()
    q_pin = q_to_pinocchio(model, pmodel, q)
    T = v_to_pinocchio_matrix(model, pmodel, q)
    M_pin = pin.crba(pmodel, data, q_pin)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    np.testing.assert_allclose(_crba(model, q), T.T @ M_pin @ T, rtol=0, atol=1e-9)
    a_pin = vdot_to_pinocchio(model, pmodel, q, v, vdot)
    tau_pin = pin.rnea(pmodel, data, q_pin, T @ np.asarray(v), a_pin)
    np.testing.assert_allclose(_rnea(model, q, v, vdot), T.T @ tau_pin, rtol=0, atol=1e-8)
    np.testing.assert_allclose(
        _com(model, q), pin.centerOfMass(pmodel, data, q_pin), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("case", CASES)
def test_limits_and_dynamics_parameters_match_pinocchio(case):
    model, pmodel = _models(case)
    for name, joint in zip(model.joint_names, model.joints, strict=True):
        pj = pmodel.joints[pmodel.getJointId(name)]
        qs, vs = slice(pj.idx_q, pj.idx_q + pj.nq), slice(pj.idx_v, pj.idx_v + pj.nv)
        p = joint.params
        if isinstance(joint, jd.Revolute | jd.Prismatic):
            np.testing.assert_allclose(
                p.position_lower, pmodel.lowerPositionLimit[qs], err_msg=name
            )
            np.testing.assert_allclose(
                p.position_upper, pmodel.upperPositionLimit[qs], err_msg=name
            )
        if not isinstance(joint, jd.Free):
            np.testing.assert_allclose(p.velocity_limit, pmodel.velocityLimit[vs], err_msg=name)
            np.testing.assert_allclose(p.effort_limit, pmodel.effortLimit[vs], err_msg=name)
            np.testing.assert_allclose(p.damping, pmodel.damping[vs], err_msg=name)
            np.testing.assert_allclose(p.friction, pmodel.friction[vs], err_msg=name)


def test_joint_order_is_document_order_not_pinocchio_order():
    """Depth-first, children in document order: ANYmal's legs come LF, RF, LH, RH as written
    (Pinocchio sorts them by name: LF, LH, RF, RH)."""
    model, pmodel = _models("anymal")
    legs = [n.split("_")[0] for n in model.joint_names[1::3]]
    assert model.joint_names[0] == "root_joint"
    assert legs == ["LF", "RF", "LH", "RH"]
    assert [n.split("_")[0] for n in list(pmodel.names)[2::3]] == ["LF", "LH", "RF", "RH"]


def test_fixed_base_root_and_world_link():
    ur5, _ = _models("ur5")  # its root link is called "world": it is the world itself
    assert "world" not in ur5.frame_names
    assert ur5.topology.frame_parents[ur5.frame_index("base_link")] == -1
    panda, _ = _models("panda")  # root link panda_link0 stays a frame on the world
    assert panda.topology.frame_parents[panda.frame_index("panda_link0")] == -1
    assert "panda_link0" not in panda.body_names


def test_floating_base_root_body():
    model, _ = _models("solo12")
    assert model.joint_names[0] == "root_joint"
    assert model.body_names[0] == "base_link"
    assert isinstance(model.joints[0], jd.Free)
    assert model.parents[0] == -1


def test_path_like_and_xml_text_load_the_same():
    path, _ = _path_and_floating("bundled:arm7")
    from pathlib import Path

    a = jd.load_urdf(path)
    b = jd.load_urdf(Path(path))
    c = jd.load_urdf("\n  " + Path(path).read_text())
    for other in (b, c):
        assert other.topology == a.topology
        np.testing.assert_array_equal(other.inertias.inertia, a.inertias.inertia)
        np.testing.assert_array_equal(other.X_PF.R, a.X_PF.R)


# --------------------------------------------------------------------------------------------
# bundled models


@pytest.mark.parametrize("name", list(BUNDLED_SIZES))
def test_bundled_model_loads(name):
    model = jd.load_model(name)
    nq, nv, floating = BUNDLED_SIZES[name]
    assert (model.nq, model.nv) == (nq, nv)
    assert isinstance(model.joints[0], jd.Free) == floating
    assert float(model.total_mass()) > 0
    q = _neutral(model)
    assert np.all(np.isfinite(_aba(model, q, jnp.zeros(nv), jnp.zeros(nv))))


def test_bundled_list_and_unknown_name():
    assert set(jd.list_models()) == set(BUNDLED_SIZES)
    with pytest.raises(ValueError, match="double_pendulum"):
        jd.load_model("no_such_robot")


def test_bundled_frames():
    arm = jd.load_model("arm7")
    assert {"ee_link", "tcp"} <= set(arm.frame_names)
    assert arm.topology.frame_parents[arm.frame_index("tcp")] == arm.body_index("link7")
    np.testing.assert_allclose(float(arm.total_mass()), 17.4)  # gripper merged, base dropped
    arm_params = arm.joint("joint1").params
    assert float(arm_params.damping[0]) == 0.5 and float(arm_params.position_upper[0]) == 2.96
    humanoid = jd.load_model("humanoid")
    for frame in ("l_sole", "r_sole", "l_hand", "r_hand", "camera", "imu"):
        assert frame in humanoid.frame_names
    assert humanoid.body_names[0] == "torso"


# --------------------------------------------------------------------------------------------
# conventions, on small hand-written robots


def _robot(body: str) -> str:
    return f'<robot name="test">{body}</robot>'


def _link(name, mass=None, xyz="0 0 0", rpy="0 0 0", diag=(0.01, 0.02, 0.025)):
    if mass is None:
        return f'<link name="{name}"/>'
    ixx, iyy, izz = diag
    return (
        f'<link name="{name}"><inertial><origin xyz="{xyz}" rpy="{rpy}"/>'
        f'<mass value="{mass}"/><inertia ixx="{ixx}" ixy="0" ixz="0" iyy="{iyy}" iyz="0" '
        f'izz="{izz}"/></inertial></link>'
    )


def _joint(name, kind, parent, child, extra="", xyz="0 0 0", rpy="0 0 0"):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz}" rpy="{rpy}"/>{extra}</joint>'
    )


def test_fixed_joint_merges_inertia_and_keeps_the_frame():
    rot = "0.3 -0.2 0.5"
    urdf = _robot(
        _link("base")
        + _link("a", 2.0, xyz="0.1 0 0")
        + _link("b", 1.0, xyz="0 0.2 0", rpy=rot)
        + _link("c", 0.5)
        + _joint("j", "revolute", "base", "a", '<axis xyz="0 0 1"/>')
        + _joint("weld", "fixed", "a", "b", xyz="0 0 0.3", rpy="0.1 0.2 0.3")
        + _joint("k", "prismatic", "b", "c", '<axis xyz="1 0 0"/>', xyz="0.5 0 0")
    )
    model = jd.load_urdf(urdf)
    assert model.body_names == ("a", "c") and model.joint_names == ("j", "k")
    assert model.parents == (-1, 0)
    X_ab = jd.Transform.from_rpy(jnp.array([0.1, 0.2, 0.3]), jnp.array([0.0, 0.0, 0.3]))
    R_b = jd.Transform.from_rpy(jnp.array([0.3, -0.2, 0.5])).R
    a = jd.SpatialInertia(2.0, jnp.array([0.1, 0, 0]), jnp.diag(jnp.array([0.01, 0.02, 0.025])))
    b = jd.SpatialInertia(
        1.0, jnp.array([0, 0.2, 0]), R_b @ jnp.diag(jnp.array([0.01, 0.02, 0.025])) @ R_b.T
    )
    expected = a + b.transform(X_ab)
    got = jax.tree.map(lambda x: x[0], model.inertias)
    for field in ("mass", "com", "inertia"):
        np.testing.assert_allclose(
            getattr(got, field), getattr(expected, field), rtol=0, atol=1e-14
        )
    # b is a frame on a; c hangs from a at the composed origin
    k = model.frame_index("b")
    assert model.topology.frame_parents[k] == 0
    np.testing.assert_allclose(model.X_BF.R[k], X_ab.R, rtol=0, atol=1e-15)
    X_PF_c = X_ab @ jd.Transform(jnp.eye(3), jnp.array([0.5, 0.0, 0.0]))
    np.testing.assert_allclose(model.X_PF.p[1], X_PF_c.p, rtol=0, atol=1e-15)
    np.testing.assert_allclose(model.X_PF.R[1], X_PF_c.R, rtol=0, atol=1e-15)
    # a fixed joint to the world: a world frame, its inertia dropped
    urdf = _robot(
        _link("base", 3.0)
        + _link("plate", 4.0)
        + _link("a", 1.0)
        + _joint("w", "fixed", "base", "plate", xyz="0 0 1")
        + _joint("j", "revolute", "plate", "a")
    )
    model = jd.load_urdf(urdf)
    assert float(model.total_mass()) == 1.0
    assert model.topology.frame_parents[model.frame_index("plate")] == -1
    np.testing.assert_allclose(model.X_PF.p[0], [0, 0, 1])


def test_joint_types_and_defaults():
    urdf = _robot(
        _link("base")
        + "".join(_link(n, 1.0) for n in ("r", "c", "p", "f", "pl"))
        + _joint("rev", "revolute", "base", "r")  # no <axis>: (1, 0, 0); no <limit>: ±inf
        + _joint(
            "cont",
            "continuous",
            "r",
            "c",
            '<axis xyz="0 2 0"/><limit effort="3" velocity="4"/><dynamics damping="0.5"/>',
        )
        + _joint("pri", "prismatic", "c", "p", '<limit lower="-1" upper="2" effort="5"/>')
        + _joint("float", "floating", "p", "f")
        + _joint("plan", "planar", "f", "pl", '<axis xyz="1 0 0"/>', xyz="0 0 1")
    )
    model = jd.load_urdf(urdf)
    rev, cont, pri, free, planar = model.joints
    assert isinstance(rev, jd.Revolute) and isinstance(cont, jd.RevoluteUnbounded)
    assert isinstance(pri, jd.Prismatic) and isinstance(free, jd.Free)
    assert isinstance(planar, jd.Planar) and planar.plane == "xy"
    np.testing.assert_allclose(rev.axis, [1, 0, 0])
    assert np.isinf(rev.params.position_lower).all() and np.isinf(rev.params.effort_limit).all()
    np.testing.assert_allclose(cont.axis, [0, 1, 0])
    assert float(cont.params.effort_limit[0]) == 3 and float(cont.params.damping[0]) == 0.5
    assert float(pri.params.position_lower[0]) == -1 and float(pri.params.position_upper[0]) == 2
    assert np.isinf(pri.params.velocity_limit).all()  # missing attribute: unlimited
    assert model.nq == 1 + 2 + 1 + 7 + 3
    # planar about x: at q = 0 the child sits at the joint origin with the parent's axes;
    # it translates in the y-z plane and turns about x
    X_WF = jd.forward_kinematics(model, model.neutral()).X_WF
    k = model.frame_index("pl")
    np.testing.assert_allclose(X_WF.R[k], np.eye(3), rtol=0, atol=1e-15)
    np.testing.assert_allclose(X_WF.p[k], [0, 0, 1], rtol=0, atol=1e-15)
    q = model.neutral().at[model.q_slice("plan")].set(jnp.array([0.3, 0.4, 0.5]))
    X = jd.forward_kinematics(model, q).X_WF
    assert abs(float(X.p[k][0])) < 1e-15  # no motion along the normal
    np.testing.assert_allclose(X.R[k] @ jnp.array([1.0, 0, 0]), [1, 0, 0], rtol=0, atol=1e-15)


def test_mimic_warns_and_loads_an_independent_joint():
    urdf = _robot(
        _link("base")
        + _link("a", 1.0)
        + _link("b", 1.0)
        + _joint("lead", "revolute", "base", "a", '<limit lower="-1" upper="1"/>')
        + _joint("follow", "revolute", "a", "b", '<mimic joint="lead" multiplier="2"/>')
    )
    with pytest.warns(UserWarning, match=r"1 <mimic> joint\(s\) .*'follow' \(mimics 'lead'\)"):
        model = jd.load_urdf(urdf)
    assert model.joint_names == ("lead", "follow") and model.nq == 2


def test_non_dynamic_elements_are_skipped_silently():
    urdf = """
    <robot name="decorated" xmlns:xacro="http://www.ros.org/wiki/xacro">
      <material name="blue"><color rgba="0 0 1 1"/></material>
      <link name="base">
        <visual><geometry><box size="1 1 1"/></geometry><material name="blue"/></visual>
        <collision><geometry><sphere radius="0.5"/></geometry></collision>
      </link>
      <link name="arm">
        <inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/>
        </inertial>
        <visual><geometry><mesh filename="package://x/arm.stl"/></geometry></visual>
      </link>
      <joint name="j" type="revolute">
        <parent link="base"/><child link="arm"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/>
        <safety_controller soft_lower_limit="-0.9" soft_upper_limit="0.9" k_velocity="1"/>
        <calibration rising="0.0"/>
      </joint>
      <gazebo reference="arm"><material>Gazebo/Blue</material>
        <sensor name="cam" type="camera"/></gazebo>
      <transmission name="t"><type>transmission_interface/SimpleTransmission</type>
        <joint name="j"><hardwareInterface>EffortJointInterface</hardwareInterface></joint>
        <actuator name="motor"><mechanicalReduction>1</mechanicalReduction></actuator>
      </transmission>
    </robot>
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = jd.load_urdf(urdf)
    assert model.joint_names == ("j",) and float(model.total_mass()) == 1.0


def test_robots_module_is_importable_from_tests():
    import robots

    assert set(robots.ROBOTS) >= {"panda", "ur5", "solo12", "anymal", "talos", "allegro", "g1"}
    assert robots.ROBOTS_DIR is not None and robots.ROBOTS_DIR.is_dir()
