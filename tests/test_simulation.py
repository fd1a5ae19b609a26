"""Simulation (`jd.step`, `jd.rollout`, `jd.GroundContact`): against MuJoCo's integrators,
against physics (momentum, energy, weight, Coulomb's law), stability of the implicit step,
gradients of rollouts against finite differences, and errors for bad input.

Short programs (the implicit step's gradient, 20-step rollouts, contact forces, energies) are
evaluated by NumPy (`numpy_call`, `numpy_eval`, `numpy_jit`): the arithmetic is what is
checked, and a compile per program would take most of their time. Rollouts of hundreds of
steps or more compile (NumPy takes longer over a long `lax.scan` than XLA takes to compile
it), as do `jd.step` and the policy rollout in
`test_policy_vmap_vector_field_and_bundled_contact`, and `test_rollout_under_batched_equals_vmap`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from numpy_eval import numpy_call, numpy_eval, numpy_jit

import jointdyn as jd

jax.config.update("jax_enable_x64", True)

# -- against MuJoCo: a chain of hinges and a slide, and a free-floating chain -------------------

CHAIN = """<mujoco><option timestep="0.002" integrator="{integrator}">
<flag contact="disable"/></option><worldbody>
 <body name="b1" pos="0 0 1"><joint type="hinge" axis="0 1 0"/>
  <inertial pos="0.1 0 -0.3" mass="1.2" diaginertia="0.01 0.02 0.03"/>
  <body name="b2" pos="0 0.1 -0.5"><joint type="slide" axis="0 0.6 0.8"/>
   <inertial pos="0 0.05 -0.2" mass="0.8" diaginertia="0.02 0.01 0.015"/>
   <body name="b3" pos="0.2 0 -0.3" quat="{quat}"><joint type="hinge" axis="1 0 0"/>
    <inertial pos="0 0 -0.25" mass="0.5" diaginertia="0.005 0.006 0.004"/>
 </body></body></body></worldbody></mujoco>"""
QUAT = np.array([0.9, 0.1, 0.3, 0.2]) / np.linalg.norm([0.9, 0.1, 0.3, 0.2])


def _inertia(m, c, d):
    return jd.SpatialInertia(m, c, np.diag(d))


def _chain():
    b = jd.ModelBuilder()
    b.add_body(
        "b1",
        _inertia(1.2, [0.1, 0, -0.3], [0.01, 0.02, 0.03]),
        "world",
        jd.Revolute([0, 1, 0]),
        X_PF=jd.Transform(np.eye(3), [0, 0, 1.0]),
    )
    b.add_body(
        "b2",
        _inertia(0.8, [0, 0.05, -0.2], [0.02, 0.01, 0.015]),
        "b1",
        jd.Prismatic([0, 0.6, 0.8]),
        X_PF=jd.Transform(np.eye(3), [0, 0.1, -0.5]),
    )
    b.add_body(
        "b3",
        _inertia(0.5, [0, 0, -0.25], [0.005, 0.006, 0.004]),
        "b2",
        jd.Revolute([1, 0, 0]),
        X_PF=jd.Transform.from_quaternion(QUAT, [0.2, 0, -0.3]),
    )
    return b.build()


def _mujoco_positions(xml, qpos, qvel, steps):
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos, qvel
    out = []
    for _ in range(steps):
        mujoco.mj_step(m, d)
        out.append(d.qpos.copy())
    return np.array(out)


@pytest.mark.parametrize("integrator, mj", [("semi_implicit_euler", "Euler"), ("rk4", "RK4")])
def test_chain_against_mujoco(integrator, mj):
    model = _chain()
    q0, v0 = np.array([0.3, 0.1, -0.5]), np.array([0.5, -0.2, 1.0])
    quat = " ".join(map(str, QUAT))
    expected = _mujoco_positions(CHAIN.format(integrator=mj, quat=quat), q0, v0, 1000)
    traj = jd.rollout(model, q0, v0, jnp.zeros((1000, 3)), 0.002, integrator=integrator)
    np.testing.assert_allclose(traj.q[1:], expected, rtol=0, atol=1e-9)


FREE = """<mujoco><option timestep="0.002" integrator="Euler"><flag contact="disable"/></option>
<worldbody><body name="base" pos="0 0 0"><freejoint/>
  <inertial pos="0.05 -0.02 0.01" mass="3" diaginertia="0.05 0.08 0.1"/>
  <body name="arm" pos="0.3 0 0"><joint type="hinge" axis="0 0.6 0.8"/>
   <inertial pos="0 0 -0.2" mass="0.7" diaginertia="0.01 0.012 0.004"/>
