"""The pieces of checkpoint-and-requeue with plain data: the requeue decision, the checkpoint step,
the stop delay, signals to a stop request (also through real signals), and batch-step end to end
with stand-ins for srun, squeue and scontrol."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host.settings import MAX_REQUEUES, count_from
from tf_for_slurm.plan.requeue import (EXIT_REQUEUE_LIMIT, EXIT_TERMINATED, LOST_STATUS, checkpoint_step, decide,
                                       signal_name, stop_delay)
from tf_for_slurm.host.stop_request import StopRequest, signals_from_env

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


# -- the decision ------------------------------------------------------------------------------
@pytest.mark.parametrize("sig,status,restarts,limit,step,target,requeue,exit_status,words", [
    ("USR1", 0, 0, 10, 300, 800, True, 0, ["requeue 1 of at most 10", "global step 300", "towards 800"]),
    ("SIGUSR1", 0, 9, 10, 700, 800, True, 0, ["requeue 10 of at most 10"]),
    ("10", 0, 0, 10, None, None, True, 0, ["no checkpoint yet"]),
    ("USR2", 0, 0, 10, 1, 800, True, 0, ["SIGUSR2"]),
    # the limit
    ("USR1", 0, 10, 10, 700, 800, False, EXIT_REQUEUE_LIMIT, ["after 10 requeues", "TF_SLURM_MAX_REQUEUES=10"]),
    ("USR1", 0, 0, 0, 700, 800, False, EXIT_REQUEUE_LIMIT, ["limit"]),
    # a step that failed by its program's own verdict (1-127) is never requeued, whatever the signal
    ("USR1", 1, 0, 10, 300, 800, False, 1, ["failed (status 1)"]),
    ("", 3, 0, 10, None, None, False, 3, ["failed (status 3)"]),
    # a lost task or one killed by a signal: worth another run from the checkpoint, within the limit
    ("USR1", 143, 0, 10, 300, 800, True, 0, ["status 143 (a task killed by signal 15)", "requeue 1"]),
    ("", 137, 0, 10, 300, 800, True, 0, ["signal 9", "global step 300"]),
    ("", LOST_STATUS, 2, 10, 300, 800, True, 0, ["a task was lost", "requeue 3 of at most 10"]),
    ("", LOST_STATUS, 0, 10, None, 800, False, LOST_STATUS, ["no checkpoint step is known"]),
    ("", 137, 10, 10, 300, 800, False, EXIT_REQUEUE_LIMIT, ["after 10 requeues"]),
    ("", 137, 0, 10, 800, 800, False, 0, ["at the target"]),
    ("TERM", 137, 0, 10, 300, 800, False, 137, ["failed (status 137)"]),  # scancel: no requeue
    # no signal: training ended on its own
    ("", 0, 0, 10, 800, 800, False, 0, ["without a time-limit warning"]),
    (None, 0, 2, 10, 800, 800, False, 0, ["without"]),
    # the target reached before the warning mattered
    ("USR1", 0, 0, 10, 800, 800, False, 0, ["at the target"]),
    ("USR1", 0, 0, 10, 900, 800, False, 0, ["at the target"]),
    # SIGTERM: scancel or preemption, never requeued by us
    ("TERM", 0, 0, 10, 300, 800, False, EXIT_TERMINATED, ["not a time-limit warning", "not requeued"]),
    ("SIGTERM", 0, 0, 10, None, None, False, EXIT_TERMINATED, ["scancel"]),
    ("HUP", 0, 0, 10, 300, 800, False, 1, ["not a time-limit warning"]),
])
def test_decide(sig, status, restarts, limit, step, target, requeue, exit_status, words):
    d = decide(sig, status, restarts, limit, checkpoint_step=step, target=target, limit_name=MAX_REQUEUES)
    assert (d.requeue, d.exit_status) == (requeue, exit_status), d
    for w in words:
        assert w in d.reason, (w, d.reason)


@pytest.mark.parametrize("restarts,start,step,target,requeue,exit_status,words", [
    (0, 100, 300, 800, True, 0, ["status 42", "requeue 1 of at most 10", "global step 300"]),
    (0, None, 300, None, True, 0, ["requeue 1"]),
    (0, 300, 300, 800, False, 42, ["saved nothing past global step 300"]),  # no progress: no loop
    (0, None, None, 800, False, 42, ["no checkpoint step is known"]),
    (0, 100, 800, 800, False, 0, ["at the target"]),
    (10, 100, 300, 800, False, EXIT_REQUEUE_LIMIT, ["after 10 requeues"]),
])
def test_a_checkpointed_status_requeues_after_progress(restarts, start, step, target, requeue, exit_status, words):
    """42, TensorFlow's PreemptionCheckpointHandler exit on non-GCP machines: checkpointed, run again."""
    for sig in ("", "USR1"):
        d = decide(sig, 42, restarts, 10, checkpoint_step=step, target=target, start_step=start)
        assert (d.requeue, d.exit_status) == (requeue, exit_status), d
        for w in words:
            assert w in d.reason, (w, d.reason)


@pytest.mark.parametrize("sig,delivered,requeue,exit_status", [
    ("USR1", False, False, 0),  # held until the margin, training finished first: never requeued
    ("USR1", True, True, 0),
    ("TERM", False, False, EXIT_TERMINATED),
])
def test_a_warning_the_step_never_got_does_not_requeue(sig, delivered, requeue, exit_status):
    d = decide(sig, 0, 0, 10, checkpoint_step=300, start_step=100, delivered=delivered)
    assert (d.requeue, d.exit_status) == (requeue, exit_status), d
    if not delivered and sig == "USR1":
        assert "before SIGUSR1 was passed on" in d.reason, d


@pytest.mark.parametrize("start,step,requeue", [
    (None, 300, True),   # first run: any checkpoint is progress
    (None, None, True),  # no checkpoint we can read: cannot judge, bounded by the limit
    (200, 300, True),
    (300, 300, False),   # nothing saved past the start: the next run would stop in the same place
    (300, 250, False),
    (300, None, True),
])
def test_decide_needs_progress_to_requeue(start, step, requeue):
    d = decide("USR1", 0, 1, 10, checkpoint_step=step, target=800, start_step=start)
    assert d.requeue is requeue, d
    if not requeue:
        assert d.exit_status == EXIT_REQUEUE_LIMIT and "saved nothing past global step" in d.reason, d


