"""The job report's model (plan/job_report.py) from plain data: timeline lines, status.json and
batch.json as dicts in; lanes, spans, marks, boundaries, step series and the summary out."""

import json
import time

import pytest

from tf_for_slurm.plan.job_report import JOB_LANE, MAX_TEXT, build, parse_timeline

T = 1_800_000_000.0
COLUMNS = ["rank", "role", "index", "node", "state", "status", "restarts", "last_heard"]


def line(at, event, rank=None, role=None, index=None, node=None, status=None, detail=None):
    return json.dumps({"at": T + at, "event": event, "job": "9", "step": "0", "rank": rank, "role": role,
                       "index": index, "node": node, "status": status, "detail": detail})


def w(rank, index, node):
    return {"rank": rank, "role": "worker", "index": index, "node": node}


def status(state="ended", rows=None, **more):
    rows = rows or [[0, "worker", 0, "n1", "exited", 0, 0, None], [1, "worker", 1, "n2", "exited", 0, 0, None]]
    return {"job": "9", "step": "0", "strategy": "mwms", "state": state, "status": 0 if state == "ended" else None,
            "started_at": T, "updated_at": T + 100, "decided_at": T + 90 if state == "ended" else None,
            "columns": COLUMNS, "tasks": rows, "lost": [], "first_exit": None, **more}


def report(lines, st=None, batch=None):
    return build("9", st, batch, parse_timeline("\n".join(lines)))


@pytest.mark.parametrize("text,kept,skipped", [
    ("", 0, 0),
    (line(1, "start", 0, "worker", 0), 1, 0),
    ("garbage\n" + line(1, "start", 0, "worker", 0), 1, 1),
    ('{"at": 1800000001, "event": "sta', 0, 1),  # cut as the node died
    (line(1, "exploded"), 0, 1),  # an event this version does not know
    ('{"at": "soon", "event": "start"}', 0, 1),
    ('{"at": NaN, "event": "start"}', 0, 1),
    ('{"at": true, "event": "start"}', 0, 1),
    ('[1, 2]\n\n\n', 0, 1),
])
def test_parse_keeps_events_and_counts_what_it_skipped(text, kept, skipped):
    timeline = parse_timeline(text)
    assert (len(timeline.events), timeline.skipped, timeline.dropped) == (kept, skipped, 0)


def test_parse_keeps_the_newest_events_sorted_and_bounds_every_string():
    # a line longer than any the hub writes (plan.step_timeline.MAX_LINE) is not one of its events
    text = "\n".join([line(5, "hang", 0, "worker", 0, detail="x" * 1500), line(1, "start", 0, "worker", 0),
                      line(6, "hang", 0, "worker", 0, detail="x" * 10_000)]
                     + [line(10 + i, "start", 0, "worker", 0) for i in range(10)])
    timeline = parse_timeline(text, max_events=4)
    assert timeline.dropped == 8 and timeline.skipped == 1 and [e.at - T for e in timeline.events] == [16, 17, 18, 19]
    hang = parse_timeline(text).events[1]
    assert hang.event == "hang" and len(hang.detail) == MAX_TEXT
    odd = parse_timeline(json.dumps({"at": T, "event": "start", "rank": True, "index": "1", "role": 5}))
    assert odd.events[0].rank is None and odd.events[0].index is None and odd.events[0].role is None


def test_spans_and_marks_of_a_restart_a_hang_and_a_loss():
    r = report([line(0, "step_start"), line(1, "start", **w(0, 0, "n1")), line(1, "start", **w(1, 1, "n2")),
                line(20, "hang", **w(0, 0, "n1"), detail="no step for 61 s at step 50"),
                line(21, "end", **w(0, 0, "n1"), status=-3), line(25, "restart", **w(0, 0, "n1")),
                line(25, "start", **w(0, 0, "n1")),  # the hub writes a restart's start with it
                line(50, "lost", **w(1, 1, "n2"), detail="its supervisor vanished"),
                line(90, "exit", **w(0, 0, "n1"), status=0), line(91, "step_end", status=0)], status())
    assert [(x.key, x.label) for x in r.lanes] == [(JOB_LANE, "job"), ("worker 0", "worker 0 (rank 0, n1)"),
                                                   ("worker 1", "worker 1 (rank 1, n2)")]
    spans = [(s.lane, s.start - T, s.end - T, s.why_end) for s in r.spans]
    assert spans == [("worker 0", 1, 21, "ended by its supervisor with status -3"),
                     ("worker 1", 1, 50, "lost: its supervisor vanished"),
                     ("worker 0", 25, 90, "exited with status 0")]
    marks = [(m.kind, m.at - T, m.lane) for m in r.marks]
    assert marks == [("start", 0, JOB_LANE), ("start", 1, "worker 0"), ("start", 1, "worker 1"),
                     ("hang", 20, "worker 0"), ("end", 21, "worker 0"), ("restart", 25, "worker 0"),
                     ("lost", 50, "worker 1"), ("end", 90, "worker 0"), ("end", 91, JOB_LANE)]
    assert "hung: no step for 61 s at step 50" in r.marks[3].text
    assert (r.start, r.end) == (T, T + 91)
    assert r.summary == ("job 9, step 0: mwms, ended with status 0; 1 run(s), 0 requeue(s), 0 relaunch(es), "
                         "1 restart(s), 1 hang(s), 1 lost, 2 tasks")


