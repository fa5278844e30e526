"""Training progress as tables (plan/train_progress.py): the report line, a task's track (its
checkpoint saves too, job-wide over its processes), the step-wide hang rule, slow workers, the ETA
against the time limit."""

import json
import math

import pytest

from tf_for_slurm.plan.train_progress import (
    MAX_HISTORY,
    MAX_LINE,
    Fit,
    Report,
    Track,
    against_limit,
    eta,
    hung,
    parse_report,
    report_line,
    slow,
)

GOOD = '{"v":1,"step":120,"t":1795806241.25,"loss":0.3102,"epoch":2,"target":400,"kind":"keras","eval":true}'
BASE = '{"v":1,"step":1,"t":100,"kind":"user"'  # + more fields + "}"


@pytest.mark.parametrize("text,want", [
    (GOOD, Report(step=120, t=1795806241.25, loss=0.3102, epoch=2, target=400, kind="keras", eval=True)),
    (GOOD + "\n", Report(step=120, t=1795806241.25, loss=0.3102, epoch=2, target=400, kind="keras", eval=True)),
    ('{"v":1,"step":0,"t":5,"kind":"user"}', Report(step=0, t=5.0)),
    (BASE + ',"loss":null,"epoch":null,"target":null,"eval":null}', Report(step=1, t=100.0)),
    (BASE + ',"loss":3}', Report(step=1, t=100.0, loss=3.0)),  # an integer loss is a number
    ('{"v":1,"step":9007199254740991,"t":1,"kind":"tf1"}', Report(step=2 ** 53 - 1, t=1.0, kind="tf1")),
    (BASE + ',"target":1,"epoch":0}', Report(step=1, t=100.0, target=1, epoch=0)),
    (BASE + ',"saves":0,"save_s":0.0}', Report(step=1, t=100.0, saves=0, save_s=0.0)),
    (BASE + ',"saves":3,"save_s":12}', Report(step=1, t=100.0, saves=3, save_s=12.0)),  # integer seconds
    (BASE + ',"saves":9007199254740991,"save_s":9007199254740991.0}',
     Report(step=1, t=100.0, saves=2 ** 53 - 1, save_s=float(2 ** 53 - 1))),
    (BASE + ',"saves":null,"save_s":null}', Report(step=1, t=100.0)),
    (GOOD[:-1] + ',"saves":2,"save_s":7.125}',
     Report(step=120, t=1795806241.25, loss=0.3102, epoch=2, target=400, kind="keras", eval=True, saves=2,
            save_s=7.125)),
])
def test_parse_report_accepts(text, want):
    assert parse_report(text) == want


