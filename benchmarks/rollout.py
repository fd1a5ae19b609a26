"""Rollout throughput: jointdyn's `jd.rollout` against MuJoCo's and Pinocchio's, in one run.

    python benchmarks/rollout.py                          # batch 4096, 200 steps (~4 min)
    python benchmarks/rollout.py --batch 256 --steps 200  # smoke run
    python benchmarks/rollout.py --no-write               # print only

float64 throughout, 2 XLA CPU devices (one per core; set before `import jax`).

1. **Quadrupeds on the ground.** A batch of the bundled `quadruped` (floating trunk, 12
   hinges, 4 foot spheres) started from perturbed stance states (as in `python -m jointdyn
   demo`: trunk 0.40 m high, knees bent, random perturbations), `--steps` steps of
   semi-implicit Euler at `dt` = 0.5 ms, joints held by PD (`kp` 100, `kd` 3) about the stance.

   - jointdyn: `jd.rollout(model, q0, v0, policy, dt, steps=T, contact=...)` with
     `jd.load_contact("quadruped", ...)` (penalty contact, Hunt-Crossley normal force and
     regularised Coulomb friction; stiffness 2e5, damping 1e6, mu 1, friction velocity 0.05) and
     the PD law as the policy `tau = kp (q* - q) - kd v` on the legs, batched three ways:
     `jd.jit(jd.batched(...))` (chunks of 32 samples batch-last, split over the 2 devices),
     `jd.jit(jax.vmap(...))` on one device, and the same `vmap` with `q0`, `v0` sharded over
     the 2 devices (`jax.sharding`: XLA partitions the batch). Model and contact are arguments.
   - MuJoCo: `mujoco.rollout` (C, a thread pool of `--threads` threads; also 1 thread) on the
     same robot written as MJCF here (`quadruped_mjcf`: free trunk, 12 hinges with the URDF's
     damping and ranges, the URDF's masses and inertias, foot bodies with 2 cm spheres against a
     ground plane), integrator `Euler` (MuJoCo's semi-implicit Euler; it treats joint damping
     implicitly), same `dt`, same steps, `position` actuators with `kp` 100 and `kv` 3 and the
     constant control `q*`: the same PD law. Contact is MuJoCo's default soft constraint
     (solref 0.02 1, pyramidal cone, mu 1, Newton solver): **the contact models differ**, so
     the trajectories do not agree to the digit; the table prints the mean final trunk height
     of both as a check that both stand. The MJCF's dynamics are checked against the URDF model
     (`jd.from_mujoco`: mass matrix and bias forces at random states).
   - Both sides return the whole trajectory (jointdyn `q`, `v` and contact forces for each
     step; MuJoCo the full physics state for each step, into a preallocated array).

2. **Contact-free humanoids.** `--small-steps` steps at 1 ms of zero torque from a random
   configuration (bundled `humanoid`; `talos_reduced.urdf` of example-robot-data, floating
   base): `jd.rollout` (no contact; `jd.jit`, single sample, and `jd.jit(jd.batched(...))` at
   `--small-batch`) against Pinocchio: a Python loop of `pin.aba` + `pin.integrate` (batch 1)
   or `pin.abaInParallel` (ModelPool, `--threads` threads, and 1 thread: on a 2-core machine
   that anything else uses, each 2-thread call can wait a scheduler slice at its barrier, see
   README.md) + a semi-implicit Euler step in NumPy (base: `p += R v dt`, quaternion by `exp(w dt / 2)`, joints `+= v dt`). The states are
   drawn separately for each library (the cost does not depend on them); jointdyn's step also
   evaluates the URDF's joint damping and limit stops, Pinocchio's does not.

3. **Compile time** (`jd.jit(f).lower(*args).compile()`, trace+lower and XLA) of every jointdyn
   rollout above.

Times: median of repeats after a warm-up (`_timing.time_call`), fastest in the JSON. The
ratios are jointdyn time / other time (below 1: jointdyn faster). Printed, and written to
`benchmarks/results/rollout-<date>-<time>.json`.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (  # one XLA CPU device per core; must precede `import jax`
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.resources  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # before jointdyn makes any array

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import mujoco.rollout  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _jointdyn import compile_timed  # noqa: E402
from _robots import ROBOTS_DIR, load_jointdyn  # noqa: E402
from _timing import time_call  # noqa: E402

DT, KP, KD = 5e-4, 100.0, 3.0  # the demo's drop (jointdyn/__main__.py)
CONTACT = dict(stiffness=2e5, damping=1e6, friction=1.0, friction_velocity=0.05)
LEGS = {"FL": (0.2, 0.1), "FR": (0.2, -0.1), "HL": (-0.2, 0.1), "HR": (-0.2, -0.1)}


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096, help="quadrupeds per call")
    ap.add_argument("--steps", type=int, default=200, help="steps of the quadruped rollouts")
    ap.add_argument("--threads", type=int, default=2, help="MuJoCo's and Pinocchio's threads")
    ap.add_argument("--small-batch", type=int, default=256, help="batch of the humanoid rollouts")
    ap.add_argument("--small-steps", type=int, default=200, help="steps of the humanoid rollouts")
    ap.add_argument("--repeats", type=int, default=5, help="most repeats of a timing")
    ap.add_argument("--budget", type=float, default=6.0, help="seconds per timing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mjx-batch", type=int, default=256, help="quadrupeds per MJX call (0: no MJX)"
    )
    ap.add_argument("--skip", default="", help="sections to skip: quadruped,humanoid,talos")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    return ap.parse_args()


def timed(fn, a: argparse.Namespace) -> dict:
    """Seconds per call of `fn` (warm: the caller has called it): median of repeats. Calls
    longer than 0.2 s are timed one by one, 3 to `--repeats` of them within `--budget`."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first < 0.2:
        r = time_call(fn, a.repeats, a.budget, warm=True)
        return {"median": r["median"], "min": r["min"], "samples": r["samples"]}
    samples = [first]
    for _ in range(max(3, min(a.repeats, int(a.budget / first))) - 1):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median": float(np.median(samples)), "min": min(samples), "samples": samples}


