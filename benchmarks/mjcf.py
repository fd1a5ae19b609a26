"""MJCF models: jointdyn's batched forward dynamics on Gymnasium's humanoid and ant against MuJoCo
MJX (`vmap(mjx.forward)`) and MuJoCo C (`mj_step`, one step per state, `mujoco.rollout` on its
threads), in one run, contacts and constraints off, float64.

    python benchmarks/mjcf.py                  # batch 4096 (~2 min)
    python benchmarks/mjcf.py --batch 256      # smoke run
    python benchmarks/mjcf.py --no-write       # print only

jointdyn: `jd.jit(jd.batched(jd.forward_dynamics, (None, 0, 0, 0)))` on `jd.from_mujoco(m)`
(armature, damping, springs as MuJoCo's). MJX: `mjx.forward(...).qacc` batched the same way (the
same chunks, the same 2 XLA CPU devices). MuJoCo C: `mujoco.rollout` with `nstep=1` from the
batch of initial states: one `mj_step` each (`mj_forward` plus the Euler update, a small part),
on 2 threads and on 1. Every row is µs per sample; the ratios are to jointdyn in the same run;
compile times are jointdyn's and MJX's first call. The three agree on `qacc` (checked on 8
states against `mj_forward`). Results: benchmarks/results/mjcf-*.json; figures in
benchmarks/NOTES.md.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (  # one XLA CPU device per core; must precede `import jax`
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # before jointdyn makes any array

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import mujoco.rollout  # noqa: E402
import numpy as np  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _jointdyn import compile_timed  # noqa: E402
from _timing import time_call  # noqa: E402

MODELS = ("humanoid", "ant")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of timing per row")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args()


def gymnasium_model(name: str):
    import gymnasium

    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / f"{name}.xml"
    m = mujoco.MjModel.from_xml_path(str(path))
    bits = mujoco.mjtDisableBit
    m.opt.disableflags |= bits.mjDSBL_CONTACT | bits.mjDSBL_CONSTRAINT | bits.mjDSBL_ACTUATION
    m.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON  # MJX has no PGS; no constraint is solved anyway
    return m


def bench(name: str, a: argparse.Namespace) -> dict:
    from mujoco import mjx

    m = gymnasium_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # actuators are left out, and said so
        model = jd.from_mujoco(m)
    B = a.batch
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    q = jax.vmap(model.random_configuration)(keys)
    v = jnp.asarray(rng.normal(size=(B, model.nv)))
    tau = jnp.asarray(rng.normal(size=(B, model.nv)))
    qpos, qvel = jax.vmap(lambda q, v: jd.to_mujoco_state(model, q, v))(q, v)
    qfrc = jax.vmap(lambda q, t: jd.to_mujoco_state(model, q, t)[1])(q, tau)
    out: dict = {"model": name, "nq": m.nq, "nv": m.nv, "nbody": m.nbody - 1, "batch": B}

    # jointdyn
    axes = (None, 0, 0, 0)
    args = jd.device_put_batched((model, q, v, tau), axes)
    exe, *t = compile_timed(jd.batched(jd.forward_dynamics, axes), args)
    t_c = sum(t)
    qacc_jd = np.asarray(exe(*args))
    r = time_call(lambda: jax.block_until_ready(exe(*args)), a.repeats, a.budget)
    out["jointdyn"] = {"us": 1e6 * r["median"] / B, "compile_s": t_c}

    # MJX: the same batching (chunks, devices)
    mx = mjx.put_model(m)
    d0 = mjx.put_data(m, mujoco.MjData(m))

    def fwd(mx, d0, qpos, qvel, qfrc):
        return mjx.forward(mx, d0.replace(qpos=qpos, qvel=qvel, qfrc_applied=qfrc)).qacc

    maxes = (None, None, 0, 0, 0)
    margs = jd.device_put_batched((mx, d0, qpos, qvel, qfrc), maxes)
    exe_m, *t = compile_timed(jd.batched(fwd, maxes), margs)
    t_m = sum(t)
    qacc_mjx = np.asarray(exe_m(*margs))
    r = time_call(lambda: jax.block_until_ready(exe_m(*margs)), a.repeats, a.budget)
    out["mjx"] = {"us": 1e6 * r["median"] / B, "compile_s": t_m}

    # MuJoCo C: one mj_step per initial state (mujoco.rollout, its threads)
    nstate = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    init = np.zeros((B, nstate))
    init[:, 1 : 1 + m.nq] = np.asarray(qpos)
    init[:, 1 + m.nq : 1 + m.nq + m.nv] = np.asarray(qvel)
    control = np.zeros((B, 1, m.nu))
    state = np.empty((B, 1, nstate))
    for threads in (2, 1):
        datas = [mujoco.MjData(m) for _ in range(threads)]
        with mujoco.rollout.Rollout(nthread=threads) as ro:

            def call(ro=ro, datas=datas):
                ro.rollout(m, datas, init, control, nstep=1, state=state)

            call()
            r = time_call(call, a.repeats, a.budget, warm=True)
        out[f"mujoco_{threads}t"] = {"us": 1e6 * r["median"] / B}

    # agreement on qacc (MuJoCo's coordinates), 8 states, against mj_forward
    d = mujoco.MjData(m)
    err_jd = err_mjx = 0.0
    for i in range(8):
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = qpos[i], qvel[i], qfrc[i]
        mujoco.mj_forward(m, d)
        ours = np.asarray(jd.to_mujoco_state(model, q[i], jnp.asarray(qacc_jd[i]))[1])
        scale = max(1.0, float(np.abs(d.qacc).max()))
        err_jd = max(err_jd, float(np.abs(ours - d.qacc).max()) / scale)
        err_mjx = max(err_mjx, float(np.abs(qacc_mjx[i] - d.qacc).max()) / scale)
    out["qacc_rel_err"] = {"jointdyn": err_jd, "mjx": err_mjx}
    for k in ("mjx", "mujoco_2t", "mujoco_1t"):
        out[k]["ratio_to_jointdyn"] = out[k]["us"] / out["jointdyn"]["us"]
    return out


def main() -> None:
    a = _parse()
    res = {
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "jax": jax.__version__,
        "mujoco": mujoco.__version__,
        "devices": len(jax.devices()),
        "dtype": "float64",
        "models": [],
    }
    print("model     nv  jointdyn µs (compile s)  MJX µs (compile s)  MuJoCo 2t / 1t µs  qacc err")
    for name in MODELS:
        r = bench(name, a)
        res["models"].append(r)
        j, x = r["jointdyn"], r["mjx"]
        print(
            f"{name:9s} {r['nv']:3d}  {j['us']:8.2f} ({j['compile_s']:5.1f})"
            f"        {x['us']:8.2f} ({x['compile_s']:5.1f})"
            f"   {r['mujoco_2t']['us']:6.2f} / {r['mujoco_1t']['us']:6.2f}"
            f"    {r['qacc_rel_err']['jointdyn']:.1e} / {r['qacc_rel_err']['mjx']:.1e}",
            flush=True,
        )
    if not a.no_write:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
        path = HERE / "results" / f"mjcf-{stamp}.json"
        path.write_text(json.dumps(res, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
