"""Compile time of jit(aba), jit(rnea), jit(crba) against the number of bodies.

Builds random trees (branching humanoid-like, revolute joints plus a free base) of 10, 30 and
60 bodies with `ModelBuilder` and reports the cold compile time of each algorithm.

    python benchmarks/compile_scaling.py
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jointdyn as jd


def random_tree(nbodies: int, seed: int = 0, branches: int = 5) -> jd.Model:
    """A floating base with `branches` limbs; further bodies extend limbs round-robin."""
    rng = np.random.default_rng(seed)
    b = jd.ModelBuilder()
    tips = []
    for i in range(nbodies):
        d = rng.uniform(0.05, 0.2, 3)
        inertia = jd.SpatialInertia(
            rng.uniform(0.5, 2),
            rng.normal(0, 0.05, 3),
            np.diag([d[0] + d[1], d[1] + d[2], d[0] + d[2]]),
        )
        if i == 0:
            b.add_body("base", inertia, "world", jd.Free())
            continue
        if len(tips) < branches:
            parent = 0
        else:
            parent = tips.pop(0)
        axis = np.eye(3)[rng.integers(3)]
        b.add_body(
            f"b{i}",
            inertia,
            parent,
            jd.Revolute(axis),
            X_PF=jd.Transform.from_rpy(rng.normal(0, 0.3, 3), rng.normal(0, 0.2, 3)),
        )
        tips.append(i)
    return b.build()


def compile_seconds(fn, *args) -> float:
    t0 = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t0


def main() -> None:
    jax.config.update("jax_enable_x64", True)
    print(f"{'bodies':>6} {'depth':>5} {'nv':>4} {'aba [s]':>8} {'rnea [s]':>8} {'crba [s]':>8}")
    for n in (10, 30, 60):
        m = random_tree(n)
        q, v = m.neutral(), jnp.zeros(m.nv)
        row = [
            compile_seconds(jax.vmap(jd.aba, (None, 0, 0, 0)), m, q[None], v[None], v[None]),
            compile_seconds(jax.vmap(jd.rnea, (None, 0, 0, 0)), m, q[None], v[None], v[None]),
            compile_seconds(jax.vmap(jd.crba, (None, 0)), m, q[None]),
        ]
        depth = max(m.topology.depths) + 1
        print(f"{n:>6} {depth:>5} {m.nv:>4} " + " ".join(f"{x:>8.2f}" for x in row))


if __name__ == "__main__":
    main()
