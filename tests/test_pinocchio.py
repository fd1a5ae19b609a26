"""Every algorithm against Pinocchio on real robots from example-robot-data, float64, 1e-9.

Coordinates are mapped explicitly (see `robots.py`): joints by name, and for free joints
Pinocchio's `q = [x, y, z, qx, qy, qz, qw]` and body-frame `v = [Rᵀṗ; Rᵀw]` against our
`q = [qw, qx, qy, qz, x, y, z]`, `v = [w; ṗ]`. With `v_pin = T v` (T orthogonal),
`M = Tᵀ M_pin T`, `tau = Tᵀ tau_pin`. Pinocchio's spatial vectors are `[linear; angular]`,
ours `[angular; linear]`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from numpy_eval import numpy_jit
from robots import (
    ROBOTS,
    load_jointdyn,
    load_pinocchio,
    q_to_pinocchio,
    v_to_pinocchio_matrix,
    vdot_to_pinocchio,
)

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

RTOL = 1e-9


def close(actual, expected, what):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=RTOL, atol=RTOL * scale, err_msg=what
    )


def swap(x):
    """`[linear; angular]` ↔ `[angular; linear]` along the first axis."""
    x = np.asarray(x)
    return np.concatenate([x[3:6], x[0:3]], 0)


def _sampled_frames(model):
    """About five frames, spread over the model, for the frame Jacobians."""
    names = model.frame_names
    return names[:: max(1, len(names) // 5)]


@numpy_jit
def _ours(model, q, v, vdot, tau, f_ext):
    """Every algorithm compared below, in one program per robot (one trace instead of one per
    algorithm, `f_ext` case, frame and dtype), evaluated by NumPy (`numpy_jit`): what is
    compared is the programs' arithmetic, and compiling this program took most of the
    module's time. (The compiled algorithms are checked in `test_jit`, `test_batch_last`,
    `test_batching` and `test_dynamics.test_jit_vmap_dtype`.)"""
    frames = _sampled_frames(model)
    return dict(
        kin=jd.forward_kinematics(model, q, v, vdot),
        crba=jd.crba(model, q),
        rnea_f=jd.rnea(model, q, v, vdot, f_ext),
        rnea=jd.rnea(model, q, v, vdot),
        aba_f=jd.aba(model, q, v, tau, f_ext),
        aba=jd.aba(model, q, v, tau),
        bias=jd.bias_forces(model, q, v),
        gravity=jd.gravity_forces(model, q),
        body_jacobians=jd.body_jacobians(model, q),
        frame_jacobians={n: jd.jacobian(model, q, n) for n in frames},
        com=jd.center_of_mass(model, q),
        kinetic=jd.kinetic_energy(model, q, v),
        potential=jd.potential_energy(model, q),
        momentum=jd.centroidal_momentum(model, q, v),
        aba_float32=jd.aba(model, *(x.astype(jnp.float32) for x in (q, v, tau))),
    )


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def robot(request):
    name = request.param
    model = load_jointdyn(name)
    pmodel = load_pinocchio(name)
    k = jax.random.split(jax.random.PRNGKey(7), 5)
    q = model.random_configuration(k[0])
    v = jax.random.normal(k[1], (model.nv,))
    vdot = jax.random.normal(k[2], (model.nv,))
    tau = 10 * jax.random.normal(k[3], (model.nv,))
    f_ext = 5 * jax.random.normal(k[4], (model.nbodies, 6))
    T = v_to_pinocchio_matrix(model, pmodel, q)
    return dict(
        ours=jax.tree.map(np.asarray, _ours(model, q, v, vdot, tau, f_ext)),
        name=name,
        model=model,
        pmodel=pmodel,
        data=pmodel.createData(),
        q=q,
        v=v,
        vdot=vdot,
        tau=tau,
        f_ext=f_ext,
        T=T,
        q_pin=q_to_pinocchio(model, pmodel, q),
        v_pin=T @ np.asarray(v),
        a_pin=vdot_to_pinocchio(model, pmodel, q, v, vdot),
        jid=[pmodel.getJointId(n) for n in model.joint_names],
    )


def pin_forces(r):
    """Our `F_Bo_W` per body → Pinocchio's per-joint forces in the joint's local frame."""
    pmodel, data = r["pmodel"], r["data"]
    pin.forwardKinematics(pmodel, data, r["q_pin"])
    fext = [pin.Force.Zero() for _ in range(pmodel.njoints)]
    for b, jid in enumerate(r["jid"]):
        R = data.oMi[jid].rotation
        n, f = np.asarray(r["f_ext"][b, :3]), np.asarray(r["f_ext"][b, 3:])
        fext[jid] = pin.Force(R.T @ f, R.T @ n)
    return fext


def test_forward_kinematics(robot):
    r = robot
    pmodel, data = r["pmodel"], r["data"]
    pin.forwardKinematics(pmodel, data, r["q_pin"], r["v_pin"], r["a_pin"])
    kin = r["ours"]["kin"]
    for b, jid in enumerate(r["jid"]):
        close(kin.X_WB.R[b], data.oMi[jid].rotation, f"R {jid}")
        close(kin.X_WB.p[b], data.oMi[jid].translation, f"p {jid}")
        V = pin.getVelocity(pmodel, data, jid, pin.LOCAL_WORLD_ALIGNED).vector
        close(kin.V_WB[b], swap(V), f"V {jid}")
        A = pin.getClassicalAcceleration(pmodel, data, jid, pin.LOCAL_WORLD_ALIGNED).vector
        close(kin.A_WB[b], swap(A), f"A {jid}")
    pin.updateFramePlacements(pmodel, data)
    matched = 0
    for k, name in enumerate(r["model"].frame_names):
        if pmodel.existFrame(name):
            oMf = data.oMf[pmodel.getFrameId(name)]
            close(kin.X_WF.R[k], oMf.rotation, f"frame {name}")
            close(kin.X_WF.p[k], oMf.translation, f"frame {name}")
            matched += 1
    # every link is a frame of both (test_urdf checks the names): all of ours were compared
    assert matched == len(r["model"].frame_names) > 0


def test_mass_matrix(robot):
    r = robot
    M_pin = pin.crba(r["pmodel"], r["data"], r["q_pin"])
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T
    close(r["ours"]["crba"], r["T"].T @ M_pin @ r["T"], "M")


def test_rnea_with_external_forces(robot):
    r = robot
    tau_pin = pin.rnea(r["pmodel"], r["data"], r["q_pin"], r["v_pin"], r["a_pin"], pin_forces(r))
    close(r["ours"]["rnea_f"], r["T"].T @ tau_pin, "rnea")
    tau_pin = pin.rnea(r["pmodel"], r["data"], r["q_pin"], r["v_pin"], r["a_pin"])
    close(r["ours"]["rnea"], r["T"].T @ tau_pin, "rnea, no f_ext")


def test_aba_with_external_forces(robot):
    r = robot
    pmodel, data, model = r["pmodel"], r["data"], r["model"]
    tau_pin = r["T"] @ np.asarray(r["tau"])
    for fext, qdd in ((pin_forces(r), r["ours"]["aba_f"]), (None, r["ours"]["aba"])):
        args = (pmodel, data, r["q_pin"], r["v_pin"], tau_pin) + ((fext,) if fext else ())
        a_pin = pin.aba(*args)
        close(vdot_to_pinocchio(model, pmodel, r["q"], r["v"], qdd), a_pin, "aba")


def test_bias_and_gravity(robot):
    r = robot
    nle = pin.nonLinearEffects(r["pmodel"], r["data"], r["q_pin"], r["v_pin"])
    # Pinocchio's nle is for a_pin = 0; ours for vdot = 0. They differ by the free joint's
    # Ṫ v term, so compare through rnea at the matching accelerations instead.
    a_pin = vdot_to_pinocchio(r["model"], r["pmodel"], r["q"], r["v"], np.zeros(r["model"].nv))
    tau_pin = pin.rnea(r["pmodel"], r["data"], r["q_pin"], r["v_pin"], a_pin)
    close(r["ours"]["bias"], r["T"].T @ tau_pin, "bias")
    if r["pmodel"].joints[1].shortname() != "JointModelFreeFlyer":
        close(r["ours"]["bias"], r["T"].T @ nle, "nle")
    g = pin.computeGeneralizedGravity(r["pmodel"], r["data"], r["q_pin"])
    close(r["ours"]["gravity"], r["T"].T @ g, "gravity")


def test_jacobians(robot):
    r = robot
    pmodel, data, model = r["pmodel"], r["data"], r["model"]
    pin.computeJointJacobians(pmodel, data, r["q_pin"])
    pin.updateFramePlacements(pmodel, data)
    J = r["ours"]["body_jacobians"]
    for b, jid in enumerate(r["jid"]):
        Jp = pin.getJointJacobian(pmodel, data, jid, pin.LOCAL_WORLD_ALIGNED)
        close(J[b], swap(Jp) @ r["T"], f"J body {b}")
    # frame Jacobians of a few frames (links merged by fixed joints among them), all compared
    names = _sampled_frames(model)
    assert names and all(pmodel.existFrame(n) for n in names)
    for name in names:
        Jf = pin.getFrameJacobian(pmodel, data, pmodel.getFrameId(name), pin.LOCAL_WORLD_ALIGNED)
        close(r["ours"]["frame_jacobians"][name], swap(Jf) @ r["T"], f"J frame {name}")


def test_com_energy_momentum(robot):
    r = robot
    pmodel, data = r["pmodel"], r["data"]
    ours = r["ours"]
    close(ours["com"], pin.centerOfMass(pmodel, data, r["q_pin"]), "com")
    close(
        ours["kinetic"],
        pin.computeKineticEnergy(pmodel, data, r["q_pin"], r["v_pin"]),
        "kinetic",
    )
    close(
        ours["potential"],
        pin.computePotentialEnergy(pmodel, data, r["q_pin"]),
        "potential",
    )
    pin.computeCentroidalMomentum(pmodel, data, r["q_pin"], r["v_pin"])
    close(ours["momentum"], swap(data.hg.vector), "h_G")


def test_float32_close_to_pinocchio(robot):
    """float32 follows its input and stays near the float64 oracle."""
    r = robot
    model = r["model"]
    qdd = r["ours"]["aba_float32"]  # aba of the float64 model at the float32 state
    assert qdd.dtype == jnp.float32
    tau_pin = r["T"] @ np.asarray(r["tau"])
    a_pin = pin.aba(r["pmodel"], r["data"], r["q_pin"], r["v_pin"], tau_pin)
    ours = vdot_to_pinocchio(model, r["pmodel"], r["q"], r["v"], np.asarray(qdd, np.float64))
    scale = np.abs(a_pin).max()
    np.testing.assert_allclose(ours, a_pin, rtol=0, atol=2e-3 * scale)
