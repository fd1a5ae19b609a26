"""Malformed URDFs raise `ValueError` naming the element at fault."""

import jax
import pytest

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

INERTIAL = (
    '<inertial><mass value="1"/>'
    '<inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'
)


def robot(*, links=None, joints=None, extra_links="", extra_joints=""):
    """A two-link robot (`base` → `arm` by revolute joint `shoulder`) with parts replaced."""
    links = f'<link name="base"/><link name="arm">{INERTIAL}</link>' if links is None else links
    if joints is None:
        joints = (
            '<joint name="shoulder" type="revolute"><parent link="base"/><child link="arm"/>'
            '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>'
        )
    return f'<robot name="r">{links}{extra_links}{joints}{extra_joints}</robot>'


def joint(name="shoulder", kind="revolute", parent="base", child="arm", inner=""):
    attrs = "".join(f' {k}="{v}"' for k, v in (("name", name), ("type", kind)) if v is not None)
    parent_el = "" if parent is None else f'<parent link="{parent}"/>'
    child_el = "" if child is None else f'<child link="{child}"/>'
    return f"<joint{attrs}>{parent_el}{child_el}{inner}</joint>"


def arm_inertial(
    mass="1", inertia='ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"', origin=""
):
    return (
        f'<link name="base"/><link name="arm"><inertial>{origin}<mass value="{mass}"/>'
        f"<inertia {inertia}/></inertial></link>"
    )


def test_valid_baseline_loads():
    assert jd.load_urdf(robot()).nq == 1


# -- the document ------------------------------------------------------------------------------


def test_unparsable_xml():
    with pytest.raises(ValueError, match="not well-formed XML"):
        jd.load_urdf('<robot name="r"><link name="a"></robot>')


def test_no_robot_element():
    with pytest.raises(ValueError, match="<robot>"):
        jd.load_urdf('<sdf version="1.6"><model name="m"/></sdf>')


def test_robot_without_links():
    with pytest.raises(ValueError, match="robot 'r' has no <link>"):
        jd.load_urdf('<robot name="r"/>')


def test_robot_without_moving_joints():
    with pytest.raises(ValueError, match="no moving joint"):
        jd.load_urdf(robot(joints=joint(kind="fixed")))


# -- topology --------------------------------------------------------------------------------


def test_missing_parent_link():
    with pytest.raises(ValueError, match="joint 'shoulder': parent link 'torso'"):
        jd.load_urdf(robot(joints=joint(parent="torso")))


def test_missing_child_link():
    with pytest.raises(ValueError, match="joint 'shoulder': child link 'hand'"):
        jd.load_urdf(robot(joints=joint(child="hand")))


def test_two_roots():
    with pytest.raises(ValueError, match="several root links.*'base'.*'spare'"):
        jd.load_urdf(robot(extra_links='<link name="spare"/>'))


def test_link_child_of_two_joints():
    extra = '<link name="other"/>' + joint(name="elbow", parent="other", child="arm")
    with pytest.raises(ValueError, match="link 'arm' is the child of two joints.*'elbow'"):
        jd.load_urdf(robot(extra_links=extra))


def test_loop():
    # base → arm → hand → forearm → hand ... : hand and forearm form a loop of their own
    links = '<link name="base"/><link name="arm"/><link name="hand"/><link name="forearm"/>'
    joints = (
        joint()
        + joint(name="wrist", parent="forearm", child="hand")
        + joint(name="elbow", parent="hand", child="forearm")
    )
    with pytest.raises(
        ValueError, match="joints 'wrist', 'elbow' form a loop through links 'hand', 'forearm'"
    ):
        jd.load_urdf(robot(links=links, joints=joints))


def test_loop_without_root():
    links = '<link name="a"/><link name="b"/>'
    joints = joint(name="ab", parent="a", child="b") + joint(name="ba", parent="b", child="a")
    with pytest.raises(ValueError, match="joints '(ab|ba)', '(ab|ba)' form a loop"):
        jd.load_urdf(robot(links=links, joints=joints))


