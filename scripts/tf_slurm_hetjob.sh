#!/bin/bash
# Heterogeneous-job Slurm template for YOUR distributed TensorFlow script: parameter servers in
# component 0 (e.g. a CPU partition), workers in component 1 (e.g. a GPU partition), one cluster.
# Copy it and edit the two #SBATCH blocks and the settings below.
#
#   sbatch scripts/tf_slurm_hetjob.sh my_train.py --epochs 3       # script and its arguments
#   sbatch --export=ALL,CHIEF=1 scripts/tf_slurm_hetjob.sh my_pss_train.py   # ParameterServerStrategy
#   sbatch -p cpu : -p gpu scripts/tf_slurm_hetjob.sh my_train.py   # options per component
#
# One step over both components, `srun --het-group=0,1 ... tf-slurm exec --roles-by-component ps,worker`:
# every task of component 0 is a "ps", every task of component 1 a "worker" (CHIEF=1: the first
# worker is the chief). srun runs each component's own tasks on that component's nodes (no -n: nothing
# here counts tasks; the batch script's SLURM_NTASKS describes component 0 only).
# sbatch's command-line options apply to EVERY component (`sbatch -w node3 ...` asks for node3 in both
# and is refused); `sbatch OPTS_0 : OPTS_1 script` adds OPTS_c to component c's block below
# (measured on Slurm 22.05: `sbatch -w node3 : -w node[1-2] scripts/tf_slurm_hetjob.sh train.py`).
# Reserved ports (--resv-ports) are not used: Slurm reserves each component's ports only on its own
# nodes, so the library uses its job-derived port window. Components must not share nodes.
#
# ------------------------------ component 0: parameter servers ------------------------------
#SBATCH --job-name=tf_hetjob
#SBATCH --ntasks=1                      # parameter servers
#SBATCH --cpus-per-task=1
#SBATCH --signal=B:URG@120              # the time-limit warning: stop, checkpoint, requeue (see the trap)
#SBATCH --requeue                       # the job may requeue itself
#SBATCH --no-kill                       # a failed node does not end the job: the step's supervisors decide
#SBATCH --open-mode=append              # a requeued run appends to the same log
#SBATCH --time=01:00:00
#SBATCH --output=tf_hetjob-%j.out
##SBATCH --partition=cpu                # real clusters: the CPU partition
##SBATCH --mem-per-cpu=4G
#SBATCH hetjob
# ------------------------------------ component 1: workers -----------------------------------
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1             # workers per node (e.g. one per GPU)
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00                 # each component has its own limit: keep them equal
##SBATCH --partition=gpu                # real clusters: the GPU partition
##SBATCH --gpus-per-node=4              # with --ntasks-per-node=4: one GPU per worker
##SBATCH --mem-per-cpu=8G

set -euo pipefail

# ---------------------------------- settings (environment wins) ----------------------------------
COMPONENT_ROLES="${COMPONENT_ROLES:-ps,worker}"   # one role per component, component 0 first
CHIEF="${CHIEF:-0}"                     # 1: the first worker is the chief (ParameterServerStrategy)
IB="${IB:-auto}"                        # auto: <node>-ib (or TF_SLURM_IB_TEMPLATE) InfiniBand names when
                                        # they resolve for every node, else host names; IB / NoIB force
LOG_LEVEL="${LOG_LEVEL:-INFO}"          # tf_for_slurm logging: DEBUG INFO WARNING ERROR
PS_LOG_LEVEL="${PS_LOG_LEVEL:-WARNING}" # supervisor logging level
DATA_DIR="${DATA_DIR:-$HOME/data}"      # exported for your script (and usable in TRAIN_ARGS)
MODEL_DIR="${MODEL_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/runs/tf_hetjob}"   # exported; reuse it to resume
PYTHON="${PYTHON:-python3}"             # the python that has tf_for_slurm and TensorFlow
WARN_MARGIN="${WARN_MARGIN:-60}"        # seconds before the time limit at which the tasks stop and the
                                        # chief checkpoints (Slurm's warning may come up to 60 s early)
MAX_REQUEUES="${MAX_REQUEUES:-${TF_SLURM_MAX_REQUEUES:-10}}"  # requeues after a time-limit warning
TRAIN_SCRIPT="${1:-${TRAIN_SCRIPT:-}}"  # first argument, else TRAIN_SCRIPT
TARGET="${TARGET:-}"                    # the step target your script checkpoints to (global step in the
                                        # checkpoint names): reached = no requeue
