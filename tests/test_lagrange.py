"""Whole-model dynamics against Lagrange's equations, on random trees of every joint class.

The oracle needs only the energies: in the chart `q = q₀ ⊕ δ` around each state (whose
velocity at `δ = 0` is `v = δ̇`, and whose acceleration is `v̇ = δ̈`, because `q₀ ⊕ t v`
moves at the constant velocity `v`),

    tau = d/dt ∂L/∂δ̇ − ∂L/∂δ = M v̇ + h,   L(δ, δ̇) = T(q, v(q, q̇)) − U(q),   q = q₀ ⊕ δ,

by automatic differentiation of `kinetic_energy` and `potential_energy` (and of each joint's
`integrate` and `v_from_qdot`, for the chart's velocity). It sees every force, including those
that do no work (the gyroscopic and Coriolis terms that a power balance cannot see). Checked:
`rnea` (`M v̇ + h`), `bias_forces` (`h`), `gravity_forces` (`∂U/∂δ`), `aba` (`M v̇ + h = tau`)
and `crba` (`M = ∂²T/∂v²`).

Trees of one topology share one compiled program (their parameters differ); the states of a
tree are one `vmap`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import numpy_jit
from trees import random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

NSTATES = 4
#: (parameter seed, topology seed): trees of one topology share one traced oracle and one
#: compiled program of the library's functions; their parameters differ.
TREES = [(0, 100), (1, 100), (2, 100)]
NBODIES = 14  # a Free root and each of the 13 classes of `trees.every_joint` once


def _v_from_qdot(model, q, qdot):
    """`v = N⁺(q) q̇`, joint by joint."""
    parts = [
        joint.v_from_qdot(q[o : o + joint.nq], qdot[o : o + joint.nq])
        for joint, o in zip(model.joints, model.topology.q_offsets, strict=True)
    ]
    return jnp.concatenate(parts)


def _lagrange(model, q0, v):
    """Lagrange's equations at `q0`: `tau = M(q0) v̇ + h(q0, v)`, with

    - `h = d/dt ∂L/∂δ̇ − ∂L/∂δ = (∂²L/∂δ̇∂δ) v − ∂L/∂δ` at `δ = 0, δ̇ = v, δ̈ = 0` (bias forces),
    - `M = ∂²L/∂δ̇² = ∂²T/∂v²` (at `δ = 0` the chart's velocity is `v = δ̇`),
    - `g = ∂U/∂δ` (gravity forces: `h` at `v = 0`).

    Forward mode only (`jacfwd` of `jvp`, `jacfwd` of `jacfwd`): the same values as
    reverse-over-forward (`jax.grad`, `jax.hessian`), compiled in ~40 s instead of ~55.
    """

    def lagrangian(d, d_dot):
        q, qdot = jax.jvp(lambda d: model.integrate(q0, d), (d,), (d_dot,))
        T = jd.kinetic_energy(model, q, _v_from_qdot(model, q, qdot))
        return T - jd.potential_energy(model, q)

    zero = jnp.zeros_like(v)

    def along_v(d_dot):  # (∂L/∂δ) · v as a function of δ̇
        return jax.jvp(lambda d: lagrangian(d, d_dot), (zero,), (v,))[1]

    h = jax.jacfwd(along_v)(v) - jax.jacfwd(lambda d: lagrangian(d, v))(zero)
    M = jax.jacfwd(jax.jacfwd(lambda v: jd.kinetic_energy(model, q0, v)))(zero)
    g = jax.jacfwd(lambda d: jd.potential_energy(model, model.integrate(q0, d)))(zero)
    return M, h, g


#: The oracle for a batch of states: traced once per tree topology, evaluated by NumPy
#: (`numpy_eval`: its second derivatives of 14 bodies' energies took ~15 s to compile).
_oracle = numpy_jit(jax.vmap(_lagrange, in_axes=(None, 0, 0)))


@numpy_jit
@functools.partial(jax.vmap, in_axes=(None, 0, 0, 0, 0))
def _library(model, q, v, vdot, tau):
    """The library's side for one state; traced once per tree topology and evaluated by NumPy
    (the arithmetic is what is compared; a compile per topology took seconds)."""
    return {
        "rnea": jd.rnea(model, q, v, vdot),
        "bias_forces": jd.bias_forces(model, q, v),
        "gravity_forces": jd.gravity_forces(model, q),
        "aba": jd.aba(model, q, v, tau),
        "crba": jd.crba(model, q),
    }


def _compare(model, q, v, vdot, tau):
    """Pairs (library, oracle) for a batch of states."""
    M, h, g = _oracle(model, q, v)
    lib = {k: np.asarray(x) for k, x in _library(model, q, v, vdot, tau).items()}
    Mv = lambda M, x: np.einsum("bij,bj->bi", M, np.asarray(x))  # noqa: E731
    return {
        "rnea": (lib["rnea"], Mv(M, vdot) + h),
        "bias_forces": (lib["bias_forces"], h),
        "gravity_forces": (lib["gravity_forces"], g),
        "aba": (Mv(M, lib["aba"]) + h, np.asarray(tau)),
        "crba": (lib["crba"], M),
    }


def _states(model, seed):
    """Random states; the middle angle of `SpaceXYZ` and `Gimbal` joints within ±1.2 (away
    from their singularities, where `N(q)` blows up)."""
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = np.array(jax.vmap(model.random_configuration)(jax.random.split(k[0], NSTATES)))
    for joint, o in zip(model.joints, model.topology.q_offsets, strict=True):
        if isinstance(joint, jd.SpaceXYZ | jd.Gimbal):
            q[:, o + 1] = np.clip(q[:, o + 1], -1.2, 1.2)
    v, vdot, tau = (jax.random.normal(kk, (NSTATES, model.nv)) for kk in k[1:])
    return jnp.asarray(q), v, vdot, 10 * tau


@pytest.mark.parametrize(("seed", "topology"), TREES)
def test_dynamics_satisfy_lagrange_equations(seed, topology):
    model = random_tree(seed, nbodies=NBODIES, topology_seed=topology)
    classes = {type(j) for j in model.joints}
    assert {jd.Ball, jd.Gimbal, jd.SpaceXYZ, jd.Planar, jd.Screw, jd.Composite} <= classes
    pairs = _compare(model, *_states(model, seed))
    for what, (got, want) in pairs.items():
        got, want = np.asarray(got), np.asarray(want)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * scale, err_msg=what)
