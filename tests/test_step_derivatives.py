"""`step_derivatives`: the Jacobians of `jd.step` in the tangent space (Crocoddyl's `Fx`,
`Fu`) against central finite differences of `jd.step` (every integrator; a tree with a joint
of every class and every passive force; ground contact; `f_ext`), against Pinocchio
(`computeABADerivatives` + `dIntegrate`) on panda and on a floating robot, under `vmap`
(what `jd.batched` maps), finite at zero velocity and identity, and `ValueError` for bad input.

The checks of values evaluate `step_derivatives`' traced program by NumPy (`numpy_call`): the
arithmetic under test is the program's, and each compile takes seconds; the `vmap` test
compiles it (`jd.jit`) and compares with that evaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from helpers import np_skew
from numpy_eval import numpy_call, numpy_eval, numpy_jit
from robots import load_jointdyn, load_pinocchio, q_to_pinocchio, v_to_pinocchio_matrix
from trees import random_inertia, random_rotation, random_tree

import jointdyn as jd
from jointdyn._contact_derivatives import contact_joint_force_derivatives
from jointdyn._dynamics import external_joint_forces
from jointdyn._spatial import quat_to_rotmat

jax.config.update("jax_enable_x64", True)

EPS = 1e-6
DT = 0.01


def passive_tree(seed: int = 0, small: bool = False) -> jd.Model:
    """A Free root and a joint of every class at random places, each with damping, a spring
    and Coulomb friction, and limit stops on the vector joints (limits ±0.4: some coordinates
    of a random configuration are beyond them). `small`: a free base, a revolute (limit
    stops) and a ball only."""
    rng = np.random.default_rng(seed)
    P = dict(damping=0.3, spring_stiffness=2.0, friction=0.05)
    L = dict(position_lower=-0.4, position_upper=0.4, stop_stiffness=30.0, stop_damping=0.5)
    R = random_rotation(rng)

    def ax():
        return rng.normal(size=3)

    joints = [
        jd.Free(damping=0.1, spring_stiffness=1.0),
        jd.Revolute(ax(), **P, **L),
        jd.Prismatic(ax(), **P, **L),
        jd.Screw(ax(), 0.1, **P, **L),
        jd.RevoluteUnbounded(ax(), **P),
        jd.Cylindrical(ax(), **P, **L),
        jd.Universal(R[0], R[1], **P, **L),
        jd.Gimbal(R, **P, **L),
        jd.SpaceXYZ(check_singularity=False, **P),
        jd.Ball(**P),
        jd.Planar("xz", **P, **L),
        jd.Translational(**P, **L),
        jd.Weld(),
        jd.Composite([jd.Prismatic(ax(), **P), jd.Revolute(ax(), **P)]),
    ]
    if small:
        joints = [joints[i] for i in (0, 1, 9)]
    b = jd.ModelBuilder()
    for i, joint in enumerate(joints):
        parent = "world" if i == 0 else f"b{int(rng.integers(0, i))}"
        X_PF = jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3))
        X_BM = jd.Transform.from_rpy(rng.normal(size=3), rng.normal(0, 0.3, 3))
        b.add_body(f"b{i}", random_inertia(rng), parent, joint, X_PF=X_PF, X_BM=X_BM)
    return b.build()


def fd_step(model, q, v, tau, dt, integrator, contact=None, f_ext=None):
    """`jd.step` and its central differences in the tangent space: `(q1, v1, fx, fu)`. Every
    direction at once (`vmap` over `±EPS` steps of `z = (δq, δv, δtau)`), evaluated by NumPy
    (`numpy_eval`): no XLA program to build, and no compiler shared with the code checked."""
    nv = model.nv
    E = EPS * np.eye(3 * nv)

    def differences(model, q, v, tau, Z, contact, f_ext):
        def step(z):
            dq, dv, du = jnp.split(z, 3)
            kw = dict(integrator=integrator, contact=contact, f_ext=f_ext)
            return jd.step(model, model.integrate(q, dq), v + dv, tau + du, dt, **kw)

        qs, vs = jax.vmap(step)(Z)
        q1, v1 = qs[0], vs[0]
        plus, minus = slice(1, 1 + 3 * nv), slice(1 + 3 * nv, None)
        dq = jax.vmap(lambda a, b: model.difference(q1, a) - model.difference(q1, b))(
            qs[plus], qs[minus]
        )
        J = jnp.concatenate([dq, vs[plus] - vs[minus]], 1).T / (2 * EPS)
        return q1, v1, J

    Z = np.concatenate([np.zeros((1, 3 * nv)), E, -E])
    q1, v1, J = numpy_eval(differences, model, q, v, tau, Z, contact, f_ext)
    return q1, v1, J[:, : 2 * nv], J[:, 2 * nv :]


@pytest.fixture(scope="module")
def tree():
    return passive_tree()


@pytest.fixture(scope="module")
def small_tree():
    return passive_tree(small=True)


def random_state(model, seed):
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = model.random_configuration(k[0])
    v = jax.random.normal(k[1], (model.nv,))
    tau = 3 * jax.random.normal(k[2], (model.nv,))
    f_ext = jax.random.normal(k[3], (model.nbodies, 6))
    return q, v, tau, f_ext


def assert_matches(sd, fx, fu, tol, what):
    scale = max(1.0, float(jnp.max(jnp.abs(fx))))
    np.testing.assert_allclose(sd.fx, fx, rtol=0, atol=tol * scale, err_msg=f"{what} fx")
    np.testing.assert_allclose(sd.fu, fu, rtol=0, atol=tol * scale, err_msg=f"{what} fu")


def ground_under(model, q, body):
    """Two contact spheres on `body` (at its origin and 10 cm off), the ground 5 cm above the
    lower one (smooth friction): the ground pushes."""
    corners = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
    i = model.body_index(body)
    X = jd.forward_kinematics(model, q).X_WB
    z = min(float((X.R[i] @ c + X.p[i])[2]) for c in corners)
    return jd.GroundContact(
        model, [body] * 2, corners, 0.0, stiffness=1e3, damping=10.0, friction=0.8, height=z + 0.05
    )


@pytest.mark.parametrize(
    ("integrator", "with_contact"),
    [("semi_implicit_euler", False), ("rk4", True), ("implicit", False), ("implicit", True)],
)
def test_matches_finite_differences(tree, small_tree, integrator, with_contact):
    """`semi_implicit_euler`: every joint class with damping, springs, friction and limit
    stops, and `f_ext`. `rk4` and `implicit`, whose programs take longer to build: a free base,
    a revolute (limit stops) and a ball, with `f_ext`; with ground contact too (`implicit`
    also without: with no contact `D` and `K` do not depend on `v`, so the `v`-derivatives
    of `D Δv` and `K Δv` are zero and only the contact case checks them)."""
    contact = None
    if integrator != "semi_implicit_euler":
        tree = small_tree
    q, v, tau, f_ext = random_state(tree, 1)
    if with_contact:
        contact = ground_under(tree, q, "b2")
        assert float(jnp.abs(jd.contact_forces(tree, contact, q, v)).max()) > 1.0  # it pushes
    kw = dict(integrator=integrator, contact=contact, f_ext=f_ext)
    sd = numpy_call(jd.step_derivatives, tree, q, v, tau, DT, **kw)  # by NumPy, not compiled
    q1, v1, fx, fu = fd_step(tree, q, v, tau, DT, integrator, contact, f_ext)
    np.testing.assert_allclose(sd.q, q1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sd.v, v1, rtol=0, atol=1e-12)
    assert_matches(sd, fx, fu, 1e-6, integrator)


# ------------------------------------------------------------------------------------------
# against Pinocchio


@numpy_jit  # evaluated by NumPy (`numpy_eval`), not compiled
def _contact_tangents_by_autodiff(model, contact, q, v, dq, dv):
    """`Q_c = Σ Jᵀ F` of the contact forces and its tangents along the directions
    `(dq[k], dv[k])` (q in the tangent space) by forward mode through the kinematics: the
    oracle of the analytic `contact_joint_force_derivatives` (a few random directions see any
    error of its Jacobians, at a third of the compile time of the full `jacfwd`)."""

    def Q(d, x):
        q_d = model.integrate(q, d)
        return external_joint_forces(model, q_d, jd.contact_forces(model, contact, q_d, x))

    zero = jnp.zeros_like(v)
    Q0 = Q(zero, v)
    return Q0, jax.vmap(lambda a, b: jax.jvp(Q, (zero, v), (a, b))[1])(dq, dv)


def test_contact_derivatives_match_autodiff():
    """The analytic Jacobians of the contact forces' joint forces (used by `step_derivatives`)
    against forward-mode autodiff through the kinematics along random directions, on random
    trees with a joint of every class (own hinge derivatives: Gimbal, SpaceXYZ, Planar,
    Composite, Free) and five spheres, four of them pushed into the ground, on bodies at
    several depths."""
    bodies = [3, 7, 13, 13, 10]
    analytic = numpy_jit(contact_joint_force_derivatives)  # evaluated by NumPy, not compiled
    for seed in range(2):
        m = random_tree(seed, nbodies=14, topology_seed=0)
        k = jax.random.split(jax.random.PRNGKey(seed), 4)
        q, v = m.random_configuration(k[0]), jax.random.normal(k[1], (m.nv,))
        dq, dv = jax.random.normal(k[2], (3, m.nv)), jax.random.normal(k[3], (3, m.nv))
        X = jd.forward_kinematics(m, q).X_WB
        pos = np.random.default_rng(seed).normal(0, 0.2, (5, 3))
        heights = sorted(float((X.R[b] @ c + X.p[b])[2]) for b, c in zip(bodies, pos, strict=True))
        contact = jd.GroundContact(
            m,
            bodies,
            pos,
            0.01,
            stiffness=1e3,
            damping=10.0,
            friction=0.8,
            height=heights[3] + 0.01,
        )
        assert int(jnp.sum(jnp.abs(jd.contact_point_forces(m, contact, q, v)[0][:, 2]) > 0)) == 4
        Q_ref, tangents = _contact_tangents_by_autodiff(m, contact, q, v, dq, dv)
        Q, dQ_dq, dQ_dv = analytic(m, contact, q, v)
        for name, ref, got in (
            ("Q", Q_ref, Q),
            ("tangents", tangents, dq @ dQ_dq.T + dv @ dQ_dv.T),
        ):
            scale = float(jnp.max(jnp.abs(ref)))
            assert scale > 1.0, name
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * scale, err_msg=name)


def _pinocchio_euler(pmodel, q_pin, v_pin, tau_pin, D, dt):
    """Pinocchio's semi-implicit Euler step Jacobians (in Pinocchio's coordinates), with the
    joint damping `tau = −D v` added: `computeABADerivatives` + `dIntegrate`."""
    data = pmodel.createData()
    pin.computeABADerivatives(pmodel, data, q_pin, v_pin, tau_pin - D @ v_pin)
    Minv = data.Minv.copy()
    Minv = np.triu(Minv) + np.triu(Minv, 1).T
    a = data.ddq.copy()
    A_q, A_v = data.ddq_dq.copy(), data.ddq_dv.copy() - Minv @ D
    nv = pmodel.nv
    v1 = v_pin + dt * a
    Jq = pin.dIntegrate(pmodel, q_pin, dt * v1, pin.ARG0)
    Jv = pin.dIntegrate(pmodel, q_pin, dt * v1, pin.ARG1)
    Vx = np.concatenate([dt * A_q, np.eye(nv) + dt * A_v], 1)
    Qx = np.concatenate([Jq, np.zeros((nv, nv))], 1) + dt * Jv @ Vx
    fx = np.concatenate([Qx, Vx])
    fu = np.concatenate([dt * dt * Jv @ Minv, dt * Minv])
    return pin.integrate(pmodel, q_pin, dt * v1), v1, fx, fu


def test_matches_pinocchio_panda():
    model, pmodel = load_jointdyn("panda"), load_pinocchio("panda")
    q, v, tau, _ = random_state(model, 2)
    sd = numpy_call(jd.step_derivatives, model, q, v, tau, DT)
    T = v_to_pinocchio_matrix(model, pmodel, q)  # a permutation for panda
    D = T @ np.diag(np.asarray(model._joint_param("damping"))) @ T.T
    q_pin = q_to_pinocchio(model, pmodel, q)
    v_pin, tau_pin = T @ np.asarray(v), T @ np.asarray(tau)
    q1, v1, fx, fu = _pinocchio_euler(pmodel, q_pin, v_pin, tau_pin, D, DT)
    T2 = np.kron(np.eye(2), T)
    np.testing.assert_allclose(q_to_pinocchio(model, pmodel, sd.q), q1, atol=1e-12)
    np.testing.assert_allclose(T @ sd.v, v1, atol=1e-12)
    np.testing.assert_allclose(T2 @ sd.fx @ T2.T, fx, rtol=0, atol=1e-9)
    np.testing.assert_allclose(T2 @ sd.fu @ T.T, fu, rtol=0, atol=1e-9)


def test_matches_pinocchio_floating_base():
    """solo12 (free base): our fx, fu rebuilt from Pinocchio's `computeABADerivatives` and
    `dIntegrate` (of its `R3 × SO3`) through the maps between the coordinates.

    With `v_pin = T(q) v` (`T` orthogonal; for the base `[Rᵀ ṗ; Rᵀ w]`), our acceleration is
    `v̇ = Tᵀ (a_pin + c)`, `c = [w_B × v_B; 0]` on the base, and our tangent `δq` is Pinocchio's
    `T δq`; `T` moves with the base rotation: `δ(T x) = G(x) δw`, `δ(Tᵀ y) = H(y) δw`.
    """
    from test_lie_derivatives import _so3_integrate_from_pinocchio

    model, pmodel = load_jointdyn("solo12"), load_pinocchio("solo12")
    nv = model.nv
    q, v, tau, _ = random_state(model, 3)
    sd = numpy_call(jd.step_derivatives, model, q, v, tau, DT)
    base = model.v_slice("root_joint")
    assert (base.start, base.stop) == (0, 6)
    R = np.asarray(quat_to_rotmat(q[:4]))
    T = v_to_pinocchio_matrix(model, pmodel, q)
    ib = pmodel.joints[pmodel.getJointId("root_joint")].idx_v  # base: [v_B; w_B] at ib
    d = np.asarray(model._joint_param("damping"))
    v_, tau_eff = np.asarray(v), np.asarray(tau) - d * np.asarray(v)
    vp, tp = T @ v_, T @ tau_eff

    data = pmodel.createData()
    pin.computeABADerivatives(pmodel, data, q_to_pinocchio(model, pmodel, q), vp, tp)
    Minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
    A_q, A_v = data.ddq_dq.copy(), data.ddq_dv.copy()
    vB, wB = vp[ib : ib + 3], vp[ib + 3 : ib + 6]
    c = np.zeros(nv)
    c[ib : ib + 3] = np.cross(wB, vB)
    dc = np.zeros((nv, nv))  # ∂c/∂v_pin
    dc[ib : ib + 3, ib : ib + 3] = np_skew(wB)
    dc[ib : ib + 3, ib + 3 : ib + 6] = -np_skew(vB)
    y = data.ddq + c

    def G(x):  # δ(T x) / δq: the base rotation's columns only
        out = np.zeros((nv, nv))
        out[ib : ib + 3, 0:3] = R.T @ np_skew(x[3:6])  # v_B = Rᵀ ṗ
        out[ib + 3 : ib + 6, 0:3] = R.T @ np_skew(x[0:3])  # w_B = Rᵀ w
        return out

    H = np.zeros((nv, nv))  # δ(Tᵀ y) / δq
    H[0:3, 0:3] = -np_skew(R @ y[ib + 3 : ib + 6])
    H[3:6, 0:3] = -np_skew(R @ y[ib : ib + 3])
    a = T.T @ y
    a_q = H + T.T @ (A_q @ T + (A_v + dc) @ G(v_) + Minv @ G(tau_eff))
    a_u = T.T @ Minv @ T
    a_v = T.T @ (A_v + dc) @ T - a_u @ np.diag(d)

    v1 = v_ + DT * a
    Jq, Jv = np.eye(nv), np.eye(nv)
    rot = _so3_integrate_from_pinocchio(R, DT * v1[:3])  # Pinocchio's SO3 dIntegrate, mapped
    Jq[:3, :3], Jv[:3, :3] = rot
    Vx = np.concatenate([DT * a_q, np.eye(nv) + DT * a_v], 1)
    Qx = np.concatenate([Jq, np.zeros((nv, nv))], 1) + DT * Jv @ Vx
    fx = np.concatenate([Qx, Vx])
    fu = np.concatenate([DT * DT * Jv @ a_u, DT * a_u])
    np.testing.assert_allclose(sd.v, v1, rtol=0, atol=1e-10)
    np.testing.assert_allclose(sd.fx, fx, rtol=0, atol=1e-8)
    np.testing.assert_allclose(sd.fu, fu, rtol=0, atol=1e-8)


@pytest.fixture(scope="module")
def rotations():
    """A free base and a ball joint (damping, spring): the Lie-group Jacobians' Taylor branches."""
    rng = np.random.default_rng(5)
    b = jd.ModelBuilder()
    b.add_body("base", random_inertia(rng), "world", jd.Free(damping=0.2))
    X = jd.Transform.from_rpy([0.1, 0.2, 0.3], [0.0, 0.1, -0.2])
    b.add_body(
        "arm", random_inertia(rng), "base", jd.Ball(damping=0.3, spring_stiffness=1.0), X_PF=X
    )
    return b.build()


