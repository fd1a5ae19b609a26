#!/usr/bin/env bash
# GPU figures in one run, on a machine with a CUDA build of JAX and no Pinocchio/Crocoddyl:
#
#   EXAMPLE_ROBOT_DATA_ROBOTS=/path/to/example-robot-data/robots bash benchmarks/gpu.sh [OUT]
#
# (the folder holds panda_description/urdf/panda.urdf and g1_description/urdf/*.urdf; meshes
# are not read). jointdyn is imported from this checkout. Each step has its own time limit, in
# the order of what matters most; results land in OUT (default benchmarks/results).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-benchmarks/results}}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
: "${EXAMPLE_ROBOT_DATA_ROBOTS:?set it to the robots folder of example-robot-data}"
nvidia-smi -L 2>/dev/null
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
step() {
    local limit=$1 t0=$SECONDS
    shift
    echo "== $*"
    timeout "$limit" "$@"
    echo "   [exit $?, $((SECONDS - t0)) s]"
}
step 60 python3 -m jointdyn demo
# gradients against forward passes (the gradients issue's table), float64, batch 4096
step 180 python3 benchmarks/gradients.py --robots panda,g1 --rounds 5 --anchors "" --out-dir "$OUT"
# a batch of 1024 FDDP problems in one vmap (the trajectory-optimisation issue), float64
step 180 python3 benchmarks/optimal_control.py --no-crocoddyl --chunk 1024 --out-dir "$OUT"
# throughput: float32 aba (and its gradient) at batch 65536
step 120 python3 benchmarks/gradients.py --robots panda,g1 --algorithms aba --no-jacfwd \
    --dtype float32 --batch 65536 --rounds 3 --anchors "" --out-dir "$OUT"
