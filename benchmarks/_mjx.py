"""The MuJoCo MJX side of `run.py`: `mjx.forward` batched as jointdyn's rows are.

`bench_mjx` loads a robot's URDF into MuJoCo (no visuals or collisions), disables contacts and
joint limits (`mjDSBL_CONTACT | mjDSBL_CONSTRAINT`: no constraint solver, the problem `aba`
solves), and times `vmap(mjx.forward)` (or `jointdyn.batched` under `--impl batched`) at the
run's batches and first dtype, beside the jointdyn `aba` row of the same batch and dtype. It
runs only when `mujoco.mjx` imports (`mjx_available()`); MuJoCo is not a dependency of jointdyn
(`pip install -e ".[mjx]"` adds it).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from _jointdyn import DTYPES, batch_over_states, blocking, compile_timed, place
from _results import log, record
from _timing import time_call

if TYPE_CHECKING:
    from _results import Settings
    from _robots import Robot


def mjx_available() -> bool:
    try:
        return importlib.util.find_spec("mujoco") is not None and (
            importlib.util.find_spec("mujoco.mjx") is not None
        )
    except (ImportError, ValueError):
        return False


def mjx_model(urdf_path: str):
    """`(mj_model, mjx_model, mjx_data)` of a URDF for MJX: no visuals or collisions (no meshes
    to find: dynamics only), contacts and constraints off (`mjDSBL_CONTACT |
    mjDSBL_CONSTRAINT`: no constraint solver, the problem `aba` solves). MuJoCo's URDF import
    gives a fixed base."""
    import xml.etree.ElementTree as ET

    import mujoco
    from mujoco import mjx

    root = ET.parse(urdf_path).getroot()
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for el in link.findall(tag):
                link.remove(el)
    ext = ET.SubElement(root, "mujoco")
    ET.SubElement(
        ext,
        "compiler",
        discardvisual="true",
        balanceinertia="true",
        boundmass="1e-6",
        boundinertia="1e-9",
    )
    mj = mujoco.MjModel.from_xml_string(ET.tostring(root, encoding="unicode"))
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT) | int(
        mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    )
    return mj, mjx.put_model(mj), mjx.put_data(mj, mujoco.MjData(mj))


def mjx_qacc(m, d0, q, v, u):
    """`qacc` of `mjx.forward` at `(qpos, qvel, qfrc_applied) = (q, v, u)`."""
    from mujoco import mjx

    return mjx.forward(m, d0.replace(qpos=q, qvel=v, qfrc_applied=u)).qacc


def bench_mjx(robot: Robot, st: Settings, res: dict) -> None:
    """MJX `vmap(forward)` with constraints off (contacts and joint limits: no solver, so the
    same problem as `aba`), fixed-base robots, at the batches and first dtype of the run; best
    effort (any error is kept). `mjx.forward` is MuJoCo's whole smooth pipeline (kinematics,
    composite inertias, `M` factorised, bias forces, passive forces), its way to `qacc`."""
    mj, m, d0 = mjx_model(robot.path)
    dtype = DTYPES[st.dtypes[0]]
    rng = np.random.default_rng(0)
    for i, b in enumerate(st.batches):
        row = {"robot": robot.name, "batch": b}
        try:
            if i == 0:
                jax.clear_caches()
            args = (
                m,
                d0,
                jnp.asarray(rng.uniform(-1, 1, (b, mj.nq)), dtype),
                jnp.asarray(rng.normal(size=(b, mj.nv)), dtype),
                jnp.asarray(rng.normal(size=(b, mj.nv)), dtype),
            )
            axes = (None, None, 0, 0, 0)
            args = place(args, axes)  # the same chunks and devices as jointdyn's rows
            compiled, t_lower, t_comp = compile_timed(batch_over_states(mjx_qacc, axes), args)
            out = jax.block_until_ready(compiled(*args))
            r = time_call(blocking(compiled, args), st.repeats, st.budget_s)
            row.update(us=1e6 * r["median"] / b, compile_s=t_lower + t_comp, dtype=str(out.dtype))
            aba_row = next(
                (
                    x
                    for x in res["rows"]
                    if x["robot"] == robot.name
                    and x["alg"] == "aba"
                    and x["batch"] == b
                    and x["dtype"] == row["dtype"]
                    and "error" not in x
                ),
                None,
            )
            if aba_row:
                row["pin_us"], row["jd_us"] = aba_row.get("pin_us"), aba_row["jd_us"]
                row["jd_compile_s"] = aba_row["lower_s"] + aba_row["compile_s"]
                row["ratio"] = row["us"] / row["pin_us"] if row["pin_us"] else None
                row["ratio_jd"] = row["us"] / row["jd_us"]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        record(res, "mjx", row)
        msg = row["error"] if "error" in row else f"{row['us']:.2f} µs/sample"
        log(f"  mjx batch {b}: {msg}")
