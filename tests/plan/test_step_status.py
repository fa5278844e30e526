"""The step's state as data (status.json) and its summary, from a StepWatch fed plain events."""

import time
from collections import namedtuple

import pytest

from tf_for_slurm.plan.step_status import STATES, failure_text, place, snapshot, summary_lines, task_rows, task_state
from tf_for_slurm.plan.step_watch import LOST_STATUS, StepWatch
from tf_for_slurm.plan.strategy import step_roles

T = namedtuple("T", "rank role index node")
TASKS = [T(0, "ps", 0, "n1"), T(1, "worker", 0, "n2"), T(2, "worker", 1, "n3")]
NAMES = {t.rank: f"{t.role} {t.index}" for t in TASKS}
WALL = 1_800_000_000.0  # the wall clock when the monotonic clock reads 100


def watch():
    roles = step_roles(TASKS)
    return roles, StepWatch(roles, [0, 1, 2], NAMES, local_rank=1, now=0.0, drain=30, silence=10)


def snap(w, roles, mono=100.0, over=False):
    return snapshot(TASKS, w, roles, job="77", step="0", mono=mono, wall=WALL, over=over)


def states(s):
    return {t["rank"]: (t["state"], t["status"]) for t in task_rows(s)}


def test_a_starting_step_then_every_task_running():
    roles, w = watch()
    s = snap(w, roles)
    assert (s["state"], s["status"], s["strategy"], s["chief"]) == ("running", None, "tf1", 1)
    assert states(s) == {0: ("starting", None), 1: ("running", None), 2: ("starting", None)}
    before = w.changes
    w.join(0, 1.0)
    w.join(2, 2.0)
    assert w.changes == before + 2  # each join is a change: the file is rewritten
    w.hear(2, 99.0)
    s = snap(w, roles)
    assert states(s) == {0: ("running", None), 1: ("running", None), 2: ("running", None)}
    assert task_rows(s)[2]["last_heard"] == WALL - 1.0  # wall clock: monotonic 99 is 1 s before the snapshot
    assert s["started_at"] == WALL - 100.0
    assert s["counts"] == {"running": 3}


def test_success_chief_and_worker_exit_ps_ended():
    roles, w = watch()
    for r in (0, 2):
        w.join(r, 1.0)
    w.exit(2, 0, 10.0)
    w.exit(1, 0, 20.0)  # the chief last: training is over, the ps is told to end
    s = snap(w, roles, mono=21.0)
    assert (s["state"], s["status"]) == ("ending", 0)
    assert states(s) == {0: ("ending", 0), 1: ("exited", 0), 2: ("exited", 0)}
    assert s["first_exit"] == {"rank": 2, "role": "worker", "index": 1, "node": "n3", "status": 0, "at": WALL - 11.0}
    w.bye(0)
    s = snap(w, roles, mono=22.0, over=True)
    assert s["state"] == "ended" and states(s)[0] == ("ended", 0)
    lines = summary_lines(s)
    assert lines[0] == "step 77.0 (tf1, 3 tasks) ended with status 0 after 22.0 s: training is over"
    assert lines[1] == "first to end: worker 1 (rank 2, n3), status 0, 10.0 s after the start"
    assert lines[2] == ("tasks: 2 exited by themselves (0 non-zero), 1 ended by the supervisor: "
                        "ps 0 (rank 0, n1); restarts: 0")


def test_a_failure_is_first_and_the_others_are_ended_with_its_status():
    roles, w = watch()
    for r in (0, 2):
        w.join(r, 1.0)
    w.exit(2, 137, 5.0)
    w.exit(1, 143, 6.0)  # the chief, ended with the others: not news
    w.bye(0)
    s = snap(w, roles, mono=7.0, over=True)
    assert s["status"] == 137
    assert s["first_failure"] == {"rank": 2, "role": "worker", "index": 1, "node": "n3", "status": 137,
                                  "reason": "worker 1 on n3 failed (exit 137, killed by SIGKILL)", "note": None,
                                  "detail": None}
    assert states(s) == {0: ("ended", 137), 1: ("ended", 143), 2: ("exited", 137)}
    lines = summary_lines(s)
    assert lines[0].endswith("ended with status 137 after 7.0 s: worker 1 on n3 failed (exit 137, killed by SIGKILL)")
    assert not lines[1].startswith("first to end")  # the first failure is said once


def test_the_end_line_names_the_first_failure_once_with_the_tasks_own_words():
    roles, w = watch()
    for r in (0, 2):
        w.join(r, 1.0)
    w.exit(2, 1, 2.4)
    fix = "MultiWorkerMirroredStrategy cannot run with ps tasks (this step has 1 ps, the default); fix: run with --ps 0"
    s = snapshot(TASKS, w, roles, job="77", step="0", mono=3.0, wall=WALL, over=True, detail=fix)
    assert s["first_failure"]["detail"] == fix
    lines = summary_lines(s)
    assert lines[0] == ("step 77.0 (tf1, 3 tasks) ended with status 1 after 3.0 s: worker 1 on n3 failed (exit 1): "
                        f"{fix}")
    assert sum(line.count("worker 1") for line in lines) == 1  # once: not again as "first to end"