def test_a_run_slurm_started_late_is_requeued_even_without_progress():
    """The controller away as a run began (its shell ran 12 s after StartTime, measured in bench_chaos): the
    time lost is Slurm's, not the start-up's; requeued all the same, within the requeue limit."""
    d = decide("USR1", 0, 2, 10, checkpoint_step=731, target=800, start_step=731, late_start=12.0)
    assert d.requeue and "began 12 s after Slurm started it" in d.reason, d
    assert not decide("USR1", 0, 2, 10, checkpoint_step=731, target=800, start_step=731, late_start=3.0).requeue
    assert not decide("USR1", 0, 10, 10, checkpoint_step=731, target=800, start_step=731, late_start=12.0).requeue


@pytest.mark.parametrize("value,name", [("USR1", "USR1"), ("sigusr1", "USR1"), ("SIGTERM", "TERM"), ("15", "TERM"),
                                        ("10", "USR1"), ("", ""), (None, ""), (" usr2 ", "USR2")])
def test_signal_name(value, name):
    assert signal_name(value) == name


@pytest.mark.parametrize("text,step", [
    ('model_checkpoint_path: "model.ckpt-800"\nall_model_checkpoint_paths: "model.ckpt-500"\n', 800),
    ('model_checkpoint_path: "/abs/dir/model.ckpt-12"\n', 12),
    ('model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-1"\n', 3),
    ('all_model_checkpoint_paths: "ckpt-1"\n', None),
    ('model_checkpoint_path: "weights"\n', None),
    ("", None),
    ('model_checkpoint_path: "a-b/ckpt-0"\n', 0),
])
def test_checkpoint_step(text, step):
    assert checkpoint_step(text) == step


@pytest.mark.parametrize("now,end,margin,delay", [
    (100.0, 190.0, 30, 60.0),   # warned 90 s before the limit (60 s early): wait until 30 s are left
    (100.0, 130.0, 30, 0.0),    # on time
    (100.0, 110.0, 30, 0.0),    # late
    (100.0, None, 30, 0.0),     # EndTime unknown: at once
    (100.0, 400.0, 0, 300.0),
])
def test_stop_delay(now, end, margin, delay):
    assert stop_delay(now, end, margin) == pytest.approx(delay)


@pytest.mark.parametrize("now,start,end,margin,step_started,delay", [
    # a 1-minute job warned as it starts: the margin is at most a quarter of the limit (15 s), not 60 s
    (1000.0, 1000.0, 1060.0, 60, None, 45.0),
    (1000.0, 0.0, 7200.0, 60, None, 6140.0),      # a 2-hour job: the margin as given
    # the step started 2 s ago: its tasks cannot take a signal yet; told START_GRACE s after the start
    (1000.0, 900.0, 1030.0, 60, 998.0, 8.0),
    (1000.0, None, None, 60, 998.0, 8.0),         # EndTime unknown: still not during start-up
    (1000.0, 900.0, 1008.0, 60, 999.0, 3.0),      # but never later than 5 s before the end
    (1000.0, 900.0, 1004.0, 60, 999.0, 0.0),
])
def test_stop_delay_adapts_to_short_limits_and_start_up(now, start, end, margin, step_started, delay):
    assert stop_delay(now, end, margin, start_time=start, step_started=step_started) == pytest.approx(delay)


def test_count_from_env():
    assert count_from({}, "TF_SLURM_MAX_REQUEUES", 10) == 10
    assert count_from({"TF_SLURM_MAX_REQUEUES": " 3 "}, "TF_SLURM_MAX_REQUEUES", 10) == 3
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(UsageError, match=r"TF_SLURM_MAX_REQUEUES='.*': expected a whole number"):
            count_from({"TF_SLURM_MAX_REQUEUES": bad}, "TF_SLURM_MAX_REQUEUES", 10)


# -- the stop request --------------------------------------------------------------------------
def test_stop_request_records_the_first_signal_only():
    now = [10.0]
    stop = StopRequest(clock=lambda: now[0])
    assert not stop.requested and stop.seconds_since() is None
    assert stop.notify("SIGUSR1") is True
    now[0] = 12.5
    assert stop.notify("TERM") is False
    assert stop.requested and stop.signal == "USR1" and stop.count == 2
    assert stop.seconds_since() == pytest.approx(2.5)


@pytest.mark.parametrize("value,names", [("", ("USR1", "USR2", "TERM")), ("USR1", ("USR1",)), ("usr2,SIGTERM", ("USR2", "TERM")),
                                         ("none", ()), ("0", ())])
def test_stop_signals_from_env(value, names):
    assert signals_from_env({"TF_SLURM_STOP_SIGNALS": value}) == names


@pytest.mark.parametrize("value", ["KILL", "NOPE", "USR1,STOP"])
def test_stop_signals_bad_names(value):
    with pytest.raises(UsageError, match="TF_SLURM_STOP_SIGNALS="):
        signals_from_env({"TF_SLURM_STOP_SIGNALS": value})


def test_real_signal_sets_the_request_and_uninstall_restores():
    before = signal.getsignal(signal.SIGUSR1)
    with StopRequest(("USR1",)) as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(5) and stop.signal == "USR1"
    assert signal.getsignal(signal.SIGUSR1) == before


HOLD_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from tf_for_slurm.stop_request import hold_warning_signals, shared_stop_request
    hold_warning_signals(float(sys.argv[1]))
    os.kill(os.getpid(), signal.SIGUSR1)   # the warning arrives before the program handles it
    time.sleep(0.1)                        # the program's start-up, well within the hold
    if sys.argv[2] == "adopt":
        stop = shared_stop_request()
        print("requested", stop.requested, stop.signal, flush=True)
        time.sleep(float(sys.argv[1]) + 0.3)  # the hold expires 0.3 s before this ends: a taken-over signal
        print("alive", flush=True)            # is not re-sent
    else:
        time.sleep(float(sys.argv[1]) + 5)
        print("not reached", flush=True)