def compiled(fn, *args) -> tuple:
    """`jd.jit(fn)` compiled for `args` (`_jointdyn.compile_timed`), and its seconds as
    {lower_s (trace + lower), xla_s, total_s}."""
    exe, lower_s, xla_s = compile_timed(fn, args)
    return exe, {"lower_s": lower_s, "xla_s": xla_s, "total_s": lower_s + xla_s}


# ---------------------------------------------------------------------------------------------
# 1. quadrupeds with ground contact
#


def quadruped_mjcf(dt: float) -> str:
    """jointdyn/models/quadruped.urdf as MJCF, with foot spheres on a ground plane and a
    position actuator (kp, kv) on each hinge."""
    legs, actuators = [], []
    for leg, (x, y) in LEGS.items():
        s = 1.0 if y > 0 else -1.0
        legs.append(f"""
      <body name="{leg}_hip" pos="{x} {y} 0">
        <joint name="{leg}_hip_joint" axis="1 0 0" range="-0.8 0.8"/>
        <inertial pos="0 {0.04 * s} 0" mass="0.6" diaginertia="0.00056 0.00048 0.00056"/>
        <body name="{leg}_thigh" pos="0 {0.08 * s} 0">
          <joint name="{leg}_thigh_joint" axis="0 1 0" range="-2 2"/>
          <inertial pos="0 0 -0.11" mass="1"
                    diaginertia="0.00416667 0.00416667 0.000266667"/>
          <body name="{leg}_calf" pos="0 0 -0.22">
            <joint name="{leg}_calf_joint" axis="0 1 0" range="-2.7 0"/>
            <inertial pos="0 0 -0.11" mass="0.2"
                      diaginertia="0.000817917 0.000817917 2.25e-05"/>
            <body name="{leg}_foot" pos="0 0 -0.22">
              <inertial pos="0 0 0" mass="0.05" diaginertia="8e-06 8e-06 8e-06"/>
              <geom name="{leg}_foot" type="sphere" size="0.02" contype="1" conaffinity="0"/>
            </body>
          </body>
        </body>
      </body>""")
        for part in ("hip", "thigh", "calf"):
            actuators.append(f'<position joint="{leg}_{part}_joint" kp="{KP}" kv="{KD}"/>')
    return f"""<mujoco model="quadruped">
  <compiler angle="radian"/>
  <option timestep="{dt}" integrator="Euler" gravity="0 0 -9.81"/>
  <default><joint damping="0.05" limited="true"/></default>
  <worldbody>
    <geom name="ground" type="plane" size="0 0 1" contype="0" conaffinity="1"/>
    <body name="trunk" pos="0 0 0.4">
      <freejoint name="root_joint"/>
      <inertial pos="0 0 0" mass="8" diaginertia="0.075 0.181667 0.226667"/>{"".join(legs)}
    </body>
  </worldbody>
  <actuator>
    {chr(10).join("    " + x for x in actuators).strip()}
  </actuator>
</mujoco>
"""


