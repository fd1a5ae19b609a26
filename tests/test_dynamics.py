"""Identities of the dynamics algorithms on random trees built from every joint class.

The values are the algorithms' traced programs evaluated by NumPy (`numpy_call`,
`numpy_jit`): what is checked is their arithmetic, and a compile per program would take most of
the module's time. `test_jit_vmap_dtype` and `test_algorithms_inline_when_traced` compile."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_eval import central_differences, numpy_call, numpy_eval, numpy_jit
from trees import random_tree

import jointdyn as jd
from jointdyn._dynamics import external_joint_forces

jax.config.update("jax_enable_x64", True)

SEEDS = [0]


def state(model, seed, dtype=jnp.float64, scale=1.0):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    q = model.random_configuration(k[0]).astype(dtype)
    v = (scale * jax.random.normal(k[1], (model.nv,))).astype(dtype)
    a = jax.random.normal(k[2], (model.nv,)).astype(dtype)
    tau = (10 * jax.random.normal(k[3], (model.nv,))).astype(dtype)
    f = jax.random.normal(k[4], (model.nbodies, 6)).astype(dtype)
    return q, v, a, tau, f


@pytest.fixture(scope="module", params=SEEDS)
def model(request):
    return random_tree(request.param)


@pytest.fixture(scope="module")
def alg():
    """The algorithms, each traced once per argument structure and evaluated by NumPy."""
    return dict(aba=numpy_jit(jd.aba), rnea=numpy_jit(jd.rnea), crba=numpy_jit(jd.crba))


@numpy_jit
def pose_rates(model, q, v):
    """World poses of every body and frame along the motion `q ⊕ s v` at `s = 0`, and their
    rates (forward-mode autodiff): `(R_B, p_B, R_F, p_F), (dR_B, dp_B, dR_F, dp_F)`. One
    program per model, for the kinematics, frame Jacobian and momentum tests."""

    def poses(s):
        kin = jd.forward_kinematics(model, model.integrate(q, s * v))
        return kin.X_WB.R, kin.X_WB.p, kin.X_WF.R, kin.X_WF.p

    return jax.jvp(poses, (0.0,), (1.0,))


def test_rnea_inverts_aba(model, alg):
    q, v, _, tau, f = state(model, 3)
    qdd = alg["aba"](model, q, v, tau, f)
    np.testing.assert_allclose(alg["rnea"](model, q, v, qdd, f), tau, rtol=1e-9, atol=1e-8)
    qdd0 = alg["aba"](model, q, v, tau)
    np.testing.assert_allclose(alg["rnea"](model, q, v, qdd0), tau, rtol=1e-9, atol=1e-8)


def test_crba_is_jacobian_of_rnea(model, alg):
    q, v, a, _, _ = state(model, 4)
    M = alg["crba"](model, q)
    with jd.differentiation_rules(False):  # on, jacfwd in v̇ would take crba's own M
        J = numpy_eval(jax.jacfwd(lambda x: jd.rnea(model, q, v, x)), a)  # by NumPy
    np.testing.assert_allclose(M, J, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(M, M.T, rtol=0, atol=1e-12)
    assert np.linalg.eigvalsh(np.asarray(M)).min() > 0


def test_aba_is_inverse_mass_matrix(model, alg):
    q, v, _, tau, _ = state(model, 5)
    M = alg["crba"](model, q)
    b = numpy_call(jd.bias_forces, model, q, v)
    np.testing.assert_allclose(
        alg["aba"](model, q, v, tau), np.linalg.solve(M, tau - b), rtol=1e-8, atol=1e-8
    )


def test_energy_and_gravity(model, alg):
    q, v, _, _, _ = state(model, 6)
    M = alg["crba"](model, q)
    np.testing.assert_allclose(
        numpy_call(jd.kinetic_energy, model, q, v), 0.5 * v @ M @ v, rtol=1e-10, atol=1e-12
    )
    z = jnp.zeros(model.nv)
    # gravity forces are the gradient of the potential energy along each joint's motion
    dU = numpy_eval(jax.grad(lambda d: jd.potential_energy(model, model.integrate(q, d))), z)
    np.testing.assert_allclose(numpy_call(jd.gravity_forces, model, q), dU, rtol=1e-8, atol=1e-8)


def test_power_balance(model):
    """d/dt (T + U) = tau · v along the motion given by aba."""
    q, v, _, tau, _ = state(model, 7)
    qdd = numpy_call(jd.aba, model, q, v, tau)

    def energy(s):
        qs = model.integrate(q, s * v)
        return jd.kinetic_energy(model, qs, v + s * qdd) + jd.potential_energy(model, qs)

    np.testing.assert_allclose(numpy_eval(jax.jacfwd(energy), 0.0), tau @ v, rtol=1e-8, atol=1e-8)


def test_external_forces_consistent(model, alg):
    """rnea(f) = rnea(0) − Σ J_bᵀ F_b with world-aligned body Jacobians; aba agrees; so does
    the simulator's `Σ J_bᵀ F_b` of contact forces (`external_joint_forces`)."""
    q, v, a, tau, f = state(model, 8)
    J = numpy_call(jd.body_jacobians, model, q)
    JtF = np.einsum("bxk,bx->k", J, f)
    got = numpy_call(external_joint_forces, model, q, f)
    np.testing.assert_allclose(got, JtF, rtol=1e-9, atol=1e-9 * float(jnp.abs(JtF).max()))
    expected = alg["rnea"](model, q, v, a) - JtF
    np.testing.assert_allclose(alg["rnea"](model, q, v, a, f), expected, rtol=1e-9, atol=1e-9)
    M = alg["crba"](model, q)
    b = numpy_call(jd.bias_forces, model, q, v)
    expected_qdd = np.linalg.solve(M, tau - b + np.einsum("bxk,bx->k", J, f))
    np.testing.assert_allclose(alg["aba"](model, q, v, tau, f), expected_qdd, rtol=1e-8, atol=1e-8)


