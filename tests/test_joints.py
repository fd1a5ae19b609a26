"""Kinematic and Lie-group identities of every joint class, in float32 and float64.

Each `(joint, dtype)` is evaluated once (`_results`, cached) on a few random states
(random configurations, `|v| ≤ 1` per entry so rotations stay below π); each test below
compares two of its outputs. Values are the traced programs evaluated by NumPy (`numpy_jit`,
`numpy_eval`, `numpy_call`; float32 programs in float32, as their jaxprs say): the arithmetic
is what is checked, and a compile per program (or per eager operation) would take most of the
module's time. jit, vmap and grad have their own tests in `test_joint_transforms.py`;
`test_space_xyz_singularity_raises` and `test_space_xyz_unchecked_near_singularity` compile
(whether a compiled program raises is their subject).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    JOINT_NAMES,
    assert_dtype,
    assert_tree_allclose,
    make_joint,
    manifold_residual,
    np_pose,
    np_quat_to_rotmat,
    np_rot,
    np_state,
    tol,
    vee,
)
from numpy_eval import numpy_call, numpy_eval, numpy_jit

import jointdyn as jd

NSTATES = 3
DTYPES = {"f32": jnp.float32, "f64": jnp.float64}

parametrize_joints = pytest.mark.parametrize("name", JOINT_NAMES)
parametrize_dtypes = pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))


@numpy_jit  # one program per joint and dtype, evaluated by NumPy
def _evaluate(joint, q, q1, v, vdot, F):
    """Every quantity the identity tests compare, for one state."""
    zero_v = jnp.zeros_like(v)
    out = {}

    X = joint.X_FM(q)
    out["X(q)"] = X.as_matrix()
    out["X(q1)"] = joint.X_FM(q1).as_matrix()
    out["X_FM(neutral)"] = joint.X_FM(joint.neutral()).as_matrix()

    # Velocity: V_FM and the derivative of the pose along q̇ = N(q) v.
    out["V_FM"] = joint.V_FM(q, v)
    out["H_FM"] = joint.H_FM(q)
    qdot = joint.qdot_from_v(q, v)
    _, dX = jax.jvp(joint.X_FM, (q,), (qdot,))
    out["dR R^T"] = dX.R @ X.R.T
    out["[w; dp] along N v"] = jnp.concatenate([vee(dX.R @ X.R.T), dX.p])
    out["v_from_qdot(qdot_from_v)"] = joint.v_from_qdot(q, qdot)

    # Acceleration; and, independently of H_FM, the first and second derivatives of the pose along
    # q(t) = q ⊕ (t v + ½ t² vdot), whose velocity is v + t vdot to first order.
    def pose(t):
        Xt = joint.X_FM(joint.integrate(q, t * v + 0.5 * t**2 * vdot))
        return Xt.R, Xt.p

    def dpose(t):
        return jax.jvp(pose, (t,), (jnp.ones_like(t),))[1]

    t0 = jnp.zeros((), v.dtype)
    (dR, dp), (ddR, ddp) = jax.jvp(dpose, (t0,), (jnp.ones_like(t0),))
    out["[w; dp] along integrate"] = jnp.concatenate([vee(dR @ X.R.T), dp])
    # d/dt(Ṙ Rᵀ) = R̈ Rᵀ + Ṙ Ṙᵀ and the second term is symmetric.
    out["[dw; ddp] along integrate"] = jnp.concatenate([vee(ddR @ X.R.T), ddp])

    out["A_FM"] = joint.A_FM(q, v, vdot)
    out["project_force(F)"] = joint.project_force(q, F)

    # Configuration space.
    q_next = joint.integrate(q, v)
    out["difference(q, q + v)"] = joint.difference(q, q_next)
    out["difference(q, q)"] = joint.difference(q, q)
    out["integrate(q, 0)"] = joint.integrate(q, zero_v)
    out["residual(q + v)"] = manifold_residual(joint, q_next)
    out["residual(q)"] = manifold_residual(joint, q)

    out["difference(q, q1)"] = joint.difference(q, q1)
    for t in (0.0, 0.5, 1.0):
        qt = joint.interpolate(q, q1, jnp.asarray(t, v.dtype))
        out[f"X(interpolate {t})"] = joint.X_FM(qt).as_matrix()
        out[f"difference(q, interpolate {t})"] = joint.difference(q, qt)
        out[f"residual(interpolate {t})"] = manifold_residual(joint, qt)

    # A point off the manifold: scale and perturb every coordinate.
    q_off = 1.3 * q + 0.05 * jnp.cos(jnp.arange(joint.nq, dtype=q.dtype))
    out["normalize(q)"] = joint.normalize(q)
    out["normalize(q_off)"] = q_n = joint.normalize(q_off)
    out["normalize(normalize(q_off))"] = joint.normalize(q_n)
    out["residual(normalize(q_off))"] = manifold_residual(joint, q_n)
    out["X(q_off)"] = joint.X_FM(q_off).as_matrix()
    out["X(normalize(q_off))"] = joint.X_FM(q_n).as_matrix()
    return out


#: Central-difference step for the float64 references below: truncation ~h², rounding
#: ~1e-16/h, both near 1e-10.
FD_STEP = 1e-5


@numpy_jit
def _finite_differences(joint, q, v, vdot):
    """float64 references by central differences, independent of `H_FM` and of autodiff:

    - `H_FM` column k: `[vee(Ṙ Rᵀ); ṗ]` of the pose along `q ⊕ t e_k` (the motion at unit
      velocity `e_k`), from `X_FM(q ⊕ ±h e_k)`;
    - `A_FM`: the rate of change of `V_FM(q ⊕ t v, v + t vdot)`, from `t = ±h`.
    """
    h = FD_STEP
    X = joint.X_FM(q)
    steps = jnp.concatenate([h * jnp.eye(joint.nv), -h * jnp.eye(joint.nv)])
    Xs = jax.vmap(lambda d: joint.X_FM(joint.integrate(q, d)))(steps)
    dR = (Xs.R[: joint.nv] - Xs.R[joint.nv :]) / (2 * h)
    dp = (Xs.p[: joint.nv] - Xs.p[joint.nv :]) / (2 * h)
    w = jax.vmap(lambda D: vee(D @ X.R.T))(dR)
    H = jnp.concatenate([w, dp], 1).T.reshape(6, joint.nv)
    V = jax.vmap(lambda t: joint.V_FM(joint.integrate(q, t * v), v + t * vdot))(jnp.array([h, -h]))
    return H, (V[0] - V[1]) / (2 * h)


def _fit(joint, R, p):
    """`X_FM(q_from_X_FM(X))` and the manifold residual of the fitted `q` (vmapped below)."""
    q_fit = joint.q_from_X_FM(jd.Transform(R, p))
    return joint.X_FM(q_fit).as_matrix(), manifold_residual(joint, q_fit)


@functools.cache
def _results(name: str, dtype: str) -> dict:
    joint = make_joint(name, DTYPES[dtype])
    rng = np.random.default_rng(0)
    states = [np_state(joint, rng, DTYPES[dtype]) for _ in range(NSTATES)]
    outs = [_evaluate(joint, *map(jnp.asarray, s)) for s in states]
    r = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
    for i, k in enumerate(("q", "q1", "v", "vdot", "F")):
        r[k] = np.stack([s[i] for s in states])
    # One program for the states, evaluated by NumPy.
    X = r["X(q)"]
    fit = numpy_eval(jax.vmap(_fit, in_axes=(None, 0, 0)), joint, X[:, :3, :3], X[:, :3, 3])
    r["X(q_from_X_FM(X))"], r["residual(q_from_X_FM)"] = map(np.asarray, fit)
    return r


@functools.cache
def _differences(name: str, dtype: str) -> dict:
    """`_finite_differences` (float64) at the states of `_results(name, dtype)`."""
    r = _results(name, dtype)
    joint = make_joint(name)
    fd = [
        _finite_differences(joint, *(jnp.asarray(r[k][i], jnp.float64) for k in ("q", "v", "vdot")))
        for i in range(NSTATES)
    ]
    return {
        "H_FM by differences": np.stack([np.asarray(H) for H, _ in fd]),
        "A_FM by differences": np.stack([np.asarray(A) for _, A in fd]),
    }


def _check(name, dtype, a, b, scale=1.0, t=None):
    r = _results(name, dtype)
    t = t or tol(DTYPES[dtype])
    x, y = (r[k] if isinstance(k, str) else k for k in (a, b))
    what = " vs ".join(k if isinstance(k, str) else "expected" for k in (a, b))
    assert_tree_allclose(x, y, rtol=t["rtol"] * scale, atol=t["atol"] * scale, what=what)


# --------------------------------------------------------------------------------------------
# poses, velocities, accelerations, forces


@parametrize_dtypes
@parametrize_joints
def test_X_FM_matches_design(name, dtype):
    """The pose is the one DESIGN.md's joint table gives (NumPy reference, float64)."""
    r = _results(name, dtype)
    joint = make_joint(name)
    expected = np.stack([np_pose(joint, q) for q in r["q"]])
    _check(name, dtype, "X(q)", expected)


