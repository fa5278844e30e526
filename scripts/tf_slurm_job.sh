#!/bin/bash
# Generic Slurm batch template for YOUR distributed TensorFlow script: copy it and edit the top.
#
#   sbatch scripts/tf_slurm_job.sh my_train.py --epochs 3        # script and its arguments
#   sbatch --nodes=4 --ntasks=8 --export=ALL,NUM_PS=2 scripts/tf_slurm_job.sh my_train.py
#
# Every task runs `tf-slurm exec -- $PYTHON my_train.py ARGS`, which exports TF_CONFIG (and
# TF_SLURM_* variables) for that task: the first NUM_PS tasks are "ps", the others "worker".
# A ps whose script ends in server.join() is ended cleanly by tf-slurm exec's supervisor once every worker
# finished (exit 0), or as soon as one fails or dies (the job then FAILS: srun --kill-on-bad-exit=1).
# Scripts that make their ps exit on their own (done-queue) work the same way.
#
#SBATCH --job-name=tf_job
#SBATCH --nodes=3
#SBATCH --ntasks=3
#SBATCH --cpus-per-task=1
#SBATCH --signal=B:URG@120              # the time-limit warning: stop, checkpoint, requeue (see the trap)
#SBATCH --requeue                       # the job may requeue itself
#SBATCH --no-kill                       # a failed node does not end the job: the step's supervisors decide
#SBATCH --open-mode=append              # a requeued run appends to the same log
#SBATCH --time=01:00:00
#SBATCH --output=tf_job-%j.out

set -euo pipefail

# ---------------------------------- settings (environment wins) ----------------------------------
IB="${IB:-auto}"                        # auto: <node>-ib (or TF_SLURM_IB_TEMPLATE) InfiniBand names when
                                        # they resolve for every node, else host names; IB / NoIB force
NUM_PS="${NUM_PS:-1}"                   # parameter servers: the first NUM_PS tasks (0: workers only,
                                        # e.g. MultiWorkerMirroredStrategy)
TASKS="${TASKS:-}"                      # or one role per task, e.g. chief,ps,worker,worker for
                                        # ParameterServerStrategy (then NUM_PS is counted from it)
LOG_LEVEL="${LOG_LEVEL:-INFO}"          # tf_for_slurm logging: DEBUG INFO WARNING ERROR
PS_LOG_LEVEL="${PS_LOG_LEVEL:-WARNING}" # supervisor logging level (psSidecarLoggingLevel)
DATA_DIR="${DATA_DIR:-$HOME/data}"      # exported for your script (and usable in TRAIN_ARGS)
MODEL_DIR="${MODEL_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/runs/tf_job}"   # exported; reuse it to resume
ITERATIONS="${ITERATIONS:-1000}"        # exported
BATCH_SIZE="${BATCH_SIZE:-64}"          # exported
SYNC="${SYNC:-0}"                       # exported: 1 = synchronous updates, if your script supports it
MEM_PER_TASK_MB="${MEM_PER_TASK_MB:-}"  # empty: from the allocation (tf-slurm mem)
PYTHON="${PYTHON:-python3}"             # the python that has tf_for_slurm and TensorFlow
WARN_MARGIN="${WARN_MARGIN:-60}"        # seconds before the time limit at which the tasks stop and the
                                        # chief checkpoints (Slurm's warning may come up to 60 s early)
MAX_REQUEUES="${MAX_REQUEUES:-${TF_SLURM_MAX_REQUEUES:-10}}"  # requeues after a time-limit warning
SPARE_NODES="${SPARE_NODES:-${TF_SLURM_SPARE_NODES:-0}}"  # the allocation's last nodes the step leaves
                                        # free to replace a lost one (sbatch --nodes=N+K)
MAX_RELAUNCHES="${MAX_RELAUNCHES:-${TF_SLURM_MAX_RELAUNCHES:-2}}"  # a step that lost a node starts again at
                                        # once on the healthy nodes (then: requeue), at most this often
MIN_WORKERS="${MIN_WORKERS:-${TF_SLURM_MIN_WORKERS:-}}"  # with no healthy node left to replace a lost
                                        # one, go on with fewer workers, down to this many (empty: never);
                                        # also when Slurm gave fewer nodes than TASKS lists: --nodes=MIN-MAX
                                        # with the --ntasks line deleted runs a task on each node it gives
TRAIN_SCRIPT="${1:-${TRAIN_SCRIPT:-}}"  # first argument, else TRAIN_SCRIPT
TARGET="${TARGET:-}"                    # the step target your script checkpoints to (global step in the
                                        # checkpoint names): reached = no requeue
# -------------------------------------------------------------------------------------------------

