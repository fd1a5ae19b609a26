"""jointdyn against Pinocchio (and MuJoCo MJX when it is installed), side by side in one run.

    python benchmarks/run.py                       # all robots, batches 1, 64, 4096 (< ~10 min)
    python benchmarks/run.py --quick               # smoke run: panda, batches 1 and 64
    python benchmarks/run.py --robots panda,g1 --batches 1,64,4096
    python benchmarks/run.py --gpu-throughput      # float32 aba at batch 65536, panda and g1

Measures, per robot of example-robot-data (panda, ur5, solo12, g1, talos):

- jointdyn `jax.jit(jax.vmap(alg))` of `aba`, `rnea`, `crba` (model passed as an argument) in
  float64 and float32 at each batch: µs per sample, and the compile time apart;
- Pinocchio `abaInParallel` / `rneaInParallel` (ModelPool, 2 threads) at the same batch, and
  one call of `pin.aba` / `pin.rnea` / `pin.crba` from Python;
- the derivatives of `aba` in (q, v, tau), q in the tangent space, with
  `jointdyn.aba_derivatives` (default), `jax.jacrev` or `jax.jacfwd`, batched, against one call
  of `pin.computeABADerivatives`;
- MuJoCo MJX `vmap(forward)` on the fixed-base robots, contacts off, only if `mujoco.mjx`
  imports.

Times are medians of several runs after a warm-up call, with `jax.block_until_ready`. Results:
printed, and written to `benchmarks/results/` as Markdown (`results-<date>.md`,
`results-latest.md`) and JSON (raw numbers). See benchmarks/README.md.

Self-contained on purpose (it does not import from tests/): the coordinate maps between
jointdyn and Pinocchio below are a copy of the ideas of tests/robots.py.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if "--cpu-devices" in sys.argv:  # one XLA CPU device per core; must precede `import jax`
    _n = sys.argv[sys.argv.index("--cpu-devices") + 1]
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_n}"
    ).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # before jointdyn makes any array

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jointdyn as jd  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _timing import paired_ratio, time_call  # noqa: E402

ROBOTS_DIR = Path(pin.__file__).parents[4] / "share" / "example-robot-data" / "robots"

# name: (path under ROBOTS_DIR, floating base)
ROBOTS: dict[str, tuple[str, bool]] = {
    "panda": ("panda_description/urdf/panda.urdf", False),
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "g1": ("g1_description/urdf/g1_29dof_rev_1_0.urdf", True),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),
}
ALGORITHMS = ("aba", "rnea", "crba")
DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


# ---------------------------------------------------------------------------------------------
# robots and the coordinate maps jointdyn ↔ Pinocchio
#
# Joint order: we number bodies depth-first in document order, Pinocchio sorts children by joint
# name, so joints are matched by name. Free joints: ours q = [qw qx qy qz x y z], v = [w; ṗ] in
# world axes; Pinocchio's q = [x y z qx qy qz qw], v = [Rᵀṗ; Rᵀw] (body axes).


def quat_to_rotmat(qwxyz: np.ndarray) -> np.ndarray:
    """(B, 4) quaternions [w x y z] → (B, 3, 3) rotation matrices."""
    qn = qwxyz / np.linalg.norm(qwxyz, axis=-1, keepdims=True)
    w, x, y, z = qn.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


@dataclass
class CoordinateMap:
    """Batched maps of states and forces from our coordinates to Pinocchio's and back."""

    q_src: np.ndarray  # q_pin[:, q_dst] = q[:, q_src]
    q_dst: np.ndarray
    v_src: np.ndarray  # non-free joints: v_pin[:, v_dst] = v[:, v_src]
    v_dst: np.ndarray
    free: list[tuple[int, int, int]]  # (our q offset, our v offset, Pinocchio idx_v)
    pnq: int
    pnv: int

    @classmethod
    def build(cls, model, pmodel) -> CoordinateMap:
        q_src, q_dst, v_src, v_dst, free = [], [], [], [], []
        for name, joint in zip(model.joint_names, model.joints, strict=True):
            qs, vs = model.q_slice(name), model.v_slice(name)
            if qs.stop == qs.start and vs.stop == vs.start:
                continue
            jid = pmodel.getJointId(name)
            if jid >= pmodel.njoints:
                raise KeyError(f"joint {name!r} is not in Pinocchio's model")
            pj = pmodel.joints[jid]
            if isinstance(joint, jd.Free):
                order = [4, 5, 6, 1, 2, 3, 0]  # [w x y z px py pz] → [px py pz x y z w]
                q_src += [qs.start + k for k in order]
                q_dst += list(range(pj.idx_q, pj.idx_q + 7))
                free.append((qs.start, vs.start, pj.idx_v))
            else:
                q_src += list(range(qs.start, qs.stop))
                q_dst += list(range(pj.idx_q, pj.idx_q + pj.nq))
                v_src += list(range(vs.start, vs.stop))
                v_dst += list(range(pj.idx_v, pj.idx_v + pj.nv))
        a = np.asarray
        return cls(a(q_src), a(q_dst), a(v_src), a(v_dst), free, pmodel.nq, pmodel.nv)

    def q(self, q: np.ndarray) -> np.ndarray:
        out = np.zeros((q.shape[0], self.pnq))
        out[:, self.q_dst] = q[:, self.q_src]
        return out

    def motion(self, q: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`T x`: a velocity (or, T being orthogonal, a generalized force) in Pinocchio's axes."""
        out = np.zeros((x.shape[0], self.pnv))
        out[:, self.v_dst] = x[:, self.v_src]
        for qo, vo, pi in self.free:
            Rt = quat_to_rotmat(q[:, qo : qo + 4]).transpose(0, 2, 1)
            out[:, pi : pi + 3] = np.einsum("bij,bj->bi", Rt, x[:, vo + 3 : vo + 6])
            out[:, pi + 3 : pi + 6] = np.einsum("bij,bj->bi", Rt, x[:, vo : vo + 3])
        return out

    def force_back(self, q: np.ndarray, f: np.ndarray) -> np.ndarray:
        """`Tᵀ f`: Pinocchio's generalized force in our coordinates."""
        out = np.zeros((f.shape[0], len(self.v_src) + 6 * len(self.free)))
        out[:, self.v_src] = f[:, self.v_dst]
        for qo, vo, pi in self.free:
            R = quat_to_rotmat(q[:, qo : qo + 4])
            out[:, vo : vo + 3] = np.einsum("bij,bj->bi", R, f[:, pi + 3 : pi + 6])
            out[:, vo + 3 : vo + 6] = np.einsum("bij,bj->bi", R, f[:, pi : pi + 3])
        return out

    def acceleration(self, q: np.ndarray, v: np.ndarray, vdot: np.ndarray) -> np.ndarray:
        """Pinocchio's acceleration for our (q, v, v̇): `T v̇ + Ṫ v`."""
        a = self.motion(q, vdot)
        vp = self.motion(q, v)
        for _, _, pi in self.free:
            a[:, pi : pi + 3] -= np.cross(vp[:, pi + 3 : pi + 6], vp[:, pi : pi + 3])
        return a

    def matrix(self, q1: np.ndarray, nv: int) -> np.ndarray:
        """`T` (Pinocchio nv × our nv) at one configuration."""
        return self.motion(np.repeat(q1[None], nv, 0), np.eye(nv)).T


@dataclass
class Robot:
    name: str
    path: str
    floating: bool
    model: Any
    pmodel: Any
    pdata: Any
    pool: Any
    cmap: CoordinateMap
    states: dict[str, np.ndarray] = field(default_factory=dict)  # ours, float64, (Bmax, n)
    pin_states: dict[str, np.ndarray] = field(default_factory=dict)  # Pinocchio's, (n, Bmax) F

    @property
    def nq(self) -> int:
        return self.model.nq

    @property
    def nv(self) -> int:
        return self.model.nv


def load_jointdyn(name: str) -> jd.Model:
    """jointdyn's model of `ROBOTS[name]` from example-robot-data (shared by the scripts)."""
    rel, floating = ROBOTS[name]
    path = ROBOTS_DIR / rel
    if not path.is_file():
        raise FileNotFoundError(f"example-robot-data file {path} is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # panda's mimic finger joint
        return jd.load_urdf(str(path), floating_base=floating)


def load_robot(name: str, nmax: int, threads: int, seed: int = 0) -> Robot:
    rel, floating = ROBOTS[name]
    path = ROBOTS_DIR / rel
    model = load_jointdyn(name)
    if floating:
        pmodel = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    else:
        pmodel = pin.buildModelFromUrdf(str(path))
    if (pmodel.nq, pmodel.nv) != (model.nq, model.nv):
        raise ValueError(
            f"{name}: nq/nv {model.nq}/{model.nv} vs Pinocchio's {pmodel.nq}/{pmodel.nv}"
        )
    cmap = CoordinateMap.build(model, pmodel)
    robot = Robot(name, str(path), floating, model, pmodel, pmodel.createData(), None, cmap)
    robot.pool = pin.ModelPool(pmodel, threads)

    keys = jax.random.split(jax.random.key(seed), nmax)
    q = np.asarray(jax.vmap(model.random_configuration)(keys), dtype=np.float64)
    if not np.all(np.isfinite(q)):
        warnings.warn(f"{name}: non-finite random configuration; using neutral", stacklevel=2)
        q = np.tile(np.asarray(model.neutral(), dtype=np.float64), (nmax, 1))
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(nmax, model.nv))
    tau = rng.normal(size=(nmax, model.nv))
    vdot = rng.normal(size=(nmax, model.nv))
    robot.states = {"q": q, "v": v, "tau": tau, "vdot": vdot}

    def F(x):  # (B, n) → (n, B), column-major as Pinocchio's parallel API wants
        return np.asfortranarray(x.T)

    robot.pin_states = {
        "q": F(cmap.q(q)),
        "v": F(cmap.motion(q, v)),
        "tau": F(cmap.motion(q, tau)),  # T orthogonal: Tᵀ tau_pin = tau ⇔ tau_pin = T tau
        "a": F(cmap.acceleration(q, v, vdot)),
    }
    return robot


# ---------------------------------------------------------------------------------------------
# jointdyn


def jd_args(robot: Robot, alg: str, batch: int, dtype, placed: bool = True) -> tuple:
    """(model, states...) of `alg` at `batch` in `dtype`; under `--impl batched` (and `placed`)
    the states split over the devices where `jointdyn.batched` computes."""
    s = robot.states
    model = jd.astype(robot.model, dtype)

    def a(x):
        return jnp.asarray(x[:batch], dtype=dtype)

    if alg == "aba":
        args = model, a(s["q"]), a(s["v"]), a(s["tau"])
    elif alg == "rnea":
        args = model, a(s["q"]), a(s["v"]), a(s["vdot"])
    else:
        args = model, a(s["q"])
    if IMPL == "batched" and placed:
        args = jd.device_put_batched(args, (None,) + (0,) * (len(args) - 1))
    return args


IMPL = "vmap"  # set from Settings.impl: "vmap" = jax.vmap, "batched" = jointdyn.batched
COMPILER_OPTIONS = True  # Settings.compiler_options: jointdyn.jit, else plain jax.jit


def jd_batched(alg: str):
    fn = getattr(jd, alg)
    return batch_over_states(fn, (None, 0) if alg == "crba" else (None, 0, 0, 0))


def batch_over_states(fn, in_axes):
    """`jax.vmap`, or with `--impl batched` `jointdyn.batched` (cache-sized chunks on CPU, split
    over all local devices)."""
    if IMPL == "batched":
        return jd.batched(fn, in_axes)
    return jax.vmap(fn, in_axes=in_axes)


def compile_timed(fn, args) -> tuple[Any, float, float]:
    """AOT-compile `jointdyn.jit(fn)` (`jax.jit` with `jointdyn.compiler_options()`; plain
    `jax.jit` under `--xla-defaults`) for `args`: (executable, trace+lower s, compile s)."""
    t0 = time.perf_counter()
    lowered = (jd.jit(fn) if COMPILER_OPTIONS else jax.jit(fn)).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


def blocking(compiled, args):
    """A call of `compiled(*args)` that waits for every output: what the batched rows time."""
    return lambda: jax.block_until_ready(compiled(*args))


def aba_derivatives_fn(mode: str):
    """(model, q, v, tau) → (∂v̇/∂q in the tangent space, ∂v̇/∂v, ∂v̇/∂tau), each (nv, nv).

    `jd`: `jointdyn.aba_derivatives` (−M⁻¹ ∂RNEA); `fwd` / `rev`: `jax.jacfwd` / `jax.jacrev`
    of `aba`.
    """
    if mode == "jd":

        def library(model, q, v, tau):
            d = jd.aba_derivatives(model, q, v, tau)
            return d.dvdot_dq, d.dvdot_dv, d.dvdot_dtau

        return batch_over_states(library, (None, 0, 0, 0))
    jac = {"fwd": jax.jacfwd, "rev": jax.jacrev}[mode]

    def derivatives(model, q, v, tau):
        def f(dq, v, tau):
            return jd.aba(model, model.integrate(q, dq), v, tau)

        return jac(f, argnums=(0, 1, 2))(jnp.zeros_like(v), v, tau)

    return batch_over_states(derivatives, (None, 0, 0, 0))


# ---------------------------------------------------------------------------------------------
# checks: jointdyn's outputs against Pinocchio's on the same states (relative max error)


def rel_err(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(x - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def check_output(robot: Robot, alg: str, out, n: int = 4) -> float:
    s, ps, pm, pd, cm = robot.states, robot.pin_states, robot.pmodel, robot.pdata, robot.cmap
    out = np.asarray(out, dtype=np.float64)[:n]
    n = out.shape[0]
    q = s["q"][:n]
    if alg == "aba":
        ref = np.stack(
            [pin.aba(pm, pd, ps["q"][:, k], ps["v"][:, k], ps["tau"][:, k]) for k in range(n)]
        )
        return rel_err(cm.acceleration(q, s["v"][:n], out), ref)
    if alg == "rnea":
        ref = np.stack(
            [pin.rnea(pm, pd, ps["q"][:, k], ps["v"][:, k], ps["a"][:, k]) for k in range(n)]
        )
        return rel_err(out, cm.force_back(q, ref))
    errs = []
    for k in range(n):
        M = np.array(pin.crba(pm, pd, ps["q"][:, k]))
        M = np.triu(M) + np.triu(M, 1).T
        T = cm.matrix(q[k], robot.nv)
        errs.append(rel_err(out[k], T.T @ M @ T))
    return max(errs)


# ---------------------------------------------------------------------------------------------
# benchmark sections


@dataclass
class Settings:
    robots: list[str]
    batches: list[int]
    dtypes: list[str]
    algorithms: list[str]
    repeats: int
    budget_s: float
    threads: int
    derivatives: bool
    deriv_modes: list[str]
    deriv_batches: list[int]
    deriv_budget_s: float
    mjx: bool
    quick: bool
    impl: str = "vmap"
    compiler_options: bool = True
    cold_repeats: int = 3


def log(msg: str) -> None:
    print(msg, flush=True)


def pin_single_call(robot: Robot, alg: str):
    """One call of pin.aba / rnea / crba / computeABADerivatives (one thread) on the first state."""
    pm, pd, ps = robot.pmodel, robot.pdata, robot.pin_states
    q, v, tau, a = (np.ascontiguousarray(ps[k][:, 0]) for k in ("q", "v", "tau", "a"))
    return {
        "aba": lambda: pin.aba(pm, pd, q, v, tau),
        "rnea": lambda: pin.rnea(pm, pd, q, v, a),
        "crba": lambda: pin.crba(pm, pd, q),
        "aba_derivatives": lambda: pin.computeABADerivatives(pm, pd, q, v, tau),
    }[alg]


def pin_single_calls(robot: Robot, st: Settings) -> dict[str, tuple[float, float]]:
    """µs per call (median, min) of pin.aba / rnea / crba / computeABADerivatives (one thread)."""
    out = {}
    for k in ("aba", "rnea", "crba", "aba_derivatives"):
        r = time_call(pin_single_call(robot, k), st.repeats, st.budget_s)
        out[k] = (1e6 * r["median"], 1e6 * r["min"])
    return out


def pin_parallel(
    robot: Robot, alg: str, batch: int, st: Settings, threads: int | None = None
) -> tuple[float, float]:
    """µs per sample (median, min) of abaInParallel / rneaInParallel (ModelPool, `threads`)."""
    call, _ = pin_reference_call(robot, alg, batch, threads or st.threads)
    r = time_call(call, st.repeats, st.budget_s)
    return 1e6 * r["median"] / batch, 1e6 * r["min"] / batch


def pin_reference_call(robot: Robot, alg: str, batch: int, threads: int):
    """(call, samples per call) of the Pinocchio reference of a batched row: `*InParallel` at
    `batch` (aba, rnea), one `pin.crba` / `computeABADerivatives` call (crba, aba_derivatives)."""
    if alg in ("crba", "aba_derivatives"):
        return pin_single_call(robot, alg), 1
    ps = robot.pin_states
    q, v = (np.asfortranarray(ps[k][:, :batch]) for k in ("q", "v"))
    x = np.asfortranarray(ps["tau" if alg == "aba" else "a"][:, :batch])
    out = np.zeros((robot.nv, batch), order="F")
    f = pin.abaInParallel if alg == "aba" else pin.rneaInParallel
    return (lambda: f(threads, robot.pool, q, v, x, out)), batch


def call_us(fn, args, st: Settings) -> tuple[float, float]:
    """µs per call (median, fastest repeat) of `jointdyn.jit(fn)` (AOT-compiled) on `args`.

    Each call waits for its result with the array's own `.block_until_ready()` (0.3 µs):
    `jax.block_until_ready(x)` walks `x` as a pytree first and costs ~1.1 µs on this machine,
    which is not part of the call (batched timings keep it; it is noise there)."""
    compiled, _, _ = compile_timed(fn, args)
    if isinstance(compiled(*args), jax.Array):
        r = time_call(lambda: compiled(*args).block_until_ready(), st.repeats, st.budget_s)
    else:
        r = time_call(lambda: jax.block_until_ready(compiled(*args)), st.repeats, st.budget_s)
    return 1e6 * r["median"], 1e6 * r["min"]


def one_sample(robot: Robot, alg: str) -> tuple:
    """The state arguments of `alg` (no model) for one float64 sample, without a batch axis."""
    return tuple(jnp.asarray(a[0]) for a in jd_args(robot, alg, 1, jnp.float64)[1:])


def call_overhead(robot: Robot, st: Settings) -> float:
    """µs per call of a jitted identity that takes the model: the cost of passing the model."""
    return call_us(lambda model, q: q, (robot.model, jnp.asarray(robot.states["q"][:1])), st)[0]


def closed_model_call(robot: Robot, st: Settings, alg: str) -> float:
    """µs per call of `jit(lambda *x: alg(model, *x))` on one float64 sample: the model is a
    compile-time constant (no pytree to pass, model-only work folded); parameter changes would
    retrace."""
    model, fn = robot.model, getattr(jd, alg)
    return call_us(lambda *x: fn(model, *x), one_sample(robot, alg), st)[0]


def packed_model_call(robot: Robot, st: Settings, alg: str) -> tuple[float, float]:
    """µs per call (median, fastest repeat) of `jointdyn.jit(alg)(jd.pack(model), *x)` on one
    float64 sample: the model passed as one flat vector (`jointdyn.pack`); new parameter values
    do not retrace."""
    return call_us(getattr(jd, alg), (jd.pack(robot.model), *one_sample(robot, alg)), st)


def bench_latency(name: str, st: Settings, res: dict) -> None:
    """Single calls after `jointdyn.use_low_latency_cpu()` (a process of its own: the settings
    are process-wide and must precede JAX's first computation)."""
    done = jd.use_low_latency_cpu()
    robot = load_robot(name, 4, 1)
    out = {"settings": done}
    for alg in st.algorithms:
        out[alg] = packed_model_call(robot, st, alg)
    log(
        "  low-latency single call µs (packed model): "
        + ", ".join(f"{a} {out[a][0]:.1f} (fastest repeat {out[a][1]:.1f})" for a in st.algorithms)
    )
    record(res, "latency", (name, out))


def bench_robot(robot: Robot, st: Settings, res: dict) -> None:
    name = robot.name
    single = pin_single_calls(robot, st)
    overhead = call_overhead(robot, st)
    closed = {alg: closed_model_call(robot, st, alg) for alg in st.algorithms}
    packed = {alg: packed_model_call(robot, st, alg)[0] for alg in st.algorithms}
    record(res, "pin_single", (name, single))
    info = {
        "nq": robot.nq,
        "nv": robot.nv,
        "floating": robot.floating,
        "model_leaves": len(jax.tree.leaves(robot.model)),
        "jd_call_overhead_us": overhead,
        "jd_closed_us": closed,
        "jd_packed_us": packed,
    }
    record(res, "robots", (name, info))
    log(
        "  pinocchio one call µs: "
        + ", ".join(f"{k} {v[0]:.2f}" for k, v in single.items())
        + f"; jointdyn call overhead (model pytree) {overhead:.1f} µs"
    )

    for alg in st.algorithms:
        pin_us, pin1_us = {}, {}
        for b in st.batches:
            if alg == "crba":  # no crbaInParallel: one call from Python stands for one sample
                pin_us[b] = single["crba"]
                pin1_us[b] = single["crba"][0]
                continue
            try:
                pin_us[b] = pin_parallel(robot, alg, b, st)
                # one thread: no OpenMP barrier, so robust to other load on the machine
                pin1_us[b] = pin_parallel(robot, alg, b, st, threads=1)[0]
            except Exception as e:
                log(f"  pinocchio {alg} batch {b}: {type(e).__name__}: {e}")
                pin_us[b], pin1_us[b] = (None, None), None
        for dname in st.dtypes:
            dtype = DTYPES[dname]
            for i, b in enumerate(st.batches):
                row = {"robot": name, "alg": alg, "dtype": dname, "batch": b}
                row["pin_us"], row["pin_us_min"] = pin_us[b]
                row["pin1_us"] = pin1_us[b]
                row["pin_ref"] = "crba one call" if alg == "crba" else f"{alg}InParallel"
                try:
                    if i == 0:
                        jax.clear_caches()  # the first batch of each (alg, dtype) compiles cold
                    args = jd_args(robot, alg, b, dtype)
                    compiled, t_lower, t_comp = compile_timed(jd_batched(alg), args)
                    out = jax.block_until_ready(compiled(*args))
                    if i == 0 or b == 64:
                        row["check_rel_err"] = check_output(robot, alg, out)
                    run = blocking(compiled, args)
                    r = time_call(run, st.repeats, st.budget_s, warm=True)
                    row.update(
                        jd_us=1e6 * r["median"] / b,
                        jd_us_min=1e6 * r["min"] / b,
                        repeats=len(r["samples"]),
                        lower_s=t_lower,
                        compile_s=t_comp,
                        cold=i == 0,
                    )
                    if row["pin_us"]:
                        row["ratio"] = row["jd_us"] / row["pin_us"]
                        row["ratio_min"] = row["jd_us_min"] / row["pin_us_min"]
                        pin_call, pin_per = pin_reference_call(robot, alg, b, st.threads)
                        row["ratio_paired"] = paired_ratio(run, b, pin_call, pin_per, st.budget_s)
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"
                record(res, "rows", row)
                log("  " + fmt_row_log(row))

    bench_cold_compile(robot, st, res)
    if st.derivatives:
        for mode in st.deriv_modes:
            bench_derivatives(robot, mode, st, res, *single["aba_derivatives"])


def bench_cold_compile(robot: Robot, st: Settings, res: dict) -> None:
    """Issue 4's compile figure, whatever `--impl`: `jointdyn.jit(jax.vmap(jointdyn.aba))` at
    the largest batch (float64 when measured), on one device, compiled cold `st.cold_repeats`
    times, each after `jax.clear_caches()` (trace, lower and XLA compile; this worker's earlier
    compiles paid XLA's one-time set-up). The batched rows' own cold compile is one sample, and
    under `--impl batched` it is `jointdyn.batched`'s program, not this one."""
    if st.cold_repeats < 1 or "aba" not in st.algorithms:
        return
    b = max(st.batches)
    dname = "float64" if "float64" in st.dtypes else st.dtypes[0]
    dtype = DTYPES[dname]
    row = {"robot": robot.name, "alg": "aba", "dtype": dname, "batch": b}
    try:
        args = jd_args(robot, "aba", b, dtype, placed=False)
        fn = jax.vmap(jd.aba, (None, 0, 0, 0))
        lower_s, compile_s = [], []
        for _ in range(st.cold_repeats):
            jax.clear_caches()
            compiled, t_lower, t_comp = compile_timed(fn, args)
            lower_s.append(t_lower)
            compile_s.append(t_comp)
        row["check_rel_err"] = check_output(robot, "aba", compiled(*args))
        total = [x + y for x, y in zip(lower_s, compile_s, strict=True)]
        row.update(lower_s=lower_s, compile_s=compile_s, total_s=total)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
    record(res, "cold_compile", row)
    if "error" in row:
        log(f"  cold compile jit(vmap(aba)): {row['error']}")
    else:
        log(
            f"  cold compile jit(vmap(aba)) batch {b} {dname}: median "
            f"{np.median(row['total_s']):.2f} s of {', '.join(f'{x:.2f}' for x in total)}"
        )


def bench_derivatives(
    robot: Robot, mode: str, st: Settings, res: dict, pin_us: float, pin_us_min: float
) -> None:
    """Batched derivatives of aba; a larger batch shrinks to fit `deriv_budget_s`."""
    per_sample = None
    done = 0
    for i, b_req in enumerate(st.deriv_batches):
        b, note = b_req, ""
        if per_sample is not None:
            # warm-up + at least two timed calls must fit in the budget
            fits = int(st.deriv_budget_s / (3 * per_sample))
            if fits < b:
                b = 1 << max(0, fits.bit_length() - 1) if fits > 0 else 0
                if b <= done:
                    record(
                        res,
                        "derivatives",
                        {
                            "robot": robot.name,
                            "mode": mode,
                            "batch": b_req,
                            "skipped": f"predicted {3 * per_sample * b_req:.0f} s "
                            f"> budget {st.deriv_budget_s:.0f} s",
                        },
                    )
                    log(f"  derivatives {mode} batch {b_req}: skipped (time budget)")
                    continue
                note = f"batch {b_req} → {b}: predicted {3 * per_sample * b_req:.0f} s > budget"
        row = {"robot": robot.name, "mode": mode, "batch": b, "requested_batch": b_req}
        row["note"] = note
        row["pin_us"], row["pin_us_min"] = pin_us, pin_us_min
        try:
            if i == 0:
                jax.clear_caches()
            log(f"  derivatives {mode} batch {b}: compiling")
            args = jd_args(robot, "aba", b, jnp.float64)
            compiled, t_lower, t_comp = compile_timed(aba_derivatives_fn(mode), args)
            run = blocking(compiled, args)
            r = time_call(run, st.repeats, st.budget_s, min_repeats=2)  # warm-up + 2 or more
            per_sample = r["median"] / b
            done = b
            row.update(
                jd_us=1e6 * per_sample,
                jd_us_min=1e6 * r["min"] / b,
                repeats=len(r["samples"]),
                lower_s=t_lower,
                compile_s=t_comp,
                ratio=1e6 * per_sample / pin_us,
                ratio_min=1e6 * r["min"] / b / pin_us_min,
            )
            if b * per_sample < 0.5:  # a pair per round fits; a larger batch would not
                row["ratio_paired"] = paired_ratio(
                    run,
                    b,
                    *pin_reference_call(robot, "aba_derivatives", b, st.threads),
                    st.budget_s,
                )
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        record(res, "derivatives", row)
        log(
            f"  derivatives {mode} batch {b}: "
            + (
                row["error"]
                if "error" in row
                else f"{row['jd_us']:.1f} µs/sample (pin one call {pin_us:.1f}), "
                f"ratio {row['ratio']:.1f}, compile {t_lower + t_comp:.1f} s {note}"
            )
        )


def mjx_available() -> bool:
    try:
        return importlib.util.find_spec("mujoco") is not None and (
            importlib.util.find_spec("mujoco.mjx") is not None
        )
    except (ImportError, ValueError):
        return False


def bench_mjx(robot: Robot, st: Settings, res: dict) -> None:
    """MJX `vmap(forward)` with constraints off (contacts and joint limits: no solver, so the
    same problem as `aba`), fixed-base robots, at the batches and first dtype of the run; best
    effort (any error is kept). `mjx.forward` is MuJoCo's whole smooth pipeline (kinematics,
    composite inertias, `M` factorised, bias forces, passive forces), its way to `qacc`."""
    import xml.etree.ElementTree as ET

    import mujoco
    from mujoco import mjx

    root = ET.parse(robot.path).getroot()
    for link in root.iter("link"):  # no meshes to find: dynamics only
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
    dtype = DTYPES[st.dtypes[0]]
    m = mjx.put_model(mj)
    d0 = mjx.put_data(mj, mujoco.MjData(mj))

    def fwd(m, d0, q, v, u):
        return mjx.forward(m, d0.replace(qpos=q, qvel=v, qfrc_applied=u)).qacc

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
            if IMPL == "batched":  # the same chunks and devices as jointdyn's rows
                args = jd.device_put_batched(args, axes)
            compiled, t_lower, t_comp = compile_timed(batch_over_states(fwd, axes), args)
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


def bench_gpu_throughput(st: Settings, res: dict, batch: int) -> None:
    """float32 jit(vmap(aba)) at a large batch on the default device, panda and g1."""
    for name in ("panda", "g1"):
        robot = load_robot(name, batch, st.threads)
        info = {"nq": robot.nq, "nv": robot.nv, "floating": robot.floating}
        record(res, "robots", (name, info))
        row = {"robot": name, "alg": "aba", "dtype": "float32", "batch": batch}
        try:
            jax.clear_caches()
            args = jd_args(robot, "aba", batch, jnp.float32)
            compiled, t_lower, t_comp = compile_timed(jd_batched("aba"), args)
            jax.block_until_ready(compiled(*args))
            r = time_call(blocking(compiled, args), st.repeats, st.budget_s)
            row.update(
                jd_us=1e6 * r["median"] / batch,
                jd_us_min=1e6 * r["min"] / batch,
                repeats=len(r["samples"]),
                lower_s=t_lower,
                compile_s=t_comp,
                cold=True,
            )
            row["samples_per_s"] = batch / r["median"]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
        row["pin_us"], row["pin_us_min"] = pin_parallel(robot, "aba", batch, st)
        row["pin1_us"] = pin_parallel(robot, "aba", batch, st, threads=1)[0]
        row["pin_ref"] = "abaInParallel (float64, CPU)"
        if "jd_us" in row:
            row["ratio"] = row["jd_us"] / row["pin_us"]
            row["ratio_min"] = row["jd_us_min"] / row["pin_us_min"]
        record(res, "rows", row)
        log(f"  {name} " + fmt_row_log(row))


# ---------------------------------------------------------------------------------------------
# one process per robot
#
# XLA:CPU (jax 0.10.2) was seen to deadlock, rarely, in a long batched call (every thread asleep
# on a futex, block_until_ready waiting forever). Each robot therefore runs in a worker process
# that streams its records to the parent; a worker silent for `--stall-timeout` seconds is
# killed, its records so far are kept, and the run goes on with the next robot.

RECORD_PREFIX = "@@record "
WORKER = False  # True in a worker: records also go to stdout for the parent


def record(res: dict, key: str, item) -> None:
    """Add `item` to `res[key]`: a list, or a dict when `item` is `(name, value)`."""
    if isinstance(res[key], dict):
        res[key][item[0]] = item[1]
    else:
        res[key].append(item)
    if WORKER:
        print(RECORD_PREFIX + json.dumps({"key": key, "item": item}, default=str), flush=True)


def empty_results() -> dict[str, Any]:
    return {
        "robots": {},
        "pin_single": {},
        "latency": {},
        "rows": [],
        "derivatives": [],
        "mjx": [],
        "cold_compile": [],
    }


def bench_one_robot(name: str, st: Settings, res: dict) -> None:
    nmax = max(st.batches + (st.deriv_batches if st.derivatives else []))
    try:
        robot = load_robot(name, nmax, st.threads)
    except Exception as e:
        log(f"  cannot load {name}: {type(e).__name__}: {e}")
        record(res, "rows", {"robot": name, "alg": "load", "error": f"{type(e).__name__}: {e}"})
        return
    log(f"  nq {robot.nq}, nv {robot.nv}, floating base {robot.floating}")
    bench_robot(robot, st, res)
    if st.mjx and not robot.floating:
        try:
            bench_mjx(robot, st, res)
        except Exception as e:
            record(res, "mjx", {"robot": name, "batch": None, "error": f"{type(e).__name__}: {e}"})


def bench_in_worker(
    name: str, st: Settings, res: dict, stall_s: float, role: str = "--worker"
) -> None:
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), role, name]
    cmd += ["--settings-json", json.dumps(st.__dict__)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    last = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            if time.monotonic() - last > stall_s:
                proc.kill()
                proc.wait()
                msg = f"worker silent for {stall_s:.0f} s, killed (XLA:CPU hang?); results kept"
                log(f"  {msg}")
                record(res, "rows", {"robot": name, "alg": "worker", "error": msg})
                return
            continue
        if line is None:
            break
        last = time.monotonic()
        if line.startswith(RECORD_PREFIX):
            r = json.loads(line[len(RECORD_PREFIX) :])
            item = r["item"]
            record(res, r["key"], tuple(item) if isinstance(res[r["key"]], dict) else item)
        else:
            print(line, end="", flush=True)
    rc = proc.wait()
    if rc != 0:
        msg = f"worker exited with status {rc}"
        log(f"  {msg}")
        record(res, "rows", {"robot": name, "alg": "worker", "error": msg})


# ---------------------------------------------------------------------------------------------
# reporting


def _f(x, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if x >= 1000:
            return f"{x:,.0f}"
        if x >= 100:
            return f"{x:.0f}" if digits <= 1 else f"{x:.1f}"
        return f"{x:.{digits}f}"
    return str(x)


def fmt_row_log(row: dict) -> str:
    head = f"{row['alg']:<5} {row['dtype']:<7} batch {row['batch']:>5}: "
    if "error" in row:
        return head + "ERROR " + row["error"]
    return head + (
        f"jointdyn {_f(row['jd_us'])} µs/sample, pinocchio {_f(row['pin_us'])} "
        f"(1 thread {_f(row.get('pin1_us'))}), ratio {_f(row.get('ratio'))}, "
        f"compile {row['lower_s'] + row['compile_s']:.1f} s"
    )


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    cpu, flags = platform.processor() or "?", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("?", "", "x86_64"):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    dev = jax.devices()[0]
    return {
        "cpu": cpu,
        "avx512": "avx512f" in flags.split(),
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _version("jaxlib"),
        "devices": [str(d) for d in jax.devices()],
        "compiler_options": jd.compiler_options(),
        "platform": dev.platform,
        "device_kind": getattr(dev, "device_kind", "?"),
        "pinocchio": pin.__version__,
        "numpy": np.__version__,
        "jointdyn": f"{jd.__version__} ({commit})",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(pkg)
    except Exception:
        return None


def render(res: dict, st: Settings) -> str:
    m = res["machine"]
    out = [f"# jointdyn benchmarks — {m['date']}", ""]
    out.append(
        f"- machine: {m['cpu']} (AVX-512: {'yes' if m['avx512'] else 'no'}), {m['cores']} cores "
        f"({m['affinity']} usable), load average at start "
        f"{', '.join(f'{x:.1f}' for x in m['loadavg_start'] or [])}, at end "
        f"{', '.join(f'{x:.1f}' for x in res.get('loadavg_end') or [])}"
    )
    out.append(f"- jax {m['jax']} (jaxlib {m['jaxlib']}), devices {', '.join(m['devices'])}")
    out.append(
        f"- pinocchio {m['pinocchio']} (threads for *InParallel: {st.threads}), numpy "
        f"{m['numpy']}, python {m['python']}, jointdyn {m['jointdyn']}"
    )
    out.append(f"- command: `{res['command']}`; wall time {res.get('wall_s', 0):.0f} s")
    opts = m.get("compiler_options")
    out.append(
        f"- jointdyn compiled with `jointdyn.jit`, XLA options {opts}"
        if st.compiler_options
        else "- jointdyn compiled with plain `jax.jit` (XLA's default options, `--xla-defaults`)"
    )
    out.append(
        "- µs per sample, median of repeats after a warm-up call; ratio = jointdyn / Pinocchio "
        "(< 1: jointdyn faster). Pinocchio is always float64 on the CPU. 'paired ratio' is the "
        "median over rounds of jointdyn's time over Pinocchio's, timed back to back in each "
        "round (~50 ms each, after one untimed call): insensitive to a machine whose speed "
        "drifts over minutes, but each side loses its warm caches to the other, so read it "
        "beside the plain ratio. 'ratio of minima' "
        "compares the fastest repeats: less sensitive to other load on the machine (with as "
        "many OpenMP threads as cores, Pinocchio's parallel calls stall when a core is taken)."
    )
    out.append("")

    rows = [r for r in res["rows"] if r.get("alg") in ALGORITHMS and "robot" in r]
    if rows:
        how = "jit(vmap(alg))" if st.impl == "vmap" else "jit(jointdyn.batched(alg))"
        out += [f"## Batched dynamics: jointdyn {how} vs Pinocchio", ""]
        out.append(
            "Pinocchio: `abaInParallel` / `rneaInParallel` (ModelPool) at the same batch, with "
            f"{st.threads} threads and with 1 (no OpenMP barrier: the steady figure on a loaded "
            "machine); crba (†): Pinocchio has no parallel crba, so both columns are one "
            "`pin.crba` call from Python (one thread)."
        )
        out.append("")
        body = []
        for r in rows:
            nv = res["robots"].get(r["robot"], {}).get("nv", "")
            alg = r["alg"] + (" †" if r["alg"] == "crba" else "")
            if "error" in r:
                body.append([r["robot"], nv, alg, r["dtype"], r["batch"], "ERROR", *[""] * 6])
                continue
            body.append(
                [
                    r["robot"],
                    nv,
                    alg,
                    r["dtype"],
                    r["batch"],
                    r["jd_us"],
                    r["pin_us"],
                    r.get("ratio"),
                    r.get("ratio_paired"),
                    r.get("ratio_min"),
                    r.get("pin1_us"),
                    r["jd_us"] / r["pin1_us"] if r.get("pin1_us") else None,
                ]
            )
        out.append(
            table(
                [
                    "robot",
                    "nv",
                    "alg",
                    "dtype",
                    "batch",
                    "jointdyn µs/sample",
                    f"Pinocchio µs/sample ({st.threads} threads)",
                    "ratio",
                    "paired ratio",
                    "ratio of minima",
                    "Pinocchio 1 thread",
                    "ratio to 1 thread",
                ],
                body,
            )
        )
        out.append("")

    if res["pin_single"]:
        out += ["## Single call: jointdyn jitted, batch 1, vs one Pinocchio call from Python", ""]
        out.append(
            "jointdyn: the batch-1 float64 row above (jit(vmap), one sample), µs per call. "
            "'call overhead' is a jitted identity `f(model, q) = q`: the cost of passing the "
            "model pytree into a jitted function, part of every jointdyn call. 'model closed "
            "over' is `jit(lambda q, ...: alg(model, q, ...))` without vmap: the model is a "
            "compile-time constant (nothing to pass, model-only work folded; new parameter "
            "values would retrace). 'packed' is `jointdyn.jit(alg)(jointdyn.pack(model), ...)`: "
            "the model as one flat vector, one buffer to pass, new values do not retrace. "
            "The call-overhead, closed-over and packed columns wait with the result's own "
            "`.block_until_ready()` (`jax.block_until_ready`, a pytree walk, adds ~0.8 µs). "
            "'packed, low-latency' is the same call in a process of its own that first ran "
            "`jointdyn.use_low_latency_cpu()` (synchronous dispatch; XLA's scheduler without "
            "concurrency optimisation); its ratio is to the Pinocchio call."
        )
        out.append("")
        body = []
        for name, single in res["pin_single"].items():
            info = res["robots"][name]
            low = res["latency"].get(name, {})
            for alg in st.algorithms:
                r = next(
                    (
                        x
                        for x in rows
                        if x["robot"] == name
                        and x["alg"] == alg
                        and x["dtype"] == "float64"
                        and x["batch"] == 1
                        and "jd_us" in x
                    ),
                    None,
                )
                jdu = r["jd_us"] if r else None
                body.append(
                    [
                        name,
                        alg,
                        jdu,
                        single[alg][0],
                        jdu / single[alg][0] if jdu else None,
                        r["jd_us_min"] / single[alg][1] if r else None,
                        info["jd_call_overhead_us"],
                        info.get("jd_closed_us", {}).get(alg),
                        info["model_leaves"],
                        info.get("jd_packed_us", {}).get(alg),
                        low[alg][0] if alg in low else None,
                        low[alg][1] if alg in low else None,
                        low[alg][0] / single[alg][0] if alg in low else None,
                    ]
                )
        out.append(
            table(
                [
                    "robot",
                    "alg",
                    "jointdyn µs/call",
                    "Pinocchio µs/call",
                    "ratio",
                    "ratio of minima",
                    "call overhead µs",
                    "model closed over µs/call",
                    "model leaves",
                    "packed µs/call",
                    "packed, low-latency µs/call",
                    "(fastest repeat)",
                    "ratio (low-latency)",
                ],
                body,
            )
        )
        out.append("")

    if rows:
        out += ["## Compile time (seconds, apart from the timings)", ""]
        how = "jax.vmap(alg)" if st.impl == "vmap" else "jointdyn.batched(alg)"
        out.append(
            f"`jointdyn.jit({how}).lower(*args).compile()` (`jax.jit` with "
            "`jointdyn.compiler_options()`; plain `jax.jit` under `--xla-defaults`), the program "
            "the rows above time. Cold: after `jax.clear_caches()`, "
            "at the first batch; the other batches reuse the traced inner jaxpr and compile "
            "their own XLA program."
        )
        out.append("")
        body = []
        keys = dict.fromkeys((r["robot"], r["alg"], r["dtype"]) for r in rows)
        for robot, alg, dname in keys:
            rs = [
                r
                for r in rows
                if (r["robot"], r["alg"], r["dtype"]) == (robot, alg, dname) and "jd_us" in r
            ]
            cold = next((r for r in rs if r["cold"]), None)
            if cold is None:
                continue
            others = ", ".join(
                f"{r['batch']}: {r['lower_s'] + r['compile_s']:.1f}" for r in rs if not r["cold"]
            )
            body.append(
                [
                    robot,
                    alg,
                    dname,
                    cold["batch"],
                    cold["lower_s"],
                    cold["compile_s"],
                    cold["lower_s"] + cold["compile_s"],
                    others or "–",
                ]
            )
        out.append(
            table(
                [
                    "robot",
                    "alg",
                    "dtype",
                    "cold at batch",
                    "trace+lower",
                    "XLA compile",
                    "cold total",
                    "other batches (total)",
                ],
                body,
            )
        )
        out.append("")

    cold = [r for r in res.get("cold_compile", []) if "total_s" in r]
    if cold:
        n = len(cold[0]["total_s"])
        out += ["## Cold compile of `jit(vmap(aba))` (issue 4's figure: talos, at most 2 s)", ""]
        out.append(
            "`jointdyn.jit(jax.vmap(jointdyn.aba)).lower(*args).compile()` (plain `jax.jit` "
            "under `--xla-defaults`) at the run's largest "
            f"batch on one device, compiled cold {n} times in each robot's worker process, each "
            "after `jax.clear_caches()` (trace, lower and XLA compile; earlier compiles in the "
            "process paid XLA's one-time set-up, ~1–2 s more for a process's first compile). "
            "Seconds; the medians of each column."
        )
        out.append("")
        body = [
            [
                r["robot"],
                r["dtype"],
                r["batch"],
                float(np.median(r["lower_s"])),
                float(np.median(r["compile_s"])),
                float(np.median(r["total_s"])),
                f"{min(r['total_s']):.2f}–{max(r['total_s']):.2f}",
            ]
            for r in cold
        ]
        out.append(
            table(
                ["robot", "dtype", "batch", "trace+lower", "XLA compile", "total", "range"],
                body,
            )
        )
        out.append("")

    if res["derivatives"]:
        out += ["## Derivatives of aba in (q, v, tau), float64", ""]
        how = "jit(vmap" if st.impl == "vmap" else "jit(jointdyn.batched"
        out.append(
            f"jointdyn: `{how}(jointdyn.aba_derivatives))` (jd: −M⁻¹ ∂RNEA with analytic "
            f"RNEA partials), or `{how}(jac(lambda dq, v, tau: aba(model, model.integrate(q, dq), "
            "v, tau), argnums=(0, 1, 2))))` at dq = 0 with jac = `jax.jacrev` (rev) or "
            "`jax.jacfwd` (fwd); q-derivatives in the tangent space, as Pinocchio's. Pinocchio: one call "
            "of `computeABADerivatives` (one thread). A batch that would not fit the time budget "
            f"({st.deriv_budget_s:.0f} s for warm-up + 2 calls) is shrunk to a power of two."
        )
        out.append("")
        body = []
        for r in res["derivatives"]:
            nv = res["robots"].get(r["robot"], {}).get("nv", "")
            if "skipped" in r:
                body.append(
                    [r["robot"], nv, r["mode"], r["batch"], "skipped", *[""] * 5, r["skipped"]]
                )
            elif "error" in r:
                body.append(
                    [r["robot"], nv, r["mode"], r["batch"], "ERROR", *[""] * 5, r["error"][:80]]
                )
            else:
                body.append(
                    [
                        r["robot"],
                        nv,
                        r["mode"],
                        r["batch"],
                        r["jd_us"],
                        r["pin_us"],
                        r["ratio"],
                        r.get("ratio_paired"),
                        r["ratio_min"],
                        r["lower_s"] + r["compile_s"],
                        r["note"] or "",
                    ]
                )
        out.append(
            table(
                [
                    "robot",
                    "nv",
                    "mode",
                    "batch",
                    "jointdyn µs/sample",
                    "Pinocchio µs/call",
                    "ratio",
                    "paired ratio",
                    "ratio of minima",
                    "compile s",
                    "note",
                ],
                body,
            )
        )
        out.append("")

    if res["mjx"]:
        out += ["## MuJoCo MJX vmap(forward), constraints off", ""]
        out.append(
            "`mjx.forward` batched as jointdyn's rows are (`jax.vmap`, or `jointdyn.batched` "
            "with `--impl batched`), with contacts and joint limits disabled "
            "(no constraint solver: the problem `aba` solves), next to the jointdyn `aba` row "
            "of the same batch and dtype above and Pinocchio's `abaInParallel`. Fixed-base "
            "robots only. MJX is compiled with the same XLA options as jointdyn (its own best "
            "on XLA:CPU: with XLA's default fusion emitters, jax 0.10.2, panda at batch 64 "
            "compiled in 35 s and ran at 0.12 s per sample). Compile: cold, trace + lower + XLA."
        )
        out.append("")
        body = [
            [
                r["robot"],
                r.get("dtype", ""),
                r["batch"],
                r.get("us"),
                r.get("jd_us"),
                r.get("ratio_jd"),
                r.get("pin_us"),
                r.get("ratio"),
                r.get("compile_s"),
                r.get("jd_compile_s"),
                r.get("error", "")[:80],
            ]
            for r in res["mjx"]
        ]
        out.append(
            table(
                [
                    "robot",
                    "dtype",
                    "batch",
                    "MJX µs/sample",
                    "jointdyn aba µs/sample",
                    "MJX / jointdyn",
                    "Pinocchio aba µs/sample",
                    "MJX / Pinocchio",
                    "MJX compile s",
                    "jointdyn compile s",
                    "error",
                ],
                body,
            )
        )
        out.append("")
    elif not res.get("gpu_throughput"):
        why = "`--no-mjx`" if res.get("mjx_off") == "--no-mjx" else "`mujoco.mjx` is not importable"
        out += [f"MuJoCo MJX: not measured ({why}).", ""]

    checks = [r for r in rows if "check_rel_err" in r]
    checks += [
        {**r, "alg": "aba (cold-compile table)"}
        for r in res.get("cold_compile", [])
        if "check_rel_err" in r
    ]
    if checks:
        out += ["## Agreement with Pinocchio (same states, first 4 samples)", ""]
        out.append(
            "max |jointdyn − Pinocchio| / max(1, max |Pinocchio|), after the coordinate maps."
        )
        out.append("")
        body = [
            [r["robot"], r["alg"], r["dtype"], r["batch"], f"{r['check_rel_err']:.1e}"]
            for r in checks
        ]
        out.append(table(["robot", "alg", "dtype", "batch", "rel. error"], body))
        out.append("")

    errors = [
        r
        for r in res["rows"] + res["derivatives"] + res["mjx"] + res.get("cold_compile", [])
        if "error" in r
    ]
    if errors:
        out += ["## Errors", ""]
        for r in errors:
            what = [r.get("robot"), r.get("alg", r.get("mode", "mjx")), r.get("dtype")]
            if r.get("batch") is not None:
                what.append(f"batch {r['batch']}")
            out.append(f"- {' '.join(str(x) for x in what if x)}: `{r['error'][:300]}`")
        out.append("")
    return "\n".join(out)


def write_results(res: dict, text: str, out_dir: Path, tag: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    prefix = f"results{'-' + tag if tag else ''}"
    paths = [
        out_dir / f"{prefix}-{stamp}.md",
        out_dir / f"{prefix}-latest.md",
        out_dir / f"{prefix}-{stamp}.json",
        out_dir / f"{prefix}-latest.json",
    ]
    raw = json.dumps(res, indent=1, default=str)
    for p in paths:
        p.write_text(text + "\n" if p.suffix == ".md" else raw)
    return paths


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def ints(s):
        return [int(x) for x in s.split(",") if x]

    def strs(s):
        return [x for x in s.split(",") if x]

    p.add_argument("--robots", type=strs, default=None, help=f"of {','.join(ROBOTS)}")
    p.add_argument("--batches", type=ints, default=None, help="default 1,64,4096")
    p.add_argument("--dtypes", type=strs, default=["float64", "float32"])
    p.add_argument("--algorithms", type=strs, default=list(ALGORITHMS))
    p.add_argument("--repeats", type=int, default=None, help="most repeats per timing (7)")
    p.add_argument("--budget", type=float, default=None, help="seconds per timing (1.5)")
    p.add_argument("--threads", type=int, default=2, help="Pinocchio threads (ModelPool)")
    p.add_argument("--no-derivatives", action="store_true")
    p.add_argument(
        "--deriv-mode", type=strs, default=["jd"], help="jd (aba_derivatives), fwd, rev, or a list"
    )
    p.add_argument("--deriv-batches", type=ints, default=None, help="default 64,4096")
    p.add_argument(
        "--deriv-budget", type=float, default=20.0, help="seconds for a large derivative batch"
    )
    p.add_argument("--no-mjx", action="store_true")
    p.add_argument(
        "--cold-repeats",
        type=int,
        default=3,
        help="cold compiles of jit(vmap(aba)) at the largest batch per robot (0: none)",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: panda, batches 1,64")
    p.add_argument(
        "--gpu-throughput", action="store_true", help="only float32 aba at a large batch"
    )
    p.add_argument("--throughput-batch", type=int, default=65536)
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=150.0,
        help="kill a robot's worker process silent this long (seconds)",
    )
    p.add_argument("--in-process", action="store_true", help="no worker processes (debugging)")
    p.add_argument(
        "--impl",
        choices=["vmap", "batched"],
        default="vmap",
        help="jointdyn batching: jax.vmap, or jointdyn.batched (cache-sized chunks, all devices)",
    )
    p.add_argument(
        "--xla-defaults",
        action="store_true",
        help="compile with plain jax.jit, not jointdyn.jit (jointdyn.compiler_options())",
    )
    p.add_argument(
        "--cpu-devices", type=int, default=None, help="XLA CPU devices (one per core: 2)"
    )
    p.add_argument(
        "--no-latency",
        action="store_true",
        help="skip the single calls in a process set up by jointdyn.use_low_latency_cpu()",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--latency-worker", help=argparse.SUPPRESS)
    p.add_argument("--settings-json", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    global WORKER
    a = parse_args(argv)
    global IMPL, COMPILER_OPTIONS
    if a.worker:
        WORKER = True
        st = Settings(**json.loads(a.settings_json))
        IMPL = st.impl
        COMPILER_OPTIONS = st.compiler_options
        bench_one_robot(a.worker, st, empty_results())
        return
    if a.latency_worker:
        WORKER = True
        st = Settings(**json.loads(a.settings_json))
        COMPILER_OPTIONS = st.compiler_options
        bench_latency(a.latency_worker, st, empty_results())
        return
    st = Settings(
        robots=a.robots or (["panda"] if a.quick else list(ROBOTS)),
        batches=a.batches or ([1, 64] if a.quick else [1, 64, 4096]),
        dtypes=a.dtypes,
        algorithms=a.algorithms,
        repeats=a.repeats or (3 if a.quick else 7),
        budget_s=a.budget or (0.5 if a.quick else 1.5),
        threads=a.threads,
        derivatives=not a.no_derivatives,
        deriv_modes=a.deriv_mode,
        deriv_batches=a.deriv_batches or ([64] if a.quick else [64, 4096]),
        deriv_budget_s=a.deriv_budget,
        mjx=not a.no_mjx and mjx_available(),
        quick=a.quick,
        impl=a.impl,
        compiler_options=not a.xla_defaults,
        cold_repeats=a.cold_repeats,
    )
    IMPL = st.impl
    COMPILER_OPTIONS = st.compiler_options
    for name in st.robots:
        if name not in ROBOTS:
            sys.exit(f"unknown robot {name!r}; robots: {', '.join(ROBOTS)}")
    for x in st.algorithms:
        if x not in ALGORITHMS:
            sys.exit(f"unknown algorithm {x!r}; algorithms: {', '.join(ALGORITHMS)}")
    for x in st.dtypes:
        if x not in DTYPES:
            sys.exit(f"unknown dtype {x!r}; dtypes: {', '.join(DTYPES)}")
    for x in st.deriv_modes:
        if x not in ("jd", "fwd", "rev"):
            sys.exit(f"unknown derivative mode {x!r}: jd, fwd or rev")

    t_start = time.perf_counter()
    res: dict[str, Any] = {
        "machine": machine_info(),
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]),
        "settings": st.__dict__,
        **empty_results(),
        "gpu_throughput": a.gpu_throughput,
    }
    m = res["machine"]
    log(
        f"cpu: {m['cpu']} (AVX-512 {'yes' if m['avx512'] else 'no'}), {m['cores']} cores "
        f"({m['affinity']} usable), load {m['loadavg_start']}"
    )
    log(f"jax {m['jax']} (jaxlib {m['jaxlib']}), devices {m['devices']}")
    log(f"pinocchio {m['pinocchio']}, numpy {m['numpy']}, jointdyn {m['jointdyn']}")
    if m["platform"] != "cpu":
        log(f"jointdyn runs on {m['platform']} ({m['device_kind']}); Pinocchio on the CPU")

    if a.gpu_throughput:
        if m["platform"] != "gpu":
            log("note: --gpu-throughput on a non-GPU device")
        bench_gpu_throughput(st, res, a.throughput_batch)
        tag = "gpu-throughput"
    else:
        res["mjx_off"] = None if st.mjx else "--no-mjx" if a.no_mjx else "not importable"
        log(
            f"robots {st.robots}, batches {st.batches}, dtypes {st.dtypes}, derivatives "
            f"{st.deriv_modes if st.derivatives else 'off'} at {st.deriv_batches}, "
            f"mjx {'on' if st.mjx else 'off (not importable)' if not a.no_mjx else 'off'}"
        )
        for name in st.robots:
            t0 = time.perf_counter()
            log(f"\n== {name}")
            if a.in_process:
                bench_one_robot(name, st, res)
            else:
                bench_in_worker(name, st, res, a.stall_timeout)
                if 1 in st.batches and not a.no_latency:
                    bench_in_worker(name, st, res, a.stall_timeout, "--latency-worker")
            log(f"  ({time.perf_counter() - t0:.0f} s)")
        tag = "quick" if st.quick else ""

    res["wall_s"] = time.perf_counter() - t_start
    res["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    text = render(res, st)
    print("\n" + text)
    if not a.no_write:
        paths = write_results(res, text, a.out_dir, tag)
        log("written: " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