def _fd_tol(dtype) -> dict:
    """Against the float64 central differences: their error (~1e-10), or float32 rounding."""
    return tol(DTYPES[dtype]) if dtype == "f32" else dict(rtol=1e-8, atol=1e-8)


@parametrize_dtypes
@parametrize_joints
def test_hinge_is_pose_derivative_by_finite_differences(name, dtype):
    """Column k of `H_FM(q)` is the spatial velocity of the motion `q ⊕ t e_k` (central
    differences of `X_FM`, float64)."""
    expected = _differences(name, dtype)["H_FM by differences"]
    _check(name, dtype, "H_FM", expected, t=_fd_tol(dtype))


@parametrize_dtypes
@parametrize_joints
def test_velocity_is_pose_derivative(name, dtype):
    r = _results(name, dtype)
    W = r["dR R^T"]
    # Ṙ Rᵀ is skew-symmetric: the derivative is tangent to SO(3) ...
    _check(name, dtype, W, -np.swapaxes(W, -1, -2))
    # ... and [vee(Ṙ Rᵀ); ṗ] along q̇ = N(q) v (or q ⊕ t v) is V_FM.
    _check(name, dtype, "[w; dp] along N v", "V_FM")
    _check(name, dtype, "[w; dp] along integrate", "V_FM")