</body></body></worldbody></mujoco>"""


def test_free_floating_chain_against_mujoco():
    b = jd.ModelBuilder()
    b.add_body("base", _inertia(3.0, [0.05, -0.02, 0.01], [0.05, 0.08, 0.1]), "world", jd.Free())
    b.add_body(
        "arm",
        _inertia(0.7, [0, 0, -0.2], [0.01, 0.012, 0.004]),
        "base",
        jd.Revolute([0, 0.6, 0.8]),
        X_PF=jd.Transform(np.eye(3), [0.3, 0, 0]),
    )
    model = b.build()
    rng = np.random.default_rng(0)
    quat = rng.normal(size=4)
    quat /= np.linalg.norm(quat)
    p, w_body, lin, hinge, rate = (
        rng.normal(size=3),
        rng.normal(size=3),
        rng.normal(size=3),
        0.4,
        -1.0,
    )
    expected = _mujoco_positions(
        FREE, np.r_[p, quat, hinge], np.r_[lin, w_body, rate], 1000
    )  # MuJoCo: qpos [p; quat; hinge], qvel [v world; w body axes; rate]
    R = np.asarray(jd.quat_to_rotmat(quat))
    q0, v0 = np.r_[quat, p, hinge], np.r_[R @ w_body, lin, rate]  # ours: [quat; p], [w; v] world
    traj = jd.rollout(model, q0, v0, jnp.zeros((1000, 7)), 0.002)
    ours = np.asarray(traj.q[1:])
    sign = np.sign(np.sum(ours[:, :4] * expected[:, 3:7], axis=1, keepdims=True))
    np.testing.assert_allclose(ours[:, 4:7], expected[:, :3], rtol=0, atol=1e-9)
    np.testing.assert_allclose(sign * ours[:, :4], expected[:, 3:7], rtol=0, atol=1e-9)
    np.testing.assert_allclose(ours[:, 7], expected[:, 7], rtol=0, atol=1e-9)


# -- physics -------------------------------------------------------------------------------------


def test_free_body_keeps_its_angular_momentum_with_rk4():
    b = jd.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_body("body", _inertia(2.0, [0.1, 0.0, 0.05], [0.2, 0.3, 0.4]), "world", jd.Free())
    model = b.build()
    q0 = jnp.array([1.0, 0, 0, 0, 0, 0, 0])
    v0 = jnp.array([0.3, 2.0, 0.2, 0.1, -0.2, 0.3])  # near the unstable intermediate axis
    traj = jax.jit(
        lambda q, v: jd.rollout(model, q, v, jnp.zeros((10_000, 6)), 1e-3, integrator="rk4")
    )(q0, v0)
    h = jax.vmap(lambda q, v: jd.centroidal_momentum(model, q, v))(traj.q[::500], traj.v[::500])
    drift = np.linalg.norm(h[:, :3] - h[0, :3], axis=1).max() / np.linalg.norm(h[0, :3])
    assert drift < 1e-6, drift
    norms = np.linalg.norm(traj.q[:, :4], axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=0, atol=1e-12)  # normalised on the manifold


def test_double_pendulum_energy_with_rk4():
    model = jd.load_model("double_pendulum")
    tau = numpy_call(jd.joint_forces, model, np.array([0.3, 0.2]), np.ones(2))
    assert float(np.abs(tau).max()) == 0

    def energy(q, v):
        return jd.kinetic_energy(model, q, v) + jd.potential_energy(model, q)

    q0, v0 = jnp.array([1.2, -0.5]), jnp.array([0.0, 1.0])
    traj = jd.rollout(model, q0, v0, jnp.zeros((10_000, 2)), 1e-3, integrator="rk4")
    E = numpy_eval(jax.vmap(energy), traj.q[::100], traj.v[::100])
    scale = np.abs(E[0]) + numpy_call(jd.kinetic_energy, model, q0, v0)
    assert float(np.abs(E - E[0]).max() / scale) < 1e-6


def _box(mass=10.0, half=(0.2, 0.1, 0.05)):
    b = jd.ModelBuilder()
    a, c, h = half
    inertia = mass / 3 * np.diag([c * c + h * h, a * a + h * h, a * a + c * c])
    b.add_body("box", jd.SpatialInertia(mass, np.zeros(3), inertia), "world", jd.Free())
    model = b.build()
    corners = np.array([[x, y, -h] for x in (a, -a) for y in (c, -c)])
    return model, jd.GroundContact(model, ["box"] * 4, corners, 0.01, friction=0.6)


@pytest.fixture(scope="module")
def box():
    model, contact = _box()
    run = jax.jit(
        lambda q, v, T: jd.rollout(model, q, v, jnp.zeros((T, 6)), 1e-3, contact=contact),
        static_argnums=2,
    )
    return model, contact, run


def test_box_at_rest_carries_its_weight(box):
    model, contact, run = box
    traj = run(jnp.array([1.0, 0, 0, 0, 0, 0, 0.08]), jnp.zeros(6), 1500)  # dropped from 2 cm
    normal = traj.contact_forces[-1, :, 2]
    np.testing.assert_allclose(normal.sum(), 10.0 * 9.81, rtol=1e-2)
    np.testing.assert_allclose(normal, normal.mean(), rtol=1e-6)  # a symmetric box
    assert np.abs(traj.v[-1]).max() < 1e-6  # at rest
    f, _ = numpy_call(jd.contact_point_forces, model, contact, traj.q[-1], traj.v[-1])
    np.testing.assert_allclose(f, traj.contact_forces[-1], rtol=1e-6, atol=1e-9)
    # above the ground: no force at all
    above = traj.q[0].at[6].set(1.0)
    assert not np.any(numpy_call(jd.contact_forces, model, contact, above, np.zeros(6)))


def test_block_pushed_along_the_ground_decelerates_at_mu_g(box):
    model, contact, run = box
    rest = run(jnp.array([1.0, 0, 0, 0, 0, 0, 0.06]), jnp.zeros(6), 1500)
    q0 = rest.q[-1].at[4:6].set(0.0)
    traj = run(q0, jnp.array([0, 0, 0, 1.0, 0, 0]), 1500)
    vx = traj.v[:, 3]
    k0, k1 = 10, 60  # from 0.94 to 0.45 m/s: far above the friction velocity 1 cm/s
    decel = (vx[k0] - vx[k1]) / ((k1 - k0) * 1e-3)
    np.testing.assert_allclose(decel, 0.6 * 9.81, rtol=2e-2)
    assert abs(float(vx[-1])) < 1e-6  # it stops and stays


def test_implicit_step_is_stable_where_euler_is_not():
    """A pendulum with stiff joint damping, d·dt/I = 5 at dt = 0.1 s (explicit Euler is stable
    below 2): semi-implicit Euler diverges, the implicit step settles where gravity pulls;
    and a stiff contact (k = 1e9) at dt = 2 ms: Euler blows up, implicit holds the box."""
    b = jd.ModelBuilder()
    arm = _inertia(1.0, [0, 0, -0.5], [0.01, 0.01, 0.01])  # 0.26 kg·m² about the axis
    b.add_body("arm", arm, "world", jd.Revolute([0, 1, 0], damping=13.0))
    model = b.build()
    q0, v0, zero = jnp.array([0.5]), jnp.array([0.0]), jnp.zeros((200, 1))
    euler = jd.rollout(model, q0, v0, zero, 0.1)
    implicit = jd.rollout(model, q0, v0, zero, 0.1, integrator="implicit")
    assert not np.all(np.abs(np.asarray(euler.v)) < 1e3)
    assert np.all(np.isfinite(implicit.q)) and abs(float(implicit.v[-1, 0])) < 1e-3
    assert abs(float(implicit.q[-1, 0])) < 1e-2  # hangs straight down

    box, _ = _box()
    corners = np.array([[x, y, -0.05] for x in (0.2, -0.2) for y in (0.1, -0.1)])
    stiff = jd.GroundContact(box, ["box"] * 4, corners, 0.01, stiffness=1e9, damping=1e9)
    q0, v0, zero = jnp.array([1.0, 0, 0, 0, 0, 0, 0.06]), jnp.zeros(6), jnp.zeros((300, 6))
    euler = jd.rollout(box, q0, v0, zero, 2e-3, contact=stiff)
    implicit = jd.rollout(box, q0, v0, zero, 2e-3, contact=stiff, integrator="implicit")
    flung = ~np.isfinite(euler.q[:, 6]) | (np.asarray(euler.q[:, 6]) > 0.1)
    assert np.any(flung)  # explicit: the stiff spring throws the box up (dropped from 6 cm)
    assert np.all(np.isfinite(implicit.q)) and np.abs(implicit.v[-1]).max() < 1e-3
    np.testing.assert_allclose(implicit.contact_forces[-1, :, 2].sum(), 10 * 9.81, rtol=1e-2)


def _box_with(model, contact, mass, stiffness, damping):
    """The box of `_box` with its mass (10 kg by default), contact stiffness and the free
    joint's damping replaced (traced values: for gradients in them)."""
    inertias = model.inertias
    scaled = type(inertias)(inertias.mass * mass / 10.0, inertias.com, inertias.inertia)
    m = eqx.tree_at(lambda m: m.inertias, model, scaled)
    m = eqx.tree_at(lambda m: m.joints[0].params.damping, m, jnp.full(6, damping))
    return m, eqx.tree_at(lambda c: c.stiffness, contact, stiffness)