""")


@pytest.mark.timeout(60)
def test_early_warning_is_held_then_taken_over():
    r = subprocess.run([PY, "-c", HOLD_CHILD, "0.3", "adopt"], capture_output=True, text=True, timeout=30,
                       cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["requested", "True", "USR1", "alive"], r.stdout
    assert "at start-up" in r.stderr


@pytest.mark.timeout(60)
def test_early_warning_nobody_takes_is_delivered_as_without_us():
    r = subprocess.run([PY, "-c", HOLD_CHILD, "0.3", "ignore"], capture_output=True, text=True, timeout=30,
                       cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == -signal.SIGUSR1, (r.returncode, r.stdout, r.stderr)
    assert "not reached" not in r.stdout


# -- batch-step end to end, with stand-ins for srun / squeue / scontrol ---------------------------
FAKE_SRUN = """#!/bin/bash
# a step that trains until told to stop (or FAKE_LOOPS x 0.1 s): writes a checkpoint state at the step it reached
# (and `told`: when it was told, epoch seconds); FAKE_HANG=1: one that checkpoints but never ends (a task
# that ignores the stop), until SIGTERM (`termed`) or the requeue (FAKE_SCONTROL kills it, as Slurm's does)
trap 'date +%s.%N > "$FAKE_DIR/told"
      echo "model_checkpoint_path: \\"model.ckpt-$FAKE_STEP\\"" > "$FAKE_DIR/checkpoint"
      [ -n "$FAKE_HANG" ] || exit 0' USR1 USR2
trap 'echo TERM > "$FAKE_DIR/termed"; date +%s.%N > "$FAKE_DIR/told"
      echo "model_checkpoint_path: \\"model.ckpt-$FAKE_STEP\\"" > "$FAKE_DIR/checkpoint"; exit 0' TERM
