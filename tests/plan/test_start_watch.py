"""The start-up phase's line (plan.start_phase) and the rule over every task's phase (plan.start_watch)."""

from __future__ import annotations

import json

import pytest

from tf_for_slurm.plan.start_phase import MAX_LINE, Phase, parse_phase, phase_line
from tf_for_slurm.plan.start_watch import TaskStart, start_wait, verdict

T0 = 1_800_000_000.0


def _p(phase: str, since: float = T0, where: str = "", detail: str = "") -> Phase:
    return Phase(phase=phase, t=since, since=since, where=where, detail=detail)


def _t(rank: int, phase=None, name: str = "") -> TaskStart:
    return TaskStart(rank=rank, name=name or f"worker {rank} (rank {rank}, node{rank + 1})", phase=phase, started=T0)


@pytest.mark.parametrize("text", [
    '{"v":1,"phase":"waiting","t":1.5,"since":1.0,"where":"train.py:41 in load_data","detail":"x"}',
    '{"v":1,"phase":"starting","t":1}',
    '{"v":1,"phase":"serving","t":2.0,"since":1}',
])
def test_good_lines_parse(text):
    phase = parse_phase(text)
    assert phase is not None and parse_phase(phase_line(phase)) == phase


@pytest.mark.parametrize("text", [
    "", "not json", "[1]", '{"v":2,"phase":"waiting","t":1}', '{"v":1,"phase":"training","t":1}',
    '{"v":1,"phase":"sleeping","t":1}', '{"v":1,"phase":"waiting","t":NaN}', '{"v":1,"phase":"waiting","t":-1}',
    '{"v":1,"phase":"waiting","t":1,"extra":1}', '{"v":1,"phase":"waiting","t":1,"where":"a\\nb"}',
    '{"v":1,"phase":"waiting","t":1,"where":"' + "x" * 121 + '"}', '{"v":true,"phase":"waiting","t":1}',
    '{"v":1,"phase":"waiting","t":1}\n{"v":1,"phase":"ready","t":2}', "x" * 600,
    '{"v":1,"phase":"waiting","t":"1"}',
])
def test_bad_lines_are_refused(text):
    assert parse_phase(text) is None


def test_a_line_fits_the_wire_even_with_a_long_non_ascii_where():
    phase = _p("waiting", where="é" * 120, detail="d" * 60)
    line = phase_line(phase)
    assert len(line) <= MAX_LINE
    back = parse_phase(line)
    assert back is not None and back.detail == "d" * 60 and back.where and "é" * len(back.where) == back.where


def test_nobody_waits_no_wait():
    assert start_wait([_t(0, _p("imported")), _t(1)], T0 + 999) is None
    assert start_wait([_t(0, _p("serving")), _t(1, _p("serving"))], T0 + 999) is None


def test_mwms_a_worker_that_stalls_before_the_strategy_is_the_laggard():
    tasks = [_t(0, _p("waiting", T0 + 10, detail="MultiWorkerMirroredStrategy's start barrier")),
             _t(1, _p("starting", T0 + 1, where="train.py:41 in load_data")),
             _t(2, _p("waiting", T0 + 12))]
    wait = start_wait(tasks, T0 + 310)
    assert wait is not None and wait.laggards == (1,) and wait.waiters == (0, 2)
    assert wait.since == T0 + 10 and wait.waited == 300
    line = wait.line(tasks)
    assert "worker 0 (rank 0, node1), worker 2 (rank 2, node3) have waited 5 min for their peers in " \
           "MultiWorkerMirroredStrategy's start barrier" in line
    assert "waiting for worker 1 (rank 1, node2): starting (TensorFlow not imported), at train.py:41 in load_data" in line
    assert verdict(wait, 300, 1800) == "name" and verdict(wait, 311, 1800) == "" and verdict(wait, 300, 300) == "fault"


def test_mwms_a_worker_that_stalls_after_the_strategy_is_behind_the_first_step():
    tasks = [_t(0, _p("stepping", T0 + 20)), _t(1, _p("ready", T0 + 15)), _t(2, _p("stepping", T0 + 21))]
    wait = start_wait(tasks, T0 + 100)
    assert wait is not None and wait.point == "stepping" and wait.laggards == (1,) and wait.since == T0 + 20


def test_tf1_a_chief_that_never_makes_its_session_is_waited_for_the_ps_serving_is_not():
    tasks = [_t(0, _p("serving", T0 + 5), "ps 0"), _t(1, _p("server", T0 + 3), "worker 0 (chief)"),
             _t(2, _p("waiting", T0 + 8, detail="the chief's session"), "worker 1")]
    wait = start_wait(tasks, T0 + 60)
    assert wait is not None and wait.laggards == (1,) and wait.waiters == (2,)
    assert "worker 1 has waited 52 s for its peers in the chief's session; waiting for worker 0 (chief): " \
           "server started" in wait.line(tasks)


def test_pss_a_worker_that_never_serves_is_waited_for():
    tasks = [_t(0, _p("serving"), "ps 0"), _t(1, _p("serving"), "worker 0"), _t(2, None, "worker 1"),
             _t(3, _p("waiting", T0 + 2, detail="connecting to its ps and workers"), "chief 0")]
    wait = start_wait(tasks, T0 + 10)
    assert wait is not None and wait.laggards == (2,) and wait.waiters == (3,)


def test_everyone_at_the_meeting_point_names_no_laggard_but_the_network():
    tasks = [_t(0, _p("waiting", T0)), _t(1, _p("waiting", T0 + 1))]
    wait = start_wait(tasks, T0 + 400)
    assert wait is not None and wait.laggards == () and "look at the network" in wait.line(tasks)


def test_the_floor_counts_the_wait_again_after_a_fault():
    tasks = [_t(0, _p("waiting", T0)), _t(1, _p("imported", T0))]
    wait = start_wait(tasks, T0 + 2000, floor=T0 + 1900)
    assert wait is not None and wait.waited == 100 and verdict(wait, 300, 1800) == ""


def test_off_switches():
    wait = start_wait([_t(0, _p("waiting", T0)), _t(1)], T0 + 10 ** 6)
    assert verdict(wait, 0, 0) == "" and verdict(wait, 0, 10) == "fault" and verdict(None, 1, 1) == ""


def test_a_long_list_of_laggards_is_cut():
    tasks = [_t(0, _p("waiting", T0))] + [_t(r) for r in range(1, 40)]
    line = start_wait(tasks, T0 + 400).line(tasks)
    assert "and 35 more" in line and len(line) <= 400
    json.dumps(line)