@pytest.mark.parametrize("text", [
    "", "   \n", "not json", "[1, 2]", "1", "null", '"a string"',
    GOOD[:-1] + " " * 600 + "}",  # oversized, even though it is valid JSON
    GOOD + " " * 500,  # oversized by trailing spaces
    BASE + ',"pad":"' + "\u00e9" * 250 + '"}',  # under 512 characters, over 512 bytes
    '{"v":1,"step":1,"t":NaN,"kind":"user"}',
    BASE + ',"loss":NaN}', BASE + ',"loss":Infinity}', BASE + ',"loss":-Infinity}',
    '{"v":1,"step":1,"t":1e400,"kind":"user"}',  # overflows to inf
    '{"v":1,"step":true,"t":1,"kind":"user"}', '{"v":true,"step":1,"t":1,"kind":"user"}',
    '{"v":1,"step":1,"t":true,"kind":"user"}', BASE + ',"epoch":false}', BASE + ',"target":true}',
    BASE + ',"loss":true}', BASE + ',"eval":1}', BASE + ',"eval":"yes"}',
    '{"v":1,"step":-1,"t":1,"kind":"user"}', '{"v":1,"step":9007199254740992,"t":1,"kind":"user"}',
    '{"v":1,"step":1.0,"t":1,"kind":"user"}', '{"v":1,"step":"1","t":1,"kind":"user"}',
    '{"v":2,"step":1,"t":1,"kind":"user"}', '{"v":0,"step":1,"t":1,"kind":"user"}',
    '{"v":1.0,"step":1,"t":1,"kind":"user"}', '{"v":"1","step":1,"t":1,"kind":"user"}',
    '{"step":1,"t":1,"kind":"user"}', '{"v":1,"t":1,"kind":"user"}', '{"v":1,"step":1,"kind":"user"}',
    '{"v":1,"step":1,"t":"1","kind":"user"}', '{"v":1,"step":1,"t":1}',
    '{"v":1,"step":1,"t":1,"kind":"horovod"}', '{"v":1,"step":1,"t":1,"kind":1}',
    BASE + ',"epoch":-1}', BASE + ',"target":0}', BASE + ',"epoch":1.5}',
    BASE + ',"saves":1}', BASE + ',"save_s":1.5}',  # one without the other
    BASE + ',"saves":1,"save_s":null}', BASE + ',"saves":null,"save_s":1.5}',
    BASE + ',"saves":-1,"save_s":1}', BASE + ',"saves":1,"save_s":-0.001}',
    BASE + ',"saves":1.0,"save_s":1}', BASE + ',"saves":true,"save_s":1}', BASE + ',"saves":"1","save_s":1}',
    BASE + ',"saves":1,"save_s":true}', BASE + ',"saves":1,"save_s":"1"}', BASE + ',"saves":1,"save_s":[1]}',
    BASE + ',"saves":9007199254740992,"save_s":1}', BASE + ',"saves":1,"save_s":9007199254740992.0}',
    BASE + ',"saves":1,"save_s":NaN}', BASE + ',"saves":1,"save_s":Infinity}', BASE + ',"saves":1,"save_s":1e400}',
    BASE + ',"saves":1,"save_s":1,"saves":2}',
    BASE + ',"x":{"a":[1,2,{"b":null}]}}', BASE + ',"loss":{"a":1}}', '{"v":1,"step":[1],"t":1,"kind":"user"}',
    BASE + ',"step":2}',  # a duplicate key: which step is true?
    BASE + '}' + BASE + '}', BASE + '}\n' + BASE + '}',  # two objects, two lines
    '{"v":1,\n"step":1,"t":1,"kind":"user"}',  # one object over two lines
    "[" * 400 + "]" * 100, '{"a":' * 100,
    "\ud800",  # a lone surrogate cannot be encoded
    b'{"v":1,"step":1,"t":1,"kind":"user"}', None, 7,
])
def test_parse_report_refuses(text):
    assert parse_report(text) is None


def track_of(points, now=None):
    """A Track fed (t, step) or (t, step, 'eval') reports, each taken at its own time."""
    track = Track()
    for p in points:
        report = Report(step=p[1], t=float(p[0]), eval=len(p) > 2, target=400, loss=0.5)
        track = track.add(report, p[0] if now is None else now)
    return track


REGULAR = [(100 + i, 10 * i) for i in range(61)]  # 10 steps a second for 60 s
IRREGULAR = [(0, 0), (1, 10), (3, 20), (4, 60)]  # 0.1, 0.2 and 0.025 s a step


@pytest.mark.parametrize("points,now,window,rate,median", [
    ([], 10, 60, None, None),
    ([(0, 5)], 10, 60, None, None),  # one sample: no rate
    (REGULAR, 160, 60, 10.0, 0.1),
    (REGULAR, 160, 10, 10.0, 0.1),
    (REGULAR, 400, 60, None, 0.1),  # silent for the window: no rate; the median stays known
    (IRREGULAR, 4, 60, 15.0, 0.1),
    (IRREGULAR, 4, 1.5, 40.0, 0.1),  # only (3, 20) and (4, 60) in the window
    ([(0, 0), (1, 10), (2, 10), (3, 20)], 3, 60, 20 / 3, 0.15),  # a repeated step is no sample: 0.1, 0.2
    ([(0, 0), (1, 10), (5, 10, "eval"), (6, 20)], 6, 60, 20 / 6, 0.3),  # the eval's time is in one step
    ([(0, 0), (10, 100), (20, 200), (21, 50), (22, 60)], 22, 60, 10.0, 0.1),  # a restart at step 50
    ([(0, 0), (1, 1000)] + [(t, 1000 + t) for t in range(2, 300, 2)], 298, 60, 1.0, 1.0),  # 0.001 s is gone
])
def test_rate_and_median(points, now, window, rate, median):
    track = track_of(points)
    got = track.rate(now, window)
    assert (got is None) if rate is None else got == pytest.approx(rate)
    got = track.median_step_seconds()
    assert (got is None) if median is None else got == pytest.approx(median)