echo $$ > "$FAKE_DIR/srun.pid"
echo "${TF_SLURM_MIN_WORKERS:-unset}" > "$FAKE_DIR/min_workers"
echo "${TF_SLURM_BATCH_HOST:-unset} ${TF_SLURM_REQUEUES_LEFT:-unset}" > "$FAKE_DIR/batch_host"
echo started > "$FAKE_DIR/started"
for i in $(seq 1 ${FAKE_LOOPS:-40}); do sleep 0.1; done
echo "model_checkpoint_path: \\"model.ckpt-$FAKE_TARGET\\"" > "$FAKE_DIR/checkpoint"
"""
# EndTime: FAKE_END (epoch seconds) when set, else FAKE_LEFT s after each call
FAKE_SQUEUE = "#!/bin/bash\ndate -d @${FAKE_END:-$(( $(date +%s) + ${FAKE_LEFT:-100} ))} +%Y-%m-%dT%H:%M:%S\n"
# `scontrol requeue` ends the job's running step, as Slurm's does
# FAKE_REQUEUE_TERM=1: as Slurm does when the requeue ends the run, SIGTERM to batch-step and to scontrol itself
FAKE_SCONTROL = ("#!/bin/bash\necho \"$@\" >> \"$FAKE_DIR/scontrol.args\"\n"
                 "[ \"$1\" = requeue ] && [ -z \"$FAKE_SCONTROL_RC\" ] && kill -KILL $(cat \"$FAKE_DIR/srun.pid\") 2>/dev/null\n"
                 "if [ -n \"$FAKE_REQUEUE_TERM\" ]; then kill -TERM $PPID; kill -TERM $$; sleep 0.3; fi\n"
                 "exit ${FAKE_SCONTROL_RC:-0}\n")


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("squeue", FAKE_SQUEUE), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
           "SLURM_JOB_ID": "77", "PYTHONPATH": str(REPO), "FAKE_STEP": "300", "FAKE_TARGET": "800"}
    env.pop("SLURM_RESTART_COUNT", None)
    env.pop("TF_SLURM_MAX_REQUEUES", None)
    return tmp_path, env


GRACE_0 = ("--start-grace", "0")  # the stand-in step takes signals at once (a test may pass its own)


def _batch_step(tmp_path, env, signo=None, *extra, start_step=None):
    (tmp_path / "started").unlink(missing_ok=True)
    (tmp_path / "checkpoint").unlink(missing_ok=True)
    if start_step is not None:  # the checkpoint a previous run left
        (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{start_step}"\n')
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "batch-step", "--checkpoint-dir", str(tmp_path),
                             "--target", "800", *GRACE_0, *extra, "--", "srun", "x"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if signo is not None:
        deadline = time.monotonic() + 20
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline, "the stand-in srun never started"
            time.sleep(0.05)
        proc.send_signal(signo)
    out, err = proc.communicate(timeout=40)
    return proc.returncode, out + err


@pytest.mark.timeout(60)
def test_batch_step_warning_requeues_at_the_margin(fake_slurm):
    tmp_path, env = fake_slurm
    t0 = time.monotonic()
    # FAKE_LOOPS=300: the stand-in step runs 30 s unless told, so it is always told first (it would end
    # by itself after 4 s, about the moment it is told: the two raced)
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "32", "FAKE_LOOPS": "300"}, signal.SIGUSR1,
                          "--warn-margin", "30")
    assert rc == 0, log
    assert time.monotonic() - t0 < 15, log  # told 1-2 s after the warning (32 s left, margin 30)
    m = re.search(r"SIGUSR1 \(3[12] s before the time limit\): telling the step's tasks to stop at their next step "
                  r"in ([0-9]+) s", log)
    assert m and 1 <= int(m.group(1)) <= 2, log
    # held, not passed on at once: squeue's EndTime is in whole seconds, at least 31 s after the
    # warning, so the wait is over 1 s; `started` was written before the test sent the warning
    held = float((tmp_path / "told").read_text()) - (tmp_path / "started").stat().st_mtime
    assert 1.0 < held < 5, (held, log)
    told = re.search(r"(\d\d):(\d\d):(\d\d) passed SIGUSR1 on to the step", log)
    warned = re.search(r"(\d\d):(\d\d):(\d\d) SIGUSR1 \(", log)
    secs = [int(a) * 3600 + int(b) * 60 + int(c) for a, b, c in (warned.groups(), told.groups())]
    # the lines say when they were written, in whole seconds: the hold is `held` above; a loaded machine
    # may write the first line late, in the second of the second (CI, the side-by-side tests niced beside
    # the Slurm tests' jobs: both at 12:31:20 with held > 1 s)
    assert 0 <= (secs[1] - secs[0]) % 86400 <= 4, log
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"]
    assert "requeued job 77" in log and "requeue 1 of at most 10" in log and "global step 300" in log


@pytest.mark.timeout(60)
def test_batch_step_stops_the_step_at_the_margin_when_no_warning_comes(fake_slurm):
    # Slurm's warning can be lost (sent before the batch shell ran): the step is told all the same at
    # the margin, and the job requeued, instead of running into the limit (the stand-in runs 30 s untold)
    tmp_path, env = fake_slurm
    t0 = time.monotonic()
    rc, log = _batch_step(tmp_path, {**env, "FAKE_END": str(int(time.time()) + 32), "FAKE_LOOPS": "300"}, None,
                          "--warn-margin", "30")
    assert rc == 0, log
    assert time.monotonic() - t0 < 15, log
    assert "no time-limit warning came by" in log and "passed SIGUSR1 on to the step" in log, log
    assert (tmp_path / "told").exists(), log
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"], log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_step, requeued", [(None, True), (300, False)])
def test_batch_step_decides_before_the_limit_when_the_step_never_ends(fake_slurm, start_step, requeued):
    # told at the margin, the step checkpoints but never ends (a slow checkpoint, a task that ignores the
    # stop): waiting would let Slurm end the job TIMEOUT, never requeued; batch-step decides 3 s before the
    # end instead: a requeue (which ends the step) after progress, else SIGTERM and the decision's status
    tmp_path, env = fake_slurm
    (tmp_path / "termed").unlink(missing_ok=True)
    end = int(time.time()) + 14
    t0 = time.time()
    folder = tmp_path / "job"
    folder.mkdir()
    rc, log = _batch_step(tmp_path, {**env, "FAKE_END": str(end), "FAKE_LOOPS": "600", "FAKE_HANG": "1",
                                     "TF_SLURM_JOB_DIR": str(folder)}, None,
                          "--warn-margin", "8", start_step=start_step)
    assert time.time() < end - 1, log  # decided before the limit, not at it
    record = json.loads((folder / "batch.json").read_text())
    assert record["status"] is None and record["checkpoint"] == 300, record  # decided while the step still ran
    assert record["state"] == ("requeued" if requeued else "ended"), record
    assert time.time() - t0 > 6, log  # not before the step was told and given its time
    assert re.search(r"the step has not ended \d+ s after its tasks were told to stop, [34] s before the time limit: "
                     r"deciding now, from the last checkpoint", log), log
    assert "step still running" in log and "checkpoint at global step 300" in log, log
    if requeued:
        assert rc == 0, log
        assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"], log
        assert "requeued job 77" in log and "requeue 1 of at most 10" in log, log
        assert not (tmp_path / "termed").exists(), log
    else:
        assert rc == EXIT_REQUEUE_LIMIT, log
        assert "this run saved nothing past global step 300" in log and "requeued job" not in log, log
        assert not (tmp_path / "scontrol.args").exists(), log
        assert (tmp_path / "termed").exists(), log  # ended, not left to the limit


@pytest.mark.timeout(60)
def test_batch_step_a_requeue_whose_sigterm_reaches_scontrol_is_still_a_requeue(fake_slurm):
    # measured under real Slurm: the requeue's SIGTERM to the run's processes killed scontrol before it
    # read the answer (status -15), and batch-step said the requeue failed and ended 1, though the job
    # was requeued; scontrol now ignores SIGTERM, and batch-step's own SIGTERM changes nothing
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "3600", "FAKE_LOOPS": "600", "FAKE_REQUEUE_TERM": "1"},
                          signal.SIGUSR2, "--warn-margin", "60")
    assert rc == 0, log
    assert "requeued job 77" in log and "failed" not in log, log
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"], log


def test_batch_step_backstop_waits_again_when_the_limit_was_raised(monkeypatch):
    # the timer fires at the old EndTime's margin; squeue now says later (scontrol update TimeLimit)
    from tf_for_slurm.supervise import batch_step

    step = batch_step._Step("77", 30.0)
    calls = []
    monkeypatch.setattr(step, "arm_backstop", lambda: calls.append("again"))
    monkeypatch.setattr(step, "handle", lambda *args: calls.append("stop"))
    monkeypatch.setattr(batch_step, "job_times", lambda job, *_a: (None, 2000.0))
    step._backstop(1000.0)
    assert calls == ["again"]
    monkeypatch.setattr(batch_step, "job_times", lambda job, *_a: (None, 1000.0))  # unchanged: stop now
    step._backstop(1000.0)
    assert calls == ["again", "stop"]


@pytest.mark.timeout(60)
def test_batch_step_no_requeue_on_sigterm_or_at_the_limit_or_at_the_target(fake_slurm):
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, env, signal.SIGTERM)
    assert rc == EXIT_TERMINATED and "not a time-limit warning" in log, log
    rc, log = _batch_step(tmp_path, {**env, "SLURM_RESTART_COUNT": "3"}, signal.SIGUSR1, "--max-requeues", "3",
                          "--warn-margin", "1000")
    assert rc == EXIT_REQUEUE_LIMIT and "after 3 requeues" in log, log
    rc, log = _batch_step(tmp_path, {**env, "FAKE_STEP": "800"}, signal.SIGUSR1, "--warn-margin", "1000")
    assert rc == 0 and "at the target" in log, log
    assert not (tmp_path / "scontrol.args").exists()


@pytest.mark.timeout(60)
def test_batch_step_without_a_signal_ends_with_the_steps_status(fake_slurm):
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LOOPS": "2"})  # the stand-in step ends by itself after 0.2 s
    assert rc == 0 and "without a time-limit warning" in log and "srun exit status 0" in log, log
    assert not (tmp_path / "scontrol.args").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra,seen", [((), "unset"), (("--min-workers", "2"), "2")])
def test_batch_step_gives_the_step_its_minimum_of_workers(fake_slurm, extra, seen):
    """The tasks plan a role list longer than a smaller allocation with the same minimum (issue 43)."""
    tmp_path, env = fake_slurm
    env.pop("TF_SLURM_MIN_WORKERS", None)
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LOOPS": "2"}, None, *extra)
    assert rc == 0 and (tmp_path / "min_workers").read_text().strip() == seen, log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("node, restarts, extra, seen", [
    ("node1", "0", (), "node1 10"), ("node4", "3", ("--max-requeues", "5"), "node4 2"),
    ("node1", "7", ("--max-requeues", "5"), "node1 0"), ("", "0", (), "unset unset"),
])
def test_batch_step_tells_the_step_its_node_and_the_requeues_left(fake_slurm, node, restarts, extra, seen):
    """A task that lost the step's supervisor on the batch host requeues within this budget (issue 43
    item 2); outside a Slurm node (no SLURMD_NODENAME), nothing is set and nobody checks."""
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_LOOPS": "2", "SLURM_RESTART_COUNT": restarts}
    env.pop("SLURMD_NODENAME", None)
    if node:
        env["SLURMD_NODENAME"] = node
    rc, log = _batch_step(tmp_path, env, None, *extra)
    assert rc == 0 and (tmp_path / "batch_host").read_text().strip() == seen, log


@pytest.mark.timeout(60)
def test_batch_step_does_not_requeue_a_step_that_ended_while_the_warning_was_held(fake_slurm):
    """A warning an hour before the limit is held until the margin; the step ends by itself first (exit
    0, its checkpoint short of --target): training finished on its own, no requeue."""
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "3600", "FAKE_LOOPS": "5", "FAKE_TARGET": "500"},
                          signal.SIGUSR1, "--warn-margin", "60")
    assert rc == 0 and "training ended on its own (global step 500) before SIGUSR1 was passed on" in log, log
    assert "passed SIGUSR1 on to the step" not in log, log
    assert not (tmp_path / "scontrol.args").exists()


@pytest.mark.timeout(60)
def test_batch_step_passes_sigusr2_on_at_once_and_requeues(fake_slurm):
    """USR2 (scancel --batch --signal=USR2): a stop asked for now, not held until the margin."""
    tmp_path, env = fake_slurm
    t0 = time.monotonic()
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "3600", "FAKE_LOOPS": "600"}, signal.SIGUSR2,
                          "--warn-margin", "60")
    assert rc == 0 and "a stop asked for now" in log and "passed SIGUSR2 on to the step" in log, log
    assert time.monotonic() - t0 < 40, log  # the stand-in step would run 60 s if it were not told
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"]


@pytest.mark.timeout(60)
def test_batch_step_never_stops_a_step_during_its_start_up(fake_slurm):
    """A stop asked for as the step starts (USR2 at once; a 1-minute job's warning) waits --start-grace
    seconds after srun started: the tasks' supervisors cannot take a signal before that."""
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "3600", "FAKE_LOOPS": "600"}, signal.SIGUSR2,
                          "--warn-margin", "60", "--start-grace", "1")
    # the USR2 the test sends once the stand-in runs can still reach batch-step before it recorded srun's
    # start (then it is held as one due before the start): either way it waits the grace
    assert rc == 0 and ("passing it on to the step in 1 s, once its tasks have started" in log
                        or "the step just started: telling its tasks to stop in 1 s, once they can take it" in log), log
    # the grace counts from srun's start, just before the stand-in wrote `started` (and before the
    # test sent USR2): the stand-in is told about 1 s after `started`, never at once
    held = float((tmp_path / "told").read_text()) - (tmp_path / "started").stat().st_mtime
    assert 0.8 < held < 5, (held, log)