def test_joint_onto_itself():
    links = '<link name="base"/><link name="arm"/>'
    joints = joint() + joint(name="self", parent="base", child="base")
    with pytest.raises(ValueError, match="joints 'self' form a loop through links 'base'"):
        jd.load_urdf(robot(links=links, joints=joints))


def test_duplicate_link():
    with pytest.raises(ValueError, match="link 'arm' is defined twice"):
        jd.load_urdf(robot(extra_links='<link name="arm"/>'))


def test_duplicate_joint():
    extra = '<link name="hand"/>' + joint(name="shoulder", parent="arm", child="hand")
    with pytest.raises(ValueError, match="joint 'shoulder' is defined twice"):
        jd.load_urdf(robot(extra_links=extra))


def test_link_named_world_below_the_root():
    extra = '<link name="world"/>' + joint(name="j2", parent="arm", child="world")
    with pytest.raises(ValueError, match="link 'world'"):
        jd.load_urdf(robot(extra_links=extra))


def test_world_root_cannot_float():
    links = f'<link name="world"/><link name="arm">{INERTIAL}</link>'
    with pytest.raises(ValueError, match="link 'world'"):
        jd.load_urdf(robot(links=links, joints=joint(parent="world")), floating_base=True)


# -- joints ----------------------------------------------------------------------------------


def test_unknown_joint_type():
    with pytest.raises(ValueError, match="joint 'shoulder' has unknown type 'ball'"):
        jd.load_urdf(robot(joints=joint(kind="ball")))


def test_zero_axis():
    with pytest.raises(ValueError, match="joint 'shoulder' has a zero <axis>"):
        jd.load_urdf(robot(joints=joint(inner='<axis xyz="0 0 0"/>')))


@pytest.mark.parametrize("kind", ["continuous", "prismatic", "planar"])
def test_zero_axis_other_types(kind):
    with pytest.raises(ValueError, match="joint 'shoulder' has a zero <axis>"):
        jd.load_urdf(robot(joints=joint(kind=kind, inner='<axis xyz="0 0 0"/>')))


def test_lower_limit_above_upper():
    inner = '<limit lower="1" upper="-1" effort="1" velocity="1"/>'
    with pytest.raises(ValueError, match="joint 'shoulder': <limit> lower 1.0 is above upper"):
        jd.load_urdf(robot(joints=joint(inner=inner)))


def test_negative_velocity_limit():
    inner = '<limit lower="-1" upper="1" effort="1" velocity="-2"/>'
    with pytest.raises(ValueError, match="joint 'shoulder'.*velocity_limit"):
        jd.load_urdf(robot(joints=joint(inner=inner)))


def test_negative_damping():
    with pytest.raises(ValueError, match="joint 'shoulder'.*damping"):
        jd.load_urdf(robot(joints=joint(inner='<dynamics damping="-1"/>')))


def test_joint_without_name():
    with pytest.raises(ValueError, match="<joint> number 1 has no 'name'"):
        jd.load_urdf(robot(joints=joint(name=None)))


def test_joint_without_type():
    with pytest.raises(ValueError, match="joint 'shoulder' has no 'type'"):
        jd.load_urdf(robot(joints=joint(kind=None)))


def test_joint_without_parent():
    with pytest.raises(ValueError, match="joint 'shoulder'.*no <parent>"):
        jd.load_urdf(robot(joints=joint(parent=None)))


def test_joint_without_child():
    with pytest.raises(ValueError, match="joint 'shoulder'.*no <child>"):
        jd.load_urdf(robot(joints=joint(child=None)))


def test_parent_without_link_attribute():
    bad = '<joint name="shoulder" type="revolute"><parent/><child link="arm"/></joint>'
    with pytest.raises(ValueError, match="joint 'shoulder': <parent> has no 'link'"):
        jd.load_urdf(robot(joints=bad))


def test_link_without_name():
    with pytest.raises(ValueError, match="<link> has no 'name'"):
        jd.load_urdf(robot(extra_links="<link/>"))