def check_mjcf(model, mj_model, seed: int) -> dict:
    """The MJCF's dynamics against the URDF model's: mass matrix and bias forces at random
    states (both jointdyn models, the same coordinates), relative max difference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the actuators: not part of the check
        other = jd.from_mujoco(mj_model)
    if model.joint_names[1:] != other.joint_names[1:]:
        raise ValueError(f"joint order differs: {model.joint_names} vs {other.joint_names}")
    keys = jax.random.split(jax.random.key(seed), 4)
    err_m = err_b = 0.0
    for k in keys:
        q = model.random_configuration(k)
        v = jax.random.normal(k, (model.nv,))
        m1, m2 = jd.crba(model, q), jd.crba(other, q)
        b1 = jd.rnea(model, q, v, jnp.zeros(model.nv))
        b2 = jd.rnea(other, q, v, jnp.zeros(model.nv))
        err_m = max(err_m, float(jnp.max(jnp.abs(m1 - m2)) / jnp.max(jnp.abs(m1))))
        err_b = max(err_b, float(jnp.max(jnp.abs(b1 - b2)) / jnp.max(jnp.abs(b1))))
    mass = float(other.total_mass())
    return {
        "mass_matrix_rel": err_m,
        "bias_rel": err_b,
        "mass_urdf": float(model.total_mass()),
        "mass_mjcf": mass,
    }


def stance_states(model, batch: int, seed: int):
    """The demo's stance `q*` and `batch` perturbed initial states around it."""
    stance = model.neutral().at[6].set(0.40)  # trunk height; knees bent
    for leg in LEGS:
        stance = stance.at[model.q_slice(f"{leg}_thigh_joint")].set(0.6)
        stance = stance.at[model.q_slice(f"{leg}_calf_joint")].set(-1.2)
    key_q, key_v = jax.random.split(jax.random.key(seed + 1))
    dq = jax.random.uniform(key_q, (batch, model.nv), minval=-0.1, maxval=0.1)
    dq = dq.at[:, 3:5].set(0.0)  # no initial horizontal offset
    q0 = jax.vmap(model.integrate, (None, 0))(stance, dq)
    v0 = 0.1 * jax.random.normal(key_v, (batch, model.nv))
    return stance, q0, v0