@pytest.mark.parametrize("failure,text", [
    ({"reason": "worker 0 on node2 failed (exit 1)"}, "worker 0 on node2 failed (exit 1)"),
    ({"reason": "worker 0 on node2 failed (exit 1)", "detail": "ValueError: bad", "note": None},
     "worker 0 on node2 failed (exit 1): ValueError: bad"),
    ({"reason": "ps 0 on n1 failed (exit 137, killed by SIGKILL)", "detail": None,
      "note": "not restarted: the step's 3 restarts are spent (max restarts 3)"},
     "ps 0 on n1 failed (exit 137, killed by SIGKILL); not restarted: the step's 3 restarts are spent "
     "(max restarts 3)"),
    ({"reason": "worker 1 (rank 2, n3) exited with status 3"},  # a file of an older version
     "worker 1 (rank 2, n3) exited with status 3"),
])
def test_failure_text(failure, text):
    assert failure_text(failure) == text


@pytest.mark.parametrize("task,words", [
    ({"role": "worker", "index": 0, "node": "node2"}, "worker 0 on node2"),
    ({"role": "chief", "index": 0, "node": "?"}, "chief 0"),
    ({"role": "ps", "index": 1, "node": None}, "ps 1"),
])
def test_place(task, words):
    assert place(task) == words


def test_a_vanished_supervisor_is_lost_and_a_never_joined_one_unaccounted():
    roles, w = watch()
    w.join(2, 1.0)
    w.closed(2, 3.0)
    s = snap(w, roles, mono=4.0)
    assert states(s)[2] == ("lost", LOST_STATUS) and states(s)[0] == ("ending", LOST_STATUS)
    assert summary_lines(s)[-1].endswith("; 1 lost: worker 1 (rank 2, n3); restarts: 0")
    w2_roles, w2 = watch()
    s2 = snap(w2, w2_roles, mono=4.0, over=True)
    assert "3 unaccounted for: ps 0 (rank 0, n1), worker 0 (rank 1, n2), worker 1 (rank 2, n3)" in summary_lines(s2)[-1]


@pytest.mark.parametrize("events,expected", [
    ([], "starting"),
    ([("join", 0)], "running"),
    ([("join", 0), ("exit", 0)], "exited"),
    ([("join", 0), ("closed", 0)], "lost"),
])
def test_task_state_words(events, expected):
    roles, w = watch()
    for kind, rank in events:
        if kind == "join":
            w.join(rank, 1.0)
        elif kind == "exit":
            w.exit(rank, 3, 2.0)
        else:
            w.closed(rank, 2.0)
    assert task_state(w, 0) == expected and expected in STATES


def test_restarts_are_counted_per_task_and_in_the_summary():
    from tf_for_slurm.plan.restart_policy import RestartPolicy

    roles = step_roles(TASKS)
    w = StepWatch(roles, [0, 1, 2], NAMES, local_rank=1, now=0.0, policy=RestartPolicy(max_restarts=2),
                  role_of={t.rank: t.role for t in TASKS})
    for r in (0, 2):
        w.join(r, 1.0)
    w.exit(2, 137, 5.0)
    s = snap(w, roles, mono=5.5)
    assert states(s)[2] == ("restarting", None) and task_rows(s)[2]["restarts"] == 1
    w.started(2, 6.0)
    assert task_state(w, 2) == "running"
    w.exit(2, 0, 20.0)
    w.exit(1, 0, 21.0)
    w.bye(0)
    s = snap(w, roles, mono=22.0, over=True)
    assert [t["restarts"] for t in task_rows(s)] == [0, 0, 1]
    assert summary_lines(s)[-1].endswith("restarts: 1")


def test_a_lost_worker_the_step_went_on_without_is_listed_with_its_time_and_the_count_left():
    tasks = [T(0, "ps", 0, "n1"), T(1, "chief", 0, "n1"), T(2, "worker", 0, "n2"), T(3, "worker", 1, "n3"),
             T(4, "worker", 2, "n4")]
    roles = step_roles(tasks)
    w = StepWatch(roles, [0, 1, 2, 3, 4], {t.rank: f"{t.role} {t.index}" for t in tasks}, local_rank=1, now=0.0,
                  role_of={t.rank: t.role for t in tasks})
    for r in (0, 2, 3, 4):
        w.join(r, 1.0)
    w.closed(3, 40.0)
    s = snapshot(tasks, w, roles, job="77", step="0", mono=50.0, wall=WALL)
    assert states(s)[3] == ("lost", None) and s["state"] == "running"
    assert s["lost"] == [{"rank": 3, "role": "worker", "index": 1, "node": "n3", "at": WALL - 10.0,
                          "reason": "worker 1 on n3 was lost (its supervisor went away without an exit status: "
                                    "killed, or its node failed)"}]
    w.exit(1, 0, 90.0)
    for r in (0, 2, 4):
        w.bye(r)
    s = snapshot(tasks, w, roles, job="77", step="0", mono=91.0, wall=WALL, over=True)
    at = time.strftime("%H:%M:%S", time.localtime(WALL - 51.0))  # mono 40 with mono 91 at WALL
    first = summary_lines(s)[0]
    assert first.endswith(f"ended with status 0 after 91.0 s: training is over; finished with 2 of 3 workers "
                          f"(worker 1 on n3 lost at {at})"), first
    assert "1 lost: worker 1 (rank 3, n3)" in summary_lines(s)[-1]


def test_the_workers_the_allocation_had_no_room_for_are_kept_for_batch_step():
    """issue 43: a role list fitted to a smaller allocation (plan.roles.fitted_to_step): batch-step
    counts the list's workers, those left out too (plan.relaunch.left_out)."""
    roles, w = watch()
    assert "workers_left_out" not in snap(w, roles)
    s = snapshot(TASKS, w, roles, job="77", step="0", mono=100.0, wall=WALL, left_out=2)
    assert s["workers_left_out"] == 2