def test_rollout_gradients_match_finite_differences(box):
    """d(final x + z)/d(mass, contact stiffness, joint damping, initial velocity), 200 steps
    of a box landing and sliding, against central differences."""
    model, contact, _ = box

    def final(x):
        mass, stiffness, damping, vx = x
        m, c = _box_with(model, contact, mass, stiffness, damping)
        q0 = jnp.array([1.0, 0, 0, 0, 0, 0, 0.062])
        v0 = jnp.array([0, 0.3, 0, vx, 0, -0.1])
        traj = jd.rollout(m, q0, v0, jnp.zeros((200, 6)), 1e-3, contact=c, checkpoint="step")
        return traj.q[-1, 4] + traj.q[-1, 6]

    x = jnp.array([10.0, 1e6, 0.5, 2.0])  # still sliding after 200 steps
    g = jax.jit(jax.grad(final))(x)
    f = jax.jit(final)
    for i, h in enumerate([1e-4, 10.0, 1e-4, 1e-6]):
        e = jnp.zeros(4).at[i].set(h)
        fd = (f(x + e) - f(x - e)) / (2 * h)
        np.testing.assert_allclose(g[i], fd, rtol=1e-4, atol=1e-12)
        assert abs(float(g[i] * x[i])) > 1e-6  # each parameter moves the final position


