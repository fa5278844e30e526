#!/usr/bin/env bash
# The test command: set up what is missing, check the house (ruff, mypy, import-linter's layer
# contracts), then run every test (unit, multi-process TensorFlow, and real Slurm on a local
# 3-node cluster started by the tests' own harness). Arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slurm and not tf"      (the fast subset)
#
# The full command (no arguments) runs in two lanes, two pytest processes at once (tests/alone.py):
#   the slurm lane:  the `slurm` tests one at a time on the local cluster, the time-limited jobs
#                    first (1-minute allocations that must checkpoint, requeue and resume), the
#                    scenario that restarts a slurmd and stops the controller last;
#   the main lane:   meanwhile, the tests that are neither `tf` nor `slurm` side by side, at a lower
#                    CPU priority (nice), so that the time-limited jobs' TensorFlow start-ups keep the
#                    cores they need; then the `tf` tests one at a time, in a network of their own,
#                    each waiting until the time-limited jobs are done;
#   then each lane takes chunks of the old-TF pass until none is left (old_tf_chunks below).
# The Slurm tests mostly wait on Slurm (the requeue jobs kept 42% of the 2 cores busy over their 3
# minutes), so the lanes fill each other's waits: one part after another took about 31 minutes on a
# fresh clone, the lanes 20-24 (1216-1443 s). The slurm lane's output comes when both lanes ended; each part's
# seconds at the end. TEST_LANES=0 runs one part after another instead: the side-by-side tests, then
# the `tf` and `slurm` tests one at a time, then the old-TF pass (a run to read in order).
# (Tried: the old-TF pass beside the Slurm jobs that wait on 1-minute limits, at the same priority:
# those jobs then needed more requeues, the preemption job 157 s instead of 95.)
#
# The old-TF pass: in the lanes' chunks (or after the given tests), the TensorFlow tests (-m "tf and
# not slurm") run again against the oldest TensorFlow we support (2.15.1, tf-keras 2.15.1) in a venv
# of their own (OLD_TF_VENV, default .venv-tf2.15, made by `scripts/setup.sh --old-tf`); their subprocesses use that venv's
# python (the tests start sys.executable). It runs when no arguments are given, so the fast subset
# and any run that picks tests stay as they were: OLD_TF_TESTS=1 runs it anyway (the given
# arguments, then -m "tf and not slurm"), OLD_TF_TESTS=0 never. It leaves out the long scenarios
# listed below (each tests our supervision, the same on any TensorFlow; the TensorFlow calls they
# make are in the tests that stay): about 30 of the 75 tests, about 3 minutes on 2 cores (40 took
# 4 min), where all take 16. OLD_TF_TESTS=all runs all of them.
# The exit status is the worst of the parts'.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${OLD_TF_TESTS:-} in
  1 | all) old_tf=1 ;;
  0) old_tf=0 ;;
  "") old_tf=$(( $# == 0 )) ;;
  *) echo "test.sh: OLD_TF_TESTS=$OLD_TF_TESTS: expected 0, 1 or all" >&2; exit 2 ;;
esac
# Side by side (pytest-xdist, each worker in a network of its own): setup.cfg's `-n auto` asks
# tests/conftest.py (workers_for), which runs a `-m` that leaves out both `tf` and `slurm` tests two
# per core (at most 4), and anything else one at a time. TEST_WORKERS=N sets the count (1: one process).
# left out of the old-TF pass unless OLD_TF_TESTS=all (node-id prefixes; seconds with TF 2.15.1, 2 cores)
old_tf_long=(
  tests/runtime/test_unmodified_scripts.py::test_a_killed_pss_task_is_restarted  # 96 with its two cases (one now)
  tests/runtime/test_unmodified_scripts.py::test_tf1_a_killed_task_is_restarted  # 35 with its two cases (one now)
  tests/runtime/test_lost_node.py  # a lost worker (the supervisor's rule) with a restart in place
  tests/runtime/test_unmodified_scripts.py::test_with_restarts_off_a_killed_task_ends_the_step  # 43
  tests/runtime/test_unmodified_scripts.py::test_a_worker_whose_training_raises_ends_a_local_step  # 22
  tests/runtime/test_keras_resume.py::test_mwms_fit_stops_on_sigusr1_with_a_checkpoint_and_resumes  # 79
  tests/runtime/test_runtime_tf2.py::test_pss_tf_keras_fit_every_process_exits_0  # 38
  tests/runtime/test_runtime_tf2.py::test_mwms_two_workers_tf_keras_fit_identical_weights  # 22: tf_keras (2.15)
  tests/runtime/test_runtime_tf2.py::test_pss_servers_give_up_when_the_coordinator_never_starts  # 9
  tests/runtime/test_runtime_tf2.py::test_shutdown_is_bounded_when_a_task_accepts_tcp_but_never_answers  # 8
  tests/runtime/test_runtime_tf1.py::test_duplicate_reports_do_not_end_ps_early  # 17
  tests/runtime/test_runtime_tf1.py::test_worker_never_up_fails_after_startup_grace  # 8
  tests/runtime/test_faults_tf1.py::test_worker_raising_ends_the_step_within_5s  # 2 x 9: races of the launcher
  tests/runtime/test_faults_tf1.py::test_worker_exiting_0_before_its_server_does_not_fail_the_job  # 2 x 7: the same
  "tests/runtime/test_sync_tf1_end.py::test_sync_chief_ends_with_its_training[ps-sleeps"  # 14
  tests/faces/test_example_mnist.py  # the MNIST example end to end (its TF1 calls: test_runtime_tf1)
  tests/faces/test_tf4slurm_runs.py  # the original tf4slurm examples end to end (the same calls)
  tests/runtime/test_resolver_scripts.py::test_a_contradiction_ends_the_step_with_one_fix_line  # 3 x 8: no training
  tests/runtime/test_resolver_scripts.py::test_gpu_layouts_from_recorded_variables_without_gpus  # 3 x 6: the same patch
  tests/runtime/test_hang.py  # 2 x 27: the hub's rule; the 2.15 capture it needs: test_progress_capture.py
  tests/runtime/test_progress_capture.py::test_evaluation_alone  # 4: the same callbacks as fit
  tests/runtime/test_progress_capture.py::test_tf1_monitored_session_reports_the_final_global_step[server]  # 4
  tests/runtime/test_progress_capture.py::test_capture_off  # 2 x 4: no TensorFlow in the rule
  tests/runtime/test_progress_capture.py::test_no_file_no_capture  # 4: the same
  tests/runtime/test_progress_capture.py::test_a_failing_capture  # 4: the same
  # our supervision and TF1 runtime rules over calls the tests above make (measured with TF 2.15.1, 2 cores)
  tests/runtime/test_runtime_tf2.py::test_pss_coordinator_sigkill_servers_exit_nonzero_within_10s_naming_it  # 13
  tests/runtime/test_runtime_tf2.py::test_pss_train_fn_failure_still_ends_every_process  # 7
  "tests/runtime/test_runtime_tf2.py::test_pss_custom_loop_normal_end_every_process_exits_0[exit_now]"  # 3
  tests/runtime/test_runtime_tf1.py::test_killed_worker_makes_ps_fail_within_bound  # 9
  tests/runtime/test_runtime_tf1.py::test_sync_replicas_one_ps_two_workers  # 7: test_sync_tf1_end's calls
  tests/runtime/test_runtime_tf1.py::test_barrier_waits_for_late_workers_and_times_out_naming_the_missing_ones  # 6
  tests/runtime/test_runtime_tf1.py::test_worker_dying_before_first_dequeue_deadline_is_lost_within_bound  # 6
  tests/runtime/test_runtime_tf1.py::test_two_ps  # 6: test_async_one_ps_two_workers's calls
  tests/runtime/test_resolver_scripts.py::test_tf1_course_script_with_jobs_and_two_tasks_per_node_completes  # 9
  tests/runtime/test_resolver_scripts.py::test_drop_in_is_the_same_script_with_one_import_line_changed  # 16: no patch
)
# each part's seconds, printed at the end (where the 25-minute budget goes)
SECONDS=0
started=$(date +%s)
times=()
took() { times+=("$1 ${SECONDS} s"); SECONDS=0; }
old_tf_args=()
if [[ ${OLD_TF_TESTS:-} != all ]]; then
  for id in "${old_tf_long[@]}"; do old_tf_args+=(--deselect "$id"); done
fi
if ((old_tf)); then bash "$root/scripts/setup.sh" --browser --old-tf; else bash "$root/scripts/setup.sh" --browser; fi
took setup
cd "$root"
venv=${TF_SLURM_VENV:-$root/.venv}
old_venv=${OLD_TF_VENV:-$root/.venv-tf2.15}
echo "test.sh: ruff, mypy, lint-imports" >&2
"$venv/bin/ruff" check --quiet tf_for_slurm
"$venv/bin/mypy" --no-error-summary
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
took checks
# the old-TF pass (see the top): its status is the function's; a missing venv is a warning
old_tf_pass() {
  if [[ ! -x $old_venv/bin/python ]]; then
    echo "test.sh: WARNING: the old-TF pass did not run: no $old_venv (see scripts/setup.sh's warning)" >&2
    return 0
  fi
  echo "test.sh: the old-TF pass: -m 'tf and not slurm' with $("$old_venv/bin/python" -c \
    'import importlib.metadata as m; print("TensorFlow", m.version("tensorflow-cpu"))') ($old_venv)" >&2
  local rc=0
  "$old_venv/bin/python" -m pytest -ra "$@" -m "tf and not slurm" ${old_tf_args[@]+"${old_tf_args[@]}"} || rc=$?
  echo "test.sh: the old-TF pass ended with status $rc" >&2
  if ((rc == 5 && $# > 0)); then rc=0; fi  # no `tf` test among the given arguments
  return "$rc"
}
# The lanes share the old-TF pass: each, once its own tests are done, claims the next of its chunks
# (pytest --chunk K/N: every N-th test module, tests/conftest.py) until none is left, so that the lane
# that ends first takes more (a mkdir claims a chunk: atomic). Its status is the worst chunk's.
OLD_TF_CHUNKS=6
old_tf_chunks() {
  local rc=0 k r
  for ((k = 0; k < OLD_TF_CHUNKS; k++)); do
    mkdir "$lanes/chunk.$k" 2>/dev/null || continue
    r=0
    TFS_TESTS_LANE=tf old_tf_pass --chunk "$k/$OLD_TF_CHUNKS" || r=$?
    if ((r > rc)); then rc=$r; fi
  done
  return "$rc"
}
status=0
if (($# == 0)) && [[ ${TEST_LANES:-1} != 0 ]]; then  # the full command in two lanes (see the top)
  lanes=$(mktemp -d -t tf_slurm_lanes.XXXXXX)  # private (0700): the window's marks, the slurm lane's log
  mkdir -m 700 "$lanes/window"
  export TFS_TESTS_WINDOW="$lanes/window"  # tests/alone.py: only the lanes' pytest runs use it
  (
    SECONDS=0
    rc=0
    TFS_TESTS_LANE=slurm "$venv/bin/python" -m pytest -ra --full --durations=40 -m slurm || rc=$?
    touch "$lanes/window/first-part-done"  # however it ended, the tf lane waits no more (tests/alone.py)
    slurm_s=$SECONDS
    old_rc=0
    if ((old_tf)); then old_tf_chunks || old_rc=$?; fi
    echo "$rc $slurm_s $old_rc $((SECONDS - slurm_s))" >"$lanes/status"
  ) >"$lanes/slurm.log" 2>&1 &
  slurm_lane=$!
  trap 'trap - INT TERM; kill 0' INT TERM  # stopped: the slurm lane too
  echo "test.sh: the slurm lane (then the old-TF pass) runs in the background; its output comes at the end" >&2
  TFS_TESTS_WINDOW= nice -n 10 "$venv/bin/python" -m pytest -ra --full -m "not tf and not slurm" || status=$?
  took "side by side (beside the slurm lane)"
  rc=0
  TFS_TESTS_LANE=tf "$venv/bin/python" -m pytest -ra --full --durations=40 -m "tf and not slurm" || rc=$?
  took "tf lane"
  if ((rc > status)); then status=$rc; fi
  if ((old_tf)); then
    old_tf_chunks || rc=$?
    took "old TF chunks (main lane)"
    if ((rc > status)); then status=$rc; fi
  fi
  wait "$slurm_lane" || true
  took "waiting for the slurm lane"
  echo "test.sh: ===== the slurm lane's output, then the old-TF pass's =====" >&2
  cat "$lanes/slurm.log" >&2 || true
  read -r rc slurm_s old_rc old_s <"$lanes/status" || { rc=1 slurm_s=? old_rc=0 old_s=?; }
  echo "test.sh: the slurm lane ended with status $rc after $slurm_s s, its old-TF chunks with $old_rc after" \
       "$old_s s" >&2
  times+=("(slurm lane $slurm_s s, then old TF chunks $old_s s)")
  for r in "$rc" "$old_rc"; do if ((r > status)); then status=$r; fi; done
  rm -rf "$lanes"
elif (($# == 0)); then  # the full command, one part after another (see the top)
  "$venv/bin/python" -m pytest -ra --full -m "not tf and not slurm" || status=$?
  took "side by side"
  rc=0
  "$venv/bin/python" -m pytest -ra --full --durations=80 -m "tf or slurm" || rc=$?
  took "one at a time"
  if ((rc > status)); then status=$rc; fi
  if ((old_tf)); then
    rc=0
    old_tf_pass || rc=$?
    took "old TF"
    if ((rc > status)); then status=$rc; fi
  fi
else
  "$venv/bin/python" -m pytest -ra "$@" || status=$?
  took pytest
  if ((old_tf)); then
    rc=0
    old_tf_pass "$@" || rc=$?
    took "old TF"
    if ((rc > status)); then status=$rc; fi
  fi
fi
echo "test.sh: $(( $(date +%s) - started )) s in all: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g')" >&2
exit "$status"