def bench_quadruped(a: argparse.Namespace) -> dict:
    model = jd.load_model("quadruped")
    contact = jd.load_contact("quadruped", model, **CONTACT)
    mj_model = mujoco.MjModel.from_xml_string(quadruped_mjcf(DT))
    check = check_mjcf(model, mj_model, a.seed)
    print(f"MJCF against URDF: {check}", flush=True)
    stance, q0, v0 = stance_states(model, a.batch, a.seed)
    B, T = a.batch, a.steps
    out: dict = {"batch": B, "steps": T, "dt": DT, "mjcf_check": check, "jointdyn": {}}

    def run(model, contact, stance, q, v):
        def pd(k, q, v):  # the 12 leg joints; the floating base unactuated
            error = model.difference(q, stance)
            return jnp.zeros(model.nv).at[6:].set(KP * error[6:] - KD * v[6:])

        return jd.rollout(model, q, v, pd, DT, steps=T, contact=contact)

    axes = (None, None, None, 0, 0)
    mesh = Mesh(np.array(jax.devices()[:2]), ("b",))
    sharded = NamedSharding(mesh, P("b"))
    variants = {
        "jd.batched": (jd.batched(run, axes), (q0, v0)),
        "vmap": (jax.vmap(run, axes), (q0, v0)),
        "vmap sharded": (
            jax.vmap(run, axes),
            (jax.device_put(q0, sharded), jax.device_put(v0, sharded)),
        ),
    }
    for name, (fn, (q, v)) in variants.items():
        args = (model, contact, stance, q, v)
        exe, comp = compiled(fn, *args)
        traj = jax.block_until_ready(exe(*args))
        height = float(jnp.mean(traj.q[:, -1, 6]))
        finite = bool(jnp.all(jnp.isfinite(traj.q)))
        del traj
        t = timed(lambda exe=exe, args=args: jax.block_until_ready(exe(*args)), a)
        out["jointdyn"][name] = {
            **t,
            "compile": comp,
            "final_height": height,
            "finite": finite,
            "us_per_sample_step": 1e6 * t["median"] / (B * T),
        }
        print(
            f"jointdyn {name}: {1e6 * t['median'] / (B * T):.3f} µs/sample-step, "
            f"compile {comp['total_s']:.1f} s, final trunk height {height:.3f} m",
            flush=True,
        )

    # MuJoCo: initial states from the same (q0, v0) in MuJoCo's coordinates
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # actuators left out: not needed here
        mj_jd = jd.from_mujoco(mj_model)
    qpos, qvel = jax.vmap(lambda q, v: jd.to_mujoco_state(mj_jd, q, v))(q0, v0)
    qpos, qvel = np.asarray(qpos), np.asarray(qvel)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(mj_model, spec)
    data = mujoco.MjData(mj_model)
    init = np.empty((B, nstate))
    for i in range(B):
        mujoco.mj_resetData(mj_model, data)
        data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_getState(mj_model, data, init[i], spec)
    ctrl = np.zeros(mj_model.nu)
    for k in range(mj_model.nu):  # the position actuators' targets: the stance
        joint = mj_model.joint(mj_model.actuator_trnid[k, 0]).name
        ctrl[k] = float(stance[model.q_slice(joint)][0])
    control = np.tile(ctrl, (1, 1, 1))  # (1, 1, nu): tiled over samples and steps
    state = np.empty((B, T, nstate))
    out["mujoco"] = {"nstate": nstate, "contact": "MuJoCo soft constraints (default solref)"}
    z = 1 + 2  # time, then qpos (x, y, z, ...)
    for threads in sorted({a.threads, 1}, reverse=True):
        datas = [mujoco.MjData(mj_model) for _ in range(threads)]
        with mujoco.rollout.Rollout(nthread=threads) as r:

            def call(r=r, datas=datas):
                r.rollout(mj_model, datas, init, control, nstep=T, state=state)

            call()
            height = float(state[:, -1, z].mean())
            finite = bool(np.all(np.isfinite(state)))
            t = timed(call, a)
        out["mujoco"][f"{threads} threads"] = {
            **t,
            "final_height": height,
            "finite": finite,
            "us_per_sample_step": 1e6 * t["median"] / (B * T),
        }
        print(
            f"mujoco {threads} threads: {1e6 * t['median'] / (B * T):.3f} µs/sample-step, "
            f"final trunk height {height:.3f} m",
            flush=True,
        )
    if a.mjx_batch > 0:
        out["mjx"] = bench_mjx_quadruped(mj_model, init[: a.mjx_batch], ctrl, a)
    return out