def test_a_requeue_and_a_relaunch_from_batch_json_split_the_runs():
    batch = {"job": "9", "run": 2, "started_at": T + 200, "state": "running", "target": 500, "history": [
        {"run": 1, "started_at": T - 1, "ended_at": T + 100, "state": "requeued", "status": 42,
         "decision": "requeue: checkpoint at step 300", "workers_planned": 3, "workers": 2,
         "relaunches": [{"at": T + 50, "lost": ["n2"], "nodes": ["n1", "n3"], "spares": [], "checkpoint": 100,
                         "workers": 2}]}]}
    r = report([line(0, "step_start"), line(1, "start", **w(0, 0, "n1")),
                line(55, "step_start"), line(56, "start", **w(0, 0, "n1")),  # the relaunch: its end unrecorded
                line(200, "step_start"), line(202, "start", **w(0, 0, "n1"))],
               status(state="running", updated_at=T + 300), batch)
    assert [(s.start - T, s.end - T, s.run, s.why_end) for s in r.spans] == [
        (1, 55, 1, "its step started again (its end was not recorded)"),
        (56, 100, 1, "its step started again (its end was not recorded)"),  # cut where run 1 was requeued
        (202, 300, 2, "still running")]
    assert [(b.kind, b.at - T) for b in r.boundaries] == [("relaunch", 50), ("requeue", 100), ("run", 200)]
    kinds = [(m.kind, m.at - T) for m in r.marks if m.lane == JOB_LANE]
    assert kinds == [("start", 0), ("relaunch", 50), ("start", 55), ("requeue", 100), ("start", 200)]
    assert "lost n2; relaunched on n1,n3, 2 of 3 workers, from checkpoint step 100" in r.boundaries[0].text
    assert "2 run(s), 1 requeue(s), 1 relaunch(es)" in r.summary


def test_a_run_started_with_fewer_workers_than_its_role_list_says_so():
    batch = {"job": "9", "run": 1, "started_at": T + 1, "state": "running", "workers_planned": 3, "workers": 2,
             "workers_at_start": 2}
    r = report([line(0, "step_start"), line(1, "start", **w(0, 0, "n1"))], status(state="running",
               updated_at=T + 30), batch)
    assert [(b.kind, b.at - T, b.text) for b in r.boundaries] == [("run", 1, "run 1 started with 2 of 3 workers")]


def test_without_a_timeline_status_json_gives_this_runs_spans_and_marks():
    rows = [[0, "ps", 0, "n1", "ended", 0, 0, None], [1, "worker", 0, "n2", "exited", 0, 2, None],
            [2, "worker", 1, "n3", "lost", 69, 0, None]]
    st = status(rows=rows, lost=[{"rank": 2, "role": "worker", "index": 1, "node": "n3", "reason": "gone",
                                  "at": T + 40}],
                first_exit={"rank": 1, "role": "worker", "index": 0, "node": "n2", "status": 0, "at": T + 80})
    r = build("9", st, None, None)
    assert [(s.lane, s.end - T) for s in r.spans] == [("ps 0", 90), ("worker 0", 80), ("worker 1", 40)]
    assert [(m.kind, m.lane) for m in r.marks if m.kind != "start"] == [("lost", "worker 1"), ("end", "worker 0"),
                                                                       ("end", "ps 0"), ("end", JOB_LANE)]
    assert any("restarted 2 time(s)" in m.text for m in r.marks)
    assert any("no timeline.jsonl" in n for n in r.notes)


def test_step_series_across_runs_thinned_and_labelled():
    progress = {"0": {"target": 800, "history": [[T + i, i] for i in range(2000)]},
                "1": {"history": [[T, 0], ["x", 1], [T + 5, None], [T + 9, 7]]},
                "2": {"history": "not a list"}, "99999999999999": {"history": [[T, 1]]}, "ps": {}}
    r = build("9", status(progress=progress), None, None)
    assert [(s.lane, len(s.points)) for s in r.series] == [("worker 0", 600), ("worker 1", 2)]
    assert r.series[0].points[-1] == (T + 1999, 1999) and r.series[0].label == "worker 0 (rank 0, n1)"
    assert r.target == 800 and r.summary.endswith("step 1999 of 800")


@pytest.mark.parametrize("st,batch", [(None, None), ({"tasks": "x", "progress": [1]}, {"history": "x"}),
                                      ({"columns": COLUMNS, "tasks": [[None, None]]}, {"run": "2", "history": [5]})])
