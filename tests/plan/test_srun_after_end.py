"""plan.srun_after_end: when batch-step ends an srun that outlives the step its hub has ended."""

import pytest

from tf_for_slurm.plan.srun_after_end import KILL_AFTER, LINGER, LOST_KILL_AFTER, LOST_LINGER, SrunAfterEnd, written_since

ENDED = {"state": "ended", "status": 0, "updated_at": 105.0, "lost": []}


@pytest.mark.parametrize("status,since", [
    (None, False), ({}, False),
    ({"updated_at": 99.999}, False),  # before srun started at 100: an earlier step's file
    ({"updated_at": 100}, True), ({"updated_at": 105.0}, True),
    ({"updated_at": "105"}, False), ({"updated_at": None}, False),
])
def test_written_since_srun_started(status, since):
    assert written_since(status, 100.0) is since


@pytest.mark.parametrize("status,counts", [
    (None, False),  # no file (yet)
    ({"state": "running", "status": None, "updated_at": 105.0}, False),
    ({"state": "ending", "status": 0, "updated_at": 105.0}, False),  # decided, tasks still ending
    ({**ENDED, "updated_at": 99.0}, False),  # an earlier run's file (before srun started at 100)
    ({**ENDED, "status": "0"}, False),  # not what the hub writes
    ({**ENDED, "updated_at": None}, False),
    (ENDED, True),
    ({**ENDED, "status": 69}, True),
])
def test_only_this_runs_ended_step_counts(status, counts):
    watch = SrunAfterEnd(started=100.0)
    watch.read(status, now=106.0)
    assert (watch.ended_at is not None) == counts
    assert watch.action(106.0 + LINGER) == ("TERM" if counts else None)


def test_term_after_the_linger_then_kill_once_each_and_the_hubs_status_kept():
    watch = SrunAfterEnd(started=100.0)
    watch.read(ENDED, now=106.0)
    watch.read({**ENDED, "status": 3}, now=107.0)  # the first end read is the one kept
    assert (watch.status, watch.lost) == (0, 0)
    assert not watch.ended_srun
    assert watch.action(106.0 + LINGER - 0.1) is None
    assert watch.action(106.0 + LINGER) == "TERM" and watch.ended_srun
    assert watch.action(106.0 + LINGER + 1) is None
    assert watch.action(106.0 + LINGER + KILL_AFTER) == "KILL"
    assert watch.action(106.0 + LINGER + KILL_AFTER + 60) is None


def test_a_task_failure_srun_reported_starts_the_linger_and_the_hubs_later_status_is_still_taken():
    watch = SrunAfterEnd(started=100.0)
    watch.task_failed(now=110.0)
    watch.task_failed(now=112.0)  # the first report counts
    assert watch.action(110.0 + LINGER - 0.1) is None
    watch.read(ENDED, now=111.0)  # a live hub's word, within its kill grace: its status is the step's
    assert watch.status == 0
    assert watch.action(110.0 + LINGER) == "TERM"
    assert watch.action(110.0 + LINGER + KILL_AFTER) == "KILL"


@pytest.mark.parametrize("feed", ["hub-counted-a-task-lost", "hub-status-69", "srun-first-then-the-hub"])
def test_a_step_that_lost_a_task_gets_the_short_linger(feed):
    """srun then waits for a node that will not answer, even after SIGTERM, and a relaunch waits for it."""
    watch = SrunAfterEnd(started=100.0)
    if feed == "hub-counted-a-task-lost":
        watch.read({**ENDED, "lost": [{"rank": 4}]}, now=110.0)
    elif feed == "hub-status-69":
        watch.read({**ENDED, "status": 69}, now=110.0)
    else:  # the spokes ended (srun's report) while the hub ended its own command, then it wrote the end
        watch.task_failed(now=110.0)
        watch.read({**ENDED, "status": 69}, now=111.0)
    assert watch.action(110.0 + LOST_LINGER - 0.1) is None
    assert watch.action(110.0 + LOST_LINGER) == "TERM"
    assert watch.action(110.0 + LOST_LINGER + LOST_KILL_AFTER) == "KILL"