# -------------------------------------------------------------------------------------------------

die() { echo "tf_slurm_hetjob.sh: error: $*" >&2; exit 2; }
[[ -n "${SLURM_JOB_ID:-}" ]] || die "SLURM_JOB_ID is not set: expected to run under sbatch (or salloc)"
[[ -n "$TRAIN_SCRIPT" ]] || die "no training script: expected 'sbatch $0 my_train.py [ARGS...]'"
(($# > 0)) && shift
TRAIN_ARGS=("$@")                       # or write your flags here, e.g. (--data_dir "$DATA_DIR")
[[ "$COMPONENT_ROLES" =~ ^[a-z]+(,[a-z]+)+$ ]] || die "COMPONENT_ROLES='$COMPONENT_ROLES': expected one role per component separated by commas, e.g. ps,worker"
[[ "$CHIEF" == 0 || "$CHIEF" == 1 ]] || die "CHIEF='$CHIEF': expected 0 or 1"
[[ "$IB" == auto || "$IB" == IB || "$IB" == NoIB ]] || die "IB='$IB': expected auto, IB or NoIB"
[[ "$WARN_MARGIN" =~ ^[0-9]{1,6}$ ]] || die "WARN_MARGIN='$WARN_MARGIN': expected seconds, an integer >= 0"
[[ "$MAX_REQUEUES" =~ ^[0-9]{1,6}$ ]] || die "MAX_REQUEUES='$MAX_REQUEUES': expected an integer >= 0"
# The step spans components 0..N-1, N = the number of roles; the job must have exactly N components
# (compared as strings: SLURM_HET_SIZE is never evaluated).
IFS=, read -r -a roles <<<"$COMPONENT_ROLES"
groups=""; for i in "${!roles[@]}"; do groups="${groups:+$groups,}$i"; done
[[ "${SLURM_HET_SIZE:-}" == "${#roles[@]}" ]] || die "SLURM_HET_SIZE='${SLURM_HET_SIZE:-}': expected ${#roles[@]} components" \
    "(one per role of COMPONENT_ROLES=$COMPONENT_ROLES): submit this script as a heterogeneous job (#SBATCH hetjob)"
cd "${SLURM_SUBMIT_DIR:-$PWD}"          # relative script paths are relative to where you submitted
[[ -f "$TRAIN_SCRIPT" ]] || die "TRAIN_SCRIPT='$TRAIN_SCRIPT': expected a file (from $PWD)"

# A checkout of tf_for_slurm that is not pip-installed: put it on PYTHONPATH (TF_SLURM_REPO, else
# the checkout this script was submitted from, as Slurm recorded it).
if ! "$PYTHON" -c 'import tf_for_slurm.cli' 2>/dev/null; then
    repo="${TF_SLURM_REPO:-}"
    if [[ -z "$repo" ]]; then
        cmd="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=//p' | head -n1)"
        [[ -n "$cmd" && -f "$cmd" ]] && repo="$(cd "$(dirname "$cmd")/.." && pwd)"
    fi
    [[ -n "$repo" && -d "$repo/tf_for_slurm" ]] || die "$PYTHON cannot import tf_for_slurm: pip install it or set TF_SLURM_REPO"
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi

ib_template="${TF_SLURM_IB_TEMPLATE:-}"; [[ -n "$ib_template" ]] || ib_template='{host}-ib'
case "$IB" in   # auto: every task decides the same from the node list, and logs which and why
    NoIB) export TF_SLURM_ADDRESS=hostname ;;
    IB) export TF_SLURM_ADDRESS="template:$ib_template" ;;
    auto) export TF_SLURM_ADDRESS="${TF_SLURM_ADDRESS:-auto}" ;;   # a site's own policy (iface:, file:) stays