die() { echo "tf_slurm_job.sh: error: $*" >&2; exit 2; }
[[ -n "${SLURM_JOB_ID:-}" ]] || die "SLURM_JOB_ID is not set: expected to run under sbatch (or salloc)"
[[ -n "$TRAIN_SCRIPT" ]] || die "no training script: expected 'sbatch $0 my_train.py [ARGS...]'"
(($# > 0)) && shift
TRAIN_ARGS=("$@")                       # or write your flags here, e.g. (--data_dir "$DATA_DIR")
[[ "$IB" == auto || "$IB" == IB || "$IB" == NoIB ]] || die "IB='$IB': expected auto, IB or NoIB"
if [[ -n "$TASKS" ]]; then
    [[ "$TASKS" =~ ^[a-z]+(,[a-z]+)*$ ]] || die "TASKS='$TASKS': expected roles separated by commas, e.g. chief,ps,worker"
    NUM_PS=0; for role in ${TASKS//,/ }; do if [[ "$role" == ps ]]; then NUM_PS=$((NUM_PS + 1)); fi; done
    ROLES=(--tasks "$TASKS")
else
    ROLES=(--ps "$NUM_PS")
fi
[[ "$NUM_PS" =~ ^[0-9]+$ ]] || die "NUM_PS='$NUM_PS': expected an integer >= 0"
[[ "$SYNC" == 0 || "$SYNC" == 1 ]] || die "SYNC='$SYNC': expected 0 or 1"
[[ "$WARN_MARGIN" =~ ^[0-9]{1,6}$ ]] || die "WARN_MARGIN='$WARN_MARGIN': expected seconds, an integer >= 0"
[[ "$MAX_REQUEUES" =~ ^[0-9]{1,6}$ ]] || die "MAX_REQUEUES='$MAX_REQUEUES': expected an integer >= 0"
[[ "$SPARE_NODES" =~ ^[0-9]{1,6}$ ]] || die "SPARE_NODES='$SPARE_NODES': expected an integer >= 0"
[[ "$MAX_RELAUNCHES" =~ ^[0-9]{1,6}$ ]] || die "MAX_RELAUNCHES='$MAX_RELAUNCHES': expected an integer >= 0"
[[ -z "$MIN_WORKERS" || "$MIN_WORKERS" =~ ^[1-9][0-9]{0,5}$ ]] || die "MIN_WORKERS='$MIN_WORKERS': expected an integer >= 1"
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

# Every number comes from one tested helper that checks each value (SLURM_NTASKS,
# SLURM_CPUS_PER_TASK, SLURM_TASKS_PER_NODE, NUM_PS, MEM_PER_TASK_MB, the partition's memory) is a
# plain integer: bash arithmetic would run a value like 'a[$(cmd)]' as code. It prints tasks, CPUs per
# task, workers, MB per CPU for srun --mem-per-cpu (never --mem: that is per NODE; empty
# MEM_PER_TASK_MB: from the allocation, the partition or the nodes), and 2 ports per task on the
# busiest node (TensorFlow + auxiliary) to reserve; nothing here is evaluated.
settings="$("$PYTHON" -m tf_for_slurm batch-settings --num-ps "$NUM_PS" --min-ps 0 --spare-nodes "$SPARE_NODES" \
    --mem-per-task-mb "$MEM_PER_TASK_MB" \
    --partition-info <(scontrol show partition "${SLURM_JOB_PARTITION:-}" 2>/dev/null) \
    --node-info <(scontrol show node "${SLURM_JOB_NODELIST:-}" 2>/dev/null))" || exit 2
read -r NTASKS CPUS_PER_TASK NUM_WORKERS MEM_PER_CPU RESV_COUNT <<<"$settings"
for v in "$NTASKS" "$CPUS_PER_TASK" "$NUM_WORKERS" "$MEM_PER_CPU" "$RESV_COUNT"; do
    [[ "$v" =~ ^[0-9]+$ ]] || die "batch-settings printed '$settings': expected 5 integers"
done

# Reserved ports only where the site configured them (MpiParams=ports=...); elsewhere the library
# uses its job-derived port window. Always with a count: a bare --resv-ports reserves NO ports on
# Slurm 22.05 (measured).
RESV_PORTS=()
slurm_config="$(scontrol show config 2>/dev/null || true)"   # (no pipe into grep -q: pipefail + SIGPIPE)
if grep -Eq '^MpiParams[[:space:]]*=[[:space:]]*ports=' <<<"$slurm_config"; then
    RESV_PORTS=(--resv-ports="$RESV_COUNT")
fi

ib_template="${TF_SLURM_IB_TEMPLATE:-}"; [[ -n "$ib_template" ]] || ib_template='{host}-ib'
case "$IB" in   # auto: every task decides the same from the node list, and logs which and why
    NoIB) export TF_SLURM_ADDRESS=hostname ;;
    IB) export TF_SLURM_ADDRESS="template:$ib_template" ;;
    auto) export TF_SLURM_ADDRESS="${TF_SLURM_ADDRESS:-auto}" ;;   # a site's own policy (iface:, file:) stays