@parametrize_dtypes
@parametrize_joints
def test_acceleration_is_velocity_derivative(name, dtype):
    """`A_FM` is the rate of change of `V_FM` along the motion (central differences), and the
    second derivative of the pose (autodiff of `X_FM`, independent of `H_FM`)."""
    expected = _differences(name, dtype)["A_FM by differences"]
    _check(name, dtype, "A_FM", expected, t=_fd_tol(dtype))
    _check(name, dtype, "A_FM", "[dw; ddp] along integrate", scale=10)


@parametrize_dtypes
@parametrize_joints
def test_project_force_is_virtual_work(name, dtype):
    """`project_force(q, F)[k]` is the power of `F` on the motion `q ⊕ t e_k` (virtual
    work), with that motion's velocity from central differences of `X_FM`."""
    r = _results(name, dtype)
    H = _differences(name, dtype)["H_FM by differences"]
    expected = np.einsum("sxk,sx->sk", H, r["F"])
    _check(name, dtype, "project_force(F)", expected, t=_fd_tol(dtype))


@parametrize_dtypes
@parametrize_joints
def test_kinematic_map_round_trip(name, dtype):
    _check(name, dtype, "v_from_qdot(qdot_from_v)", "v")


# --------------------------------------------------------------------------------------------
# configuration space


@parametrize_dtypes
@parametrize_joints
def test_neutral_is_identity(name, dtype):
    r = _results(name, dtype)
    _check(name, dtype, r["X_FM(neutral)"], np.broadcast_to(np.eye(4), r["X_FM(neutral)"].shape))
    joint = make_joint(name, DTYPES[dtype])
    assert joint.neutral().shape == (joint.nq,)


@parametrize_dtypes
@parametrize_joints
def test_integrate_difference(name, dtype):
    r = _results(name, dtype)
    _check(name, dtype, "difference(q, q + v)", "v")
    _check(name, dtype, "difference(q, q)", np.zeros_like(r["v"]))
    _check(name, dtype, "integrate(q, 0)", "q")
    _check(name, dtype, "residual(q + v)", np.zeros_like(r["residual(q + v)"]))


@parametrize_dtypes
@parametrize_joints
def test_interpolate(name, dtype):
    r = _results(name, dtype)
    _check(name, dtype, "X(interpolate 0.0)", "X(q)")
    _check(name, dtype, "X(interpolate 1.0)", "X(q1)")
    _check(name, dtype, "difference(q, interpolate 0.0)", np.zeros_like(r["v"]))
    _check(name, dtype, "difference(q, interpolate 1.0)", "difference(q, q1)")
    _check(name, dtype, "difference(q, interpolate 0.5)", 0.5 * r["difference(q, q1)"])
    for t in (0.0, 0.5, 1.0):
        res = r[f"residual(interpolate {t})"]
        _check(name, dtype, res, np.zeros_like(res))


