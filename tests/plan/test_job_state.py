"""What a job was where Slurm's word is wrong (plan/job_state.py): a job whose step had ended before the
time limit, recorded by Slurm as TIMEOUT because its controller was away when the job ended (issue 44)."""

from __future__ import annotations

import time

import pytest

from tf_for_slurm.plan.job_state import Ended, ended_before_limit, limit_at, limit_seconds, state_text


def local(text):
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


START, LIMIT = local("2024-05-01T10:00:00"), local("2024-05-01T11:00:00")
STEP_END, BATCH_END = local("2024-05-01T10:03:04"), local("2024-05-01T10:03:06")
SLURM = {"JobId": "77", "JobState": "TIMEOUT", "Reason": "TimeLimit", "StartTime": "2024-05-01T10:00:00",
         "TimeLimit": "01:00:00", "EndTime": "2024-05-01T11:07:00", "Restarts": "0"}
BATCH = {"job": "77", "run": 1, "state": "ended", "status": 0, "ended_at": BATCH_END,
         "decision": "training ended without a time-limit warning (global step 800)"}
STEP = {"job": "77", "step": "0", "state": "ended", "status": 0, "decided_at": STEP_END}


def changed(base, **values):
    out = {**base, **values}
    return {k: v for k, v in out.items() if v is not ...}  # ...: the key left out


@pytest.mark.parametrize("slurm,batch,step,found", [
    (SLURM, BATCH, STEP, Ended("COMPLETED", "TIMEOUT", 0, STEP_END, LIMIT)),
    (SLURM, changed(BATCH, status=1), STEP, Ended("FAILED", "TIMEOUT", 1, STEP_END, LIMIT)),
    (SLURM, BATCH, None, Ended("COMPLETED", "TIMEOUT", 0, BATCH_END, LIMIT)),  # no status.json: batch-step's end
    (SLURM, BATCH, changed(STEP, decided_at=...), Ended("COMPLETED", "TIMEOUT", 0, BATCH_END, LIMIT)),
    (SLURM, BATCH, changed(STEP, decided_at=BATCH_END + 5), Ended("COMPLETED", "TIMEOUT", 0, BATCH_END, LIMIT)),
    (SLURM, BATCH, changed(STEP, job="76"), Ended("COMPLETED", "TIMEOUT", 0, BATCH_END, LIMIT)),  # another job's
    # the limit from EndTime when StartTime or TimeLimit says none
    (changed(SLURM, TimeLimit="UNLIMITED"), BATCH, STEP, Ended("COMPLETED", "TIMEOUT", 0, STEP_END,
                                                               local("2024-05-01T11:07:00"))),
    (changed(SLURM, StartTime=..., JobId=..., Restarts=...), BATCH, STEP,
     Ended("COMPLETED", "TIMEOUT", 0, STEP_END, local("2024-05-01T11:07:00"))),
    (changed(SLURM, Restarts="2"), changed(BATCH, run=3), STEP, Ended("COMPLETED", "TIMEOUT", 0, STEP_END, LIMIT)),
    # Slurm's word stands
    (changed(SLURM, JobState="COMPLETED"), BATCH, STEP, None),
    (changed(SLURM, JobState="FAILED"), BATCH, STEP, None),
    (None, BATCH, STEP, None),
    (SLURM, None, STEP, None),  # no batch.json: nothing says the batch script ended
    (SLURM, changed(BATCH, state="requeued"), STEP, None),
    (SLURM, changed(BATCH, state="running", status=..., ended_at=...), STEP, None),
    (SLURM, changed(BATCH, status=None), STEP, None),  # decided while the step still ran (at the deadline)
    (SLURM, changed(BATCH, status=True), STEP, None),
    (SLURM, changed(BATCH, ended_at="10:03"), STEP, None),
    (SLURM, changed(BATCH, ended_at=LIMIT), STEP, None),  # not before the time limit
    (SLURM, changed(BATCH, ended_at=START - 60), changed(STEP, decided_at=START - 62), None),  # before this run
    (SLURM, changed(BATCH, run=2), STEP, None),  # another run's record (Slurm: Restarts=0)
    (SLURM, changed(BATCH, job="76"), STEP, None),  # another job's folder
    (SLURM, BATCH, changed(STEP, state="running"), None),  # the step's own status says it did not end
    (changed(SLURM, TimeLimit="UNLIMITED", EndTime="Unknown"), BATCH, STEP, None),  # no limit known
])
def test_a_step_that_ended_before_the_limit_is_not_a_timeout(slurm, batch, step, found):
    assert ended_before_limit(slurm, batch, step) == found


def test_the_state_in_words_keeps_slurms_beside_it():
    assert state_text(SLURM, BATCH, STEP) == (
        "COMPLETED (Slurm: TIMEOUT; the step had ended 0 at 10:03:04, before the time limit; Slurm's controller "
        "was away when the job ended)")
    assert state_text(SLURM, changed(BATCH, status=1), STEP).startswith("FAILED (Slurm: TIMEOUT; the step had ended 1 ")
    assert state_text(changed(SLURM, JobState="RUNNING"), changed(BATCH, state="running"), STEP) == "RUNNING"
    assert state_text(SLURM, changed(BATCH, ended_at=LIMIT + 1), STEP) == "TIMEOUT"
    assert state_text({}, None, None) == "?"


@pytest.mark.parametrize("text,seconds", [
    ("01:00:00", 3600), ("1-02:03:04", 93784), ("00:05:00", 300), ("03:04", 184), ("5", 300), ("2-03", 183600),
    ("2-03:04", 183840), ("UNLIMITED", None), ("Partition_Limit", None), ("", None), (None, None), ("1:2:3:4", None),
    ("-5", None),
])
def test_slurms_time_limit_in_seconds(text, seconds):
    assert limit_seconds(text) == seconds


def test_the_limit_is_start_plus_time_limit_else_end_time():
    assert limit_at(SLURM) == LIMIT
    assert limit_at(changed(SLURM, StartTime="Unknown")) == local("2024-05-01T11:07:00")
    assert limit_at({"StartTime": "2024-05-01T10:00:00"}) is None