esac
export TF_SLURM_PS="$NUM_PS"
export GRPC_POLL_STRATEGY=poll          # gRPC's epoll engines misbehave on some cluster kernels
export TF_SLURM_LOG_LEVEL="$LOG_LEVEL"
export TF_SLURM_SIDECAR_LOG_LEVEL="$PS_LOG_LEVEL"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# The job folder: exec's hub writes the step's state there (`tf-slurm status $SLURM_JOB_ID`), batch-step the run's.
jobs_root="${TF_SLURM_JOBS_ROOT:-tf_slurm_jobs}"; [[ "$jobs_root" == /* ]] || jobs_root="${SLURM_SUBMIT_DIR:-$PWD}/$jobs_root"
export TF_SLURM_JOB_DIR="$jobs_root/$SLURM_JOB_ID"
export DATA_DIR MODEL_DIR ITERATIONS BATCH_SIZE SYNC
mkdir -p "$MODEL_DIR"

echo "job $SLURM_JOB_ID: $NTASKS tasks on ${SLURM_JOB_NODELIST:-?} ($NUM_PS ps), $CPUS_PER_TASK CPU(s) and" \
     "${MEM_PER_CPU} MB per CPU per task, IB=$IB: $TRAIN_SCRIPT ${TRAIN_ARGS[*]}"

echo "job $SLURM_JOB_ID: ports: ${RESV_PORTS[*]:-job-derived window (no MpiParams=ports)}"
# The step runs under `tf-slurm batch-step`, which: passes the time-limit warning on to every task
# WARN_MARGIN s before the limit (Slurm may warn up to 60 s early; see the trap below), so
# training stops at its next step and the chief checkpoints; exits with the first failing task's
# status (srun's own is the highest, 143 for tasks it ended); and requeues the job when the warning
# stopped training before TARGET (when set), or a task was killed or lost after the checkpoint advanced
# (at most MAX_REQUEUES times; never after the program's own failure, 1-127, or a SIGTERM from
# scancel). The requeued run resumes from MODEL_DIR's last checkpoint. A step that lost a node (a ps,
# the chief, an MWMS worker: TensorFlow cannot go on without it) is first started again at once on
# the allocation's healthy nodes, a spare in the lost one's place (at most MAX_RELAUNCHES times).
# The time-limit warning is SIGURG (--signal=B:URG@N): it reaches only this shell, which ignored it
# until here (its default action), so a warning sent as the job starts (a requeued run started by the
# backfill scheduler got it 44 ms in) cannot kill the shell; batch-step's backstop stops the step at the
# same moment anyway. From here on the trap writes it (and SIGUSR1, SIGUSR2, SIGTERM: scancel,
# preemption) down for `tf-slurm batch-step`, in a folder only this user can use, with a random name
# (mktemp -d: 0700): other users see job ids and can write to /tmp, and a file of theirs must not stop
# or requeue the job. The traps come after every command substitution of the script: bash 5.2 can fail
# to parse a `$(...)` that a trap interrupts, and that ends the shell.
warn_dir="$(mktemp -d "${TMPDIR:-/tmp}/tf_slurm.XXXXXXXXXX")" \
    || { echo "tf_slurm_job.sh: error: cannot make a private folder in ${TMPDIR:-/tmp}" >&2; exit 2; }
warn_file="$warn_dir/warning"
trap 'trap "" URG USR1 USR2 TERM; rm -rf -- "$warn_dir"' EXIT   # removed however the shell ends
for sig in URG USR1 USR2 TERM; do word=${sig/URG/USR1}
    trap "printf -v warn_line '%s %(%s)T' $word -1; echo \"\$warn_line\" >>\"\$warn_file\" || true" "$sig"; done
{ "$PYTHON" -m tf_for_slurm batch-step --checkpoint-dir "$MODEL_DIR" ${TARGET:+--target "$TARGET"} --max-requeues "$MAX_REQUEUES" \
    --max-relaunches "$MAX_RELAUNCHES" --spare-nodes "$SPARE_NODES" ${MIN_WORKERS:+--min-workers "$MIN_WORKERS"} --warn-margin "$WARN_MARGIN" --warn-file "$warn_file" -- \
    srun -l --kill-on-bad-exit=1 --no-kill --mpi=none -n "$NTASKS" -c "$CPUS_PER_TASK" --mem-per-cpu="${MEM_PER_CPU}M" \
    "${RESV_PORTS[@]}" \
    "$PYTHON" -m tf_for_slurm --log-level "$LOG_LEVEL" exec "${ROLES[@]}" \
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