@parametrize_dtypes
@parametrize_joints
def test_q_from_X_FM_reproduces_pose(name, dtype):
    r = _results(name, dtype)
    _check(name, dtype, "X(q_from_X_FM(X))", "X(q)", scale=10)
    _check(name, dtype, "residual(q_from_X_FM)", np.zeros_like(r["residual(q_from_X_FM)"]))


@parametrize_dtypes
@parametrize_joints
def test_normalize(name, dtype):
    r = _results(name, dtype)
    _check(name, dtype, "normalize(q)", "q")
    _check(name, dtype, "normalize(normalize(q_off))", "normalize(q_off)")
    res = r["residual(normalize(q_off))"]
    _check(name, dtype, res, np.zeros_like(res))
    _check(name, dtype, "residual(q)", np.zeros_like(r["residual(q)"]))


@parametrize_dtypes
@parametrize_joints
def test_pose_reads_unit_vectors_normalised(name, dtype):
    """Off the unit spheres, `X_FM` is the pose of the normalised configuration (quaternions
    and `[cos, sin]` read normalised, as Drake and MuJoCo do): still a rigid transform."""
    _check(name, dtype, "X(q_off)", "X(normalize(q_off))")


@pytest.mark.parametrize(
    "joint", [jd.Ball(), jd.Free(), jd.RevoluteUnbounded()], ids=lambda j: type(j).__name__
)
def test_zero_unit_vector_reads_as_identity(joint):
    """`q = 0` on a quaternion or `[cos, sin]` (a common first guess for a floating base)
    reads as the identity rotation, as MuJoCo reads it, with finite derivatives; `normalize`
    gives the neutral configuration."""

    def outputs(joint, q):
        def pose(x):
            return joint.X_FM(x).as_matrix()

        return pose(q), jax.jacfwd(pose)(q), joint.normalize(q), joint.neutral()

    X, dX, normalized, neutral = numpy_call(outputs, joint, np.zeros(joint.nq))
    np.testing.assert_array_equal(X, np.eye(4))
    assert np.all(np.isfinite(dX))
    np.testing.assert_array_equal(normalized, neutral)


@parametrize_dtypes
@parametrize_joints
def test_output_dtype(name, dtype):
    r = _results(name, dtype)
    assert_dtype(r, DTYPES[dtype])
    assert_dtype(make_joint(name, DTYPES[dtype]).neutral(), DTYPES[dtype])


# --------------------------------------------------------------------------------------------
# random configurations

NSAMPLES = 128
LIMITS = (-0.3, 0.5)


def _random_configurations(joint, key, n):
    """`n` samples and their distance from the manifold (one program per joint, evaluated by
    NumPy: `numpy_call` below)."""
    q = jax.vmap(joint.random_configuration)(jr.split(key, n))
    return q, jax.vmap(lambda qk: manifold_residual(joint, qk))(q)


def _angular_mask(joint) -> np.ndarray:
    """Which coordinates are angles (sampled in ±π when unbounded; translations in ±1)."""
    if isinstance(joint, jd.Composite):
        return np.concatenate([_angular_mask(j) for j in joint.joints])
    angles = {
        jd.Revolute: [True],
        jd.Prismatic: [False],
        jd.Screw: [True],
        jd.Cylindrical: [True, False],
        jd.Universal: [True, True],
        jd.Gimbal: [True, True, True],
        jd.SpaceXYZ: [True, True, True],
        jd.Planar: [False, False, True],
        jd.Translational: [False, False, False],
        jd.Free: [False] * 7,  # quaternion entries are checked by their norm
    }
    return np.array(angles.get(type(joint), [False] * joint.nq), dtype=bool)