def test_recent_samples_are_bounded_in_time():
    track = track_of([(t, t) for t in range(0, 1000)])
    assert len(track._recent) <= 122


@pytest.mark.parametrize("points,step,last_step_at,last_progress_at", [
    ([], None, None, None),
    ([(10, 5)], 5, 10.0, 10.0),
    ([(10, 5), (20, 5)], 5, 10.0, 10.0),  # the same step again: not progress
    ([(10, 5), (20, 5, "eval")], 5, 10.0, 20.0),  # an evaluation: progress, not a step
    ([(10, 5), (20, 9, "eval")], 5, 10.0, 20.0),  # whatever step it names
    ([(10, 5), (20, 5, "eval"), (30, 5)], 5, 10.0, 20.0),  # a repeat after it takes nothing back
    ([(10, 5), (8, 9)], 5, 10.0, 10.0),  # older than the last report: stale
    ([(10, 5), (10, 9)], 5, 10.0, 10.0),  # the same file read again
    ([(10, 5), (20, 3)], 3, 20.0, 20.0),  # restarted from a checkpoint
])
def test_step_and_progress_times(points, step, last_step_at, last_progress_at):
    track = track_of(points)
    assert (track.step, track.last_step_at, track.last_progress_at) == (step, last_step_at, last_progress_at)


@pytest.mark.parametrize("count", [1, 2, MAX_HISTORY, MAX_HISTORY + 1, 1000, 20000])
def test_history_is_bounded_and_keeps_the_first_and_last(count):
    track = track_of([(t, t) for t in range(count)])
    history = track.history()
    assert len(history) <= MAX_HISTORY
    assert history[0] == [0, 0] and history[-1] == [count - 1, count - 1]
    assert len(history) == count if count <= MAX_HISTORY else len(history) > MAX_HISTORY // 4
    gaps = [b[0] - a[0] for a, b in zip(history, history[1:-1])]  # evenly in time, but for the newest
    assert not gaps or max(gaps) <= 2 * min(gaps)


def test_json_round_trip():
    track = track_of(REGULAR + [(170, 600, "eval")])
    d = json.loads(json.dumps(track.to_json(160)))
    assert d["step"] == 600 and d["rate"] == pytest.approx(10.0) and d["target"] == 400 and d["loss"] == 0.5
    assert d["last_step_at"] == 160 and d["last_progress_at"] == 170 and d["kind"] == "user"
    back = Track.from_json(d)
    assert back.to_json(160) == d and back.median_step_seconds() == pytest.approx(0.1)
    back.add(Report(step=610, t=171.0), 171)
    assert back.step == 610 and back.history()[-1] == [171.0, 610]
    assert "history" not in track.to_json(160, with_history=False)
    assert Track().to_json()["step"] is None


@pytest.mark.parametrize("d", [
    None, [], "x", 7,
    {"step": -1}, {"step": True}, {"step": 1.5}, {"loss": float("nan")}, {"kind": "other"}, {"target": 0},
    {"last_step_at": "yesterday"}, {"last_progress_at": float("inf")},
    {"history": "x"}, {"history": [[1, 2, 3]]}, {"history": [[1, "2"]]}, {"history": [[2, 1], [1, 2]]},
    {"history": [[t, t] for t in range(MAX_HISTORY + 1)]}, {"history": [{"t": 1}]},
    {"saves": -1}, {"saves": 1.5}, {"saves": True}, {"saves": 2 ** 53}, {"save_s": -1.0}, {"save_s": "1"},
    {"save_s": float("nan")}, {"save_s": 2.0 ** 53},
])
def test_from_json_of_a_bad_dict_is_an_empty_track(d):
    track = Track.from_json(d)
    assert track.step is None and track.history() == [] and track.last_progress_at is None


def test_report_line_carries_the_save_counters_and_stays_under_the_bound():
    line = report_line(Report(step=1, t=1.0, saves=2, save_s=1.23456))
    assert '"saves":2,"save_s":1.235' in line and parse_report(line) == Report(step=1, t=1.0, saves=2, save_s=1.235)
    assert "saves" not in report_line(Report(step=1, t=1.0))  # a report without them (report_progress) has none
    big = 2 ** 53 - 1  # every field at its longest
    longest = report_line(Report(step=big, t=-1.2345678901234e-300, loss=-1.23456e-300, epoch=big, target=big,
                                 kind="optimizer", eval=True, saves=big, save_s=float(big) - 0.5))
    assert len(longest.encode()) <= 300 and parse_report(longest) is not None, longest


