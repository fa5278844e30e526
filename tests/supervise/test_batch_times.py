"""Slurm's times of each run in batch.json: batch-step's one squeue at the start (SubmitTime, StartTime,
EndTime; supervise/slurm_job.py) gives batch.json `slurm_submit` and `slurm_start` (epoch seconds, None
when Slurm does not say), and the next run carries them into `history`.  Stand-ins for squeue (a `run`
function, or a script on PATH): no cluster.  On Slurm 22.05 a requeue sets SubmitTime again (measured
on the local cluster: run 2's SubmitTime is the requeue's time, its StartTime when it started again)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tf_for_slurm.supervise import batch_step, slurm_job
from tf_for_slurm.supervise.batch_record import BatchRecord
from tf_for_slurm.supervise.slurm_job import JobTimes, job_times, run_times

REPO = Path(__file__).resolve().parents[2]
SUBMIT, START, END = "2024-05-01T09:58:00", "2024-05-01T10:00:00", "2024-05-01T11:00:00"


def epoch(text):
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def answer(out, rc=0, err="", asked=None):
    """A stand-in for subprocess.run: squeue's answer (its argv noted in `asked`)."""
    def run(argv, **kw):
        if asked is not None:
            asked.append(argv)
        return SimpleNamespace(stdout=out, stderr=err, returncode=rc)
    return run


def columns(*texts):
    return "".join(t.ljust(20) for t in texts) + "\n"  # squeue -O pads each column to 20


@pytest.mark.parametrize("out,rc,times", [
    (columns(SUBMIT, START, END), 0, (epoch(SUBMIT), epoch(START), epoch(END))),
    (columns(SUBMIT, "N/A", "N/A"), 0, (epoch(SUBMIT), None, None)),  # pending: no start yet
    (columns("Unknown", START, END), 0, (None, epoch(START), epoch(END))),
    (columns(START, END), 0, (None, epoch(START), epoch(END))),  # fewer columns: the last ones
    (columns(END), 0, (None, None, epoch(END))),
    (columns("x", "y", "z") + columns(SUBMIT, START, END), 0, (epoch(SUBMIT), epoch(START), epoch(END))),  # last line
    (columns(SUBMIT, START, END) + "\n\n", 0, (epoch(SUBMIT), epoch(START), epoch(END))),
    ("", 0, (None, None, None)),
    (columns(SUBMIT, START, END), 1, (None, None, None)),  # squeue failed: nothing it printed counts
    ("9999-99-99T99:99:99 0000-00-00T00:00:00 2024-13-01T10:00:00", 0, (None, None, None)),
])
def test_run_times_reads_squeues_three_columns_robustly(out, rc, times):
    asked = []
    assert run_times("7", 0, run=answer(out, rc, asked=asked)) == JobTimes(*times)
    assert asked[0] == ["squeue", "-h", "-j", "7", "-O", "SubmitTime,StartTime,EndTime"]
    assert job_times("7", 0, run=answer(out, rc)) == times[1:]  # the backstop's own question, unchanged


def test_a_missing_squeue_means_no_times():
    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])
    assert run_times("7", 0, run=missing) == JobTimes(None, None, None)


def _run(monkeypatch, out, restarts):
    """One run's batch.json: its record, then the backstop's squeue (a stand-in) as batch-step asks it."""
    monkeypatch.setattr(batch_step, "run_times", functools.partial(slurm_job.run_times, run=answer(out)))
    record = BatchRecord("77", restarts, 10, 800, None, None, say=pytest.fail)
    assert (record.data["slurm_submit"], record.data["slurm_start"]) == (None, None)  # not yet asked
    step = batch_step._Step("77", 30.0, on_times=record.slurm_times)
    acted = []
    monkeypatch.setattr(step, "_do", acted.append)  # the relay's actions (timers) are not this test's
    step.arm_backstop()
    assert acted and step.job_start == record.data["slurm_start"]
    return record


def test_batch_json_gets_each_runs_slurm_times_and_carries_them_into_history(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_SLURM_JOB_DIR", str(tmp_path))
    monkeypatch.delenv("TF_SLURM_STATUS_FILE", raising=False)
    path = tmp_path / "batch.json"
    first = _run(monkeypatch, columns(SUBMIT, START, END), restarts=0)
    written = json.loads(path.read_text())
    assert (written["slurm_submit"], written["slurm_start"]) == (epoch(SUBMIT), epoch(START))
    first.end(42, 300, "requeue 1 of at most 10", requeued=True)
    assert json.loads(path.read_text())["slurm_start"] == epoch(START)  # the end keeps them
    # run 2: SubmitTime is the requeue's (Slurm 22.05); squeue then does not answer in run 3
    requeued, restarted = "2024-05-01T10:59:00", "2024-05-01T11:01:30"
    second = _run(monkeypatch, columns(requeued, restarted, "2024-05-01T12:01:30"), restarts=1)
    second.end(0, 800, "done", requeued=False)
    _run(monkeypatch, "", restarts=2)
    written = json.loads(path.read_text())
    assert (written["run"], written["slurm_submit"], written["slurm_start"]) == (3, None, None)
    assert [(h["run"], h["slurm_submit"], h["slurm_start"]) for h in written["history"]] == [
        (1, epoch(SUBMIT), epoch(START)), (2, epoch(requeued), epoch(restarted))]


FAKE_SQUEUE = """#!/bin/bash
echo "$@" >> "$FAKE_DIR/squeue.args"
end=$(date -d @$(( $(date +%s) + 100 )) +%Y-%m-%dT%H:%M:%S)
printf '%-20s%-20s%-20s\\n' 2024-05-01T09:58:00 2024-05-01T10:00:00 "$end"
"""


@pytest.mark.procs
@pytest.mark.timeout(60)
def test_batch_step_writes_slurms_times_from_its_one_squeue(tmp_path):
    """batch-step as a process: its backstop's squeue is the only one, and batch.json has its times."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("squeue", FAKE_SQUEUE), ("srun", "#!/bin/bash\nsleep 1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    folder = tmp_path / "job"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
           "SLURM_JOB_ID": "77", "PYTHONPATH": str(REPO), "TF_SLURM_JOB_DIR": str(folder)}
    for name in ("SLURM_RESTART_COUNT", "TF_SLURM_STATUS_FILE"):
        env.pop(name, None)
    res = subprocess.run([sys.executable, "-m", "tf_for_slurm", "batch-step", "--no-requeue", "--", "srun", "x"],
                         env=env, capture_output=True, text=True, timeout=50)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "squeue.args").read_text() == "-h -j 77 -O SubmitTime,StartTime,EndTime\n"  # asked once
    written = json.loads((folder / "batch.json").read_text())
    assert (written["state"], written["slurm_submit"], written["slurm_start"]) == ("ended", epoch(SUBMIT),
                                                                                  epoch(START)), written
