#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh Debian machine: system packages (Slurm, munge, Open MPI)
# and a virtual environment .venv with tf_for_slurm, TensorFlow (CPU), mpi4py and the test tools.
# Re-running is cheap: each step is skipped when already done.
#
#   bash scripts/setup.sh --old-tf   also (scripts/test.sh does this when it runs its old-TF pass)
#                                    the oldest TensorFlow we support in a venv of its own:
#                                    OLD_TF_VENV (default .venv-tf2.15) with tensorflow-cpu 2.15.1,
#                                    tf-keras 2.15.1 and tf_for_slurm[test], made with OLD_TF_PYTHON
#                                    (default: PYTHON, else python3; TensorFlow 2.15 has wheels for
#                                    Python 3.9-3.11 only: with another Python it is skipped, said
#                                    in one line, and scripts/test.sh says so again at its end).
#   bash scripts/setup.sh --browser  also Debian's chromium (scripts/test.sh asks for it): the
#                                    tests render `tf-slurm report`'s page to a PNG with it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TF_SLURM_VENV:-$root/.venv}
python=${PYTHON:-python3}
old_tf=0
browser=0
for arg in "$@"; do
  case $arg in
    --old-tf) old_tf=1 ;;
    --browser) browser=1 ;;
    *) echo "setup: unknown argument '$arg' (expected --old-tf or --browser)" >&2; exit 2 ;;
  esac
done

need_apt=()
command -v slurmctld >/dev/null 2>&1 || need_apt+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || need_apt+=(slurmd)
command -v srun >/dev/null 2>&1 || need_apt+=(slurm-client)
command -v munged >/dev/null 2>&1 || need_apt+=(munge)
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
if ((browser)) && ! command -v chromium >/dev/null 2>&1; then need_apt+=(chromium); fi
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

want=$(cat "$root/setup.cfg" "$root/pyproject.toml" "$root/scripts/setup.sh" | sha256sum | cut -c1-16)

main_venv() {
  local stamp=$venv/.tf_for_slurm-setup
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
}

# The oldest TensorFlow we support (README: "Versions tested"): TensorFlow 2.15.1 with tf-keras 2.15.1.
old_tf_version=2.15.1
old_venv=${OLD_TF_VENV:-$root/.venv-tf2.15}
old_python=${OLD_TF_PYTHON:-$python}

old_tf_venv() {
  local old_stamp=$old_venv/.tf_for_slurm-setup
  if ! "$old_python" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; then
    echo "setup: WARNING: no TensorFlow $old_tf_version venv: $old_python is not Python 3.9-3.11 (its wheels'" \
         "range); set OLD_TF_PYTHON to one" >&2
    return 0
  fi
  if [[ ! -x $old_venv/bin/python ]]; then
    echo "setup: creating $old_venv (TensorFlow $old_tf_version)" >&2
    "$old_python" -m venv "$old_venv"
    printf '*\n' > "$old_venv/.gitignore"  # a venv inside the checkout: git leaves it alone
  fi
  if [[ ! -f $old_stamp || $(cat "$old_stamp") != "$want" ]]; then
    echo "setup: installing tensorflow-cpu==$old_tf_version into $old_venv (about a minute the first time)" >&2
    # tensorflow-cpu 2.15.1 pins what it needs (numpy<2, protobuf<5, Keras 2.15): the resolver picks those
    "$old_venv/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==$old_tf_version"
    # --no-deps: tf-keras 2.15.1 requires `tensorflow` (the full wheel, CUDA libraries included), not tensorflow-cpu
    "$old_venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "tf-keras==$old_tf_version"
    touch "$old_venv/.tf-installed"
  fi
}

old_tf_package() {
  # after main_venv: two editable installs at once would both write the checkout's egg-info
  local old_stamp=$old_venv/.tf_for_slurm-setup
  if [[ -f $old_venv/.tf-installed ]] && [[ ! -f $old_stamp || $(cat "$old_stamp") != "$want" ]]; then
    echo "setup: installing tf_for_slurm[test] into $old_venv" >&2
    "$old_venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[test]" \
      "tensorflow-cpu==$old_tf_version"
    echo "$want" > "$old_stamp"
  fi
}

# the two venvs' TensorFlow at once: each install waits on downloads and unpacking as much as on a core
old_pid=
if ((old_tf)); then
  old_tf_venv &
  old_pid=$!
fi
main_venv
if [[ -n $old_pid ]]; then
  wait "$old_pid"
  old_tf_package
fi
