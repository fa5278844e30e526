#!/usr/bin/env bash
# The main job: distributed MNIST (1 ps + 2 workers) through the local launcher, on real MNIST
# digits when present. Prints the held-out accuracy and how the ps exited.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
venv=${TF_SLURM_VENV:-$root/.venv}
data=${DATA_DIR:-$root/../shared/data/mnist}
model=${MODEL_DIR:-$root/runs/mnist-demo-$(date +%Y%m%d-%H%M%S)}
export GRPC_POLL_STRATEGY=poll TF_CPP_MIN_LOG_LEVEL=2
"$venv/bin/tf-slurm" local -n 3 --ps 1 -- \
  "$venv/bin/python" examples/mnist_distributed/LaunchTFServerWithHooks.py \
  --data_dir "$data" --model_dir "$model" --ps 1 --workers 2 "$@"