@pytest.mark.parametrize("integrator", ["semi_implicit_euler", "implicit"])
def test_finite_at_identity_and_zero_velocity(rotations, integrator):
    """At the neutral configuration, `v = 0`, `tau = 0` (the base falls: `v⁺ ≠ 0`) and with
    gravity off (`v⁺ = 0`, `q⁺ = q`: every Jacobian at its Taylor branch), against central
    differences. `implicit`: the ball's spring and the dampers taken implicitly, and their
    second derivatives' chart correction (`_chart_bracket`) at the identity."""
    m = rotations
    q, zero = m.neutral(), jnp.zeros(m.nv)
    weightless = eqx.tree_at(lambda x: x.gravity, m, jnp.zeros(3))
    for model in (m, weightless):
        sd = numpy_call(jd.step_derivatives, model, q, zero, zero, DT, integrator=integrator)
        assert np.isfinite(np.asarray(sd.fx)).all() and np.isfinite(np.asarray(sd.fu)).all()
        _, _, fx, fu = fd_step(model, q, zero, zero, DT, integrator)
        assert_matches(sd, fx, fu, 1e-7, f"at rest, {integrator}")
    np.testing.assert_array_equal(sd.v, 0.0)
    np.testing.assert_allclose(sd.q, q, atol=0)