def bench_mjx_quadruped(mj_model, init: np.ndarray, ctrl: np.ndarray, a) -> dict:
    """The same quadrupeds (MJCF, initial states, position actuators, `dt`) with MJX: a
    `lax.scan` of `mjx.step` under `vmap`, split over the 2 XLA CPU devices, at `--mjx-batch`
    (MJX's contact pipeline on a CPU is much slower than MuJoCo C's; a smaller batch keeps
    the run short, and the figure is per sample-step)."""
    try:
        from mujoco import mjx
    except ImportError as e:
        print(f"mjx: not importable ({e})", flush=True)
        return {"error": f"not importable: {e}"}
    B, T = len(init), a.steps
    nq, nv = mj_model.nq, mj_model.nv
    qpos = jnp.asarray(init[:, 1 : 1 + nq])
    qvel = jnp.asarray(init[:, 1 + nq : 1 + nq + nv])
    m = mjx.put_model(mj_model)
    d0 = mjx.put_data(mj_model, mujoco.MjData(mj_model)).replace(ctrl=jnp.asarray(ctrl))

    def run(m, d0, qpos, qvel):
        def one(qpos, qvel):
            def body(d, _):
                d = mjx.step(m, d)
                return d, None

            d = d0.replace(qpos=qpos, qvel=qvel)
            # under x64 mjx.step returns some integer fields (contacts) as int64: carry the
            # dtypes it returns
            out = jax.eval_shape(mjx.step, m, d)
            d = jax.tree.map(lambda x, o: x.astype(o.dtype), d, out)
            d, _ = jax.lax.scan(body, d, None, length=T)
            return d.qpos

        return jax.vmap(one)(qpos, qvel)

    mesh = Mesh(np.array(jax.devices()[:2]), ("b",))
    sharded = NamedSharding(mesh, P("b"))
    shared = jax.device_put((m, d0), NamedSharding(mesh, P()))  # copied to both devices
    args = (*shared, jax.device_put(qpos, sharded), jax.device_put(qvel, sharded))
    try:
        exe, comp = compiled(run, *args)
        q_end = jax.block_until_ready(exe(*args))
    except Exception as e:  # MJX's support varies with its version: keep the error
        print(f"mjx: {type(e).__name__}: {e}", flush=True)
        return {"error": f"{type(e).__name__}: {e}"}
    height = float(jnp.mean(q_end[:, 2]))
    t = timed(lambda: jax.block_until_ready(exe(*args)), a)
    out = {
        **t,
        "batch": B,
        "compile": comp,
        "final_height": height,
        "finite": bool(jnp.all(jnp.isfinite(q_end))),
        "us_per_sample_step": 1e6 * t["median"] / (B * T),
    }
    print(
        f"mjx (batch {B}): {out['us_per_sample_step']:.3f} µs/sample-step, compile "
        f"{comp['total_s']:.1f} s, final trunk height {height:.3f} m",
        flush=True,
    )
    return out


# ---------------------------------------------------------------------------------------------
# 2. contact-free humanoids against Pinocchio
#


def load_pair(name: str):
    """(jointdyn model, Pinocchio model) of the bundled humanoid or of talos."""
    if name == "humanoid":
        model = jd.load_model("humanoid")
        path = importlib.resources.files("jointdyn").joinpath("models", "humanoid.urdf")
    else:
        path = ROBOTS_DIR / "talos_data/robots/talos_reduced.urdf"
        model = load_jointdyn("talos")
    pmodel = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    if (pmodel.nq, pmodel.nv) != (model.nq, model.nv) or pmodel.nq != pmodel.nv + 1:
        raise ValueError(f"{name}: nq/nv {model.nq}/{model.nv}, Pinocchio {pmodel.nq}/{pmodel.nv}")
    return model, pmodel


def euler_step_numpy(q, v, a, dt):
    """Semi-implicit Euler on Pinocchio's coordinates, (n, B) arrays: a free flyer
    (`[p, quat xyzw]`, body-frame velocity) and revolute joints."""
    v = v + dt * a
    q = q.copy()
    x, y, z, w = q[3], q[4], q[5], q[6]
    u = np.stack([x, y, z])
    vl, om = v[0:3], v[3:6]
    t = 2.0 * np.cross(u, vl, axis=0)  # R(quat) @ vl
    q[0:3] += dt * (vl + w * t + np.cross(u, t, axis=0))
    angle = np.linalg.norm(om, axis=0) * dt
    axis = om / np.maximum(np.linalg.norm(om, axis=0), 1e-300)
    s, c = np.sin(angle / 2), np.cos(angle / 2)
    dx, dy, dz = axis * s  # quat ⊗ [dx, dy, dz, c]
    nq = np.stack(
        [
            w * dx + x * c + y * dz - z * dy,
            w * dy - x * dz + y * c + z * dx,
            w * dz + x * dy - y * dx + z * c,
            w * c - x * dx - y * dy - z * dz,
        ]
    )
    q[3:7] = nq / np.linalg.norm(nq, axis=0)
    q[7:] += dt * v[6:]
    return q, v


