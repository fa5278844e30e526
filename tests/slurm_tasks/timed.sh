#!/bin/bash
# Test-only python wrapper for the sbatch templates: runs the real python, and for tasks of a
# step (not the batch script's own calls) appends "PROCID EXIT_STATUS UNIX_TIME" to $TASK_TIMES.
#
# TASK_PS_LINE=TEXT: the step's supervisor ends the ps once every worker is done, possibly before the
# ps printed what the test reads. The ps's program (SLURM_PROCID 0, run by its `tf-slurm exec`) also
# copies its output to $TASK_TIMES.ps, and every worker's program, once it has ended and its line is
# written, waits (at most 120 s) until that copy holds TEXT: the ps has printed it before its
# workers' tasks end, whoever is faster.
program=0   # the task's own program (LaunchTFServerWithHooks.py), not its `python -m tf_for_slurm exec`
if [[ -n "${SLURM_STEP_ID:-}" && "${1:-}" != -m && "$*" == *LaunchTFServerWithHooks* ]]; then program=1; fi
if [[ -n "${TASK_PS_LINE:-}" && "$program" == 1 && "${SLURM_PROCID:-}" == 0 ]]; then
    "$REAL_PYTHON" "$@" > >(tee -a "$TASK_TIMES.ps")
else
    "$REAL_PYTHON" "$@"
fi
rc=$?
if [[ -n "${SLURM_STEP_ID:-}" && -n "${TASK_TIMES:-}" && "$*" == *LaunchTFServerWithHooks* ]]; then
    echo "${SLURM_PROCID} ${rc} $(date +%s.%N)" >>"$TASK_TIMES"
fi
if [[ -n "${TASK_PS_LINE:-}" && "$program" == 1 && "${SLURM_PROCID:-}" != 0 ]]; then
    for _ in $(seq 2400); do
        grep -qF -- "$TASK_PS_LINE" "$TASK_TIMES.ps" 2>/dev/null && break
        sleep 0.05
    done
fi
exit "$rc"