def test_kinematics_derivatives(model):
    """V_WB = J v = d/dt X_WB; A_WB = d/dt V_WB along the motion."""
    q, v, a, _, _ = state(model, 9)
    kin = numpy_call(jd.forward_kinematics, model, q, v, a)
    J = numpy_call(jd.body_jacobians, model, q)
    np.testing.assert_allclose(np.einsum("bxk,k->bx", J, v), kin.V_WB, rtol=0, atol=1e-10)

    (R, _, _, _), (dR, dp, _, _) = jax.tree.map(np.asarray, pose_rates(model, q, v))
    W = dR @ np.swapaxes(R, 1, 2)
    w = np.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], -1)
    np.testing.assert_allclose(np.concatenate([w, dp], -1), kin.V_WB, rtol=0, atol=1e-9)

    def vel(s):
        return jd.forward_kinematics(
            model, model.integrate(q, s * v + 0.5 * s**2 * a), v + s * a
        ).V_WB

    np.testing.assert_allclose(numpy_eval(jax.jacfwd(vel), 0.0), kin.A_WB, rtol=0, atol=1e-8)


def test_frame_jacobian(model):
    q, v, _, _, _ = state(model, 10)
    J = numpy_call(jd.jacobian, model, q, "tool")

    k = model.frame_index("tool")
    (_, _, R, _), (_, _, dR, dp) = jax.tree.map(np.asarray, pose_rates(model, q, v))
    R, dR, dp = R[k], dR[k], dp[k]
    W = dR @ R.T
    V = np.array([W[2, 1], W[0, 2], W[1, 0], *dp])
    np.testing.assert_allclose(J @ v, V, rtol=0, atol=1e-9)
    # a body name is a frame too
    np.testing.assert_allclose(
        numpy_call(jd.jacobian, model, q, model.body_names[3]),
        numpy_call(jd.body_jacobians, model, q)[3],
        rtol=0,
        atol=1e-12,
    )


