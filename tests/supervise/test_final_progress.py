"""A task's final step reaches the hub before its exit is recorded (issue 44, item 5): a COMPLETED job's
`tf-slurm status` said "step 3722 of 3750" after fit had finished.

Each task's command writes its progress file the way the shim does (one JSON line rewritten in place:
many quick steps) and exits 0 at once after its final report.  Its supervisor reads the file once more
as the command ends, a spoke sends that report before the exit (unthrottled), and the hub reads it
before it records the exit (the hub's own command's too), so status.json shows every task's final step.

Why this failed without that order, by construction rather than by luck: a spoke passes a report at most
once in 2 s (spoke.REPORT_EVERY) and the hub reads at most one a task in 0.5 s (progress_board.MIN_GAP).
A worker's command waits until status.json says every task joined, writes its first step, and waits
until its supervisor has read it (the file's access time moves: a look, every 0.5 s); it makes quick
steps until the next look (the spoke sends the first report in that turn, before it looks), then writes
its final step (FINAL) and exits at once: its final report follows the first by at most 0.5 s, sooner
than MIN_GAP, and the hub dropped it unread.  The chief (rank 0) waits until status.json says the
workers exited, then does the same and ends the step.  (On a file system that keeps no access times
each wait ends after 2 s: the test still checks the final steps, without forcing the tight timing.)
No TensorFlow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_for_slurm.plan.train_progress import Report, report_line
from tf_for_slurm.supervise.progress_board import MIN_GAP, ProgressBoard

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
TASKS = 3
FINAL = 1000  # every task's final step (its quick steps before it: 10 ms apart, far fewer)

TASK = f"""import json, os, sys, time
from tf_for_slurm.host import settings
from tf_for_slurm.host.job_folder import read_json, status_path
from tf_for_slurm.plan.step_status import task_rows
path, rank = os.environ[settings.PROGRESS_FILE], int(os.environ["SLURM_PROCID"])

def report(step):  # as the shim writes (tf_slurm_progress._write): in place, one pwrite, then ftruncate
    line = json.dumps({{"v": 1, "step": step, "t": round(time.time(), 3), "kind": "keras", "target": {FINAL},
                       "saves": rank + 1, "save_s": 0.25 * (rank + 1)}}, separators=(",", ":")) + "\\n"
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        size, data = os.fstat(fd).st_size, line.encode()
        if len(data) < size:
            data = data[:-1] + b" " * (size - len(data)) + b"\\n"
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)

def wait_for(states):  # every worker (rank 0: every other task) in one of `states`, as status.json says
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = task_rows(read_json(status_path()) or {{}})
        if len(rows) == {TASKS} and all(r["state"] in states for r in rows if r["rank"] != 0 or rank != 0):
            return
        time.sleep(0.05)
    sys.exit("status.json never said " + str(states))

wait_for(("exited",) if rank == 0 else ("running",))
step = 1
report(step)
for look in (1, 2):  # its supervisor's next two looks (every 0.5 s) at the file
    seen, deadline = os.stat(path).st_atime_ns, time.monotonic() + 2
    while os.stat(path).st_atime_ns == seen and time.monotonic() < deadline:
        time.sleep(0.001)
        if look == 2 and time.monotonic() >= next_step:  # quick steps meanwhile, 10 ms apart
            step, next_step = step + 1, next_step + 0.01
            report(step)
    next_step = time.monotonic() + 0.01
report({FINAL})
sys.exit(0)  # at once after the final report
"""

@pytest.mark.procs
@pytest.mark.timeout(120)
def test_every_task_s_final_step_is_in_the_status_file_after_the_step(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", str(TASKS), "--ps", "0", "--folder", str(tmp_path),
                        "--", PY, "-c", TASK], cwd=ROOT, capture_output=True, text=True, timeout=90, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    found = list(tmp_path.glob("*/status.json"))
    assert len(found) == 1, found
    progress = json.loads(found[0].read_text())["progress"]
    want = {str(rank): FINAL for rank in range(TASKS)}
    assert {rank: p["step"] for rank, p in progress.items()} == want, progress
    for rank, p in progress.items():  # the final report's save counters too (job-wide totals, one process each)
        assert (p["saves"], p["save_s"]) == (int(rank) + 1, 0.25 * (int(rank) + 1)), p
    shown = subprocess.run([PY, "-m", "tf_for_slurm", "status", str(found[0].parent)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env=env)
    assert f"training: step {FINAL} of {FINAL}" in shown.stdout, shown.stdout + shown.stderr  # the chief's


NOW = 1_800_000_000.0


def line(step, t):
    return report_line(Report(step=step, t=t, kind="keras", saves=1, save_s=0.5))


@pytest.mark.parametrize("last", [["exit", "0"], ["bye", "0"], ["exit", "1"], None])  # None: the status file's write
def test_a_report_held_back_by_the_gap_is_read_before_the_exit(last):
    board = ProgressBoard()
    assert board.hear_line(1, ["progress", line(10, NOW)], NOW)
    assert board.hear_line(1, ["progress", line(20, NOW + 0.1)], NOW + MIN_GAP / 5)  # too soon: held back
    assert board.tracks[1].step == 10
    if last is None:
        assert board.to_json(NOW + 0.2)["1"]["step"] == 20
    else:
        assert not board.hear_line(1, last, NOW + 0.2)  # the caller's to record
        assert board.tracks[1].step == 20
    assert board.to_json(NOW + 0.3)["1"]["step"] == 20 and board._held == {}


def test_held_back_lines_newest_only_superseded_by_a_later_read_and_bounded():
    board = ProgressBoard()
    assert board.hear(2, line(1, NOW), NOW)
    assert board.hear(2, line(2, NOW + 0.1), NOW + 0.1) and board.hear(2, line(3, NOW + 0.2), NOW + 0.2)
    assert board._held == {2: line(3, NOW + 0.2)}  # the newest only
    assert board.hear(2, line(4, NOW + 0.6), NOW + 0.6)  # after the gap: read, the held one is older
    assert board._held == {} and board.tracks[2].step == 4
    assert board.hear(2, "x" * 600, NOW + 0.7) and board._held == {}  # too long to be a report: not kept
    assert board.hear(2, "not a report", NOW + 0.8)  # too soon: held, unread
    assert not board.hear_line(2, ["exit", "0"], NOW + 0.9) and board.tracks[2].step == 4  # dropped at the exit
    assert not board.hear_line(2, ["progress", "not a report"], NOW + 2)  # read: a protocol error, as before
    assert not board.hear_line(2, ["started"], NOW + 2) and not board.hear_line(3, ["exit", "0"], NOW + 2)