def counted(reports):
    """A Track's job-wide save totals after reports (t, step, saves, save_s[, 'eval'])."""
    track = Track()
    for r in reports:
        track.add(Report(step=r[1], t=float(r[0]), saves=r[2], save_s=r[3], eval=len(r) > 4), float(r[0]))
    return track.saves, track.save_s


@pytest.mark.parametrize("reports,totals", [
    ([], (None, None)),
    ([(1, 1, None, None)], (None, None)),  # never told (report_progress, an older shim)
    ([(1, 1, 0, 0.0)], (0, 0.0)),
    ([(1, 1, 1, 2.5), (2, 2, 2, 5.0)], (2, 5.0)),
    ([(1, 1, 2, 4.0), (2, 2, 2, 4.0)], (2, 4.0)),  # the same counters again
    ([(1, 1, 2, 4.0), (2, 2, None, None)], (2, 4.0)),  # a report without them keeps the totals
    ([(1, 1, 0, 0.0), (2, 1, 1, 3.0, "eval")], (1, 3.0)),  # an evaluation report (a save running) counts too
    ([(2, 1, 2, 4.0), (1, 1, 5, 10.0)], (2, 4.0)),  # older than the last: stale
    ([(1, 10, 2, 4.0), (2, 5, 3, 6.0)], (3, 6.0)),  # the step went back, not the counters: the same process
    # a restarted process counts from 0 again: what the last one reached is carried
    ([(1, 1, 2, 5.0), (2, 2, 3, 7.5), (3, 1, 0, 0.0)], (3, 7.5)),
    ([(1, 1, 2, 5.0), (2, 2, 3, 7.5), (3, 1, 0, 0.0), (4, 2, 1, 1.25)], (4, 8.75)),
    ([(1, 1, 3, 7.5), (2, 1, 1, 1.0)], (4, 8.5)),  # its first report after a save already
    ([(1, 1, 2, 5.0), (2, 1, 2, 1.0)], (4, 6.0)),  # fewer seconds, as many saves: a new process
    ([(1, 1, 2, 5.0), (2, 1, 1, 1.0), (3, 1, 1, 0.5)], (4, 6.5)),  # two restarts
    ([(1, 1, 1, 0.1), (2, 1, 0, 0.0), (3, 1, 1, 0.2)], (2, 0.3)),  # rounded to 0.001
])
def test_save_totals_carry_over_restarted_processes(reports, totals):
    assert counted(reports) == totals


@pytest.mark.parametrize("then,totals", [
    (None, (5, 12.5)),
    ((0, 0.0), (5, 12.5)),  # the new run's process, no save yet
    ((1, 2.0), (6, 14.5)),  # its counters add to the earlier runs' totals
])
def test_save_totals_go_on_from_an_earlier_run_s_status(then, totals):
    track = Track().add(Report(step=9, t=1.0, saves=4, save_s=10.0), 1.0)  # a process, then its restart's
    track.add(Report(step=1, t=2.0, saves=1, save_s=2.5), 2.0)
    d = json.loads(json.dumps(track.to_json(2.0)))
    assert (d["saves"], d["save_s"]) == (5, 12.5)
    back = Track.from_json(d)
    assert (back.saves, back.save_s) == (5, 12.5) and back.to_json(2.0) == d
    if then is not None:
        back.add(Report(step=2, t=3.0, saves=then[0], save_s=then[1]), 3.0)
    assert (back.saves, back.save_s) == totals


def tracks_of(spec):
    return {rank: track_of(points) for rank, points in spec.items()}


STEADY = [(t, t * 10) for t in range(0, 11)]  # 0.1 s a step until t=10