@parametrize_joints
def test_random_configuration_unbounded(name):
    joint = make_joint(name)
    q, res = map(np.asarray, numpy_call(_random_configurations, joint, jr.PRNGKey(1), NSAMPLES))
    assert q.shape == (NSAMPLES, joint.nq)
    assert_tree_allclose(res, np.zeros_like(res), atol=1e-12, what="manifold residual")
    # Unbounded coordinates: angles within ±π and translations within ±1.
    free = np.ones(joint.nq, bool)
    if isinstance(joint, jd.Ball | jd.RevoluteUnbounded):
        free[:] = False
    if isinstance(joint, jd.Free):
        free[:4] = False
    if isinstance(joint, jd.Composite):
        free = np.concatenate(
            [np.full(j.nq, not isinstance(j, jd.Ball | jd.RevoluteUnbounded)) for j in joint.joints]
        )
    bound = np.where(_angular_mask(joint), np.pi, 1.0)[free]
    assert np.all(np.abs(q[:, free]) <= bound)
    # ... and spread over that range, not stuck at one value.
    assert np.all(np.ptp(q[:, free], axis=0) > bound)
    if isinstance(joint, jd.Ball | jd.Free):
        # Uniform rotations: the mean rotation matrix of many samples is near zero.
        R = np.stack([np_quat_to_rotmat(qk[:4]) for qk in q])
        assert np.max(np.abs(np.mean(R, axis=0))) < 0.25


@parametrize_joints
def test_random_configuration_respects_limits(name):
    joint = make_joint(name, limits=LIMITS)
    lower = np.asarray(joint.params.position_lower)
    limited = np.isfinite(lower)
    if not isinstance(joint, jd.Weld | jd.Ball | jd.RevoluteUnbounded):
        assert limited.any()
    q, res = map(np.asarray, numpy_call(_random_configurations, joint, jr.PRNGKey(2), NSAMPLES))
    lo, hi = LIMITS
    assert np.all(q[:, limited] >= lo) and np.all(q[:, limited] <= hi)
    if limited.any():
        assert np.all(q[:, limited].min(0) < lo + 0.1) and np.all(q[:, limited].max(0) > hi - 0.1)
    assert_tree_allclose(res, np.zeros_like(res), atol=1e-12, what="manifold residual")


@pytest.mark.parametrize("name", ["cylindrical", "space_xyz", "composite_ru"])
def test_random_configuration_explicit_bounds(name, getkey):
    joint = make_joint(name)
    lower = np.linspace(-1.0, 0.2, joint.nq)
    upper = lower + 0.25

    def sample(joint, key):
        return jax.vmap(lambda k: joint.random_configuration(k, lower, upper))(jr.split(key, 64))

    q = numpy_call(sample, joint, getkey())
    assert np.all(q >= lower) and np.all(q <= upper)


# --------------------------------------------------------------------------------------------
# passive forces


def test_passive_damping_and_friction():
    joint = jd.Cylindrical((1.0, 2.0, 2.0), damping=[0.3, 0.9], friction=[0.5, 0.2])
    passive_force = numpy_jit(joint.passive_force)
    q = np.array([0.1, -0.2])
    for v in ([1.5, -2.0], [-0.25, 0.75]):
        v = np.array(v)
        expected = -np.array([0.3, 0.9]) * v - np.array([0.5, 0.2]) * np.sign(v)
        assert_tree_allclose(passive_force(q, v), expected, atol=1e-12)
    # No friction force at rest.
    assert_tree_allclose(passive_force(q, np.zeros(2)), np.zeros(2), atol=0)


@pytest.mark.parametrize("cls", [jd.Revolute, jd.Prismatic, jd.Screw])
def test_passive_limit_stop_one_dof(cls):
    k, b = 100.0, 2.0
    joint = cls(position_lower=-0.5, position_upper=0.5, stop_stiffness=k, stop_damping=b)
    passive_force = numpy_jit(joint.passive_force)

    def tau(q, v):
        return float(passive_force(np.array([q]), np.array([v]))[0])

    # Inside the limits: no force whatever the velocity.
    for q, v in [(0.0, 0.0), (0.49, 3.0), (-0.49, -3.0)]:
        assert tau(q, v) == 0.0
    # Above the upper limit: spring pushes back, damper resists moving further out.
    assert tau(0.6, 0.0) == pytest.approx(-k * 0.1)
    assert tau(0.6, 1.0) == pytest.approx(-k * 0.1 - b * 1.0)
    assert tau(0.6, -1.0) == pytest.approx(-k * 0.1 + b * 1.0)
    # Moving back in fast: the spring-damper would pull outwards; a stop never pulls.
    assert tau(0.6, -10.0) == 0.0
    # Below the lower limit: mirror image.
    assert tau(-0.6, 0.0) == pytest.approx(k * 0.1)
    assert tau(-0.6, -1.0) == pytest.approx(k * 0.1 + b * 1.0)
    assert tau(-0.6, 10.0) == 0.0


