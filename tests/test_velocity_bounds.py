"""HPP's velocity bounds: `joint.velocity_bound_linear/angular` and `jd.body_velocity_bounds`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from trees import every_joint, random_inertia, random_tree

import jointdyn as jd

JOINTS = every_joint(np.random.default_rng(0)) + [jd.Free(), jd.Screw([0, 0, 1.0], -0.4)]


def _blocks_norms(joint, qs):
    """Spectral norms of the angular and linear halves of `H_FM(q)`, one row per `q` of `qs`."""
    H = np.asarray(jax.jit(jax.vmap(joint.H_FM))(qs))  # one program, not 200 eager calls
    if H.shape[-1] == 0:
        return np.zeros((len(qs), 2))
    return np.stack([np.linalg.norm(H[:, :3], 2, (1, 2)), np.linalg.norm(H[:, 3:], 2, (1, 2))], 1)


@pytest.mark.parametrize("joint", JOINTS, ids=lambda j: type(j).__name__)
def test_joint_bounds_hold_and_are_the_supremum(joint):
    """`‖H_w(q)‖₂ ≤ λ_ang` and `‖H_v(q)‖₂ ≤ λ_lin` at 200 random configurations (and at
    gimbal lock); for single joints the largest of these equals the constant."""
    lam_lin, lam_ang = float(joint.velocity_bound_linear()), float(joint.velocity_bound_angular())
    keys = jax.random.split(jax.random.PRNGKey(1), 200)
    qs = jax.jit(jax.vmap(joint.random_configuration))(keys)
    if isinstance(joint, jd.Gimbal):  # gimbal lock: the supremum
        qs = jnp.concatenate([qs, jnp.array([[0.3, np.pi / 2, -0.2]])])
    norms = _blocks_norms(joint, qs)
    assert np.all(norms[:, 0] <= lam_ang * (1 + 1e-12) + 1e-12), (norms[:, 0].max(), lam_ang)
    assert np.all(norms[:, 1] <= lam_lin * (1 + 1e-12) + 1e-12), (norms[:, 1].max(), lam_lin)
    if not isinstance(joint, jd.Composite):
        np.testing.assert_allclose(norms.max(0), [lam_ang, lam_lin], rtol=1e-9, atol=1e-12)


def test_composite_with_unbounded_lever_arm():
    """A revolute followed by a prismatic has no finite linear bound; the reverse order does."""
    assert float(jd.Composite([jd.Revolute(), jd.Prismatic()]).velocity_bound_linear()) == np.inf
    assert float(jd.Composite([jd.Prismatic(), jd.Revolute()]).velocity_bound_linear()) == 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_body_speeds_never_exceed_the_bounds(seed):
    """On a random tree of every joint class, at 300 random states inside `q_range`:
    `‖v_WBo‖ ≤ λ_lin ‖v‖` and `‖w_WB‖ ≤ λ_ang ‖v‖` for every body, all bounds finite."""
    model = random_tree(seed, nbodies=16)
    keys = jax.random.split(jax.random.PRNGKey(seed), 300)
    q = jax.jit(jax.vmap(model.random_configuration))(keys)
    q_range = (q.min(0), q.max(0))  # the box of the sampled states
    lam_lin, lam_ang = jd.body_velocity_bounds(model, q_range)
    assert lam_lin.shape == lam_ang.shape == (model.nbodies,)
    assert np.all(np.isfinite(lam_lin)) and np.all(np.isfinite(lam_ang))
    v = jax.random.normal(jax.random.PRNGKey(seed + 7), (300, model.nv))
    V = jax.jit(jax.vmap(lambda q, v: jd.forward_kinematics(model, q, v).V_WB))(q, v)
    speed = np.linalg.norm(np.asarray(v), axis=1)[:, None]
    w_ratio = np.linalg.norm(np.asarray(V[..., :3]), axis=-1) / speed
    v_ratio = np.linalg.norm(np.asarray(V[..., 3:]), axis=-1) / speed
    assert np.all(w_ratio <= np.asarray(lam_ang) * (1 + 1e-12))
    assert np.all(v_ratio <= np.asarray(lam_lin) * (1 + 1e-12))
    assert np.all(v_ratio.max(0) > 0.05 * np.asarray(lam_lin))  # bounds not absurdly loose


@pytest.mark.parametrize("kind", ["revolute", "prismatic"])
def test_single_joint_bound_is_tight(kind):
    """One revolute with the body origin 0.7 m off the axis at right angles: `λ_lin = 0.7`,
    reached; one prismatic: `λ_lin = 1`, reached."""
    b = jd.ModelBuilder()
    joint = jd.Revolute([0, 0, 1.0]) if kind == "revolute" else jd.Prismatic([0, 1.0, 0])
    X_BM = jd.Transform(jnp.eye(3), jnp.array([0.7, 0.0, 0.0]))
    b.add_body("link", random_inertia(np.random.default_rng(0)), "world", joint, X_BM=X_BM)
    model = b.build()
    lam_lin, lam_ang = jd.body_velocity_bounds(model, (-jnp.ones(1), jnp.ones(1)))
    q, v = jnp.array([0.4]), jnp.array([2.0])
    V = jd.forward_kinematics(model, q, v).V_WB[0]
    np.testing.assert_allclose(np.linalg.norm(V[3:]) / 2.0, lam_lin[0], rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(V[:3]) / 2.0, lam_ang[0], rtol=1e-12)
    assert float(lam_lin[0]) == pytest.approx(0.7 if kind == "revolute" else 1.0, rel=1e-12)


def test_default_range_and_errors():
    """Without `q_range`, the position limits: infinite where an unbounded translation sits
    below a rotation; a `q_range` of the wrong size is an error."""
    model = random_tree(0, nbodies=6)  # a free root: unbounded translation, no rotation above
    lam_lin, _ = jd.body_velocity_bounds(model)
    assert np.isfinite(lam_lin[0])  # the root's own translation has no lever arm
    with pytest.raises(ValueError, match="q_range"):
        jd.body_velocity_bounds(model, (jnp.zeros(3), jnp.ones(3)))
