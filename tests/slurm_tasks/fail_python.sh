#!/bin/bash
# Test-only "python" for the sbatch templates: the template's own calls (outside a step) run the real
# python; in the step, task $FAIL_RANK exits with $FAIL_STATUS after 2 s and every other task waits
# until srun ends it (SIGTERM: srun's own status is then 143), or with OTHERS=python runs for real.
if [[ -z "${SLURM_STEP_ID:-}" ]]; then exec "$REAL_PYTHON" "$@"; fi
# SUPERVISE=1: `python -m tf_for_slurm exec ...` (the task's supervisor) runs for real; its command fails
if [[ "${SUPERVISE:-0}" == 1 && "${1:-}" == -m && "${2:-}" == tf_for_slurm ]]; then exec "$REAL_PYTHON" "$@"; fi
if [[ "$SLURM_PROCID" == "${FAIL_RANK:-2}" ]]; then
    sleep 2
    exit "${FAIL_STATUS:-2}"
fi
if [[ "${OTHERS:-sleep}" == python ]]; then exec "$REAL_PYTHON" "$@"; fi
exec sleep 120
