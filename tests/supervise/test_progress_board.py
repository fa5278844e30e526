"""The hub's progress board, hang watch and status's training view, with plain data: reports in,
the status file's `progress` and the lines out; an earlier run's tracks go on and are never judged hung."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from tf_for_slurm.cli import training_view
from tf_for_slurm.plan.step_status import snapshot
from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.strategy import step_roles
from tf_for_slurm.plan.train_progress import Report, report_line
from tf_for_slurm.supervise.hang_watch import HangWatch
from tf_for_slurm.supervise.progress_board import MIN_GAP, ProgressBoard

NOW = 1_800_000_000.0


def feed(board, rank, steps, t0=NOW, every=1.0, start=0):
    for i, step in enumerate(range(start, start + steps)):
        t = t0 + i * every
        assert board.hear(rank, report_line(Report(step=step, t=t, loss=1.0, kind="tf1")), t)


def test_reports_are_read_at_most_every_half_second_and_bad_lines_refused():
    board = ProgressBoard()
    assert board.hear(0, report_line(Report(step=1, t=NOW, kind="keras")), NOW)
    assert board.hear(0, report_line(Report(step=2, t=NOW + 0.1, kind="keras")), NOW + MIN_GAP / 2)  # dropped
    assert board.tracks[0].step == 1
    assert not board.hear(0, '{"v":2}', NOW + 1)
    assert not board.hear(1, "x" * 600, NOW + 1)
    assert board.hear(0, report_line(Report(step=3, t=NOW + 1, kind="keras")), NOW + 1)
    assert board.to_json(NOW + 1)["0"]["step"] == 3


def test_an_asynchronous_steps_slow_worker_is_marked_after_a_minute():
    board = ProgressBoard(asynchronous=True)
    for rank, every in ((0, 1.0), (1, 1.0), (2, 1.0), (3, 4.0)):
        feed(board, rank, 80 if every == 1.0 else 20, every=every)
    out = board.to_json(NOW + 79)
    assert [r for r, p in out.items() if p.get("slow")] == ["3"]
    assert not [r for r, p in ProgressBoard(asynchronous=False).to_json(NOW).items()]
    names = {r: f"worker {r} (node{r})" for r in range(4)}
    line = training_view.slow_line({"progress": out}, names)
    assert line is not None and "worker 3 (node3)" in line and "worker 2" not in line


def test_an_earlier_runs_tracks_go_on_and_are_not_judged_hung(tmp_path):
    old = ProgressBoard()
    feed(old, 0, 30)
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"progress": old.to_json(NOW + 30)}))
    board = ProgressBoard.from_file(str(path), "mwms")
    assert board.tracks[0].step == 29 and len(board.tracks[0].history()) > 2
    assert ProgressBoard.from_file(str(tmp_path / "missing.json")).tracks == {}
    path.write_text('{"progress": {"x": 1, "7": "junk"}}')
    assert ProgressBoard.from_file(str(path)).tracks[7].step is None
    # the new run's hub, an hour later: rank 0 runs, its restored track is an hour old, never hung
    tasks = [SimpleNamespace(rank=0, role="worker", index=0, node="n1")]
    mono = time.monotonic()
    watch = StepWatch(step_roles(tasks), [0], {0: "worker 0"}, local_rank=0, now=mono)
    watch.join(0, mono)
    restored = ProgressBoard.from_file(None)
    restored.restore(json.loads(json.dumps({"0": old.to_json(NOW + 30)})))
    hangs = HangWatch(60, 10, tasks, "mwms", 0, {0: "worker 0"})
    assert hangs.look(restored.tracks, watch, NOW + 3600, mono) == []
    # once it progressed in this run and stopped for the bound: hung
    feed(restored, 0, 3, t0=NOW + 3601, start=100)
    assert hangs.look(restored.tracks, watch, NOW + 3603 + 61, mono + 10) == [(0, True)]


def _two_workers(strategy):
    tasks = [SimpleNamespace(rank=r, role="worker", index=r, node=f"n{r}") for r in (0, 1)]
    mono = time.monotonic()
    watch = StepWatch(step_roles(tasks, strategy), [0, 1], {0: "w0", 1: "w1"}, local_rank=0, now=mono)
    for r in (0, 1):
        watch.join(r, mono)
    board = ProgressBoard()
    feed(board, 0, 5, t0=NOW - 1)  # its last report 0.6 s after worker 1's
    feed(board, 1, 5, t0=NOW - 1.6)
    return tasks, watch, board, HangWatch(60, 10, tasks, strategy, 0, {0: "w0", 1: "w1"}), mono - 1


def test_a_synchronous_hang_found_one_task_at_a_time_is_one_hang():
    # MWMS: the workers' last reports 0.6 s apart; the first look finds worker 1 (its group restarts), the
    # next look (5 s later at the 60 s floor) must not find worker 0 as a second hang while that restart
    # is under way
    tasks, watch, board, hangs, mono = _two_workers("mwms")
    assert hangs.look(board.tracks, watch, NOW + 62.7, mono + 100) == [(1, True)]
    assert hangs.look(board.tracks, watch, NOW + 68.7, mono + 106) == []
    assert hangs.found == 1
    # TF1: each worker restarts alone: a second worker stuck later is a hang of its own
    tasks, watch, board, hangs, mono = _two_workers("tf1")
    assert hangs.look(board.tracks, watch, NOW + 62.7, mono + 100) == [(1, True)]
    assert hangs.look(board.tracks, watch, NOW + 68.7, mono + 106) == [(0, True)]

def test_status_snapshot_and_view_show_the_training():
    board = ProgressBoard()
    feed(board, 0, 10)
    step = {"progress": board.to_json(NOW + 9), "chief": 0, "state": "running"}
    end = NOW + 3600
    slurm = {"EndTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(end)), "TimeLimit": "01:00:00"}
    line = training_view.training_line(step, slurm, None, NOW + 9)
    assert line is not None and line.startswith("training: step 9, 1 steps/s") and "no target known" in line
    board.add(0, Report(step=10, t=NOW + 10, target=100, kind="keras"), NOW + 10)
    step["progress"] = board.to_json(NOW + 10)
    line = training_view.training_line(step, slurm, None, NOW + 10)
    assert line is not None and "step 10 of 100" in line and "ETA" in line and "time limit" in line
    far = training_view.training_line(step, slurm, {"target": 100000}, NOW + 10)
    assert far is not None and "will not finish before the time limit" in far and "requeue, about" in far
    assert snapshot([], StepWatch(step_roles([SimpleNamespace(rank=0, role="worker", index=0, node="n")]), [0],
                                  {0: "w"}, local_rank=0, now=0.0),
                    step_roles([SimpleNamespace(rank=0, role="worker", index=0, node="n")]), job="1", step="0",
                    mono=0.0, wall=NOW, progress={"0": {"step": 1}})["progress"] == {"0": {"step": 1}}