def test_implicit_step_gradients_match_finite_differences(box):
    """One implicit step of the box pressed into the ground and sliding: d(x⁺ + z⁺ + v⁺_z)
    /d(mass, contact stiffness, joint damping, vx, dt) against central differences (the step's
    `K`, `D` from the analytic contact Jacobians, differentiated again by `jax.grad`)."""
    model, contact, _ = box

    def after(x):
        mass, stiffness, damping, vx, dt = x
        m, c = _box_with(model, contact, mass, stiffness, damping)
        q0 = jnp.array([1.0, 0, 0, 0, 0, 0, 0.058])  # the corners' spheres 2 mm in
        v0 = jnp.array([0, 0.3, 0, vx, 0, -0.1])
        q1, v1 = jd.step(m, q0, v0, jnp.zeros(6), dt, integrator="implicit", contact=c)
        return q1[4] + q1[6] + v1[5]

    x = jnp.array([10.0, 1e6, 0.5, 2.0, 2e-3])
    g = numpy_eval(jax.grad(after), x)
    f = numpy_jit(after)
    for i, h in enumerate([1e-4, 10.0, 1e-4, 1e-6, 1e-7]):
        e = jnp.zeros(5).at[i].set(h)
        fd = (f(x + e) - f(x - e)) / (2 * h)
        np.testing.assert_allclose(g[i], fd, rtol=1e-5, atol=1e-12)
        assert abs(float(g[i] * x[i])) > 1e-6  # each parameter moves the next state