def bench_humanoid(name: str, a: argparse.Namespace) -> dict:
    model, pmodel = load_pair(name)
    B, T, dt = a.small_batch, a.small_steps, 1e-3
    key = jax.random.key(a.seed)
    q0 = jax.vmap(lambda k: model.neutral())(jax.random.split(key, B))
    q0 = q0 + jnp.zeros_like(q0).at[:, 7:].set(0.1 * jax.random.normal(key, (B, model.nq - 7)))
    v0 = 0.1 * jax.random.normal(key, (B, model.nv))
    controls = jnp.zeros((T, model.nv))
    out: dict = {"nq": model.nq, "nv": model.nv, "batch": B, "steps": T, "dt": dt}

    def run(model, q, v, controls):
        return jd.rollout(model, q, v, controls, dt)

    rows = {
        "jd 1": (run, (model, q0[0], v0[0], controls), 1),
        f"jd.batched {B}": (jd.batched(run, (None, 0, 0, None)), (model, q0, v0, controls), B),
    }
    for label, (fn, args, n) in rows.items():
        exe, comp = compiled(fn, *args)
        jax.block_until_ready(exe(*args))
        t = timed(lambda exe=exe, args=args: jax.block_until_ready(exe(*args)), a)
        out[label] = {**t, "compile": comp, "us_per_sample_step": 1e6 * t["median"] / (n * T)}

    # Pinocchio: batch 1 in a Python loop, batch B with abaInParallel + NumPy Euler
    pdata = pmodel.createData()
    rng = np.random.default_rng(a.seed)
    pq = np.stack([pin.neutral(pmodel) for _ in range(B)], axis=1)
    pq[7:] += 0.1 * rng.normal(size=(pmodel.nq - 7, B))
    pv = 0.1 * rng.normal(size=(pmodel.nv, B))
    tau1 = np.zeros(pmodel.nv)

    def pin_one():
        q, v = pq[:, 0].copy(), pv[:, 0].copy()
        for _ in range(T):
            v = v + dt * pin.aba(pmodel, pdata, q, v, tau1)
            q = pin.integrate(pmodel, q, dt * v)
        return q

    pool = pin.ModelPool(pmodel, a.threads)
    tau = np.zeros((pmodel.nv, B), order="F")
    acc = np.zeros((pmodel.nv, B), order="F")

    def pin_batch(threads):
        q, v = np.asfortranarray(pq), np.asfortranarray(pv)
        for _ in range(T):
            pin.abaInParallel(threads, pool, q, v, tau, acc)
            q, v = euler_step_numpy(q, v, acc, dt)
            q, v = np.asfortranarray(q), np.asfortranarray(v)
        return q

    pins = [("pin 1", pin_one, 1), (f"pin {B} 1 thread", lambda: pin_batch(1), B)]
    pins.append((f"pin {B}", lambda: pin_batch(a.threads), B))
    for label, fn, n in pins:
        fn()
        t = timed(fn, a)
        out[label] = {**t, "us_per_sample_step": 1e6 * t["median"] / (n * T)}
    for label in out:
        if isinstance(out[label], dict):
            print(
                f"{name} {label}: {out[label]['us_per_sample_step']:.3f} µs/sample-step", flush=True
            )
    return out


# ---------------------------------------------------------------------------------------------
# the run
#


