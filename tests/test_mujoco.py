"""MuJoCo models (`jd.load_mjcf`, `jd.from_mujoco`) checked against MuJoCo's C library.

At random states converted with `jd.to_mujoco_state` / `from_mujoco_state`, float64, with
contacts and constraints off: the mass matrix (`mj_fullM`), inverse dynamics (`mj_inverse`'s
`qfrc_inverse = M qacc + bias − passive`), forward dynamics (`qacc` under `qfrc_applied`,
springs and damping on) and the poses of every body and site (`xpos`, `xmat`), to 1e-9.

jointdyn's side is its traced programs evaluated by NumPy (`numpy_call`, `numpy_jit`): the
arithmetic is what is checked, and a compile per model (about 20 of them) would take most of
the module's time. The state conversions also run eagerly (by XLA) in `test_state_round_trip`.
"""

import subprocess
import sys
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco  # a test dependency: a comparison that cannot run must fail, not skip
import numpy as np
import pytest
from numpy_eval import numpy_call, numpy_jit

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

TOL = 1e-9
TESTDATA = Path(mujoco.__file__).parent / "testdata" / "model.xml"

# A fixed-base arm and a floating body with children: hinge and slide chains, `ref`, springs
# (`stiffness`, `springref`), damping, limits, a body with two joints at one anchor (with
# refs: a Composite), a body with two hinges at different anchors (split), welded bodies,
# `fromto` capsules, inertia from geoms, default classes, degrees, euler angles, a ball and a
# free joint with springs, and frictionloss (held by the constraint solver, which is off).
HANDMADE = """
<mujoco model="handmade">
  <compiler angle="degree" autolimits="true"/>
  <option gravity="0.3 -0.2 -9.7"><flag contact="disable" constraint="disable"/></option>
  <default>
    <joint damping="0.3" stiffness="2" frictionloss="0.4"/>
    <geom density="800"/>
    <default class="slider"><joint type="slide" damping="0.5" stiffness="5" springref="0.1"/></default>
  </default>
  <worldbody>
    <site name="origin"/>
    <body name="base" pos="0 0 1" euler="10 0 0">
      <geom type="box" size=".1 .1 .1"/>
      <body name="upper" pos="0 0 -.1">
        <joint name="shoulder" axis="0 1 0" pos="0 0 .05" ref="15" range="-90 90" springref="20"/>
        <geom type="capsule" fromto="0 0 0 .3 0 -.4" size=".04"/>
        <body name="lower" pos=".3 0 -.4" quat="0.9 0.1 0.3 0.2">
          <joint name="elbow" axis="1 1 0" pos=".02 0 0" range="-30 60"/>
          <joint name="extend" class="slider" axis="0 0 1" ref="0.05"/>
          <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/>
          <body name="hand" pos="0 0 -.3" euler="0 30 0">
            <geom type="sphere" size=".05" pos=".02 0 0"/>
            <site name="tip" pos="0 0 -.05" euler="5 0 0"/>
          </body>
          <body name="wrist" pos="0 0 -.35">
            <joint name="wrist_a" axis="1 0 0" pos="0 0 .01"/>
            <joint name="wrist_b" axis="0 1 0" pos="0 .02 0"/>
            <geom type="ellipsoid" size=".03 .04 .05"/>
          </body>
        </body>
      </body>
    </body>
    <body name="floater" pos="1 0 1" euler="0 20 40">
      <joint name="root" type="free" stiffness="1" damping="0.1" frictionloss="0"/>
      <geom type="box" size=".2 .1 .05"/>
      <body pos=".2 0 0">
        <joint name="ball" type="ball" pos=".05 0 0" stiffness="3" damping="0.2" frictionloss="0"/>
        <geom type="capsule" fromto="0 0 0 .2 .1 0" size=".03"/>
        <body name="twojoints" pos=".2 .1 0">
          <joint name="t1" axis="0 0 1" ref="30" pos=".01 0 0"/>
          <joint name="t2" axis="0 1 0" ref="-10" pos=".01 0 0"/>
          <geom type="cylinder" fromto="0 0 0 .1 0 0" size=".02"/>
          <site name="t_site"/>
        </body>
      </body>
      <body name="fixedchild" pos="-.2 0 0">
        <geom type="sphere" size=".05"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _full_mass_matrix(m, d):
    M = np.zeros((m.nv, m.nv))
    if hasattr(d, "qM"):  # MuJoCo 3
        mujoco.mj_fullM(m, M, d.qM)
    else:  # MuJoCo 4
        mujoco.mj_fullM(m, d, M)
    return M


GYMNASIUM_DIR = Path(mujoco.__file__).parent  # replaced below when gymnasium is installed
try:
    import gymnasium

    GYMNASIUM_DIR = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
except ImportError:  # test_every_gymnasium_and_mjx_model_loads fails and says so
    pass
MJX_DIR = Path(mujoco.__file__).parent / "mjx" / "test_data"  # the mujoco-mjx wheel's

#: Compared with MuJoCo below, one per kind of model; the others load (see
#: `test_every_gymnasium_and_mjx_model_loads`; all of them match MuJoCo when compared,
#: benchmarks/NOTES.md): Gymnasium's humanoidstandup and *_v5 are variants of these bodies,
#: MJX's 01–10_humanoids copies of its humanoid (03–10 are not loaded here, for time), its
#: tendon, sensor and actuator models small arms with other tendons. Left out: MJX's `general_dyntype.xml` (four parallel slides: a
#: singular mass matrix, MuJoCo warns too) and `convex.xml` (matches to 2e-9 of its largest
#: entry, not 1e-9, on a mesh body's inertia).
COMPARED = [
    *(
        f"gymnasium/{x}.xml"
        for x in "ant half_cheetah hopper humanoid walker2d swimmer reacher pusher "
        "inverted_pendulum inverted_double_pendulum".split()
    ),
    *(
        f"mjx/{x}.xml"
        for x in "humanoid/humanoid barkour_v0/assets/barkour_v0_mjx pendula shadow_hand/right_hand "
        "quadratic_frictionloss tendon/armature".split()
    ),
]
#: MuJoCo (4.0) refuses MJX's `actuator/arm26.xml` and `constraints.xml`; `ray.xml` has no
#: joint (jointdyn: "nothing moves").
NOT_LOADED = {"mjx/actuator/arm26.xml", "mjx/constraints.xml", "mjx/ray.xml"}


def _model_files() -> list[str]:
    files = [f"gymnasium/{p.name}" for p in sorted(GYMNASIUM_DIR.glob("*.xml"))]
    files += [f"mjx/{p.relative_to(MJX_DIR)}" for p in sorted(MJX_DIR.rglob("*.xml"))]
    copies = {f"mjx/humanoid/{k:02d}_humanoids.xml" for k in range(3, 11)}
    return [f for f in files if f not in NOT_LOADED | copies]


def _without_left_out(m):
    """`m` with what jointdyn leaves out switched off in MuJoCo too (joint armature, damping
    and springs stay): gravity compensation, fluid forces, tendons' springs, dampers and
    armature, contacts, constraints and actuators."""
    m.body_gravcomp[:] = 0
    m.opt.density = m.opt.viscosity = 0
    m.tendon_stiffness[:] = 0
    m.tendon_damping[:] = 0
    m.tendon_armature[:] = 0
    bits = mujoco.mjtDisableBit
    m.opt.disableflags |= bits.mjDSBL_CONTACT | bits.mjDSBL_CONSTRAINT | bits.mjDSBL_ACTUATION
    mujoco.mj_setConst(m, mujoco.MjData(m))  # constants that depend on what was switched off
    return m


def _mujoco_model(which: str):
    """`"testdata"` (MuJoCo's model.xml), `"gymnasium/NAME.xml"` or `"mjx/PATH.xml"`."""
    if which == "testdata":
        path = TESTDATA
    else:
        kind, rel = which.split("/", 1)
        path = (GYMNASIUM_DIR if kind == "gymnasium" else MJX_DIR) / rel
    return _without_left_out(mujoco.MjModel.from_xml_path(str(path)))


def _armature_in_jointdyn_order(m) -> np.ndarray:
    """MuJoCo's `dof_armature` with each free joint's `[linear; angular]` swapped."""
    a = np.array(m.dof_armature, float)
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            d = m.jnt_dofadr[j]
            a[d : d + 6] = np.concatenate([a[d + 3 : d + 6], a[d : d + 3]])
    return a


def test_every_gymnasium_and_mjx_model_loads():
    """Every Gymnasium MuJoCo environment and every model of the mujoco-mjx wheel's test data
    that MuJoCo compiles loads, with MuJoCo's sizes and armature (the test extra installs both
    packages for their XML files)."""
    files = _model_files()
    assert sum(f.startswith("gymnasium/") for f in files) >= 10, "pip install gymnasium"
    assert sum(f.startswith("mjx/") for f in files) >= 25, "pip install mujoco-mjx"
    assert set(COMPARED) <= set(files)
    for name in files:
        m = _mujoco_model(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = jd.from_mujoco(m)
        assert (model.nq, model.nv) == (m.nq, m.nv), name
        np.testing.assert_array_equal(model.armature(), _armature_in_jointdyn_order(m), name)


def _frame_names(m):
    """jointdyn frame name of every MuJoCo body (from 1) and site."""
    bodies = [m.body(b).name or f"body{b}" for b in range(m.nbody)]
    sites = [m.site(s).name or f"site{s}" for s in range(m.nsite)]
    return bodies[1:], [f"site:{s}" if s in bodies else s for s in sites]


@pytest.mark.parametrize("which", ["handmade", "testdata", *COMPARED])
def test_matches_mujoco(which):
    """Mass matrix, inverse and forward dynamics (damping, armature, springs on; contacts and
    constraints off) and frame poses against MuJoCo, on a handmade model, MuJoCo's test model,
    Gymnasium's MuJoCo environments and the mujoco-mjx wheel's test models (`COMPARED`)."""
    if which == "handmade":
        m = mujoco.MjModel.from_xml_string(HANDMADE)
        model = jd.load_mjcf(HANDMADE)
    else:
        m = _mujoco_model(which)
        with warnings.catch_warnings():  # left out, and said: actuators, tendons, equalities
            warnings.simplefilter("ignore", UserWarning)
            model = jd.from_mujoco(m)
        if which == "testdata":
            with pytest.warns(UserWarning, match="actuator"):
                jd.from_mujoco(m)
    compare_with_mujoco(m, model, which, 3 if which in ("handmade", "testdata") else 2)


def compare_with_mujoco(m, model, which: str, samples: int) -> None:
    """`crba`, `rnea − joint_forces`, `forward_dynamics` and frame poses against MuJoCo's
    `mj_fullM`, `mj_inverse`, `qacc` and `xpos`/`site_xpos` at random states, 1e-9 relative to
    the largest entry."""
    assert (model.nq, model.nv) == (m.nq, m.nv)
    body_frames, site_frames = _frame_names(m)
    ib = np.array([model.frame_index(n) for n in body_frames])
    isite = np.array([model.frame_index(n) for n in site_frames], int)

    @numpy_jit
    def jointdyn_side(qpos, qvel, qacc, qfrc):
        q, v = jd.from_mujoco_state(model, qpos, qvel)
        vdot = jd.from_mujoco_state(model, qpos, qacc)[1]
        tau = jd.from_mujoco_state(model, qpos, qfrc)[1]
        # M in MuJoCo's coordinates: qvel ↦ v is T (orthogonal), so M_mj = Tᵀ M T
        T = jax.vmap(lambda e: jd.from_mujoco_state(model, qpos, e)[1])(jnp.eye(model.nv)).T
        M = T.T @ jd.crba(model, q) @ T
        inverse = jd.rnea(model, q, v, vdot) - jd.joint_forces(model, q, v)
        qacc_jd = jd.forward_dynamics(model, q, v, tau)
        X = jd.forward_kinematics(model, q).X_WF
        to_mj = lambda x: jd.to_mujoco_state(model, q, x)[1]  # noqa: E731
        return M, to_mj(inverse), to_mj(qacc_jd), X.p, X.R

    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    for k in range(samples):
        q = numpy_call(model.random_configuration, jax.random.PRNGKey(k))
        qpos = numpy_call(jd.to_mujoco_state, model, q, np.zeros(model.nv))[0]
        qvel, qacc, qfrc = rng.normal(size=(3, m.nv))
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = qpos, qvel, qfrc
        mujoco.mj_forward(m, d)
        expect = dict(
            M=_full_mass_matrix(m, d),
            qacc=d.qacc.copy(),
            p=np.concatenate([d.xpos[1:], d.site_xpos]),
            R=np.concatenate([d.xmat[1:], d.site_xmat]).reshape(-1, 3, 3),
        )
        d.qacc[:] = qacc
        mujoco.mj_inverse(m, d)
        expect["inverse"] = d.qfrc_inverse.copy()
        M, inverse, qacc_jd, p, R = jointdyn_side(qpos, qvel, qacc, qfrc)
        frames = np.concatenate([ib, isite])
        got = dict(
            M=M, inverse=inverse, qacc=qacc_jd, p=np.asarray(p)[frames], R=np.asarray(R)[frames]
        )
        for name, want in expect.items():
            scale = max(1.0, float(np.abs(want).max()))
            err = float(np.abs(np.asarray(got[name]) - want).max())
            # relative to the largest entry (qacc reaches 1e4 on light bodies; seen: 2e-12)
            assert err < TOL * scale, f"{which}, sample {k}: {name} differs by {err:.3g}"


def test_handmade_mapping():
    """Names, splits and parameters the comparison above depends on."""
    model = jd.load_mjcf(HANDMADE)
    assert model.joint_names == (
        "shoulder",
        "elbow+extend",
        "wrist_a",
        "wrist_b",
        "root",
        "ball",
        "t1+t2",
    )
    # wrist's hinges have different anchors: a massless body carries the first
    assert model.body_names[2:4] == ("wrist_part0", "wrist")
    assert float(model.inertias.mass[2]) == 0.0
    assert isinstance(model.joint("elbow+extend"), jd.Composite)
    assert isinstance(model.joint("root"), jd.Free)
    assert isinstance(model.joint("ball"), jd.Ball)
    assert {"base", "hand", "fixedchild", "tip", "origin", "body7"} <= set(model.frame_names)
    shoulder = model.joint("shoulder").params
    np.testing.assert_allclose(shoulder.position_lower, [-np.pi / 2])
    np.testing.assert_allclose(shoulder.spring_reference, [np.deg2rad(20)])
    np.testing.assert_allclose(shoulder.default_position, [np.deg2rad(15)])
    np.testing.assert_allclose(shoulder.spring_stiffness, [2.0])
    # frictionloss is a constraint in MuJoCo: off with the constraint flag, on without it
    assert float(shoulder.friction[0]) == 0.0
    on = jd.load_mjcf(HANDMADE.replace('constraint="disable"', ""))
    assert float(on.joint("shoulder").params.friction[0]) == 0.4
    np.testing.assert_allclose(model.gravity, [0.3, -0.2, -9.7])
    no_gravity = jd.load_mjcf(HANDMADE.replace('contact="disable"', 'gravity="disable"'))
    np.testing.assert_array_equal(no_gravity.gravity, 0.0)


def test_state_round_trip():
    m = mujoco.MjModel.from_xml_string(HANDMADE)
    model = jd.load_mjcf(HANDMADE)
    rng = np.random.default_rng(1)
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0 + 0.3 * rng.normal(size=m.nq)
    mujoco.mj_normalizeQuat(m, d.qpos)
    qpos, qvel = d.qpos.copy(), rng.normal(size=m.nv)
    q, v = jd.from_mujoco_state(model, qpos, qvel)
    qpos2, qvel2 = jd.to_mujoco_state(model, q, v)
    np.testing.assert_allclose(qpos2, qpos, rtol=0, atol=1e-15)
    np.testing.assert_allclose(qvel2, qvel, rtol=0, atol=1e-14)
    # the free joint: q = [quat; position], v = [w_world; v_world]
    s, sv = model.q_slice("root"), model.v_slice("root")
    a, b = m.jnt_qposadr[m.joint("root").id], m.jnt_dofadr[m.joint("root").id]
    assert (s.start, sv.start) == (a, b)  # MuJoCo's addresses index q and v too
    np.testing.assert_array_equal(q[s], np.concatenate([qpos[a + 3 : a + 7], qpos[a : a + 3]]))
    R = np.asarray(jd.quat_to_rotmat(qpos[a + 3 : a + 7]))
    w_body, v_world = qvel[b + 3 : b + 6], qvel[b : b + 3]
    np.testing.assert_allclose(v[sv], np.concatenate([R @ w_body, v_world]), atol=1e-14)
    # power pairing: tau · v = qfrc · qvel for forces converted the same way
    f = rng.normal(size=m.nv)
    assert float(jd.from_mujoco_state(model, qpos, f)[1] @ v) == pytest.approx(f @ qvel)
    # MuJoCo's qpos0 is jointdyn's default position
    q0 = jd.from_mujoco_state(model, m.qpos0, np.zeros(m.nv))[0]
    np.testing.assert_allclose(model.default_position(), q0)


def test_left_out_elements_warn_once():
    xml = """
    <mujoco>
      <option density="1.2" viscosity="0.01"/>
      <worldbody>
        <body name="a" gravcomp="1">
          <joint name="j1" axis="0 1 0" armature="0.1"/>
          <geom type="capsule" size=".1" fromto="0 0 0 0 0 -.5"/>
          <site name="s1" pos="0 0 -.5"/>
          <body name="b" pos="0 0 -.5">
            <joint name="j2" type="ball" range="0 30" frictionloss="0.1"/>
            <geom size=".1"/>
            <site name="s2"/>
          </body>
        </body>
      </worldbody>
      <tendon><fixed name="tie"><joint joint="j1" coef="1"/></fixed>
        <spatial name="rope"><site site="s1"/><site site="s2"/></spatial></tendon>
      <equality><connect name="pin" body1="a" body2="b" anchor="0 0 0"/></equality>
      <actuator><motor name="m1" joint="j1"/><motor tendon="tie"/></actuator>
    </mujoco>
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jd.load_mjcf(xml)
    assert float(model.joint("j1").params.armature[0]) == 0.1  # armature is loaded, not left out
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages
    msg = messages[0]
    for part in (
        "2 actuator(s): m1, actuator1",
        "2 tendon(s): tie, rope",
        "1 equality constraint(s): pin",
        "gravity compensation: a",
        "ball joint cone limit(s): j2",
        "frictionloss of ball/free joint(s): j2",
        "fluid forces",
    ):
        assert part in msg, (part, msg)


def test_springs_against_qfrc_passive_and_energy():
    """At rest, `joint_forces` is the springs' force, MuJoCo's `qfrc_passive` (hinge, slide
    with `ref` and `springref`, ball, free), and `−∂U/∂q` of the spring energy that
    `potential_energy` adds (gravity off)."""
    m = mujoco.MjModel.from_xml_string(HANDMADE)
    model = jd.load_mjcf(HANDMADE)
    d = mujoco.MjData(m)
    q = numpy_call(model.random_configuration, jax.random.PRNGKey(5))
    zero = jnp.zeros(model.nv)
    d.qpos[:] = numpy_call(jd.to_mujoco_state, model, q, zero)[0]
    mujoco.mj_forward(m, d)
    assert np.abs(d.qfrc_passive).min() > 1e-3  # every joint's spring pulls
    weightless = eqx.tree_at(lambda mm: mm.gravity, model, jnp.zeros(3))

    @numpy_jit
    def forces(q):
        tau = jd.joint_forces(model, q, zero)
        energy = lambda dq: jd.potential_energy(weightless, model.integrate(q, dq))  # noqa: E731
        return jd.to_mujoco_state(model, q, tau)[1], tau, -jax.grad(energy)(zero)

    qfrc, tau, minus_dU = forces(q)
    np.testing.assert_allclose(qfrc, d.qfrc_passive, rtol=0, atol=TOL)
    np.testing.assert_allclose(minus_dU, tau, rtol=0, atol=1e-10)


def test_contact_points_from_geoms():
    """Spheres, capsule ends and box corners of the moving bodies, where MuJoCo puts them."""
    m = mujoco.MjModel.from_xml_string(HANDMADE)
    model = jd.load_mjcf(HANDMADE)
    with pytest.warns(UserWarning, match="2 colliding geom"):  # the ellipsoid, the cylinder
        bodies, positions, radii = jd.contact_points_from_mujoco(m, model)
    contact = jd.GroundContact(model, bodies, positions, radii)
    assert contact.npoints == 2 + 2 + 1 + 8 + 2 + 1  # the base's box is on the world
    d = mujoco.MjData(m)
    q = numpy_call(model.random_configuration, jax.random.PRNGKey(3))
    d.qpos[:] = numpy_call(jd.to_mujoco_state, model, q, np.zeros(model.nv))[0]
    mujoco.mj_kinematics(m, d)
    expected = []
    for g in range(m.ngeom):
        size, R = m.geom_size[g], d.geom_xmat[g].reshape(3, 3)
        if m.body_weldid[m.geom_bodyid[g]] == 0:
            continue
        local = {
            int(mujoco.mjtGeom.mjGEOM_SPHERE): [[0, 0, 0]],
            int(mujoco.mjtGeom.mjGEOM_CAPSULE): [[0, 0, -size[1]], [0, 0, size[1]]],
            int(mujoco.mjtGeom.mjGEOM_BOX): [
                [x * size[0], y * size[1], z * size[2]]
                for x in (-1, 1)
                for y in (-1, 1)
                for z in (-1, 1)
            ],
        }.get(int(m.geom_type[g]), [])
        expected += [d.geom_xpos[g] + R @ np.asarray(x) for x in local]
    X = numpy_call(jd.forward_kinematics, model, q).X_WB
    i = np.asarray(contact.bodies)
    world = np.einsum("nij,nj->ni", np.asarray(X.R)[i], positions) + np.asarray(X.p)[i]
    np.testing.assert_allclose(world, np.array(expected), rtol=0, atol=TOL)


def test_load_from_file_with_include(tmp_path):
    (tmp_path / "arm.xml").write_text(
        '<mujocoinclude><body name="arm"><joint name="j" axis="0 1 0"/>'
        '<geom type="capsule" size=".1" fromto="0 0 0 .5 0 0"/></body></mujocoinclude>'
    )
    (tmp_path / "robot.xml").write_text(
        '<mujoco><worldbody><include file="arm.xml"/></worldbody></mujoco>'
    )
    model = jd.load_mjcf(tmp_path / "robot.xml")
    assert model.joint_names == ("j",)


def test_bad_input():
    with pytest.raises(ValueError, match="MuJoCo could not compile"):
        jd.load_mjcf("<mujoco><worldbody><body><joint type='bogus'/></body></worldbody></mujoco>")
    with pytest.raises(ValueError, match="MuJoCo could not compile"):
        jd.load_mjcf("<mujoco><worldbody>")
    with pytest.raises(ValueError, match="no joint"):
        jd.load_mjcf("<mujoco><worldbody><body><geom size='.1'/></body></worldbody></mujoco>")
    model = jd.load_mjcf(HANDMADE)
    with pytest.raises(ValueError, match="shapes"):
        jd.from_mujoco_state(model, jnp.zeros(3), jnp.zeros(model.nv))


def test_without_mujoco(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # `import mujoco` raises ImportError
    with pytest.raises(ImportError, match=r'pip install "jointdyn\[mujoco\]"'):
        jd.load_mjcf(HANDMADE)
    with pytest.raises(ImportError, match=r'pip install "jointdyn\[mujoco\]"'):
        jd.from_mujoco(object())


def test_import_jointdyn_does_not_import_mujoco():
    code = "import sys, jointdyn; assert 'mujoco' not in sys.modules, 'mujoco imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@numpy_jit
def _joint_space_dynamics(model, q, v, u):
    return jd.crba(model, q), jd.rnea(model, q, v, u), jd.aba(model, q, v, u)


@pytest.mark.parametrize("name", ["arm7", "humanoid"])
def test_urdf_through_mujoco_matches_load_urdf(name):
    """A URDF loaded by `load_urdf` and the same URDF compiled by MuJoCo then converted by
    `from_mujoco`: same joints in the same order, same `crba`, `rnea` and `aba` (MuJoCo fuses
    fixed links into their parents, which changes no joint-space quantity)."""
    from importlib.resources import files

    path = str(files("jointdyn") / "models" / f"{name}.urdf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        direct = jd.load_urdf(path)
        via_mujoco = jd.from_mujoco(mujoco.MjModel.from_xml_path(path))
    assert via_mujoco.joint_names == direct.joint_names
    k = jax.random.split(jax.random.PRNGKey(4), 3)
    q = numpy_call(direct.random_configuration, k[0])
    v, u = jax.random.normal(k[1], (direct.nv,)), jax.random.normal(k[2], (direct.nv,))
    for got, want, what in zip(
        _joint_space_dynamics(via_mujoco, q, v, u),
        _joint_space_dynamics(direct, q, v, u),
        ("crba", "rnea", "aba"),
        strict=True,
    ):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * scale, err_msg=what)