@pytest.mark.timeout(60)
def test_batch_step_a_warning_before_srun_started_waits_for_the_tasks(fake_slurm):
    """The batch shell's trap wrote the warning as the job started (a short job's warning at start-up,
    29 s left, margin 60): it is passed on --start-grace s after srun started, not as srun starts."""
    tmp_path, env = fake_slurm
    warn = tmp_path / "warn"
    warn.write_text(f"USR1 {time.time():.3f}\n")
    rc, log = _batch_step(tmp_path, {**env, "FAKE_LEFT": "30", "FAKE_LOOPS": "600"}, None, "--warn-margin", "60",
                          "--start-grace", "1", "--warn-file", str(warn))
    # the delay is counted from srun's start (1 s), printed once the file was read and squeue answered:
    # "in 1 s", or "in 0 s" on a loaded machine where that took over half a second
    assert rc == 0 and re.search(r"telling the step's tasks to stop at their next step in [01] s", log), log
    assert "passed SIGUSR1 on to the step" in log and "requeued job 77" in log, log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("status,why", [
    (42, "checkpointed, e.g. PreemptionCheckpointHandler"),  # TensorFlow's PreemptionCheckpointHandler
    (LOST_STATUS, "a task was lost: its node failed or hung"),  # exec: a supervisor vanished or went silent
    (137, "a task killed by signal 9"),  # the OOM killer, restarts (if any) spent
])
def test_batch_step_requeues_a_step_that_ended_retryably_after_a_checkpoint(fake_slurm, status, why):
    """Without any warning: the checkpoint advanced past the run's start, so another run resumes."""
    tmp_path, env = fake_slurm
    (tmp_path / "bin" / "srun").write_text(
        '#!/bin/bash\necho "model_checkpoint_path: \\"model.ckpt-${FAKE_STEP}\\"" > "$FAKE_DIR/checkpoint"\n'
        f'exit {status}\n')
    rc, log = _batch_step(tmp_path, env, start_step=100)
    assert rc == 0 and f"status {status} ({why})" in log and "requeued job 77" in log, log
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "77"]


@pytest.mark.timeout(60)
def test_batch_step_does_not_requeue_a_step_whose_program_failed(fake_slurm):
    tmp_path, env = fake_slurm
    (tmp_path / "bin" / "srun").write_text(
        '#!/bin/bash\necho "model_checkpoint_path: \\"model.ckpt-${FAKE_STEP}\\"" > "$FAKE_DIR/checkpoint"\nexit 3\n')
    rc, log = _batch_step(tmp_path, env, start_step=100)
    assert rc == 3 and "requeued job" not in log and not (tmp_path / "scontrol.args").exists(), log


