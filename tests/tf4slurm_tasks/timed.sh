#!/bin/bash
# Test wrapper: run the command, then append "PROCID EXIT_STATUS UNIX_TIME" to $TASK_TIMES.
"$@"
rc=$?
echo "${SLURM_PROCID} ${rc} $(date +%s.%N)" >>"$TASK_TIMES"
exit "$rc"
