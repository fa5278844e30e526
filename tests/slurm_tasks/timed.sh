#!/bin/bash
# Test-only python wrapper for the sbatch templates: runs the real python, and for tasks of a
# step (not the batch script's own calls) appends "PROCID EXIT_STATUS UNIX_TIME" to $TASK_TIMES.
"$REAL_PYTHON" "$@"
rc=$?
if [[ -n "${SLURM_STEP_ID:-}" && -n "${TASK_TIMES:-}" && "$*" == *LaunchTFServerWithHooks* ]]; then
    echo "${SLURM_PROCID} ${rc} $(date +%s.%N)" >>"$TASK_TIMES"
fi
exit "$rc"