# -- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inner, attr",
    [
        ('<origin xyz="0 zero 0"/>', "xyz"),
        ('<origin rpy="0 0 pi"/>', "rpy"),
        ('<axis xyz="0 0 one"/>', "xyz"),
        ('<limit lower="-1" upper="high" effort="1" velocity="1"/>', "upper"),
        ('<limit lower="low" upper="1" effort="1" velocity="1"/>', "lower"),
        ('<limit lower="-1" upper="1" effort="lots" velocity="1"/>', "effort"),
        ('<limit lower="-1" upper="1" effort="1" velocity="fast"/>', "velocity"),
        ('<dynamics damping="some"/>', "damping"),
        ('<dynamics friction="nan"/>', "friction"),
    ],
)
def test_non_numeric_joint_attribute(inner, attr):
    with pytest.raises(ValueError, match=f"joint 'shoulder': <[a-z]+ {attr}="):
        jd.load_urdf(robot(joints=joint(inner=inner)))


@pytest.mark.parametrize(
    "inner, attr",
    [
        ('<origin xyz="0 0"/>', "xyz"),
        ('<origin rpy="0 0 0 0"/>', "rpy"),
        ('<axis xyz="1"/>', "xyz"),
        ('<limit lower="-1 0" upper="1" effort="1" velocity="1"/>', "lower"),
    ],
)
def test_wrong_number_of_components(inner, attr):
    with pytest.raises(ValueError, match=f"joint 'shoulder': <[a-z]+ {attr}=.*expected"):
        jd.load_urdf(robot(joints=joint(inner=inner)))


@pytest.mark.parametrize(
    "links, attr",
    [
        (arm_inertial(mass="heavy"), "value"),
        (arm_inertial(inertia='ixx="a" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"'), "ixx"),
        (arm_inertial(inertia='ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="inf"'), "izz"),
        (arm_inertial(origin='<origin xyz="0 0 x"/>'), "xyz"),
        (arm_inertial(origin='<origin xyz="0 0 0" rpy="0 0"/>'), "rpy"),
    ],
)
def test_bad_inertial_numbers(links, attr):
    with pytest.raises(ValueError, match=f"link 'arm': <[a-z]+ {attr}="):
        jd.load_urdf(robot(links=links))


def test_missing_mass():
    links = '<link name="base"/><link name="arm"><inertial><inertia ixx="1"/></inertial></link>'
    with pytest.raises(ValueError, match="link 'arm': <inertial> has no <mass>"):
        jd.load_urdf(robot(links=links))


def test_missing_inertia_attribute():
    links = arm_inertial(inertia='ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0"')
    with pytest.raises(ValueError, match="link 'arm': <inertia> has no 'izz'"):
        jd.load_urdf(robot(links=links))


# -- physics ---------------------------------------------------------------------------------


def test_negative_mass():
    with pytest.raises(ValueError, match="link 'arm' has negative mass"):
        jd.load_urdf(robot(links=arm_inertial(mass="-1")))


def test_inertia_not_positive_semidefinite():
    links = arm_inertial(inertia='ixx="0.1" ixy="0" ixz="0" iyy="-0.1" iyz="0" izz="0.1"')
    with pytest.raises(ValueError, match="link 'arm'.*not positive semi-definite"):
        jd.load_urdf(robot(links=links))


def test_inertia_breaks_triangle_inequality():
    links = arm_inertial(inertia='ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.5"')
    with pytest.raises(ValueError, match="link 'arm'.*triangle inequality"):
        jd.load_urdf(robot(links=links))


def test_bad_inertia_of_a_merged_link_names_the_links():
    """A welded link's inertia is checked as part of its body: the message names both."""
    flat = '<inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="1"/>'
    extra = f'<link name="plate"><inertial><mass value="0"/>{flat}</inertial></link>' + joint(
        name="weld", kind="fixed", parent="arm", child="plate"
    )
    links = '<link name="base"/><link name="arm"/>'
    with pytest.raises(ValueError, match="link 'arm' \\(with the links fixed to it: 'plate'\\)"):
        jd.load_urdf(robot(links=links, extra_links=extra))
