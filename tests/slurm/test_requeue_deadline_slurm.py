"""Real Slurm: a batch-step job whose step, told to stop at the margin, checkpoints but never ends.
batch-step decides 3 s before the limit instead of waiting (Slurm would end the job TIMEOUT, never
requeued): the job is requeued from that checkpoint, and its second run ends COMPLETED.

No `--signal` and no template: the backstop tells the step (tests/slurm/one_minute_jobs.py: the
job runs beside the two others, so it costs no allocation of its own).
"""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.slurm]


@pytest.mark.timeout(660)
def test_a_step_that_never_stops_is_requeued_before_the_limit_not_timed_out(one_minute_jobs):
    entry = one_minute_jobs["hung"]
    info, folder = entry["info"], entry["model"]
    log = entry["log"].read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log)
    assert int(info.get("Restarts", "0")) == 1, (info, log)
    assert "no time-limit warning came by" in log and "told: checkpointed, running on" in log, log
    m = re.search(r"the step has not ended (\d+) s after its tasks were told to stop, (\d+) s before the time limit: "
                  r"deciding now, from the last checkpoint", log)
    assert m and 8 <= int(m.group(1)) <= 13 and 2 <= int(m.group(2)) <= 4, log
    assert re.search(r"requeued job \d+, .*SIGUSR1: requeue 1 of at most \d+, to resume from global step 5", log), log
    assert "run 2: at the target" in log and "training ended without a time-limit warning (global step 10)" in log, log
    assert (folder / "checkpoint").read_text().strip() == 'model_checkpoint_path: "model.ckpt-10"'
