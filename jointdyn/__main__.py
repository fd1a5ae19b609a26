"""Command line: `python -m jointdyn demo` (batched forward dynamics) and `python -m jointdyn list`.

    python -m jointdyn list
    python -m jointdyn demo [--model NAME | --mjcf PATH] [--batch N] [--dtype float32|float64]
                            [--repeats R]

The demo loads a bundled model (or, with `--mjcf`, any MJCF file through MuJoCo), draws a batch of random states `(q, v, tau)`, times
`jax.jit(jax.vmap(aba))` and `jd.batched(aba)` on it, checks that inverse dynamics undoes
forward dynamics, `rnea(q, v, aba(q, v, tau)) = tau`, and prints the centre of mass and the
total energy `T + U` of the first sample. On the quadruped it then simulates a batch of drops
onto the ground (`jd.rollout` with `jd.GroundContact` on the feet, a PD stance controller),
from perturbed initial states, prints the steps per second and whether they come to rest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jointdyn",
        description="jointdyn: rigid-body joints and dynamics on JAX.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("list", help="print the names of the bundled models")
    demo = sub.add_parser(
        "demo",
        help="time batched forward dynamics (ABA) on a bundled model",
        description="Time jax.jit(jax.vmap(aba)) and jointdyn.batched(aba) on a batch of random "
        "states of a bundled model and check rnea(aba(tau)) == tau.",
    )
    demo.add_argument(
        "--model", default="quadruped", help="bundled model name (default: %(default)s)"
    )
    demo.add_argument(
        "--batch", type=int, default=1024, help="number of states (default: %(default)s)"
    )
    demo.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="floating-point precision; float64 enables jax_enable_x64 (default: %(default)s)",
    )
    demo.add_argument(
        "--repeats", type=int, default=10, help="timed runs, median reported (default: %(default)s)"
    )
    demo.add_argument(
        "--mjcf",
        metavar="PATH",
        help="run the demo on this MJCF file instead (needs MuJoCo: pip install mujoco)",
    )
    demo.add_argument("--seed", type=int, default=0, help="PRNG seed (default: %(default)s)")
    return parser


def _list() -> int:
    import jointdyn as jd

    for name in jd.list_models():
        print(name)
    return 0


def _demo(args: argparse.Namespace) -> int:
    import jax

    if args.dtype == "float64":
        # The CLI's choice, made before any array exists; importing jointdyn never does this.
        jax.config.update("jax_enable_x64", True)

    import jax.numpy as jnp

    import jointdyn as jd

    if args.batch < 1:
        print("error: --batch must be at least 1", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("error: --repeats must be at least 1", file=sys.stderr)
        return 2
    if args.mjcf is not None:
        try:
            model = jd.load_mjcf(args.mjcf)
        except (ImportError, ValueError, OSError) as e:
            print(f"error: cannot load {args.mjcf!r}: {e}", file=sys.stderr)
            return 2
        args.model = args.mjcf
    else:
        try:
            model = jd.load_model(args.model)
        except ValueError:
            print(
                f"error: unknown model {args.model!r}; bundled models are: "
                + ", ".join(jd.list_models()),
                file=sys.stderr,
            )
            return 2

    dtype = jnp.dtype(args.dtype)
    model = jd.astype(model, dtype)
    device = jax.devices()[0]
    print(f"model    {args.model}: nq={model.nq} nv={model.nv} nbodies={model.nbodies}")
    print(f"bodies   {', '.join(model.body_names)}")
    print(
        f"backend  {jax.default_backend()} ({device.device_kind}, {jax.device_count()} device(s))"
    )
    print(f"dtype    {dtype.name}, batch {args.batch}")

    # A batch of random states: configurations within the joint limits, v and tau standard normal.
    key_q, key_v, key_tau = jax.random.split(jax.random.key(args.seed), 3)
    q = jax.vmap(model.random_configuration)(jax.random.split(key_q, args.batch)).astype(dtype)
    v = jax.random.normal(key_v, (args.batch, model.nv), dtype)
    tau = jax.random.normal(key_tau, (args.batch, model.nv), dtype)

    # jd.jit: jax.jit with jd.compiler_options() (faster XLA:CPU compile and run)
    aba_batch = jd.jit(jax.vmap(jd.aba, in_axes=(None, 0, 0, 0)))
    rnea_batch = jd.jit(jax.vmap(jd.rnea, in_axes=(None, 0, 0, 0)))

    t0 = time.perf_counter()
    vdot = aba_batch(model, q, v, tau).block_until_ready()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        aba_batch(model, q, v, tau).block_until_ready()
        times.append(time.perf_counter() - t0)
    run_s = statistics.median(times)
    print(f"compile  {compile_s:.2f} s (first call of jit(vmap(aba)), includes tracing)")
    print(
        f"aba      {run_s * 1e3:.3f} ms per batch, {run_s / args.batch * 1e6:.3f} us per sample, "
        f"{args.batch / run_s:,.0f} samples/s (median of {args.repeats})"
    )

    # jd.batched: on CPU, cache-sized chunks evaluated batch-last (SIMD across samples), the
    # batch split over every local device; inputs placed once where it computes
    aba_chunks = jd.jit(jd.batched(jd.aba, in_axes=(None, 0, 0, 0)))
    placed = jd.device_put_batched((model, q, v, tau), (None, 0, 0, 0))
    vdot_chunks = aba_chunks(*placed).block_until_ready()
    chunk_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        aba_chunks(*placed).block_until_ready()
        chunk_times.append(time.perf_counter() - t0)
    chunk_s = statistics.median(chunk_times)
    agree = float(jnp.max(jnp.abs(vdot_chunks - vdot)) / jnp.maximum(1.0, jnp.max(jnp.abs(vdot))))
    print(
        f"batched  {chunk_s / args.batch * 1e6:.3f} us per sample with jd.batched(aba), "
        f"{run_s / chunk_s:.1f}x jit(vmap(aba)); same vdot to {agree:.1e}"
    )

    tau_back = rnea_batch(model, q, v, vdot)
    residual = float(jnp.max(jnp.abs(tau_back - tau)))
    finite = bool(jnp.all(jnp.isfinite(vdot)))
    print(f"check    max |rnea(q, v, aba(q, v, tau)) - tau| = {residual:.3e} (finite: {finite})")

    @jd.jit  # one compilation for both quantities
    def com_and_energy(model, q, v):
        energy = jd.kinetic_energy(model, q, v) + jd.potential_energy(model, q)
        return jd.center_of_mass(model, q), energy

    com, energy = com_and_energy(model, q[0], v[0])
    com_str = ", ".join(f"{x:+.4f}" for x in com.tolist())
    print(f"sample 0 centre of mass [{com_str}] m, total energy T + U = {float(energy):.4f} J")
    if args.model == "quadruped":
        finite = _simulate(model, args, dtype) and finite
    return 0 if finite else 1


#: Drop simulation: soft ground contact on the four feet, a PD controller holding a stance.
_DT, _SECONDS, _KP, _KD = 5e-4, 4.0, 100.0, 3.0
_CONTACT = dict(stiffness=2e5, damping=1e6, friction=1.0, friction_velocity=0.05)


def _simulate(model, args: argparse.Namespace, dtype) -> bool:
    """A batch of quadrupeds dropped from perturbed states onto the ground for 4 s (the trunk
    rocks on its feet for a while: after 2 s some still moved at 5 cm/s)."""
    import jax
    import jax.numpy as jnp

    import jointdyn as jd

    contact = jd.astype(jd.load_contact(args.model, model, **_CONTACT), dtype)
    stance = model.neutral().at[6].set(0.40)  # trunk height; knees bent
    for leg in ("FL", "FR", "HL", "HR"):
        stance = stance.at[model.q_slice(f"{leg}_thigh_joint")].set(0.6)
        stance = stance.at[model.q_slice(f"{leg}_calf_joint")].set(-1.2)
    batch, steps = min(args.batch, 256), int(round(_SECONDS / _DT))
    key_q, key_v = jax.random.split(jax.random.key(args.seed + 1))
    dq = jax.random.uniform(key_q, (batch, model.nv), dtype, -0.1, 0.1).at[:, 3:5].set(0.0)
    q0 = jax.vmap(model.integrate, (None, 0))(stance.astype(dtype), dq)
    v0 = 0.1 * jax.random.normal(key_v, (batch, model.nv), dtype)

    def stand(k, q, v):  # PD on the 12 leg joints, the floating base unactuated
        error = model.difference(q, stance.astype(dtype))
        return jnp.zeros(model.nv, dtype).at[6:].set(_KP * error[6:] - _KD * v[6:])

    @jd.jit
    def drop(q0, v0):
        run = lambda q, v: jd.rollout(model, q, v, stand, _DT, steps=steps, contact=contact)  # noqa: E731
        traj = jax.vmap(run)(q0, v0)
        trunk_speed = jnp.linalg.norm(traj.v[:, -1, 3:6], axis=-1)
        last = traj.contact_forces[:, -int(0.25 / _DT) :, :, 2].sum(-1).mean(-1)  # last 0.25 s
        carried = last / (model.total_mass() * 9.81)
        return trunk_speed, carried, jnp.all(jnp.isfinite(traj.q))

    t0 = time.perf_counter()
    drop_compiled = drop.lower(q0, v0).compile()  # tracing and compile, ahead of the run
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    speed, carried, ok = jax.block_until_ready(drop_compiled(q0, v0))
    run_s = time.perf_counter() - t0
    print(
        f"simulate {batch} quadrupeds dropped on the ground, {steps} steps of {_DT * 1e3:g} ms: "
        f"{batch * steps / run_s:,.0f} steps/s ({run_s:.2f} s; compile {compile_s:.1f} s)"
    )
    rest = bool(ok) and float(speed.max()) < 0.05
    print(
        f"rest     after {_SECONDS:g} s: trunk speed <= {float(speed.max()):.1e} m/s, the feet "
        f"carry {float(carried.min()):.3f}-{float(carried.max()):.3f} of the weight over the "
        f"last 0.25 s (finite: {bool(ok)}, at rest below 5 cm/s: {rest})"
    )
    return bool(ok)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    return _demo(args)


if __name__ == "__main__":
    sys.exit(main())