def machine() -> dict:
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except OSError:
            return ""

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in sh(["lscpu"]).splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "jax": jax.__version__,
        "mujoco": mujoco.__version__,
        "pinocchio": pin.__version__,
        "devices": [str(d) for d in jax.devices()],
        "jointdyn_commit": sh(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


def table(res: dict) -> str:
    lines = []
    if "quadruped" in res:
        r = res["quadruped"]
        B, T = r["batch"], r["steps"]
        mj = r["mujoco"]
        mj2 = mj[f"{res['threads']} threads"]
        lines += [
            f"## Quadrupeds with ground contact: batch {B}, {T} steps, dt {r['dt']}, float64",
            "",
            "Contact models differ: jointdyn penalty (Hunt-Crossley, regularised Coulomb), "
            "MuJoCo soft constraints. PD in jointdyn = MuJoCo position actuators (kp 100, kv 3).",
            "",
            "| side | µs / sample-step | (fastest) | sample-steps / s | final trunk height m "
            f"| compile s (lower + XLA) | ratio to MuJoCo {res['threads']} threads "
            "| ratio to MuJoCo 1 thread |",
            "|---|---|---|---|---|---|---|---|",
        ]
        rows = [(f"jointdyn {k}", v) for k, v in r["jointdyn"].items()]
        rows += [(f"MuJoCo {k}", v) for k, v in mj.items() if isinstance(v, dict)]
        if "median" in r.get("mjx", {}):
            rows.append((f"MJX (batch {r['mjx']['batch']})", r["mjx"]))
        per_step = lambda v: v["median"] / (v.get("batch", B) * T)  # noqa: E731
        for label, v in rows:
            Bv = v.get("batch", B)
            us, fast = 1e6 * v["median"] / (Bv * T), 1e6 * v["min"] / (Bv * T)
            comp = v.get("compile")
            comp_s = (
                f"{comp['total_s']:.1f} ({comp['lower_s']:.1f} + {comp['xla_s']:.1f})"
                if comp
                else "–"
            )
            lines.append(
                f"| {label} | {us:.3f} | {fast:.3f} | {Bv * T / v['median']:,.0f} "
                f"| {v['final_height']:.3f} | {comp_s} | {per_step(v) / per_step(mj2):.2f} "
                f"| {per_step(v) / per_step(mj['1 threads']):.2f} |"
            )
        lines.append("")
    for name in ("humanoid", "talos"):
        if name not in res:
            continue
        r = res[name]
        B, T = r["batch"], r["steps"]
        lines += [
            f"## {name} (nq {r['nq']}, nv {r['nv']}), no contact, zero torque, {T} steps, "
            f"dt {r['dt']}, float64",
            "",
            f"| batch | jointdyn µs / sample-step | Pinocchio µs / sample-step ({res['threads']} "
            "threads) | ratio | Pinocchio 1 thread | ratio to 1 thread "
            "| jointdyn compile s (lower + XLA) |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, jk, pk, p1k in (
            (1, "jd 1", "pin 1", "pin 1"),
            (B, f"jd.batched {B}", f"pin {B}", f"pin {B} 1 thread"),
        ):
            j, p, p1 = r[jk], r[pk], r[p1k]
            c = j["compile"]
            lines.append(
                f"| {n} | {j['us_per_sample_step']:.3f} | {p['us_per_sample_step']:.3f} "
                f"| {j['median'] / p['median']:.2f} | {p1['us_per_sample_step']:.3f} "
                f"| {j['median'] / p1['median']:.2f} "
                f"| {c['total_s']:.1f} ({c['lower_s']:.1f} + {c['xla_s']:.1f}) |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    a = _parse()
    skip = set(filter(None, a.skip.split(",")))
    res: dict = {"machine": machine(), "threads": a.threads, "settings": vars(a)}
    t0 = time.perf_counter()
    if "quadruped" not in skip:
        res["quadruped"] = bench_quadruped(a)
    for name in ("humanoid", "talos"):
        if name not in skip:
            res[name] = bench_humanoid(name, a)
    res["machine"]["loadavg_end"] = os.getloadavg()
    res["wall_s"] = time.perf_counter() - t0
    text = table(res)
    print()
    print(text)
    print(
        f"load average {res['machine']['loadavg_start']} -> {res['machine']['loadavg_end']}; "
        f"{res['wall_s']:.0f} s"
    )
    if not a.no_write:
        out = Path(a.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"rollout-{datetime.datetime.now():%Y-%m-%d-%H%M}.json"
        res["table"] = text
        path.write_text(json.dumps(res, indent=1, default=float) + "\n")
        print(f"written: {path}")


if __name__ == "__main__":
    main()