def test_passive_limit_stop_cylindrical():
    k, b, d = np.array([50.0, 200.0]), np.array([1.0, 3.0]), np.array([0.1, 0.2])
    joint = jd.Cylindrical(
        (0.0, 1.0, 0.0),
        position_lower=[-1.0, 0.0],
        position_upper=[1.0, 0.3],
        stop_stiffness=k,
        stop_damping=b,
        damping=d,
    )
    passive_force = numpy_jit(joint.passive_force)
    q = np.array([1.2, -0.05])  # angle above its upper limit, displacement below its lower
    v = np.array([0.5, 0.4])
    expected = np.array([-50.0 * 0.2 - 1.0 * 0.5, 200.0 * 0.05 - 3.0 * 0.4]) - d * v
    assert_tree_allclose(passive_force(q, v), expected, atol=1e-12)
    q_in = np.array([0.5, 0.1])
    assert_tree_allclose(passive_force(q_in, v), -d * v, atol=1e-12)


def test_passive_limit_stop_space_xyz_power():
    """Stops act on angles; mapped by N(q)ᵀ they do the same power with v as with q̇."""
    k, b = 30.0, 0.5
    joint = jd.SpaceXYZ(position_lower=-0.5, position_upper=0.5, stop_stiffness=k, stop_damping=b)
    q = np.array([0.7, 0.2, -0.9])  # θ₁ above, θ₃ below, θ₂ inside
    v = np.array([0.3, -0.2, 0.4])

    def outputs(joint, q, v):
        N = jax.jacfwd(joint.qdot_from_v, argnums=1)(q, v)
        return joint.qdot_from_v(q, v), N, joint.passive_force(q, v)

    qdot, N, tau = numpy_call(outputs, joint, q, v)
    f = np.array(
        [min(0.0, -k * 0.2 - b * float(qdot[0])), 0.0, max(0.0, -k * (-0.4) - b * float(qdot[2]))]
    )
    assert_tree_allclose(tau, N.T @ f, atol=1e-12)
    assert float(tau @ v) == pytest.approx(float(f @ qdot))


# --------------------------------------------------------------------------------------------
# SpaceXYZ specifics


def test_space_xyz_singularity_raises():
    joint = jd.SpaceXYZ(check_singularity=True)
    qdot = jax.jit(lambda j, q, v: j.qdot_from_v(q, v))
    v = jnp.array([0.1, 0.2, 0.3])
    qdot(joint, jnp.array([0.3, 1.0, -0.2]), v).block_until_ready()  # regular: no error
    with pytest.raises(Exception, match="cos"):
        qdot(joint, jnp.array([0.3, np.pi / 2, -0.2]), v).block_until_ready()


def test_space_xyz_unchecked_near_singularity():
    joint = jd.SpaceXYZ(check_singularity=False)
    q = jnp.array([0.3, np.arccos(1e-4), -0.2])  # |cos θ₂| = 1e-4, inside the checked band
    v = jnp.array([0.1, 0.2, 0.3])
    qdot = jax.jit(lambda j, q, v: j.qdot_from_v(q, v))(joint, q, v)
    assert np.all(np.isfinite(qdot))
    assert_tree_allclose(
        numpy_call(jd.SpaceXYZ.v_from_qdot, joint, q, qdot), v, rtol=1e-8, atol=1e-8
    )
    checked = jd.SpaceXYZ(check_singularity=True)
    with pytest.raises(Exception, match="cos"):
        jax.jit(lambda j, q, v: j.qdot_from_v(q, v))(checked, q, v).block_until_ready()


def test_space_xyz_q_from_non_orthogonal_matrix():
    rng = np.random.default_rng(3)
    angles = np.array([0.4, -0.7, 2.1])
    R = np_rot([0, 0, 1], angles[2]) @ np_rot([0, 1, 0], angles[1]) @ np_rot([1, 0, 0], angles[0])
    A = R + 1e-3 * rng.normal(size=(3, 3))
    U, _, Vt = np.linalg.svd(A)
    nearest = U @ Vt  # orthogonal polar factor: the nearest rotation
    joint = jd.SpaceXYZ()

    def fit(joint, A):
        q = joint.q_from_X_FM(jd.Transform(A, jnp.zeros(3, A.dtype)))
        return q, joint.X_FM(q).R

    q, R = numpy_call(fit, joint, A)
    assert_tree_allclose(R, nearest, atol=1e-12)
    assert np.max(np.abs(np.asarray(q) - angles)) < 1e-2  # close to, not equal to, the angles