@pytest.mark.timeout(60)
def test_batch_step_failed_requeue_says_why(fake_slurm):
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "FAKE_SCONTROL_RC": "1"}, signal.SIGUSR1, "--warn-margin", "1000")
    assert rc == 1 and "scontrol requeue 77 failed" in log and "--requeue" in log, log


def test_stop_on_signal_hook_requests_a_stop_once_the_signal_arrived():
    from tf_for_slurm.runtime.hooks import StopOnSignalHook

    class RunContext:
        stops = 0

        def request_stop(self):
            self.stops += 1

    class Values:
        results = 412

    stop = StopRequest()
    hook = StopOnSignalHook(stop, name="worker:0")  # begin() (TensorFlow) not needed for the decision
    ctx = RunContext()
    hook.after_run(ctx, Values())
    assert ctx.stops == 0 and hook.stopped_at_step is None
    stop.notify("USR1")
    hook.after_run(ctx, Values())
    hook.after_run(ctx, Values())
    assert ctx.stops == 1 and hook.stopped_at_step == -1  # no global step tensor: step unknown


def test_launch_refuses_a_non_bool_stop_on_signal():
    from tf_for_slurm.runtime import launch

    with pytest.raises(UsageError, match="stop_on_signal="):
        launch(lambda ctx: None, tasks=["ps", "worker"], stop_on_signal="yes")


@pytest.mark.timeout(60)
def test_batch_step_sigterm_after_a_warning_is_passed_on_and_prevents_the_requeue(fake_slurm):
    tmp_path, env = fake_slurm
    (tmp_path / "started").unlink(missing_ok=True)
    # The stand-in srun may write `started` before batch-step has seen it start: the signals then wait
    # for the start grace (0 here) and the step must not end by itself meanwhile (FAKE_LOOPS=300: 30 s;
    # with 4 s it reached its target first, under load, and ended 0 unsignalled)
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "batch-step", "--target", "800", "--checkpoint-dir",
                             str(tmp_path), "--warn-margin", "30", *GRACE_0, "--", "srun", "x"],
                            env={**env, "FAKE_LEFT": "100", "FAKE_LOOPS": "300"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)  # 100 s left: the tasks would be told in 70 s, but the user cancels
    proc.send_signal(signal.SIGTERM)  # (either order ends the same way)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_TERMINATED, out
    assert "passed SIGTERM on to the step" in out and "not a time-limit warning" in out, out
    assert not (tmp_path / "scontrol.args").exists()


@pytest.mark.timeout(60)
def test_batch_step_does_not_requeue_a_run_that_saved_nothing_new(fake_slurm):
    tmp_path, env = fake_slurm
    rc, log = _batch_step(tmp_path, {**env, "SLURM_RESTART_COUNT": "1"}, signal.SIGUSR1, "--warn-margin", "1000",
                          start_step=300)
    assert rc == EXIT_REQUEUE_LIMIT and "saved nothing past global step 300" in log, log
    assert "run 2 of job 77 (requeued 1 time(s); checkpoint at 300)" in log, log
    assert not (tmp_path / "scontrol.args").exists()
    rc, log = _batch_step(tmp_path, {**env, "SLURM_RESTART_COUNT": "1"}, signal.SIGUSR1, "--warn-margin", "1000",
                          start_step=200)
    assert rc == 0 and "requeue 2 of at most 10" in log, log


SHIM_CHILD = textwrap.dedent("""
    import os, signal, time
    os.kill(os.getpid(), signal.SIGUSR1)  # the warning, before this program handles anything
    time.sleep(0.3)
    from tf_for_slurm.stop_request import shared_stop_request
    stop = shared_stop_request()
    print("hold", os.environ.get("TF_SLURM_SIGNAL_HOLD"), "requested", stop.requested, stop.signal, flush=True)
""")


@pytest.mark.timeout(60)
def test_exec_shim_holds_an_early_warning_for_the_program():
    """End to end through `tf-slurm exec` (under local): the shim, not the test, installs the hold."""
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "1", "--ps", "0", "--", PY, "-c", SHIM_CHILD],
                       capture_output=True, text=True, timeout=50, cwd=str(REPO),
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "hold 15 requested True USR1" in r.stdout, (r.stdout, r.stderr[-3000:])


def test_step_in_name():
    from tf_for_slurm.plan.requeue import step_in_name

    assert step_in_name("/d/ckpt-1300") == 1300 and step_in_name("/run-3/model.ckpt-7") == 7
    assert step_in_name("/d/weights") is None


def test_job_times_and_requeue_job_read_slurms_answers():
    """squeue unanswered or unreadable: times unknown; scontrol's refusal: its last line, else its status."""
    from types import SimpleNamespace

    from tf_for_slurm.supervise.slurm_job import job_times, requeue_job

    def answer(out, rc=0, err=""):
        return lambda argv, **kw: SimpleNamespace(stdout=out, stderr=err, returncode=rc)

    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])

    start, end = (time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) for t in ("2024-05-01T10:00:00",
                                                                                "2024-05-01T11:00:00"))
    assert job_times("7", 0, run=answer("2024-05-01T10:00:00 2024-05-01T11:00:00\n")) == (start, end)
    assert job_times("7", 0, run=answer("2024-05-01T11:00:00\n")) == (None, end)
    assert job_times("7", 0, run=answer("N/A N/A\n")) == (None, None)
    assert job_times("7", 0, run=answer("2024-05-01T10:00:00 2024-05-01T11:00:00\n", 1)) == (None, None)
    assert job_times("7", 0, run=missing) == (None, None)
    assert requeue_job("7", 0, run=answer("")) is None
    assert requeue_job("7", 0, run=answer("", 1, "scontrol: error: x\nJob is not requeueable\n")) == \
        ("Job is not requeueable", False)
    assert requeue_job("7", 0, run=answer("", 2)) == ("2", False)
    assert requeue_job("7", 0, run=answer("", -9)) == ("killed by signal 9", False)
    said = []
    away = requeue_job("7", 0, said.append, run=answer("", 1, "Unable to contact slurm controller (connect failure)"))
    assert away is not None and away.away and "did not answer" in away.why and said == [away.why]


