"""Random kinematic trees with every joint class, for identity tests."""

from __future__ import annotations

import jax
import numpy as np

import jointdyn as jd


def random_inertia(rng: np.random.Generator) -> jd.SpatialInertia:
    """A physically valid inertia: principal moments from three positive 'half-moments'."""
    d = rng.uniform(0.02, 0.3, 3)
    Q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    I = Q @ np.diag([d[0] + d[1], d[1] + d[2], d[0] + d[2]]) @ Q.T
    return jd.SpatialInertia(rng.uniform(0.3, 3.0), rng.normal(0, 0.2, 3), I)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    Q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    return Q * np.sign(np.linalg.det(Q))


def every_joint(rng: np.random.Generator) -> list[jd.AbstractJoint]:
    """One joint of every class (random axes, pitch; perpendicular axes where needed)."""
    R = random_rotation(rng)
    return [
        jd.Revolute(rng.normal(size=3)),
        jd.Prismatic(rng.normal(size=3)),
        jd.Screw(rng.normal(size=3), rng.normal() * 0.2),
        jd.RevoluteUnbounded(rng.normal(size=3)),
        jd.Cylindrical(rng.normal(size=3)),
        jd.Universal(R[0], R[1]),
        jd.Gimbal(R),
        jd.SpaceXYZ(check_singularity=False),
        jd.Ball(),
        jd.Planar("xz"),
        jd.Translational(),
        jd.Weld(),
        jd.Composite([jd.Prismatic(rng.normal(size=3)), jd.Revolute(rng.normal(size=3))]),
    ]


def random_tree(
    seed: int = 0, nbodies: int = 16, floating: bool = True, topology_seed: int | None = None
) -> jd.Model:
    """A random tree: a `Free` root (if `floating`), then every joint class at random places.

    With `topology_seed`, the parents are drawn from that seed alone: trees of one
    `topology_seed` and `nbodies` share their structure (one compiled program serves them all)
    and differ in every parameter (inertias, axes, placements) with `seed`.
    """
    rng = np.random.default_rng(seed)
    topology_rng = rng if topology_seed is None else np.random.default_rng(topology_seed)
    b = jd.ModelBuilder()
    pool = every_joint(rng)
    if floating:
        b.add_body("root", random_inertia(rng), "world", jd.Free(), joint_name="root_joint")
    for i in range(int(floating), nbodies):
        joint = pool[i % len(pool)]
        parent = "world" if i == 0 else int(topology_rng.integers(-1 if not floating else 0, i))
        b.add_body(
            f"body{i}",
            random_inertia(rng),
            parent,
            joint,
            X_PF=jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3)),
            X_BM=jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3)),
        )
    b.add_frame("tool", f"body{nbodies - 1}", jd.Transform.from_rpy([0.1, 0.2, 0.3], [0.1, 0, 0.2]))
    return b.build()


def random_states(model: jd.Model, n: int, seed: int = 0):
    """`n` random states `(q, v, u)`: configurations from `model.random_configuration`, `v` and
    `u` (a `tau` or `vdot`) standard normal, all from `jax.random.PRNGKey(seed)`."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    q = jax.vmap(model.random_configuration)(keys)
    v = jax.random.normal(keys[0], (n, model.nv))
    u = jax.random.normal(keys[1], (n, model.nv))
    return q, v, u