def test_com_and_momentum(model):
    """`h_G = [k_G; l]` against the bodies' poses along the motion `q ⊕ s v`: `l = m ċ` and
    `k_G = Σ R I_C Rᵀ w + m (c_i − c) × ċ_i` (rates by autodiff of the poses); and `k_G` does
    not change when every body gets the same extra translational velocity."""
    q, v, _, _, _ = state(model, 11)
    m = model.total_mass()

    def reference(q, v):
        """From the poses' rates by autodiff (`pose_rates`); the rest in NumPy."""
        poses, rates = jax.tree.map(np.asarray, pose_rates(model, q, v))
        (R, p, _, _), (dR, dp, _, _) = poses, rates
        mass, com = np.asarray(model.inertias.mass), np.asarray(model.inertias.com)
        # world centres of mass c_i = X_WB_i com_i = R_i com_i + p_i, (nbodies, 3), and rates
        c_i = np.einsum("bij,bj->bi", R, com) + p
        dc_i = np.einsum("bij,bj->bi", dR, com) + dp
        c, dc = (np.sum(mass[:, None] * x, 0) / float(m) for x in (c_i, dc_i))
        W = dR @ np.swapaxes(R, 1, 2)
        w = np.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], -1)
        I_W = R @ np.asarray(model.inertias.inertia) @ np.swapaxes(R, 1, 2)
        spin = np.einsum("bij,bj->i", I_W, w)
        orbit = np.sum(mass[:, None] * np.cross(c_i - c, dc_i), 0)
        return np.concatenate([spin + orbit, float(m) * dc])

    h = numpy_call(jd.centroidal_momentum, model, q, v)
    np.testing.assert_allclose(h, reference(q, v), rtol=1e-9, atol=1e-9)
    # the root is a Free joint, v = [w; ṗ] in the world: adding u to ṗ adds u to every
    # body's velocity (no rotation), so l gains m u and k_G does not change
    assert isinstance(model.joints[0], jd.Free)
    u = jnp.array([0.7, -1.3, 0.4])
    root = model.v_slice("root_joint")
    h_u = numpy_call(jd.centroidal_momentum, model, q, v.at[root.start + 3 : root.start + 6].add(u))
    np.testing.assert_allclose(h_u[:3], h[:3], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(h_u[3:], h[3:] + m * u, rtol=1e-9, atol=1e-9)


def test_forward_dynamics_adds_passive_forces():
    rng = np.random.default_rng(3)
    b = jd.ModelBuilder()
    inertia = jd.SpatialInertia(1.0, [0.1, 0, -0.3], np.diag([0.02, 0.03, 0.04]))
    b.add_body("a", inertia, "world", jd.Revolute([0, 1, 0], damping=0.7, friction=0.1))
    b.add_body(
        "b",
        inertia,
        "a",
        jd.Prismatic(
            [0, 0, 1],
            position_lower=-0.1,
            position_upper=0.1,
            stop_stiffness=100.0,
            stop_damping=1.0,
        ),
    )
    m = b.build()
    q = jnp.array([0.3, 0.25])  # prismatic beyond its upper stop
    v = jnp.asarray(rng.normal(size=2))
    tau = jnp.asarray(rng.normal(size=2))
    # damping and friction on the revolute joint; the prismatic one 0.15 past its upper stop
    # (spring 100, damper 1), which only ever pushes back in
    expected = np.array([-0.7 * v[0] - 0.1 * np.sign(v[0]), min(0.0, -100.0 * 0.15 - v[1])])
    assert expected[1] < 0
    np.testing.assert_allclose(
        numpy_call(jd.joint_forces, m, q, v), expected, rtol=1e-12, atol=1e-12
    )
    # forward_dynamics moves the model under tau and those forces: inverse dynamics gives back
    # their sum
    vdot = numpy_call(jd.forward_dynamics, m, q, v, tau)
    back = numpy_call(jd.rnea, m, q, v, vdot)
    np.testing.assert_allclose(back, tau + expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_jit_vmap_dtype(dtype):
    model = random_tree(2, nbodies=8)
    batch = [state(model, s, dtype, scale=0.5) for s in range(3)]
    q, v, _, tau, f = (jnp.stack(x) for x in zip(*batch, strict=True))
    qdd = jax.jit(jax.vmap(jd.aba, (None, 0, 0, 0, 0)))(model, q, v, tau, f)
    assert qdd.dtype == dtype
    back = jax.jit(jax.vmap(jd.rnea, (None, 0, 0, 0, 0)))(model, q, v, qdd, f)
    assert back.dtype == dtype
    tol = 2e-3 if dtype == jnp.float32 else 1e-9
    np.testing.assert_allclose(back, tau, rtol=tol, atol=tol * 10)
    M = jax.jit(jax.vmap(jd.crba, (None, 0)))(model, q)
    assert M.dtype == dtype and M.shape == (3, model.nv, model.nv)


def test_aba_gradients_match_finite_differences():
    model = random_tree(4, nbodies=8)
    q, v, _, tau, _ = state(model, 12, scale=0.5)
    w = jax.random.normal(jax.random.PRNGKey(0), (model.nv,))

    def loss(dq, v, tau):
        return jd.aba(model, model.integrate(q, dq), v, tau) @ w

    z = jnp.zeros(model.nv)
    grads = numpy_eval(jax.grad(loss, argnums=(0, 1, 2)), z, v, tau)
    # Three random directions per argument, each alone (zero in the other two).
    rng = np.random.default_rng(0)
    d = np.zeros((3, 3, 3, model.nv))  # (argument, direction, argument moved, entry)
    for argnum in range(3):
        d[argnum, :, argnum] = rng.normal(size=(3, model.nv))
    fd = central_differences(
        lambda x: loss(*x), np.stack([z, v, tau]), d.reshape(9, 3, model.nv), 1e-6
    ).reshape(3, 3)
    for argnum in range(3):
        ad = d[argnum, :, argnum] @ grads[argnum]
        np.testing.assert_allclose(ad, fd[argnum], rtol=1e-5, atol=1e-6)


def test_gradient_wrt_model_parameters():
    """d aba / d (mass, gravity): matches finite differences, no retrace needed."""
    model = random_tree(5, nbodies=6)
    q, v, _, tau, _ = state(model, 13, scale=0.5)

    def loss(mass, gravity):
        m = jd.Model(
            model.joints,
            model.X_PF,
            model.X_BM,
            jd.SpatialInertia(mass, model.inertias.com, model.inertias.inertia),
            model.X_BF,
            gravity,
            model.topology,
        )
        return jnp.sum(jd.aba(m, q, v, tau) ** 2)

    mass, gravity = np.asarray(model.inertias.mass), np.asarray(model.gravity)
    gm, gg = numpy_eval(jax.grad(loss, argnums=(0, 1)), mass, gravity)
    n = len(mass)  # the flat vector [mass; gravity], moved along mass[2] and gravity[2]
    fd = central_differences(
        lambda x: loss(x[:n], x[n:]),
        np.concatenate([mass, gravity]),
        np.eye(n + 3)[[2, n + 2]],
        1e-6,
    )
    np.testing.assert_allclose(gm[2], fd[0], rtol=1e-5)
    np.testing.assert_allclose(gg[2], fd[1], rtol=1e-5)


def test_joint_forces_are_each_joints_passive_force():
    """`joint_forces` (the coordinate laws on whole vectors, the joint maps per class) equals
    every joint's own `passive_force`, concatenated, on a tree of every joint class with
    damping, friction, springs towards a random configuration, and limit stops engaged on
    some coordinates from above and below."""
    model = random_tree(7, nbodies=14)
    rng = np.random.default_rng(7)
    k = jax.random.split(jax.random.PRNGKey(7), 2)
    q, q_ref = model.random_configuration(k[0]), model.random_configuration(k[1])
    v = jnp.asarray(rng.normal(size=model.nv))
    side = rng.integers(0, 2, model.nq)  # 0: past the upper limit, 1: below the lower one
    gap = rng.uniform(0.05, 0.2, model.nq)
    model = model.with_joint_params(
        damping=rng.uniform(0.1, 1.0, model.nv),
        friction=rng.uniform(0.1, 1.0, model.nv),
        spring_stiffness=rng.uniform(0.5, 2.0, model.nv),
        spring_reference=q_ref,
        position_lower=np.where(side == 1, q + gap, q - 1.0),
        position_upper=np.where(side == 0, q - gap, q + 1.0),
        stop_stiffness=rng.uniform(10.0, 50.0, model.nq),
        stop_damping=rng.uniform(0.1, 1.0, model.nq),
    )

    @numpy_jit  # traced once (both models have one structure), evaluated by NumPy
    def both(model, q, v):
        own = [
            j.passive_force(q[oq : oq + j.nq], v[ov : ov + j.nv])
            for j, oq, ov in zip(
                model.joints, model.topology.q_offsets, model.topology.v_offsets, strict=True
            )
        ]
        return jd.joint_forces(model, q, v), jnp.concatenate(own)

    got, expected = both(model, q, v)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # the stops and springs act: without them the forces differ
    plain = model.with_joint_params(
        stop_stiffness=np.zeros(model.nq), spring_stiffness=np.zeros(model.nv)
    )
    assert np.abs(np.asarray(got - both(plain, q, v)[0])).max() > 0.1


def test_no_nan_gradients_at_neutral_and_zero_velocity():
    """Gradients at the neutral configuration (identity quaternions, zero angles) and zero
    velocity, through `integrate(q, dq)` at `dq = 0` (the exponential maps at zero), finite. `aba`, `forward_dynamics`, `rnea` and `crba` (every model leaf,
    `q`, `v`, `tau`, `f_ext`) are checked there in `test_gradients.test_no_nan_at_neutral_and_limits`
    on a tree of every joint class; here the other functions of the state."""
    model = random_tree(6, nbodies=14)
    q = model.neutral()
    z = jnp.zeros(model.nv)

    def total(qq, v):
        return (
            jd.kinetic_energy(model, qq, v)
            + jd.potential_energy(model, qq)
            + jnp.sum(jd.centroidal_momentum(model, qq, v))
            + jnp.sum(jd.jacobian(model, qq, "tool"))
            + jnp.sum(jd.joint_forces(model, qq, v))
        )

    def along(dq, v):
        return total(model.integrate(q, dq), v)

    for g in numpy_eval(jax.grad(along, argnums=(0, 1)), z, z):
        assert np.all(np.isfinite(g))


def test_bad_shapes_raise():
    model = random_tree(0, nbodies=5)
    q, v, a, tau, f = state(model, 0)
    with pytest.raises(ValueError, match="`q`"):
        jd.rnea(model, q[:-1], v, a)
    with pytest.raises(ValueError, match="`tau`"):
        jd.aba(model, q, v, tau[:-1])
    with pytest.raises(ValueError, match="f_ext"):
        jd.aba(model, q, v, tau, f[:-1])


def test_algorithms_inline_when_traced():
    """Under a transformation the public algorithms are traced once, inline (no nested `aba`
    call to be traced again by vmap's rule); on concrete arrays they run jitted."""
    model = random_tree(4, nbodies=5)
    q, v, _, tau, _ = state(model, 3)
    batched = jax.make_jaxpr(jax.vmap(jd.aba, (None, 0, 0, 0)))(model, q[None], v[None], tau[None])
    assert "name=aba" not in str(batched)
    direct = jd.aba(model, q, v, tau)
    np.testing.assert_allclose(jax.jit(jd.aba)(model, q, v, tau), direct, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(jd.aba, (None, 0, 0, 0)))(model, q[None], v[None], tau[None])[0],
        direct,
        rtol=1e-12,
        atol=1e-12,
    )
