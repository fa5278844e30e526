"""Real Slurm: `tf-slurm report` of a job with a restart and a requeue, rendered by a real browser.

The job is one_minute_jobs' `tf-slurm submit -t 1` TF1 job (1 ps + 2 workers; tests/slurm/one_minute_jobs.py):
its worker 1 is killed once, in the first run where it trained (the supervisor restarts it in place),
and its minute is too short for the target, so it checkpoints and requeues (test_submit_requeue_slurm.py
checks the training).  Its folder's `timeline.jsonl` (every run's hub), `status.json` and `batch.json`
make the page; headless Chromium (Debian's package) renders it to a PNG whose pixels must show the
running bars, the restart, the requeue and the workers' step curves (tests/report_shot.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter

import pytest

from one_minute_jobs import HAVE_MNIST, MNIST
from report_shot import hex_rgb, read_png, shoot
from slurm_harness import PYTHON, REPO
from tf_for_slurm.cli.report_page import (
    BAR_HEIGHT,
    COLOURS,
    GOODPUT_COLOURS,
    MARK_HEIGHT,
    MARK_WIDTH,
    RUNNING,
    STEP_COLOURS,
    SWATCH,
)
from tf_for_slurm.plan.step_timeline import parse_line

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")]


@pytest.mark.timeout(660)
def test_the_report_of_a_job_with_a_restart_and_a_requeue(one_minute_jobs, tmp_path):
    entry = one_minute_jobs["submit"]
    folder, job = entry["folder"], str(entry["job"])
    assert entry.get("killed"), "worker 1 was never killed (it never trained?)"
    run = entry["killed"][2]  # the first run where it trained: which one depends on the machine's speed
    events = [e for e in map(parse_line, (folder / "timeline.jsonl").read_text().splitlines()) if e]
    runs = [e for e in events if e["event"] == "step_start"]
    assert len(runs) >= 2 and len({e["job"] for e in events}) == 1, [(e["event"], e["rank"]) for e in events]
    restarts = [e for e in events if e["event"] == "restart"]
    assert [(e["rank"], e["role"], e["index"]) for e in restarts] == [(2, "worker", 1)], restarts
    assert runs[run - 1]["at"] < restarts[0]["at"], (run, runs, restarts)  # in the run where it was killed
    assert run == len(runs) or restarts[0]["at"] < runs[run]["at"], (run, runs, restarts)
    # batch.json keeps the training's progress at each run's end: the last run's per task, the earlier runs' steps
    batch = json.loads((folder / "batch.json").read_text())
    assert {"1", "2"} <= set(batch["progress"]) and all("history" not in t for t in batch["progress"].values())
    # a run before the one where the worker first trained may have ended with no step at all (a slow machine)
    steps = [r.get("step") for r in batch["history"]]
    assert steps and all(isinstance(s, int) or (s is None and n < run) for n, s in enumerate(steps, 1)), steps
    # the run where it was killed trained: it has a step, below the last run's unless it was the last run (worker 0
    # may have trained alone in an earlier run, whose checkpoint then let this one reach the target)
    assert run == len(steps) + 1 or isinstance(steps[run - 1], int) and steps[run - 1] < batch["step"], \
        (run, steps, batch)
    # the page, written into the job folder by the command a user runs
    done = subprocess.run([PYTHON, "-m", "tf_for_slurm", "report", job, "--folder", str(folder.parent)],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    page = folder / "report.html"
    assert done.stdout.strip() == str(page) and page.stat().st_mode & 0o777 == 0o600
    html = page.read_text()
    assert "worker 1 (rank 2" in html and "requeue" in html and "http://" not in html and "https://" not in html
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium): the page was not rendered")
    png = folder / "report.png"  # kept beside the page: the README's picture is one of these
    shoot(page, png, height=700, profile=tmp_path)
    width, height, pixels = read_png(png)
    assert (width, height) == (1200, 700)
    counts = Counter(pixels)
    legend, one_mark = SWATCH * SWATCH, MARK_WIDTH * MARK_HEIGHT
    assert counts[hex_rgb(RUNNING)] > 20 * legend, "no running bars"
    for kind in ("start", "restart", "requeue", "end"):
        seen = counts[hex_rgb(COLOURS[kind])]
        assert seen >= legend + one_mark, f"{kind} ({COLOURS[kind]}): {seen} px, only its legend's {legend} or less"
    # the two workers' step curves: TF1's global step is shared, so one curve mostly covers the other
    curves = sum(counts[hex_rgb(colour)] for colour in STEP_COLOURS[:2])
    assert curves > 2 * legend + 300, f"the step curves are missing ({curves} px)"
    # the goodput bar over the timeline: training, and the queue between the two runs, drawn beyond their swatches
    for part in ("training", "queued"):
        seen = counts[hex_rgb(GOODPUT_COLOURS[part])]
        assert seen >= legend + 10 * BAR_HEIGHT, f"goodput {part} ({GOODPUT_COLOURS[part]}): {seen} px"


def _slurm_time(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.timeout(660)
def test_the_goodput_of_a_job_with_a_restart_and_a_requeue(one_minute_jobs):
    """`tf-slurm goodput --json` of the same job: the parts add up; the last run starts at Slurm's StartTime
    and the queue between runs is Slurm's starts less batch-step's ends; the redone steps are each run's
    furthest step less the checkpoint the next run resumed from (batch.json: what batch-step read from
    the checkpoint folder); the killed worker's restart redoes no step (TF1's global step lives on the ps)."""
    entry = one_minute_jobs["submit"]
    folder, job, info = entry["folder"], str(entry["job"]), entry["info"]
    done = subprocess.run([PYTHON, "-m", "tf_for_slurm", "goodput", job, "--folder", str(folder.parent), "--json"],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    acc = json.loads(done.stdout)
    parts, runs = acc["parts"], acc["runs"]
    assert abs(sum(parts.values()) - acc["total_s"]) <= 0.5, acc
    assert parts["training"] > 0 and 0 < acc["goodput"] < 1, acc
    batch = json.loads((folder / "batch.json").read_text())
    assert len(runs) == len(batch["history"]) + 1 == int(info["Restarts"]) + 1, (runs, batch["history"], info)
    slurm_start = _slurm_time(info["StartTime"])
    assert abs(runs[-1]["start"] - slurm_start) <= 1.0, (runs[-1], info["StartTime"])
    gaps = [later["start"] - earlier["end"] for earlier, later in zip(runs, runs[1:])]
    assert abs(gaps[-1] - (slurm_start - batch["history"][-1]["ended_at"])) <= 1.0, (gaps, batch["history"][-1])
    assert abs(acc["queued_between_s"] - sum(gaps)) <= 0.5 and parts["queued"] >= acc["queued_between_s"], acc
    records = [*batch["history"], batch]
    # a run that never trained (None) redoes nothing; a run that resumed from no checkpoint started at 0
    expected = sum(max(0, (run["step"] or 0) - (later["checkpoint_at_start"] or 0))
                   for run, later in zip(records, records[1:]))
    assert acc["redone_steps"] == expected, (acc["redone_steps"], records)
    for figures, record in zip(runs[1:], records[1:]):  # a run that found no checkpoint started fresh: its first step
        fresh = record["checkpoint_at_start"] is None
        assert (figures["resumed_from"] is None or figures["resumed_from"] <= (record["step"] or 0)) if fresh \
            else figures["resumed_from"] == record["checkpoint_at_start"], (figures, record)
