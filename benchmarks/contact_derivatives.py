"""Step derivatives with ground contact: the analytic contact Jacobians against forward mode.

The bundled quadruped with its bundled contact (`jd.load_contact("quadruped", m)`), `--batch`
states near a standing pose with the feet pressed into the ground (random joint offsets and
velocities, float64), `jd.step_derivatives(..., contact=...)` for each `--integrators`, as
`jd.jit(jd.batched(...))` on one CPU device:

- jointdyn: the contact forces' joint-force Jacobians analytic (`_contact_derivatives`);
- anchor: the same step derivatives with those Jacobians by forward-mode autodiff through the
  kinematics (`jax.jacfwd` of `external_joint_forces ∘ contact_forces`), what the library did
  before, swapped in for this run only.

Both give the same `fx`, `fu` (the largest difference is printed). Reported: trace+lower and
XLA compile seconds, µs per sample (median of repeats), and the paired ratio
(`_timing.paired_ratio`) analytic / forward mode.

    python benchmarks/contact_derivatives.py
    python benchmarks/contact_derivatives.py --integrators semi_implicit_euler,rk4,implicit
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark script: float64 throughout

import jax.numpy as jnp  # noqa: E402

import jointdyn as jd  # noqa: E402
from jointdyn import _simulation  # noqa: E402
from jointdyn._dynamics import external_joint_forces  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import paired_ratio, time_call  # noqa: E402


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--integrators", default="semi_implicit_euler")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    return ap.parse_args()


def forward_mode(model, contact, q, v):
    """`(Q_c, ∂Q_c/∂q, ∂Q_c/∂v)` by forward mode through the kinematics (the anchor)."""

    def Q(q, v):
        return external_joint_forces(model, q, jd.contact_forces(model, contact, q, v))

    zero = jnp.zeros(model.nv, v.dtype)
    dq = jax.jacfwd(lambda d: Q(model.integrate(q, d), v))(zero)
    return Q(q, v), dq, jax.jacfwd(lambda x: Q(q, x))(v)


def states(model, contact, batch: int):
    """Standing poses, feet 5 mm in the ground, random joint offsets and velocities."""
    q = model.neutral()
    for leg in ("FL", "FR", "HL", "HR"):
        q = q.at[model.q_slice(f"{leg}_thigh_joint")].set(0.6)
        q = q.at[model.q_slice(f"{leg}_calf_joint")].set(-1.2)
    p = jd.contact_point_forces(model, contact, q, jnp.zeros(model.nv))[1]
    q = q.at[6].add(-float(p[:, 2].min()) - 0.005)
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    qs = jnp.tile(q, (batch, 1)).at[:, 7:].add(0.05 * jax.random.normal(k[0], (batch, 12)))
    vs = 0.1 * jax.random.normal(k[1], (batch, model.nv))
    taus = jax.random.normal(k[2], (batch, model.nv))
    return qs, vs, taus


def compiled(model, contact, integrator, dt, args):
    fn = jd.jit(
        jd.batched(
            lambda q, v, tau: jd.step_derivatives(
                model, q, v, tau, dt, integrator=integrator, contact=contact
            ),
            shard=False,
        )
    )
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    exe = lowered.compile()
    return exe, t1 - t0, time.perf_counter() - t1


def main() -> None:
    a = _parse()
    model = jd.load_model("quadruped")
    contact = jd.load_contact("quadruped", model)
    args = states(model, contact, a.batch)
    B = a.batch
    print(
        f"step_derivatives with contact, quadruped (nv {model.nv}, {contact.npoints} spheres), "
        f"batch {B}, dt {a.dt}, float64, 1 CPU device, {platform.machine()}, "
        f"jax {jax.__version__}"
    )
    analytic_fn = _simulation.contact_joint_force_derivatives
    for integrator in a.integrators.split(","):
        exe, lower_s, xla_s = compiled(model, contact, integrator, a.dt, args)
        _simulation.contact_joint_force_derivatives = forward_mode
        try:
            ref, ref_lower, ref_xla = compiled(model, contact, integrator, a.dt, args)
        finally:
            _simulation.contact_joint_force_derivatives = analytic_fn
        out, out_ref = exe(*args), ref(*args)
        scale = float(jnp.max(jnp.abs(out_ref.fx)))
        diff = max(
            float(jnp.max(jnp.abs(out.fx - out_ref.fx))),
            float(jnp.max(jnp.abs(out.fu - out_ref.fu))),
        )

        def run_analytic(exe=exe):
            jax.block_until_ready(exe(*args))

        def run_forward(ref=ref):
            jax.block_until_ready(ref(*args))

        t_a = time_call(run_analytic, a.repeats, a.budget)["median"]
        t_f = time_call(run_forward, a.repeats, a.budget)["median"]
        ratio = paired_ratio(run_analytic, B, run_forward, B, a.budget)
        print(
            f"  {integrator}: analytic {t_a * 1e6 / B:8.1f} µs/sample (compile {lower_s:.1f} + "
            f"{xla_s:.1f} s); forward mode {t_f * 1e6 / B:8.1f} µs/sample (compile "
            f"{ref_lower:.1f} + {ref_xla:.1f} s); paired ratio {ratio:.2f}; "
            f"max |Δfx|, |Δfu| {diff:.1e} (scale {scale:.1e})"
        )


if __name__ == "__main__":
    main()