def test_nothing_or_damaged_files_give_an_empty_report_not_an_exception(st, batch):
    r = build("9", st, batch, parse_timeline("garbage"))
    assert (r.start, r.end, r.spans, r.series) == (None, None, (), ())
    assert r.lanes[0].key == JOB_LANE


def test_lanes_are_bounded():
    lines = [line(1, "start", rank=i, role="worker", index=i) for i in range(300)]
    r = report(lines)
    assert len(r.lanes) == 257 and any("44 more tasks are not drawn" in n for n in r.notes)


def _runs(*spans, current=None):
    """batch.json of a job whose earlier runs (start, end) were requeued; `current`: this run's start."""
    history = [{"run": i + 1, "started_at": T + a, "ended_at": T + b, "state": "requeued", "status": 42,
                "decision": "requeue"} for i, (a, b) in enumerate(spans)]
    run = len(history) + 1
    return {"job": "9", "run": run, "started_at": None if current is None else T + current, "state": "running",
            "history": history} if history or current is not None else None


@pytest.mark.parametrize("batch,times,cut", [
    # a requeued job: run 1 until 100, in the queue until 200, run 2 from then: two segments, none in the gap
    (_runs((-1, 100), current=200), [*range(0, 100, 5), *range(205, 300, 5)], [(0, 95), (205, 295)]),
    (None, [*range(0, 100, 5), *range(205, 300, 5)], [(0, 295)]),  # no batch.json: the runs are not known
    (_runs(current=-1), [0, 50, 90], [(0, 90)]),  # one run (a relaunch inside it is no gap)
    (_runs((-1, 100), (150, 250), current=300), [10, 90, 160, 240, 310, 390], [(10, 90), (160, 240), (310, 390)]),
    # a point written after its run's end (another clock) is neither run's: a dot of its own, no line across
    (_runs((-1, 100), current=200), [10, 90, 150, 210], [(10, 90), (150, 150), (210, 210)]),
    (_runs((-1, 100), current=200), [210, 220], [(210, 220)]),  # only run 2 reported
])
def test_a_step_series_is_cut_at_each_run_and_no_segment_crosses_a_gap(batch, times, cut):
    progress = {"0": {"history": [[T + t, int(t) * 2] for t in times]}}
    r = build("9", status(progress=progress), batch, None)
    (series,) = r.series
    assert [(seg[0][0] - T, seg[-1][0] - T) for seg in series.segments] == cut
    assert series.points == tuple((T + t, int(t) * 2) for t in times)  # every point kept, in order
    runs = [*(batch or {}).get("history", []), batch or {}]
    gaps = [(a["ended_at"], b["started_at"]) for a, b in zip(runs, runs[1:]) if b.get("started_at") is not None]
    assert len(gaps) == len(runs) - 1
    for end, start in gaps:
        assert not [s for s in series.segments if s[0][0] <= end and s[-1][0] >= start], (end, start)


def test_the_summary_says_what_the_job_was_with_slurms_word_beside_it():
    """Slurm's TIMEOUT of a job whose step had ended before the limit (its controller away as the job
    ended: plan.job_state) is corrected in the summary; Slurm's own word otherwise; nothing unasked."""
    def clock(t):
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))

    batch = {"job": "9", "run": 1, "started_at": T - 2, "state": "ended", "status": 0, "ended_at": T + 92,
             "decision": "training ended without a time-limit warning"}
    slurm = {"JobId": "9", "JobState": "TIMEOUT", "StartTime": clock(T - 5), "TimeLimit": "00:10:00",
             "EndTime": clock(T + 900), "Restarts": "0"}
    r = build("9", status(), batch, None, slurm=slurm)
    assert r.summary.startswith(f"job 9 COMPLETED (Slurm: TIMEOUT; the step had ended 0 at {clock(T + 90)[11:]}, "
                                "before the time limit; Slurm's controller was away when the job ended), step 0: "
                                "mwms, ended with status 0; 1 run(s)"), r.summary
    late = build("9", status(), {**batch, "ended_at": T + 600}, None, slurm=slurm)  # at the limit: a timeout
    assert late.summary.startswith("job 9 TIMEOUT, step 0: mwms, ended with status 0;"), late.summary
    assert build("9", status(), batch, None).summary.startswith("job 9, step 0: mwms")


def test_a_named_start_up_wait_is_a_mark_that_says_so():
    r = report([line(0, "step_start"), line(1, "start", **w(0, 0, "n1")), line(1, "start", **w(1, 1, "n2")),
                line(302, "hang", **w(1, 1, "n2"), detail="start-up: no training step: worker 0 (rank 0, n1) has "
                     "waited 5 min for its peers; waiting for worker 1 (rank 1, n2): TensorFlow imported"),
                line(400, "exit", **w(0, 0, "n1"), status=0), line(401, "step_end", status=0)], status())
    mark = next(m for m in r.marks if m.kind == "hang")
    assert mark.text.startswith("worker 1 (rank 1, n2): waited for: start-up: no training step: "), mark.text
