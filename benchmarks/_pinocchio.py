"""The Pinocchio side of `run.py`: coordinate maps, Pinocchio's calls, and the agreement check.

- `CoordinateMap` maps jointdyn's states and forces to Pinocchio's coordinates and back, so that
  both libraries compute the same thing on the same states;
- `pin_single_call(s)`, `pin_parallel` and `pin_reference_call` are the Pinocchio calls the
  tables compare with: one `pin.aba` / `rnea` / `crba` / `computeABADerivatives` call from
  Python (one thread), and `abaInParallel` / `rneaInParallel` with a `ModelPool`;
- `check_output` compares jointdyn's outputs with Pinocchio's on the first states (the
  "Agreement" table).

Self-contained on purpose (it does not import from tests/): the maps are a copy of the ideas of
tests/robots.py.

Joint order: jointdyn numbers bodies depth-first in document order, Pinocchio sorts children by
joint name, so joints are matched by name. Free joints: jointdyn's q = [qw qx qy qz x y z],
v = [w; ṗ] in world axes; Pinocchio's q = [x y z qx qy qz qw], v = [Rᵀṗ; Rᵀw] (body axes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pinocchio as pin
from _timing import time_call

import jointdyn as jd

if TYPE_CHECKING:
    from _results import Settings
    from _robots import Robot


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
# Pinocchio's calls: the references of the tables


def pin_single_call(robot: Robot, alg: str):
    """One call of pin.aba / rnea / crba / computeABADerivatives / computeRNEADerivatives (one
    thread) on the first state."""
    pm, pd, ps = robot.pmodel, robot.pdata, robot.pin_states
    q, v, tau, a = (np.ascontiguousarray(ps[k][:, 0]) for k in ("q", "v", "tau", "a"))
    return {
        "aba": lambda: pin.aba(pm, pd, q, v, tau),
        "rnea": lambda: pin.rnea(pm, pd, q, v, a),
        "crba": lambda: pin.crba(pm, pd, q),
        "aba_derivatives": lambda: pin.computeABADerivatives(pm, pd, q, v, tau),
        "rnea_derivatives": lambda: pin.computeRNEADerivatives(pm, pd, q, v, a),
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
