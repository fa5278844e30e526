"""plan.batch_host_loss: after the batch host's supervisor was lost, which task checks, and what it does."""

import pytest

from tf_for_slurm.plan.batch_host_loss import (MAX_TURN, Ask, BatchHostLoss, Done, Sleep, checker_turn, gone,
                                               launch_failed)


@pytest.mark.parametrize("state, lost", [
    ("MIXED", False), ("ALLOCATED", False), ("IDLE+DRAIN", False), ("MIXED+NOT_RESPONDING", True),
    ("IDLE+NOT_RESPONDING", True), ("DOWN", True), ("DOWN+NOT_RESPONDING", True), ("MIXED*", True),
    ("down*", True), ("", False), ("DOWNLOADING", False),
])
def test_gone(state, lost):
    assert gone(state) is lost


TASKS = [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2"), (4, "n3"), (5, "n4"), (6, "n5")]


@pytest.mark.parametrize("rank, node, turn", [
    (2, "n1", 0), (3, "n1", None), (4, "n1", 1), (5, "n1", 2), (6, "n1", None),  # the first task of 3 nodes
    (0, "n1", None), (1, "n1", None),  # on the lost node itself
    (0, "n2", 0), (4, "n2", 1), (2, "n2", None),
])
def test_checker_turn(rank, node, turn):
    assert checker_turn(TASKS, rank, node) == turn


def watch(**kw):
    args = dict(job="7", node="n1", turn=0, restarts=0, requeues_left=3, start=100.0, wait=150.0, every=5.0,
                probe_every=15.0)
    args.update(kw)
    return BatchHostLoss(**args)


REFUSED = "srun: error: Application launch failed: Communication connection failure"


@pytest.mark.parametrize("text, failed", [
    (REFUSED, True), ("srun: error: Task launch for StepId=7.3 failed on node n1: Communication connection failure",
                      True),
    ("srun: error: Unable to create step for job 7: Requested node configuration is not available", False),
    ("srun: No such file or directory", False), ("no answer within 60 s", False),
])
def test_launch_failed(text, failed):
    assert launch_failed(text) is failed


def test_a_step_that_runs_there_ends_the_check_at_once():
    w = watch()
    assert w.next(100.0) == Ask("probe")
    w.probe_said(True, "", 101.0)
    done = w.next(101.0)
    assert isinstance(done, Done) and not done.acted
    assert "n1 still starts a step" in done.line and "left to its batch script" in done.line


def test_slurms_verdict_is_the_evidence_then_the_requeue_within_the_budget():
    w = watch(turn=1)
    assert w.next(100.0) == Ask("probe")
    w.probe_said(False, "srun: error: Unable to create step", 101.0)  # not the node's answer: no evidence
    assert w.next(101.0) == Ask("node")
    w.node_said("MIXED", 101.5)
    assert w.next(102.0) == Sleep(106.0)  # every 5 s from the last look
    assert w.next(106.0) == Ask("node")
    w.node_said(None, 106.1)  # Slurm did not answer: asked again later
    assert w.next(111.0) == Ask("node")
    w.node_said("MIXED+NOT_RESPONDING", 112.0)
    assert w.next(112.0) == Sleep(114.0)  # its turn: 2 s after the evidence
    assert w.next(114.0) == Ask("job")
    w.job_said("RUNNING", 0)
    assert w.next(114.1) == Ask("requeue")
    w.requeue_said(None)
    done = w.next(115.0)
    assert done.acted and done.line.startswith("requeued job 7: its batch host n1 lost (Slurm says "
                                               "MIXED+NOT_RESPONDING)")
    assert "3 requeue(s) were left" in done.line


def test_two_probes_in_a_row_that_failed_to_launch_are_the_evidence():
    w = watch()
    assert w.next(100.0) == Ask("probe")
    w.probe_said(False, REFUSED, 111.0)
    assert w.next(111.0) == Ask("node")
    w.node_said("MIXED", 111.0)
    assert w.next(111.0) == Sleep(115.0)  # the next probe 15 s after the first began
    assert w.next(115.0) == Ask("probe")
    w.probe_said(False, REFUSED, 126.0)
    assert w.next(126.0) == Ask("job")
    w.job_said("RUNNING", 0)
    assert w.next(126.0) == Ask("requeue")
    w.requeue_said(None)
    assert w.next(126.0).line.startswith(f"requeued job 7: its batch host n1 lost (2 steps in a row could not "
                                         f"start there: {REFUSED})")


def test_a_probe_failure_of_another_kind_breaks_the_row():
    w = watch()
    w.next(100.0)
    w.probe_said(False, REFUSED, 100.0)
    w.next(115.0)
    w.probe_said(False, "srun: error: Unable to create step", 115.0)
    w.next(130.0)
    w.probe_said(False, REFUSED, 130.0)
    assert w.phase == "look" and w.evidence is None


def test_no_evidence_within_the_wait_leaves_the_job():
    w = watch(wait=20.0)
    t = 100.0
    while True:
        step = w.next(t)
        if isinstance(step, Done):
            break
        if step == Ask("node"):
            w.node_said("ALLOCATED", t)
        elif step == Ask("probe"):
            w.probe_said(False, "no answer within 60 s", t)
        else:
            assert isinstance(step, Sleep) and step.until <= 120.0
            t = step.until
    assert t == 120.0 and not step.acted
    assert step.line == ("nothing showed its node n1 lost within 20 s (Slurm says ALLOCATED; a step there did "
                         "not start: no answer within 60 s): the job is left to its batch script")


def lost(w, now=110.0):
    w.next(100.0)
    w.probe_said(False, "refused", 100.0)
    w.next(100.0)
    w.node_said("DOWN*", now)


@pytest.mark.parametrize("state, restarts", [("COMPLETING", 0), ("PENDING", 1), ("RUNNING", 1), (None, None)])
def test_another_task_acted_or_unknown(state, restarts):
    w = watch()
    lost(w)
    assert w.next(110.0) == Ask("job")
    w.job_said(state, restarts)
    done = w.next(111.0)
    assert isinstance(done, Done) and not done.acted


def test_no_requeue_left_cancels():
    w = watch(requeues_left=0)
    lost(w)
    w.next(110.0)
    w.job_said("RUNNING", 0)
    assert w.next(110.0) == Ask("cancel")
    w.cancel_said(None)
    done = w.next(111.0)
    assert done.acted and "cancelled job 7" in done.line and "no requeue left (--max-requeues)" in done.line


def test_a_refused_requeue_cancels():
    w = watch()
    lost(w)
    w.next(110.0)
    w.job_said("RUNNING", 0)
    assert w.next(110.0) == Ask("requeue")
    w.requeue_said("Requested operation is presently disabled")
    assert w.next(110.0) == Ask("cancel")
    w.cancel_said("Access/permission denied")
    done = w.next(111.0)
    assert not done.acted and done.line.startswith("could not cancel job 7 (Access/permission denied)")
    assert "Slurm refused the requeue (Requested operation is presently disabled)" in done.line


def test_a_finished_step_is_cancelled_not_requeued():
    w = watch(finished=True)
    lost(w)
    w.next(110.0)
    w.job_said("RUNNING", 0)
    assert w.next(110.0) == Ask("cancel")
    w.cancel_said(None)
    assert "the step had ended with status 0" in w.next(110.0).line


def test_turns_are_bounded():
    w = watch(turn=100)
    lost(w, now=110.0)
    assert w.next(110.0) == Sleep(110.0 + MAX_TURN)


def test_answers_out_of_turn_change_nothing():
    w = watch()
    w.job_said("RUNNING", 0)  # before any evidence
    w.requeue_said(None)
    w.cancel_said(None)
    assert w.next(100.0) == Ask("probe") and w.phase == "look"


@pytest.mark.parametrize("before", ["look", "job", "requeue"])
def test_a_stop_signal_ends_the_check_unless_its_action_is_under_way(before):
    w = watch()
    if before != "look":
        lost(w)
    if before == "requeue":
        w.next(110.0)
        w.job_said("RUNNING", 0)
    w.stop_came()
    step = w.next(111.0)
    if before == "requeue":  # already asked of Slurm: its answer is awaited
        assert step == Ask("requeue")
    else:
        assert isinstance(step, Done) and not step.acted and step.line.startswith("a stop signal came")
