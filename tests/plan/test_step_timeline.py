"""plan.step_timeline: the events read off two status snapshots, and their lines (plain data)."""

from __future__ import annotations

import json

import pytest

from tf_for_slurm.plan.step_timeline import MAX_LINE, changes, event_line, parse_line

COLUMNS = ["rank", "role", "index", "node", "state", "status", "restarts", "last_heard"]


def snap(t, rows, **extra):
    base = {"job": "77", "step": "0", "strategy": "mwms", "state": "running", "status": None, "started_at": 100.0,
            "updated_at": t, "columns": COLUMNS, "lost": [], "first_exit": None, "hangs": [], "running_again": {}}
    base.update(extra)
    base["tasks"] = [[r, role, i, f"node{r + 1}", state, status, restarts, t] for r, role, i, state, status, restarts
                     in rows]
    return base


def kinds(events):
    return [(e["event"], e["rank"]) for e in events]


S0 = snap(101.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "starting", None, 0)])
S1 = snap(102.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "running", None, 0)])


@pytest.mark.parametrize("before,after,expected", [
    (None, S0, [("step_start", None), ("start", 0)]),
    (S0, S1, [("start", 1)]),
    (S1, S1, []),
    # killed and running again between two writes: its restart then its new start, at the new start's time
    (S1, snap(104.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "running", None, 1)],
              running_again={"1": 103.5}), [("restart", 1), ("start", 1)]),
    # failed before it was ever seen running, still waiting to restart: it ran, then its restart
    (S0, snap(102.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "restarting", None, 1)]),
     [("start", 1), ("restart", 1)]),
    # started again and ended with the step before the next write: nothing of it is lost
    (snap(102.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "restarting", None, 1)]),
     snap(103.0, [(0, "chief", 0, "exited", 0, 0), (1, "worker", 0, "ended", 0, 1)], running_again={"1": 102.4},
          state="ended", status=0, first_exit={"rank": 0, "at": 102.9}),
     [("start", 1), ("exit", 0), ("end", 1), ("step_end", None)]),
    (S1, snap(103.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "lost", None, 0)],
              lost=[{"rank": 1, "reason": "worker 0 (rank 1, node2) its node is gone", "at": 102.5}]), [("lost", 1)]),
    (S1, snap(103.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "running", None, 0)],
              hangs=[{"rank": 1, "at": 102.7, "detail": "no training step for 61 s at step 50"}]), [("hang", 1)]),
])
def test_events_between_two_snapshots(before, after, expected):
    assert kinds(changes(before, after)) == expected


def test_each_event_has_its_time_task_and_words():
    after = snap(103.0, [(0, "chief", 0, "running", None, 0), (1, "worker", 0, "lost", None, 0)],
                 lost=[{"rank": 1, "reason": "worker 0 (rank 1, node2) its node is gone", "at": 102.5}],
                 hangs=[{"rank": 0, "at": 102.7, "detail": "no training step for 61 s at step 50"}])
    lost, hang = changes(S1, after)
    assert lost == {"at": 102.5, "event": "lost", "job": "77", "step": "0", "rank": 1, "role": "worker", "index": 0,
                    "node": "node2", "status": None, "detail": "worker 0 (rank 1, node2) its node is gone"}
    assert (hang["event"], hang["at"], hang["role"], hang["detail"]) == (
        "hang", 102.7, "chief", "no training step for 61 s at step 50")


def test_a_rolling_list_of_hangs_gives_only_the_new_ones():
    old = [{"rank": r, "at": 100.0 + r, "detail": "x"} for r in range(100)]
    new = old[1:] + [{"rank": 5, "at": 300.0, "detail": "y"}]
    before = snap(200.0, [(5, "worker", 4, "running", None, 0)], hangs=old)
    after = snap(301.0, [(5, "worker", 4, "running", None, 0)], hangs=new)
    assert [(e["event"], e["at"], e["detail"]) for e in changes(before, after)] == [("hang", 300.0, "y")]


def test_lines_round_trip_and_are_bounded():
    event = changes(None, S0)[1]
    assert parse_line(event_line(event)) == event
    long = dict(event, detail="x" * 5000)
    line = event_line(long)
    assert len(line.encode()) <= MAX_LINE and line.endswith("\n")
    assert parse_line(line)["detail"] in (None, "x" * 600)


@pytest.mark.parametrize("line", [
    "", "not json", "[1, 2]", '{"event": "start"}', '{"event": "explode", "at": 1}', '{"event": "start", "at": "1"}',
    "{" * 5000,
])
def test_anything_else_is_not_an_event(line):
    assert parse_line(line) is None


def test_fields_of_the_wrong_kind_are_dropped():
    got = parse_line(json.dumps({"event": "hang", "at": 5, "rank": True, "index": "2", "status": 1.5,
                                 "node": 7, "detail": ["<b>"], "extra": 1}))
    assert got is not None and (got["rank"], got["index"], got["status"], got["node"]) == (None, None, None, None)
    assert "extra" not in got and got["detail"] is None