@pytest.mark.parametrize("spec,now,floor,factor,ranks,bound", [
    ({}, 1000, 60, 10, None, None),  # nothing at all
    ({0: [], 1: []}, 1000, 60, 10, None, None),  # no task reported yet: starting, not hung
    ({0: STEADY, 1: STEADY}, 69, 60, 10, None, None),  # 59 s silent
    ({0: STEADY, 1: STEADY}, 70, 60, 10, (0, 1), 60),  # 60 s silent: the floor
    ({0: STEADY, 1: STEADY, 2: []}, 100, 60, 10, (0, 1), 60),  # the task that never reported is left out
    ({0: STEADY[:3], 1: STEADY}, 70, 60, 10, (0, 1), 60),  # all silent, one longer: both named
    ({0: STEADY[:3], 1: STEADY + [(60, 200)]}, 100, 60, 10, (0,), 60),  # one silent, one trains: that one
    ({0: STEADY, 1: STEADY + [(50, 100, "eval")]}, 100, 60, 10, (0,), 60),  # 1 evaluating: not hung
    ({0: STEADY, 1: STEADY + [(50, 100, "eval")]}, 110, 60, 10, (0, 1), 60),  # evaluating too long
    ({0: STEADY, 1: STEADY}, 1000, 0, 10, None, None),  # floor 0: off
    ({0: STEADY, 1: STEADY}, 1000, -1, 10, None, None),
    ({0: [(0, 0), (20, 1), (40, 2)], 1: [(0, 0), (20, 1), (40, 2)]}, 239, 60, 10, None, None),  # 20 s steps
    ({0: [(0, 0), (20, 1), (40, 2)], 1: [(0, 0), (20, 1), (40, 2)]}, 240, 60, 10, (0, 1), 200),
    ({0: [(0, 0), (20, 1), (40, 2)], 1: [(0, 0), (1, 10), (2, 20)]}, 240, 60, 10, (0, 1), 100.5),  # of 20 and 0.1
    ({0: [(0, 0), (10, 1)], 1: [(0, 5)], 2: [(0, 0), (30, 1)]}, 199, 60, 10, None, None),  # median of 10, 30
    ({0: [(0, 0), (10, 1)], 1: [(0, 5)], 2: [(0, 0), (30, 1)]}, 209, 60, 10, (1,), 200),
    ({0: [(0, 0), (10, 1)], 1: [(0, 5)], 2: [(0, 0), (30, 1)]}, 230, 60, 10, (0, 1, 2), 200),
    ({0: [(5, 1)]}, 65, 60, 10, (0,), 60),  # no step time known: the floor alone
])
def test_hung(spec, now, floor, factor, ranks, bound):
    hang = hung(tracks_of(spec), now, floor=floor, factor=factor)
    if ranks is None:
        assert hang is None
    else:
        assert hang is not None and hang.ranks == ranks and hang.bound == pytest.approx(bound)
        assert set(hang.last_step) == set(ranks) and hang.silent_for >= bound


def test_hang_line():
    hang = hung(tracks_of({0: [(0, 0), (0.4, 1), (0.8, 2), (74, 815)], 1: [(0, 0), (0.4, 1), (0.8, 2), (60, 812)]}),
                148)
    assert hang is not None
    assert hang.line({0: "worker 0", 1: "worker 1"}) == (
        "no training step for 74 s (bound: max(10 x 0.4 s median step, 60 s) = 60 s): "
        "worker 1 at step 812, worker 0 at step 815")
    assert hang.line().endswith("rank 1 at step 812, rank 0 at step 815")
    alone = hung(tracks_of({3: [(0, 7)]}), 100)
    assert alone is not None and alone.line() == (
        "no training step for 100 s (bound: 60 s, no step time known): rank 3 at step 7")


@pytest.mark.parametrize("tasks,name_length,base,shown", [
    (3, 4, 0, 3), (8, 4, 0, 8), (9, 4, 0, 8), (1000, 4, 0, 8),  # at most 8 named
    (8, 16, 1000, None), (1000, 10, 2 ** 52, None), (1000, 200, 0, None), (3, 5000, 0, None),  # as many as fit
])
def test_hang_line_is_bounded(tasks, name_length, base, shown):
    hang = hung({r: track_of([(0, base), (1, base + r + 1)]) for r in range(tasks)}, 1000)
    assert hang is not None
    line = hang.line({r: f"w{r}".ljust(name_length, "x") for r in range(tasks)})
    assert len(line) < MAX_LINE, line
    if shown is not None:
        assert line.count(" at step ") == shown
    if line.count(" at step ") < tasks:
        assert line.endswith(f" and {tasks - line.count(' at step ')} more")


def rated(rate, start=0, until=200):
    return [(t, int(t * rate)) for t in range(start, until + 1)]