# a step whose hub wrote its end (status 0, a task lost) but whose srun still waits, as `srun --no-kill` does for
# the tasks of a lost node until Slurm marks the node down; FAKE_IGNORE_TERM=1: it ignores SIGTERM too
LINGERING_SRUN = """#!/bin/bash
if [ -n "$FAKE_IGNORE_TERM" ]; then trap '' TERM; else trap 'echo TERM > "$FAKE_DIR/termed"; exit 143' TERM; fi
echo $$ > "$FAKE_DIR/srun.pid"
printf '{"state": "ended", "status": %s, "updated_at": %s, "lost": [{"rank": 3}]}' "$FAKE_HUB_STATUS" \\
    "$(date +%s.%N)" > "$TF_SLURM_STATUS_FILE"
date +%s.%N > "$FAKE_DIR/ended"
while :; do sleep 0.1; done
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ignore_term", [False, True], ids=["ends-on-sigterm", "needs-sigkill"])
def test_an_srun_waiting_for_a_lost_nodes_tasks_is_ended_and_the_hubs_status_kept(fake_slurm, ignore_term):
    tmp_path, env = fake_slurm
    (tmp_path / "bin" / "srun").write_text(LINGERING_SRUN)
    env = {**env, "TF_SLURM_STATUS_FILE": str(tmp_path / "status.json"), "FAKE_HUB_STATUS": "0",
           "FAKE_IGNORE_TERM": "1" if ignore_term else ""}
    rc, log = _batch_step(tmp_path, env)
    took = time.time() - float((tmp_path / "ended").read_text())
    assert rc == 0, log
    assert "the step ended with status 0 3 s ago (its supervisor's status file; 1 task(s) lost) but srun still runs" \
        in log, log
    assert re.search(r"srun exit status (143|137) \(ended by batch-step\); the step's: 0", log), log
    assert (tmp_path / "termed").exists() != ignore_term
    assert 3 <= took < 12, (took, log)  # the lost-task linger, then SIGTERM (and 2 s later SIGKILL)
    assert "not requeued" not in log and "requeued job" not in log, log


# a step that loses a node: the first srun writes the hub's status file (FAKE_STATUS, with "NOW" for the time)
# (FAKE_STATUS_2: the second too, a second loss during the relaunch) and ends as FAKE_FIRST says ("69": srun reports two tasks' 69 and exits 69; "linger": it reports them but then
# waits, as srun --no-kill does for a lost node's task); every later srun records its words and exits 0
RELAUNCH_SRUN = """#!/bin/bash
echo $$ > "$FAKE_DIR/srun.pid"
n=$(ls "$FAKE_DIR"/argv.* 2>/dev/null | wc -l)
printf '%s\\n' "$@" > "$FAKE_DIR/argv.$n"
if [ "$n" = 1 ] && [ -n "$FAKE_STATUS_2" ]; then FAKE_STATUS="$FAKE_STATUS_2"; elif [ "$n" != 0 ]; then exit 0; fi
echo "${FAKE_STATUS//NOW/$(date +%s.%N)}" > "$TF_SLURM_JOB_DIR/status.json"
echo 'model_checkpoint_path: "model.ckpt-400"' > "$FAKE_DIR/checkpoint"
echo "srun: error: $FAKE_FAILED: Exited with exit code 69" >&2
[ "$FAKE_FIRST" = linger ] || exit 69
trap 'exit 143' TERM
while :; do sleep 0.1; done
"""
TF1_ROWS = [[0, "ps", 0, "node1", "running", None, 0, None], [1, "worker", 0, "node2", "running", None, 0, None],
            [2, "worker", 1, "node3", "running", None, 0, None]]


def _status(state, lost_rank=None, first=None, nodes=("node1", "node2", "node3")):
    rows = [list(r) for r in TF1_ROWS]
    for row, node in zip(rows, nodes):
        row[3] = node
    if lost_rank is not None:
        rows[lost_rank][4] = "lost"
    progress = {"1": {"step": 400, "rate": 2.5, "loss": 0.3, "history": [[1.0, 390], [2.0, 400]]},
                "2": {"step": 380, "rate": 2.4, "loss": None, "history": [[1.0, 370]]}}
    return json.dumps({"state": state, "status": 69 if state == "ended" else None, "updated_at": "NOW",
                       "chief": 1, "first_failure": first, "lost": [], "tasks": rows,
                       "progress": progress}).replace('"NOW"', "NOW")


def _relaunch_run(tmp_path, env, nodelist, *extra):
    (tmp_path / "bin" / "srun").write_text(RELAUNCH_SRUN)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-300"\n')
    env = {**env, "TF_SLURM_JOB_DIR": str(job_dir), "SLURM_JOB_NODELIST": nodelist}
    env.pop("TF_SLURM_STATUS_FILE", None)
    r = subprocess.run([PY, "-m", "tf_for_slurm", "batch-step", "--checkpoint-dir", str(tmp_path), "--target", "800",
                        *GRACE_0, *extra, "--", "srun", "-l", "--mem-per-cpu=100M", "-n", "3", "python", "train.py",
                        "--mem=7"], env=env, capture_output=True, text=True, timeout=60)
    argv = [(tmp_path / f"argv.{i}").read_text().split("\n")[:-1] for i in range(3) if (tmp_path / f"argv.{i}").exists()]
    batch = json.loads((job_dir / "batch.json").read_text())
    return r.returncode, r.stdout + r.stderr, argv, batch


@pytest.mark.timeout(60)
def test_a_step_that_lost_its_ps_node_is_relaunched_at_once_on_a_spare(fake_slurm):
    """TF1: the hub (worker 0) counted the ps lost and ended the step with 69: batch-step starts it again
    on node2, node3 and the spare node4, without node1 (the dead step still holds its resources there:
    --overlap --mem=0), and the job is not requeued."""
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_STATUS": _status("ended", 0, {"rank": 0, "node": "node1", "status": 69}),
           "FAKE_FAILED": "node[2-3]: tasks 1-2", "FAKE_FIRST": "69"}
    rc, log, argv, batch = _relaunch_run(tmp_path, env, "node[1-4]", "--spare-nodes", "1")
    assert rc == 0, log
    assert argv[0] == ["-l", "--mem-per-cpu=100M", "-n", "3", "--nodes=3", "python", "train.py", "--mem=7"], argv
    assert argv[1] == ["-l", "-n", "3", "--overlap", "--mem=0", "--nodes=3", "--nodelist=node2,node3,node4",
                       "--exclude=node1", "python", "train.py", "--mem=7"], argv
    assert re.search(r"relaunch 1 of 2: lost node1; starting the step again at once on node2,node3,node4 \(node4 in "
                     r"place of node1\), [0-9.]+ s after the step ended; it resumes from the checkpoint at global step "
                     r"400", log), log
    assert [(r["lost"], r["spares"], r["checkpoint"]) for r in batch["relaunches"]] == [(["node1"], ["node4"], 400)]
    assert "scontrol.args" not in os.listdir(tmp_path), log  # no requeue
    # the training's progress at the run's end, from the relaunched step's status.json, its history left there
    assert batch["progress"] == {"1": {"step": 400, "rate": 2.5, "loss": 0.3},
                                 "2": {"step": 380, "rate": 2.4, "loss": None}} and batch["step"] == 400, batch


@pytest.mark.timeout(60)
def test_a_step_that_lost_its_hubs_node_is_ended_and_relaunched_without_it(fake_slurm):
    """The hub's own node (worker 0 on node2) lost: it writes no end; the others end (69) and srun waits
    for it.  batch-step ends srun 10 s after it reported the failures and relaunches without node2."""
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_STATUS": _status("running"), "FAKE_FAILED": "node1: task 0", "FAKE_FIRST": "linger"}
    rc, log, argv, batch = _relaunch_run(tmp_path, env, "node[1-4]", "--spare-nodes", "1")
    assert rc == 0, log
    assert "the step ended 10 s ago (srun reported a task's failure) but srun still runs" in log, log
    assert "--nodelist=node1,node3,node4" in argv[1] and "--exclude=node2" in argv[1], argv
    assert "relaunch 1 of 2: lost node2;" in log, log


@pytest.mark.timeout(60)
def test_without_a_healthy_node_to_spare_the_requeue_decision_follows(fake_slurm):
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_STATUS": _status("ended", 2), "FAKE_FAILED": "node[1-2]: tasks 0-1", "FAKE_FIRST": "69"}
    rc, log, argv, batch = _relaunch_run(tmp_path, env, "node[1-3]")
    assert rc == 0 and len(argv) == 1, (log, argv)
    assert "lost node3; not relaunched in the allocation: 2 healthy node(s) left of the allocation's 3, the step " \
           "needs 3" in log, log
    assert "requeued job 77" in log and "a task was lost" in log, log
    assert "relaunches" not in batch


@pytest.mark.timeout(60)
def test_a_second_node_lost_during_the_relaunch_ends_in_the_requeue_decision(fake_slurm):
    """node1 lost, relaunched on node2,node3,node4; then node4 lost too: 2 healthy nodes for a step of 3
    (node1 is never used again): one line, then the requeue, and no third srun."""
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_STATUS": _status("ended", 0, {"rank": 0, "node": "node1", "status": 69}),
           "FAKE_STATUS_2": _status("ended", 2, nodes=("node2", "node3", "node4")),
           "FAKE_FAILED": "node[2-3]: tasks 1-2", "FAKE_FIRST": "69"}
    rc, log, argv, batch = _relaunch_run(tmp_path, env, "node[1-4]", "--spare-nodes", "1")
    assert rc == 0 and len(argv) == 2, (log, argv)
    assert "relaunch 1 of 2: lost node1;" in log, log
    assert "lost node4; not relaunched in the allocation: 2 healthy node(s) left of the allocation's 4, the step " \
           "needs 3" in log, log
    assert "requeued job 77" in log, log
    assert [r["lost"] for r in batch["relaunches"]] == [["node1"]], batch


@pytest.mark.timeout(60)
def test_the_relaunch_budget_is_a_bound(fake_slurm):
    tmp_path, env = fake_slurm
    env = {**env, "FAKE_STATUS": _status("ended", 2), "FAKE_FAILED": "node[1-2]: tasks 0-1", "FAKE_FIRST": "69"}
    rc, log, argv, batch = _relaunch_run(tmp_path, env, "node[1-4]", "--spare-nodes", "1", "--max-relaunches", "0")
    assert len(argv) == 1 and "relaunch" not in log and "requeued job 77" in log, log


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra,command,message", [
    (["--spare-nodes", "3"], ["srun", "x"], "--spare-nodes=3: expected fewer than the allocation's 3 node(s)"),
    (["--spare-nodes", "1"], ["mpirun", "x"], "--spare-nodes=1: expected a step command that runs srun"),
    (["--spare-nodes", "1"], ["srun", "--het-group=0,1", "x"], "not over the components of a heterogeneous job"),
    (["--max-relaunches", "two"], ["srun", "x"], "--max-relaunches='two'"),
])
def test_relaunch_options_are_checked_in_one_line(fake_slurm, extra, command, message):
    tmp_path, env = fake_slurm
    r = subprocess.run([PY, "-m", "tf_for_slurm", "batch-step", *extra, "--", *command],
                       env={**env, "SLURM_JOB_NODELIST": "node[1-3]"}, capture_output=True, text=True, timeout=30)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], (r.returncode, r.stderr)
    assert not (tmp_path / "argv.0").exists() and not (tmp_path / "started").exists()  # nothing ran


@pytest.mark.parametrize("signal,checkpoint,start", [
    (None, 1200, 1200),  # the start-up fault ended it (SIGKILL, 137): its checkpoint is where it started
    (None, None, None),  # no checkpoint known at all
    ("USR1", 1200, 1200),  # the time-limit warning came while it still waited for its peers
])
def test_a_run_that_never_trained_is_not_requeued(signal, checkpoint, start):
    """A step ended by a start-up fault (supervise.start_wait) saved nothing past its start: another run
    would only wait again (issue 42)."""
    d = decide(signal, 137 if signal is None else 0, 0, 10, checkpoint_step=checkpoint, target=5000, start_step=start)
    assert not d.requeue and "not requeued" in d.reason, d