# -- interfaces -------------------------------------------------------------------------------


def test_policy_vmap_vector_field_and_bundled_contact():
    model = jd.load_model("double_pendulum")
    q0, v0 = jnp.array([0.4, 0.1]), jnp.array([0.0, 0.5])
    taus = jnp.stack([jnp.array([0.1 * k, 0.0]) for k in range(20)])
    by_array = numpy_call(jd.rollout, model, q0, v0, taus, 1e-2)
    by_policy = jd.rollout(model, q0, v0, lambda k, q, v: jnp.array([0.1 * k, 0.0]), 1e-2, steps=20)
    np.testing.assert_allclose(by_array.q, by_policy.q, rtol=0, atol=1e-14)
    assert by_array.q.shape == (21, 2) and by_array.contact_forces is None
    q1, v1 = jd.step(model, q0, v0, taus[0], 1e-2)
    np.testing.assert_allclose(by_array.q[1], q1, atol=1e-14)
    batch = numpy_eval(
        jax.vmap(lambda q: jd.rollout(model, q, v0, taus, 1e-2).q[-1]), jnp.stack([q0, -q0])
    )
    np.testing.assert_allclose(batch[0], by_array.q[-1], atol=1e-12)
    # the vector field: (q̇, v̇) with q̇ = N(q) v, here for a quaternion joint too
    quad = jd.load_model("quadruped")
    q = numpy_call(quad.random_configuration, jax.random.PRNGKey(0))
    v = jax.random.normal(jax.random.PRNGKey(1), (quad.nv,))
    tau = jnp.zeros(quad.nv)
    qdot, vdot = numpy_eval(jd.vector_field(quad), 0.0, (q, v), tau)
    eps = 1e-6
    fd = (quad.integrate(q, eps * v) - quad.integrate(q, -eps * v)) / (2 * eps)
    np.testing.assert_allclose(qdot, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(vdot, numpy_call(jd.forward_dynamics, quad, q, v, tau), rtol=1e-12)
    # the bundled quadruped stands on its four foot spheres
    contact = jd.load_contact("quadruped", quad)
    names = {quad.topology.body_names[b] for b in contact.bodies}
    assert contact.npoints == 4 and len(names) == 4 and all(n.endswith("_calf") for n in names)
    np.testing.assert_allclose(contact.positions[:, 2], -0.22)


def test_bad_input_names_the_argument():
    model, contact = _box()
    q, v, tau = jnp.array([1.0, 0, 0, 0, 0, 0, 0]), jnp.zeros(6), jnp.zeros(6)
    with pytest.raises(ValueError, match="`controls`"):
        jd.rollout(model, q, v, jnp.zeros((10, 5)), 1e-3)
    with pytest.raises(ValueError, match="`dt` must be positive"):
        jd.step(model, q, v, tau, 0.0)
    with pytest.raises(ValueError, match="`integrator`"):
        jd.step(model, q, v, tau, 1e-3, integrator="verlet")
    with pytest.raises(ValueError, match="`steps`"):
        jd.rollout(model, q, v, lambda k, q, v: tau, 1e-3)
    with pytest.raises(ValueError, match="`bodies`: unknown body 'foot'"):
        jd.GroundContact(model, ["foot"], np.zeros((1, 3)), 0.01)
    with pytest.raises(ValueError, match="`radii` must be non-negative"):
        jd.GroundContact(model, ["box"], np.zeros((1, 3)), -0.01)
    with pytest.raises(ValueError, match="`stiffness` must be non-negative"):
        jd.GroundContact(model, ["box"], np.zeros((1, 3)), 0.01, stiffness=-1.0)
    with pytest.raises(ValueError, match="`positions`"):
        jd.GroundContact(model, ["box"], np.zeros((2, 3)), 0.01)
    # NaN passed the sign checks (every comparison with NaN is false)
    with pytest.raises(ValueError, match="`radii` must be finite"):
        jd.GroundContact(model, ["box"], np.zeros((1, 3)), np.nan)
    with pytest.raises(ValueError, match="`positions` must be finite"):
        jd.GroundContact(model, ["box"], np.full((1, 3), np.nan), 0.01)
    with pytest.raises(ValueError, match="`height` must be finite"):
        jd.GroundContact(model, ["box"], np.zeros((1, 3)), 0.01, height=np.nan)
    with pytest.raises(ValueError, match="`steps`"):
        jd.rollout(model, q, v, lambda k, q, v: tau, 1e-3, steps=-1)


def test_rollout_of_no_steps_is_the_initial_state():
    """`T = 0` (controls `(0, nv)` or a policy with `steps=0`) gives the initial state and no
    contact forces, with any `checkpoint` (was an `IndexError`)."""
    model, contact = _box()
    q, v = jnp.array([1.0, 0, 0, 0, 0, 0, 0.1]), jnp.ones(6)
    for controls, steps, checkpoint in [
        (jnp.zeros((0, 6)), None, "none"),
        (jnp.zeros((0, 6)), None, "step"),
        (lambda k, q, v: -v, 0, 2),
    ]:
        options = dict(steps=steps, contact=contact, checkpoint=checkpoint)
        traj = numpy_call(jd.rollout, model, q, v, controls, 1e-3, **options)
        np.testing.assert_array_equal(traj.q, q[None])
        np.testing.assert_array_equal(traj.v, v[None])
        assert traj.contact_forces.shape == (0, contact.npoints, 3)


def test_contact_gradient_finite_at_the_boundary(box):
    """At first touch (penetration exactly 0) and just outside, the contact forces and their
    gradients in the state and the parameters are finite (no 0^(n-1) of a negative)."""
    model, contact, _ = box
    corners_z = -0.05 - 0.01  # sphere centres 5 cm below the box origin, radius 1 cm

    def total(q, v, stiffness):
        c = eqx.tree_at(lambda c: c.stiffness, contact, stiffness)
        return jd.contact_forces(model, c, q, v).sum()

    value = numpy_jit(total)
    grad = numpy_jit(jax.grad(total, argnums=(0, 1, 2)))
    for z in (-corners_z, -corners_z + 1e-3):  # touching, and 1 mm above
        q = jnp.array([1.0, 0, 0, 0, 0, 0, z])
        v = jnp.array([0.0, 0.0, 0.0, 0.1, 0.0, -0.2])
        grads = grad(q, v, contact.stiffness)
        assert all(np.all(np.isfinite(g)) for g in grads)
        assert float(value(q, v, contact.stiffness)) == 0.0


def test_rollout_under_batched_equals_vmap():
    model = jd.load_model("double_pendulum")
    q0s = jnp.array([[0.4, 0.1], [-0.3, 0.2], [1.0, -1.0]])
    taus = jnp.zeros((50, 2))

    def final(q0):
        return jd.rollout(model, q0, jnp.zeros(2), taus, 1e-2).q[-1]

    np.testing.assert_allclose(
        jd.batched(final, in_axes=(0,))(q0s), jax.vmap(final)(q0s), rtol=1e-12, atol=1e-12
    )