@pytest.mark.parametrize("spec,now,ratio,want", [
    ({0: rated(10, until=30), 1: rated(10, until=30), 2: rated(10, until=30), 3: rated(2, until=30)}, 30, 1.5, []),
    ({0: rated(10), 1: rated(10), 2: rated(10), 3: rated(2)}, 200, 1.5, [3]),  # after the window
    ({0: rated(10), 1: rated(10), 2: rated(7), 3: rated(2)}, 200, 1.5, [3]),  # 7 > 8.5 / 1.5
    ({0: rated(10), 1: rated(10), 2: rated(4), 3: rated(2)}, 200, 1.5, [2, 3]),  # 4 < 7 / 1.5
    ({0: rated(10), 1: rated(10), 2: rated(2)}, 200, 1.5, [2]),
    ({0: rated(10), 1: rated(2)}, 200, 1.5, []),  # two: which one is slow?
    ({0: rated(10), 1: rated(10), 2: rated(10), 3: rated(2, start=170)}, 200, 1.5, []),  # 3 just started
    ({0: rated(10), 1: rated(10), 2: rated(10), 3: rated(2, until=100)}, 200, 1.5, []),  # 3 silent: hung's
    ({0: rated(10), 1: rated(10), 2: rated(10), 3: rated(2)}, 200, 0, []),
])
def test_slow(spec, now, ratio, want):
    assert slow(tracks_of(spec), now, ratio=ratio) == want


@pytest.mark.parametrize("step,rate,target,now,want", [
    (100, 10.0, 400, 1000.0, 1030.0),
    (100, 0.5, 101, 1000.0, 1002.0),
    (400, 10.0, 400, 1000.0, 1000.0),  # reached: now
    (500, None, 400, 1000.0, 1000.0),  # reached, whatever the rate
    (100, 10.0, None, 1000.0, None),  # no target
    (None, 10.0, 400, 1000.0, None),
    (100, 0.0, 400, 1000.0, None), (100, -1.0, 400, 1000.0, None), (100, None, 400, 1000.0, None),
])
def test_eta(step, rate, target, now, want):
    assert eta(step, rate, target, now) == want


@pytest.mark.parametrize("eta_at,end_time,now,run_seconds,want", [
    (None, 2000.0, 1000.0, 3600.0, Fit(None, None)),  # no ETA: unknown
    (1500.0, None, 1000.0, 3600.0, Fit(True, 1)),  # no time limit
    (1500.0, 2000.0, 1000.0, 3600.0, Fit(True, 1)),
    (2000.0, 2000.0, 1000.0, 3600.0, Fit(True, 1)),  # exactly at the limit
    (2001.0, 2000.0, 1000.0, 3600.0, Fit(False, 2)),  # this run, then 1 s of another
    (2000.0 + 3600.0, 2000.0, 1000.0, 3600.0, Fit(False, 2)),  # exactly one more run
    (2000.0 + 3601.0, 2000.0, 1000.0, 3600.0, Fit(False, 3)),
    (2000.0 + 10 * 3600.0, 2000.0, 1000.0, 3600.0, Fit(False, 11)),
    (5000.0, 900.0, 1000.0, 1000.0, Fit(False, 5)),  # the end time passed: the work left from now
    (3000.0, 2000.0, 1000.0, None, Fit(False, None)),  # no run length
    (3000.0, 2000.0, 1000.0, 0.0, Fit(False, None)),
])
def test_against_limit(eta_at, end_time, now, run_seconds, want):
    assert against_limit(eta_at, end_time, now, run_seconds) == want
    if want.runs_needed and not want.finishes:
        assert want.runs_needed >= 2 and want.runs_needed == 1 + math.ceil(
            (eta_at - max(end_time, now)) / run_seconds)


@pytest.mark.parametrize("running,since,now,ranks", [
    (None, None, 70, (0, 1)),
    ([1], None, 70, (1,)),  # task 0 ended: not hung
    ([], None, 1000, None),
    (None, {0: 50.0}, 70, (1,)),  # task 0 restarted at 50: its start-up is not a hang yet
    (None, {0: 50.0}, 110, (0, 1)),
])
def test_hung_only_judges_running_tasks_from_their_restart(running, since, now, ranks):
    hang = hung(tracks_of({0: STEADY, 1: STEADY}), now, running=running, since=since)
    assert (hang.ranks if hang else None) == ranks
