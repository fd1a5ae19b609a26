"""Model structure, configuration space, builder errors, and no retracing on parameter changes."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from trees import random_inertia, random_tree

import jointdyn as jd

jax.config.update("jax_enable_x64", True)


def test_sizes_names_slices():
    m = random_tree(0)
    assert m.nq == sum(j.nq for j in m.joints)
    assert m.nv == sum(j.nv for j in m.joints)
    assert m.joint_names[0] == "root_joint"
    assert m.q_slice("root_joint") == slice(0, 7)
    assert m.v_slice("root_joint") == slice(0, 6)
    # slices tile q and v in body order
    qs = [m.q_slice(n) for n in m.joint_names]
    assert qs[0].start == 0 and qs[-1].stop == m.nq
    assert all(a.stop == b.start for a, b in zip(qs, qs[1:], strict=False))
    assert "tool" in m.frame_names and set(m.body_names) <= set(m.frame_names)
    with pytest.raises(KeyError):
        m.q_slice("nope")


def test_configuration_space():
    m = random_tree(1)
    key = jax.random.PRNGKey(0)
    q0 = m.random_configuration(key)
    assert q0.shape == (m.nq,)
    X = jd.forward_kinematics(m, m.neutral()).X_WB
    # at neutral every body sits at X_PF X_BM⁻¹ relative to its parent
    X_PB = m.X_PF @ m.X_BM.inverse()
    i = m.parents.index(0) if 0 in m.parents else None
    if i is not None:
        expected = jax.tree.map(lambda x: x[0], X) @ jax.tree.map(lambda x: x[i], X_PB)
        np.testing.assert_allclose(X.R[i], expected.R, rtol=0, atol=1e-12)
    v = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (m.nv,))
    q1 = m.integrate(q0, v)
    np.testing.assert_allclose(m.difference(q0, q1), v, rtol=0, atol=1e-9)
    np.testing.assert_allclose(m.difference(q0, q0), 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.interpolate(q0, q1, 1.0), m.normalize(q1), rtol=0, atol=1e-9)
    np.testing.assert_allclose(m.normalize(q1), q1, rtol=0, atol=1e-9)


def test_random_configuration_limits():
    b = jd.ModelBuilder()
    inertia = jd.SpatialInertia(1.0, [0, 0, 0], np.eye(3) * 0.1)
    b.add_body("a", inertia, "world", jd.Revolute(position_lower=-0.2, position_upper=0.5))
    b.add_body("b", inertia, "a", jd.Ball())
    m = b.build()
    qs = jax.vmap(m.random_configuration)(jax.random.split(jax.random.PRNGKey(0), 200))
    assert jnp.all(qs[:, 0] >= -0.2) and jnp.all(qs[:, 0] <= 0.5)
    np.testing.assert_allclose(jnp.linalg.norm(qs[:, 1:], axis=1), 1.0, rtol=0, atol=1e-12)


def test_random_configuration_is_one_draw_mapped_per_joint():
    """`Model.random_configuration` draws one `(nbodies, width)` block of uniforms (one random
    number generator in the program, not one per joint: the compile time) and maps row `i`
    through joint `i`'s `configuration_from_uniform`; a `Ball`'s quaternions are uniform on
    SO(3) (every `E[q_k²] = 1/4` on the unit 3-sphere)."""
    m = random_tree(3, nbodies=14)
    key = jax.random.PRNGKey(5)
    width = max(j.n_uniform for j in m.joints)
    u = jax.random.uniform(key, (m.nbodies, width))
    expected = jnp.concatenate(
        [j.configuration_from_uniform(u[i, : j.n_uniform]) for i, j in enumerate(m.joints)]
    )
    np.testing.assert_allclose(m.random_configuration(key), expected, rtol=0, atol=1e-12)
    program = jax.jit(lambda k: m.random_configuration(k)).lower(key).as_text()
    one_draw = jax.jit(lambda k: jax.random.uniform(k, (3,))).lower(key).as_text()
    assert program.count("threefry") == one_draw.count("threefry") > 0
    keys = jax.random.split(jax.random.PRNGKey(6), 4000)
    q = np.asarray(jax.vmap(jd.Ball().random_configuration)(keys))
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.mean(q**2, axis=0), 0.25, rtol=0, atol=0.02)
    assert np.all(q[:, 0] >= 0)


def test_no_retrace_when_parameters_change():
    m = random_tree(2, nbodies=6)
    q, v = m.neutral(), jnp.zeros(m.nv)

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def f(model, q, v):
        return jd.aba(model, q, v, v), jd.crba(model, q), jd.rnea(model, q, v, v)

    f(m, q, v)
    m2 = eqx.tree_at(lambda x: x.inertias.mass, m, m.inertias.mass * 2.0)
    m3 = eqx.tree_at(lambda x: x.gravity, m2, jnp.array([0.0, 1.0, -3.0]))
    m4 = eqx.tree_at(lambda x: x.joints[1].axis, m3, jnp.array([0.0, 1.0, 0.0]))
    m5 = eqx.tree_at(lambda x: x.X_PF.p, m4, m4.X_PF.p + 0.1)
    m6 = eqx.tree_at(lambda x: x.joints[1].params.damping, m5, jnp.array([3.0]))
    outs = [f(mm, q, v)[0] for mm in (m2, m3, m4, m5, m6)]
    assert not np.allclose(outs[0], outs[1])  # the parameter change had an effect


def test_parameter_leaves_are_arrays():
    m = random_tree(3, nbodies=5)
    leaves = jax.tree.leaves(m)
    assert all(isinstance(x, jax.Array) for x in leaves)
    assert hash(m.topology) == hash(random_tree(3, nbodies=5).topology)


def test_builder_errors():
    rng = np.random.default_rng(0)
    b = jd.ModelBuilder()
    b.add_body("a", random_inertia(rng), "world", jd.Revolute())
    with pytest.raises(ValueError, match="unknown parent body 'zz'"):
        b.add_body("b", random_inertia(rng), "zz", jd.Revolute())
    with pytest.raises(ValueError, match="'a' is already used"):
        b.add_body("a", random_inertia(rng), "world", jd.Revolute())
    with pytest.raises(ValueError, match="negative mass"):
        b.add_body("c", jd.SpatialInertia(-1.0, np.zeros(3), np.eye(3)), "a", jd.Revolute())
    with pytest.raises(ValueError, match="triangle inequality"):
        b.add_body(
            "c", jd.SpatialInertia(1.0, np.zeros(3), np.diag([0.1, 0.1, 1.0])), "a", jd.Revolute()
        )
    with pytest.raises(ValueError, match="positive semi-definite"):
        b.add_body(
            "c", jd.SpatialInertia(1.0, np.zeros(3), np.diag([-0.1, 0.1, 0.1])), "a", jd.Revolute()
        )
    with pytest.raises(ValueError, match="`joint`"):
        b.add_body("c", random_inertia(rng), "a", "revolute")
    with pytest.raises(ValueError, match="gravity"):
        jd.ModelBuilder(gravity=[0, 0])
    with pytest.raises(ValueError, match="at least one body"):
        jd.ModelBuilder().build()


@pytest.mark.parametrize(
    ("R", "p", "match"),
    [
        (2.0 * np.eye(3), np.zeros(3), "rotation matrix"),  # a scale
        (np.diag([1.0, 1.0, -1.0]), np.zeros(3), "determinant"),  # a reflection
        (np.array([[1.0, 0.3, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), np.zeros(3), "rotation"),
        (np.eye(3), np.array([np.nan, 0.0, 0.0]), "finite"),
    ],
)
def test_builder_refuses_poses_that_are_not_rigid(R, p, match):
    """`X_PF`, `X_BM` and frames' `X_BF` must be rigid transforms: a scaled, sheared or
    reflected `R`, or a NaN, was accepted and gave wrong dynamics without a word."""
    rng = np.random.default_rng(0)
    bad = jd.Transform(R, p)
    for kw in ({"X_PF": bad}, {"X_BM": bad}):
        with pytest.raises(ValueError, match=match):
            jd.ModelBuilder().add_body("a", random_inertia(rng), "world", jd.Revolute(), **kw)
    b = jd.ModelBuilder()
    b.add_body("a", random_inertia(rng), "world", jd.Revolute())
    with pytest.raises(ValueError, match=match):
        b.add_frame("f", "a", bad)
    # rounding (a rotation written with 6 digits) passes
    c, s = np.cos(0.3), np.sin(0.3)
    rounded = np.round(np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]), 6)
    b.add_frame("g", "a", jd.Transform(rounded, np.zeros(3)))


def test_float32_follows_input_dtype():
    m = random_tree(4, nbodies=6)
    q = m.neutral().astype(jnp.float32)
    v = jnp.ones(m.nv, jnp.float32)
    assert jd.aba(m, q, v, v).dtype == jnp.float32
    assert jd.forward_kinematics(m, q).X_WB.R.dtype == jnp.float32
    assert jd.crba(m, q).dtype == jnp.float32


def test_builder_stacks_the_bodies_values_without_compiling():
    """`ModelBuilder.build` stacks every body's values as given (float64 here), on the host: a
    chain of a size not built before compiles nothing beyond its joints' own programs (eager
    `jnp.stack` compiled one program per body count and leaf shape)."""
    rng = np.random.default_rng(0)

    def chain(n):
        b = jd.ModelBuilder()
        inertias = [random_inertia(rng) for _ in range(n)]
        offsets = rng.normal(size=(n, 3))
        for i in range(n):
            X_PF = jd.Transform(np.eye(3), offsets[i])
            b.add_body(
                f"b{i}", inertias[i], i - 1 if i else "world", jd.Revolute([0, 0, 1.0]), X_PF=X_PF
            )
        return b.build(), inertias, offsets

    chain(2)  # the revolute joint's own programs (the singular-mass check), compiled once
    compiles, recording = [], [True]

    def listener(event, *_, **__):
        if recording[0]:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        m, inertias, offsets = chain(11)  # a body count no other test builds
    finally:
        recording[0] = False
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:  # JAX 0.7 has none: the listener stays, inert
            unregister(listener)
    assert "/jax/core/compile/backend_compile_duration" not in compiles
    np.testing.assert_array_equal(m.inertias.mass, [float(x.mass) for x in inertias])
    np.testing.assert_array_equal(m.inertias.inertia, np.stack([x.inertia for x in inertias]))
    np.testing.assert_array_equal(m.X_PF.p, offsets)
    assert {x.dtype for x in jax.tree.leaves((m.inertias, m.X_PF, m.X_BM, m.X_BF))} == {
        np.dtype("float64")
    }


def test_model_without_degrees_of_freedom():
    """A built model whose joints are all welds (nv = 0; the loaders refuse such a robot,
    `ModelBuilder` does not): the dynamics return empty arrays, not a concatenation error."""
    b = jd.ModelBuilder()
    b.add_body("a", jd.SpatialInertia(1.0, [0.0, 0.0, 0.0], np.eye(3)), "world", jd.Weld())
    b.add_body("b", jd.SpatialInertia(2.0, [0.0, 0.0, 0.1], np.eye(3)), "a", jd.Weld())
    m = b.build()
    assert (m.nq, m.nv) == (0, 0)
    z = jnp.zeros(0)
    assert jd.aba(m, z, z, z).shape == (0,)
    assert jd.forward_dynamics(m, z, z, z).shape == (0,)
    assert jd.rnea(m, z, z, z).shape == (0,)
    assert jd.crba(m, z).shape == (0, 0)
    d = jd.aba_derivatives(m, z, z, z)
    assert d.dvdot_dq.shape == (0, 0)
    traj = jd.rollout(m, z, z, jnp.zeros((3, 0)), 0.01)
    assert traj.q.shape == (4, 0)
    assert jd.batched(jd.aba, (None, 0, 0, 0))(m, *3 * [jnp.zeros((4, 0))]).shape == (4, 0)
    # the model's parameters still have (zero) gradients: no NaN
    # (jitted: one program instead of ~150 operations compiled one by one)
    g = jax.jit(jax.grad(lambda m: jnp.sum(jd.aba(m, z, z, z)) + jd.potential_energy(m, z)))(m)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