esac
EXEC_OPTS=(--roles-by-component "$COMPONENT_ROLES")
[[ "$CHIEF" == 1 ]] && EXEC_OPTS+=(--chief)
export GRPC_POLL_STRATEGY=poll          # gRPC's epoll engines misbehave on some cluster kernels
export TF_SLURM_LOG_LEVEL="$LOG_LEVEL"
export TF_SLURM_SIDECAR_LOG_LEVEL="$PS_LOG_LEVEL"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# The job folder: exec's hub writes the step's state there (`tf-slurm status $SLURM_JOB_ID`), batch-step the run's.
jobs_root="${TF_SLURM_JOBS_ROOT:-tf_slurm_jobs}"; [[ "$jobs_root" == /* ]] || jobs_root="${SLURM_SUBMIT_DIR:-$PWD}/$jobs_root"
export TF_SLURM_JOB_DIR="$jobs_root/$SLURM_JOB_ID"
export DATA_DIR MODEL_DIR
mkdir -p "$MODEL_DIR"

for i in "${!roles[@]}"; do   # each component's nodes and tasks per node, as Slurm gives them (printed only)
    nodes_var="SLURM_JOB_NODELIST_HET_GROUP_$i"; tasks_var="SLURM_TASKS_PER_NODE_HET_GROUP_$i"
    echo "job $SLURM_JOB_ID: component $i (${roles[$i]}): nodes ${!nodes_var:-?}, tasks per node ${!tasks_var:-?}"
done
echo "job $SLURM_JOB_ID: IB=$IB, chief=$CHIEF, ports: job-derived window: $TRAIN_SCRIPT ${TRAIN_ARGS[*]}"

# The step runs under `tf-slurm batch-step`, which: passes the time-limit warning on to every task
# WARN_MARGIN s before the limit (Slurm may warn up to 60 s early; see the trap below), so
# training stops at its next step and the chief checkpoints; exits with the first failing task's
# status (srun's own is the highest, 143 for tasks it ended); and requeues the job when the warning
# stopped training before TARGET (when set), or a task was killed or lost after the checkpoint advanced
# (at most MAX_REQUEUES times; never after the program's own failure, 1-127, or a SIGTERM from
# scancel). The requeued run resumes from MODEL_DIR's last checkpoint.
# No -n/-c/--mem: one value would apply to every component; srun takes each component's tasks and
# memory from its allocation. (Slurm 22.05's srun does not pass the job's --cpus-per-task on: where a
# component needs more CPUs per task, export SRUN_CPUS_PER_TASK, which applies to every component.)
# The time-limit warning is SIGURG (--signal=B:URG@N): it reaches only this shell, which ignored it
# until here (its default action), so a warning sent as the job starts (a requeued run started by the
# backfill scheduler got it 44 ms in) cannot kill the shell; batch-step's backstop stops the step at the
# same moment anyway. From here on the trap writes it (and SIGUSR1, SIGUSR2, SIGTERM: scancel,
# preemption) down for `tf-slurm batch-step`, in a folder only this user can use, with a random name
# (mktemp -d: 0700): other users see job ids and can write to /tmp, and a file of theirs must not stop
# or requeue the job. The traps come after every command substitution of the script: bash 5.2 can fail
# to parse a `$(...)` that a trap interrupts, and that ends the shell.
warn_dir="$(mktemp -d "${TMPDIR:-/tmp}/tf_slurm.XXXXXXXXXX")" \
    || { echo "tf_slurm_hetjob.sh: error: cannot make a private folder in ${TMPDIR:-/tmp}" >&2; exit 2; }
warn_file="$warn_dir/warning"
trap 'trap "" URG USR1 USR2 TERM; rm -rf -- "$warn_dir"' EXIT   # removed however the shell ends
for sig in URG USR1 USR2 TERM; do word=${sig/URG/USR1}
    trap "printf -v warn_line '%s %(%s)T' $word -1; echo \"\$warn_line\" >>\"\$warn_file\" || true" "$sig"; done
{ "$PYTHON" -m tf_for_slurm batch-step --checkpoint-dir "$MODEL_DIR" ${TARGET:+--target "$TARGET"} --max-requeues "$MAX_REQUEUES" \
    --warn-margin "$WARN_MARGIN" --warn-file "$warn_file" -- \
    srun --het-group="$groups" -l --kill-on-bad-exit=1 --no-kill --mpi=none \
    "$PYTHON" -m tf_for_slurm --log-level "$LOG_LEVEL" exec "${EXEC_OPTS[@]}" \
    --sidecar-log-level "$PS_LOG_LEVEL" -- "$PYTHON" "$TRAIN_SCRIPT" "${TRAIN_ARGS[@]}" \
    && status=0 || status=$?
  echo "$status" >"$warn_dir/status"; } &
step=$!
# a trapped signal (the warning) cuts `wait` short, and bash's own record of the step's status is not to
# be trusted then (a warning as the step ended made a COMPLETED job FAILED 151, or 255): wait until the
# step has ended, then take the status it wrote
while kill -0 "$step" 2>/dev/null; do wait "$step" || true; done
read -r status <"$warn_dir/status" || status=1
[[ "$status" =~ ^[0-9]{1,3}$ ]] || status=1
exit "$status"
