"""Every matrix product jointdyn traces runs at float32's full precision (`_precision.py`).

At JAX's default precision a float32 product on a recent NVIDIA GPU is computed in TF32
(about 1e-3 relative error); the dynamics chain dozens of them (measured on an H100: float32
`aba` of the bundled quadruped, `max |rnea(aba(tau)) − tau|` 0.80 at the default against
3.1e-4 at full precision). CPUs have no such path, so the test reads the programs instead of
their numbers: each `dot_general` traced by a public function, its gradients, its forward-mode
derivatives and its `vmap`, carries `Precision.HIGHEST` (with the global default untouched).
"""

import jax
import jax.numpy as jnp
import numpy as np
from trees import random_tree

import jointdyn as jd
from jointdyn import optimal_control as oc

jax.config.update("jax_enable_x64", True)


def _dots(jaxpr) -> list:
    """The `dot_general` equations of a (closed) jaxpr and of every jaxpr inside it."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn)
        for p in eqn.params.values():
            for sub in p if isinstance(p, tuple | list) else (p,):
                if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                    found += _dots(sub)
    return found


def _state(model, seed=0):
    rng = np.random.default_rng(seed)
    q = model.random_configuration(jax.random.PRNGKey(seed))
    v, u = (jnp.asarray(rng.normal(size=model.nv), jnp.float32) for _ in range(2))
    return q, v, u


def _cases():
    """name: (function, arguments). A small random tree (a `Free` root and three other joint
    classes: the products are the algorithms', not the joints'), float32; the bundled
    quadruped where contact is involved."""
    model = jd.astype(random_tree(0, nbodies=4), jnp.float32)
    q, v, u = _state(model)
    quad = jd.astype(jd.load_model("quadruped"), jnp.float32)
    contact = jd.load_contact("quadruped", quad)
    qc, vc, uc = _state(quad)
    frame = model.frame_names[-1]
    locked = jnp.zeros(model.nbodies, bool).at[1].set(True)
    loss = lambda f: lambda *a: jnp.sum(f(*a) ** 2)  # noqa: E731
    Y = jnp.asarray(np.random.default_rng(1).normal(size=(12, 10)), jnp.float32)
    pi = jnp.asarray(jd.inertial_parameters(model)[1], jnp.float32)
    jac = lambda f: jax.jacfwd(f, argnums=(1, 2, 3))  # noqa: E731
    return {
        "aba": (jd.aba, (model, q, v, u)),
        "rnea": (jd.rnea, (model, q, v, u)),
        "crba": (jd.crba, (model, q)),
        "forward_dynamics": (jd.forward_dynamics, (model, q, v, u)),
        "bias_forces": (jd.bias_forces, (model, q, v)),
        "gravity_forces": (jd.gravity_forces, (model, q)),
        "joint_forces": (jd.joint_forces, (model, q, v)),
        "locking_forces": (jd.locking_forces, (model, q, v, u, locked)),
        "forward_kinematics": (jd.forward_kinematics, (model, q, v, u)),
        "jacobian": (lambda m, q: jd.jacobian(m, q, frame), (model, q)),
        "body_jacobians": (jd.body_jacobians, (model, q)),
        "center_of_mass": (jd.center_of_mass, (model, q)),
        "centroidal_momentum": (jd.centroidal_momentum, (model, q, v)),
        "kinetic_energy": (jd.kinetic_energy, (model, q, v)),
        "potential_energy": (jd.potential_energy, (model, q)),
        "aba_derivatives": (jd.aba_derivatives, (model, q, v, u)),
        "rnea_derivatives": (jd.rnea_derivatives, (model, q, v, u)),
        "regressor": (jd.regressor, (model, q, v, u)),
        "joint_regressor": (jd.joint_regressor, (model, q, v, u)),
        "contact_forces": (lambda m, q, v: jd.contact_forces(m, contact, q, v), (quad, qc, vc)),
        "step": (lambda m, q, v, u: jd.step(m, q, v, u, 1e-3, contact=contact), (quad, qc, vc, uc)),
        "step_rk4": (
            lambda m, q, v, u: jd.step(m, q, v, u, 1e-3, integrator="rk4"),
            (model, q, v, u),
        ),
        "rollout": (
            lambda m, q, v, u: jd.rollout(m, q, v, jnp.stack([u, u]), 1e-3).q,
            (model, q, v, u),
        ),
        "step_derivatives": (
            lambda m, q, v, u: jd.step_derivatives(m, q, v, u, 1e-3),
            (model, q, v, u),
        ),
        "grad aba": (jax.grad(loss(jd.aba), argnums=(0, 1, 2, 3)), (model, q, v, u)),
        "grad rnea": (jax.grad(loss(jd.rnea), argnums=(0, 1, 2, 3)), (model, q, v, u)),
        "grad crba": (jax.grad(loss(jd.crba), argnums=(0, 1)), (model, q)),
        "jacfwd aba": (jac(jd.aba), (model, q, v, u)),
        "jacfwd forward_dynamics": (jac(jd.forward_dynamics), (model, q, v, u)),
        "vector_field": (
            lambda m, q, v, u: jd.vector_field(m, contact)(0.0, (q, v), u),
            (quad, qc, vc, uc),
        ),
        "solve": (
            lambda m, q, v: (
                oc.solve(
                    oc.ShootingProblem(m, q, v, 3, 0.01, lambda q, v, u: u, lambda q, v: v),
                    max_iterations=2,
                ).cost
            ),
            (model, q, v),
        ),
        "least_squares": (jd.least_squares, (Y, Y @ pi)),
        "batched aba": (jd.batched(jd.aba, (None, 0, 0, 0)), (model, q[None], v[None], u[None])),
        "vmap aba": (jax.vmap(jd.aba, (None, 0, 0, 0)), (model, q[None], v[None], u[None])),
        "grad of jit aba": (jax.grad(loss(jax.jit(jd.aba)), argnums=(1, 2, 3)), (model, q, v, u)),
    }


def test_every_product_is_full_precision():
    assert jax.config.jax_default_matmul_precision is None  # the library leaves it alone
    bad, counted = {}, 0
    for name, (fn, args) in _cases().items():
        dots = _dots(jax.make_jaxpr(fn)(*args))
        counted += len(dots)
        wrong = [
            e.params["precision"]
            for e in dots
            if e.params["precision"] != (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
        ]
        if wrong:
            bad[name] = f"{len(wrong)} of {len(dots)}"
    assert counted > 0  # the walk sees the products
    assert not bad, f"products below full precision: {bad}"
    assert jax.config.jax_default_matmul_precision is None
