#!/bin/bash
# Test wrapper: run the command, then append "PROCID EXIT_STATUS UNIX_TIME" to $TASK_TIMES.
#
# TASK_PS_LINE=TEXT (for steps under `tf-slurm exec`, whose supervisor ends a ps once every worker is
# done, possibly before the ps printed what the test reads): the ps (SLURM_PROCID 0, the first task)
# also copies its output to $TASK_TIMES.ps, and every other task, once its command has ended and its
# line is written, waits (at most 120 s) until that copy holds TEXT. So the ps has printed TEXT
# before its workers' tasks end, whoever is faster.
if [[ -n "${TASK_PS_LINE:-}" && "${SLURM_PROCID}" == 0 ]]; then
    "$@" > >(tee -a "$TASK_TIMES.ps")
else
    "$@"
fi
rc=$?
echo "${SLURM_PROCID} ${rc} $(date +%s.%N)" >>"$TASK_TIMES"
if [[ -n "${TASK_PS_LINE:-}" && "${SLURM_PROCID}" != 0 ]]; then
    for _ in $(seq 2400); do
        grep -qF -- "$TASK_PS_LINE" "$TASK_TIMES.ps" 2>/dev/null && break
        sleep 0.05
    done
fi
exit "$rc"
