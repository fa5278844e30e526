#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine: system packages (Slurm, munge, Open MPI)
# and a virtual environment .venv with tf_for_slurm, TensorFlow (CPU), mpi4py and the test tools.
# Re-running is cheap: each step is skipped when already done.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TF_SLURM_VENV:-$root/.venv}
python=${PYTHON:-python3}

need_apt=()
command -v slurmctld >/dev/null 2>&1 || need_apt+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need_apt+=(slurmd)
command -v srun >/dev/null 2>&1 || need_apt+=(slurm-client)
command -v munged >/dev/null 2>&1 || need_apt+=(munge)
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
if ((${#need_apt[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]} (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: WARNING: ${need_apt[*]} missing and not root with apt-get: Slurm/MPI tests will be skipped" >&2
  fi
fi

stamp=$venv/.tf_for_slurm-setup
want=$(cat "$root/setup.cfg" "$root/pyproject.toml" "$root/scripts/setup.sh" | sha256sum | cut -c1-16)
if [[ ! -x $venv/bin/python ]]; then
  echo "setup: creating $venv" >&2
  "$python" -m venv "$venv"
fi
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing tf_for_slurm[tf-cpu,mpi,test] into $venv (about a minute the first time)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[tf-cpu,mpi,test]"
  # tf_keras (Keras 2) for model.fit under TF2 strategies; --no-deps: it would pull the 2.2 GB
  # `tensorflow` wheel on top of tensorflow-cpu
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps tf-keras==2.21.0
  echo "$want" > "$stamp"
fi