def test_composite_fit_derivatives_match_finite_differences():
    """`Composite.q_from_X_FM` is differentiated by the implicit function theorem at the fit,
    not through its iterations: its gradient and Hessian in the target pose and in the joints'
    parameters (axes, moved off unit length too) match central differences of the fit itself.
    A revolute + universal joint reaches every rotation, so the fit is exact and locally
    unique whichever way the axes move."""
    joint = make_joint("composite_ru")
    rng = np.random.default_rng(5)
    params, static = eqx.partition(joint, eqx.is_inexact_array)
    q0 = numpy_call(type(joint).random_configuration, joint, jr.PRNGKey(3))
    dv = rng.normal(size=joint.nv)
    dp = jax.tree.map(lambda x: rng.normal(size=np.shape(x)), params)
    w = rng.normal(size=joint.nq)

    def g(st):  # s: the target moves along dv; t: every parameter along dp
        s, t = st[0], st[1]
        X = joint.X_FM(joint.integrate(jnp.asarray(q0), s * dv))
        moved = eqx.combine(jax.tree.map(lambda x, d: x + t * d, params, dp), static)
        return jnp.dot(w, moved.q_from_X_FM(X))

    g_jit, grad, hess = numpy_jit(g), numpy_jit(jax.grad(g)), numpy_jit(jax.hessian(g))
    e = np.eye(2)
    x = np.array([0.05, 0.02])
    h = 1e-6
    fd = np.array([(g_jit(x + h * ei) - g_jit(x - h * ei)) / (2 * h) for ei in e])
    assert np.abs(fd).min() > 1e-3  # both directions move the fit: the check can fail
    assert_tree_allclose(grad(x), fd, rtol=1e-6, atol=1e-7, what="gradient vs FD")
    h = 1e-4
    fd2 = np.stack([(grad(x + h * ei) - grad(x - h * ei)) / (2 * h) for ei in e])
    assert_tree_allclose(hess(x), fd2, rtol=1e-5, atol=1e-6, what="Hessian vs FD")


def test_space_xyz_integrate_keeps_branch():
    """Angles with |θ₂| > π/2 are as valid as their twin (θ₁ ± π, π − θ₂, θ₃ ± π)."""
    joint = jd.SpaceXYZ()
    q = np.array([0.3, 2.5, -0.4])
    v = np.array([1e-3, -2e-3, 1e-3])

    def outputs(joint, q, v):
        return joint.integrate(q, jnp.zeros(3)), joint.integrate(q, v), joint.interpolate(q, q, 0.5)

    at_zero, moved, halfway = numpy_call(outputs, joint, q, v)
    assert_tree_allclose(at_zero, q, atol=1e-12)
    assert np.max(np.abs(moved - q)) < 1e-2
    assert_tree_allclose(halfway, q, atol=1e-12)


# --------------------------------------------------------------------------------------------
# astype


@parametrize_joints
def test_astype_float32_leaves(name):
    joint = make_joint(name, jnp.float32)
    leaves = jax.tree.leaves(eqx.filter(joint, eqx.is_inexact_array))
    assert leaves and all(x.dtype == jnp.float32 for x in leaves)


def test_a_joint_class_with_its_own_hdot_is_called():
    """`_local_terms` takes `H` and `Ḣ` from one `jvp` of `H_FM` unless the joint class
    defines `Hdot_FM` itself; then that method is used (here one returning twice the true
    `Ḣ`, so the velocity-product term shows which was taken)."""
    from jointdyn._kinematics import _local_terms

    class DoubledHdot(jd.Gimbal):
        def Hdot_FM(self, q, v):
            return 2 * jd.Gimbal.Hdot_FM(self, q, v)

    base = jd.Gimbal()
    doubled = DoubledHdot()
    q, v = np.array([0.3, -0.7, 1.1]), np.array([0.5, 1.5, -2.0])
    X0, H0, V0, c0 = numpy_call(_local_terms, base, q, v)
    X1, H1, V1, c1 = numpy_call(_local_terms, doubled, q, v)
    Hdot_v = numpy_call(jd.Gimbal.Hdot_FM, base, q, v) @ v
    assert np.abs(Hdot_v).max() > 0.1  # a q-dependent hinge: the check can fail
    np.testing.assert_allclose(H1, H0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(V1, V0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(c1 - c0, Hdot_v, rtol=1e-12, atol=1e-12)
