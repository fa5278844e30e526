"""Real Slurm: a time-limited job survives Slurm's own rough edges (issue 35), each injected at a
moment the test chooses, never waited for:

- the warning at the very start of every run, again and again (`scancel --batch --signal=URG` every
  50 ms for the run's first 3 s: before the shell's trap, during it, during srun's start): the
  template job checkpoints, requeues and completes (it runs beside the other 1-minute jobs:
  tests/slurm/one_minute_jobs.py);
- a node's slurmd restarted under a running task, then the controller away at the requeue: a
  `tf-slurm submit` job told to stop (`scancel --batch --signal=USR2`), whose task takes 5 s to
  checkpoint, while slurmctld is stopped; batch-step's `scontrol requeue` waits through the outage
  with one line, `tf-slurm status` says the controller does not answer (not "Slurm does not know
  it"), and once it is back the job requeues and completes.

The training is tests/slurm_tasks/paced_steps.py (no TensorFlow): a first run can never reach the
target, so every job needs a requeue by construction.
"""

from __future__ import annotations

import re
from pathlib import Path

import away_job
import pytest
from away_job import FIRST_RUN, TARGET
from background_slurm import result_of
from one_minute_jobs import WARNED_TARGET

pytestmark = pytest.mark.slurm


def _saved(model: Path) -> int:
    text = (model / "checkpoint").read_text() if (model / "checkpoint").exists() else ""
    m = re.search(r"model\.ckpt-(\d+)", text)
    return int(m.group(1)) if m else -1


@pytest.mark.timeout(900)
def test_the_warning_at_every_runs_start_ends_completed_at_the_target(one_minute_jobs):
    job = one_minute_jobs["warned"]
    log = Path(job["log"]).read_text(errors="replace")
    info = job["info"]
    assert info["JobState"] == "COMPLETED" and int(info["Restarts"]) >= 1, (info, log[-6000:])
    assert _saved(job["model"]) == WARNED_TARGET, log[-4000:]
    runs = {r for r, rc in job["sent"] if rc == 0}
    assert {0, int(info["Restarts"])} <= runs, job["sent"]  # it reached the first run's start and the last's
    assert "SIGUSR1 reached the batch shell" in log, log[-6000:]  # once trapped, a warning like any other
    assert "died by signal" not in log, log[-6000:]


@pytest.fixture(scope="module")
def away(slurm_cluster, tmp_path_factory):
    """The submitted job, its node's slurmd restarted, then told to stop while the controller is away
    (tests/slurm/away_job.py); in a one-process run it ran beside the TensorFlow tests from the start
    (tests/background_slurm.py): its result, else it runs now."""
    done = result_of("away")
    return done if done is not None else away_job.run(slurm_cluster, tmp_path_factory.mktemp("away"))


@pytest.mark.timeout(600)
def test_the_controller_away_at_the_requeue_is_waited_for_and_the_job_completes(away):
    text = away["text"]
    assert away["end"] == ("COMPLETED", 1), (away["end"], text[-6000:])
    assert _saved(away["model"]) == TARGET, away["task"][-4000:]
    assert len(re.findall(r"scontrol requeue \d+: Slurm's controller does not answer", text)) == 1, text[-6000:]
    assert re.search(r"scontrol requeue \d+: Slurm's controller answered again after \d+ s", text), text[-6000:]
    assert re.search(r"requeued job \d+", text) and "is the job requeueable" not in text, text[-6000:]
    status = away["status"]
    assert "controller does not answer" in status.stdout and "does not know it" not in status.stdout, \
        (status.stdout, status.stderr)


@pytest.mark.timeout(600)
def test_a_slurmd_restarted_under_the_running_task_changes_nothing(away):
    # the first run went on after the restart: told to stop, it checkpointed at its FIRST_RUN steps
    assert f"checkpointed at step {FIRST_RUN}" in away["task"], away["task"][-4000:]
    assert "run 2 resumed from step 30" in away["task"], away["task"][-4000:]
