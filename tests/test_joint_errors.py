"""Construction errors: a `ValueError` whose message names the argument at fault."""

import numpy as np
import pytest

import jointdyn as jd

AXIS_JOINTS = [jd.Revolute, jd.Prismatic, jd.Screw, jd.RevoluteUnbounded, jd.Cylindrical]


@pytest.mark.parametrize("cls", AXIS_JOINTS)
def test_zero_axis(cls):
    with pytest.raises(ValueError, match="axis"):
        cls((0.0, 0.0, 0.0))


@pytest.mark.parametrize("cls", AXIS_JOINTS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_axis(cls, bad):
    with pytest.raises(ValueError, match="axis"):
        cls((1.0, bad, 0.0))


@pytest.mark.parametrize("cls", AXIS_JOINTS)
@pytest.mark.parametrize("axis", [(1.0, 0.0), (1.0, 0.0, 0.0, 0.0), ((1.0, 0.0, 0.0),), 1.0])
def test_axis_shape(cls, axis):
    with pytest.raises(ValueError, match="axis"):
        cls(axis)


def test_universal_axes_not_perpendicular():
    with pytest.raises(ValueError, match="axis1.*axis2"):
        jd.Universal((1.0, 0.0, 0.0), (1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="axis2"):
        jd.Universal((1.0, 0.0, 0.0), (0.0, 0.0, 0.0))


def test_gimbal_axes_not_perpendicular():
    with pytest.raises(ValueError, match=r"axes\[1\].*axes\[2\]"):
        jd.Gimbal(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 1.0, 1.0)))
    with pytest.raises(ValueError, match="axes"):
        jd.Gimbal(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)))  # two axes, not three
    with pytest.raises(ValueError, match=r"axes\[0\]"):
        jd.Gimbal(((0.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))


@pytest.mark.parametrize("cls", [jd.Revolute, jd.Prismatic, jd.Cylindrical, jd.SpaceXYZ])
def test_position_lower_above_upper(cls):
    with pytest.raises(ValueError, match="position_lower"):
        cls(position_lower=1.0, position_upper=-1.0)
    cls(position_lower=-1.0, position_upper=-1.0)  # equal bounds are allowed


def test_position_lower_above_upper_one_coordinate():
    with pytest.raises(ValueError, match="position_lower"):
        jd.Planar(position_lower=[0.0, 0.0, 2.0], position_upper=[1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    "name",
    ["damping", "friction", "stop_stiffness", "stop_damping", "velocity_limit", "effort_limit"],
)
@pytest.mark.parametrize("cls", [jd.Revolute, jd.Ball, jd.Free, jd.Planar])
def test_negative_parameter(cls, name):
    with pytest.raises(ValueError, match=name):
        cls(**{name: -0.5})
    cls(**{name: 0.5})  # and a non-negative one is accepted


def test_nan_parameter():
    with pytest.raises(ValueError, match="damping"):
        jd.Revolute(damping=np.nan)


@pytest.mark.parametrize(
    "name", ["position_lower", "position_upper", "default_position", "spring_reference"]
)
def test_nan_position_parameter(name):
    """NaN limits, default positions and spring references were accepted (no comparison with
    NaN is true); an infinite limit is no limit and stays allowed."""
    with pytest.raises(ValueError, match=name):
        jd.Revolute(**{name: np.nan})
    jd.Revolute(position_lower=-np.inf, position_upper=np.inf)


@pytest.mark.parametrize(
    "cls, name, value",
    [
        (jd.Revolute, "damping", [0.1, 0.2, 0.3]),
        (jd.Revolute, "position_lower", [-1.0, -1.0]),
        (jd.Cylindrical, "friction", [0.1, 0.2, 0.3]),
        (jd.Ball, "damping", [0.1, 0.2, 0.3, 0.4]),
        (jd.Ball, "stop_stiffness", [1.0, 1.0, 1.0]),
        (jd.Free, "effort_limit", np.ones((6, 1))),
        (jd.Planar, "default_position", [0.0, 0.0]),
    ],
)
def test_parameter_shape(cls, name, value):
    with pytest.raises(ValueError, match=name):
        cls(**{name: value})


def test_parameter_shape_broadcasts():
    joint = jd.Cylindrical(damping=0.3, friction=[0.1, 0.2])
    assert joint.params.damping.shape == (2,) and joint.params.friction.shape == (2,)


def test_unknown_parameter():
    with pytest.raises(TypeError):
        jd.Revolute(dampening=0.1)


@pytest.mark.parametrize("plane", ["xx", "XY", "zx", "", "xyz"])
def test_planar_bad_plane(plane):
    with pytest.raises(ValueError, match="plane"):
        jd.Planar(plane)


@pytest.mark.parametrize("pitch", [[0.1, 0.2], np.ones((1,)), np.ones((2, 2))])
def test_screw_pitch_not_scalar(pitch):
    with pytest.raises(ValueError, match="pitch"):
        jd.Screw((0.0, 0.0, 1.0), pitch)


@pytest.mark.parametrize("pitch", [np.nan, np.inf])
def test_screw_pitch_not_finite(pitch):
    with pytest.raises(ValueError, match="pitch"):
        jd.Screw((0.0, 0.0, 1.0), pitch)


@pytest.mark.parametrize("bad", [3, "revolute", jd.Transform.identity(), jd.Revolute])
def test_composite_of_non_joint(bad):
    with pytest.raises(ValueError, match="joints"):
        jd.Composite([jd.Revolute(), bad])


def test_composite_empty():
    with pytest.raises(ValueError, match="joints"):
        jd.Composite([])