def test_vmap_over_a_horizon(rotations):
    m = rotations
    keys = jax.random.split(jax.random.PRNGKey(4), 4)
    qs = jax.vmap(m.random_configuration)(keys)
    vs, taus = jax.random.normal(keys[0], (4, m.nv)), jax.random.normal(keys[1], (4, m.nv))
    vs = vs.at[0].set(0.0)  # a knot at rest among them

    def one(q, v, tau):
        return jd.step_derivatives(m, q, v, tau, DT)

    by_vmap = jd.jit(jax.vmap(one))(qs, vs, taus)  # jd.batched is vmap (plus devices)
    for k in range(4):
        ref = numpy_call(jd.step_derivatives, m, qs[k], vs[k], taus[k], DT)  # by NumPy
        for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(by_vmap), strict=True):
            np.testing.assert_allclose(b[k], a, rtol=0, atol=1e-12)
    assert by_vmap.fx.shape == (4, 2 * m.nv, 2 * m.nv) and by_vmap.fu.shape == (4, 2 * m.nv, m.nv)


def test_bad_input_raises(rotations):
    m = rotations
    q, v = m.neutral(), jnp.zeros(m.nv)
    cases = [
        (dict(q=q[:-1]), "`q`"),
        (dict(v=v[:-1]), "`v`"),
        (dict(tau=v[None]), "`tau`"),
        (dict(dt=0.0), "`dt`"),
        (dict(dt=jnp.ones(2)), "`dt`"),
        (dict(integrator="euler"), "`integrator`"),
        (dict(f_ext=jnp.zeros((m.nbodies, 3))), "`f_ext`"),
        (dict(contact="ground"), "`contact`"),
    ]
    for bad, match in cases:
        args = dict(q=q, v=v, tau=v, dt=DT) | bad
        kw = {k: args.pop(k) for k in ("integrator", "f_ext", "contact") if k in args}
        with pytest.raises(ValueError, match=match):
            jd.step_derivatives(m, args["q"], args["v"], args["tau"], args["dt"], **kw)
