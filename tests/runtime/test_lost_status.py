"""One status for "a peer was lost", with plain data (no TensorFlow): a TF1 ps that loses a worker
and a PSS server that loses its coordinator exit with plan.requeue's LOST_STATUS, the status exec's
supervisors use, so batch-step requeues the job once the checkpoint advanced; their timeout and
failure statuses stay apart from it and are never requeued."""

from __future__ import annotations

import pytest

import tf_for_slurm.runtime as runtime
from tf_for_slurm.plan import requeue, step_watch
from tf_for_slurm.runtime import ps_wait, pss_exit, tf2

LOST = [("ps_wait.EXIT_WORKER_LOST", ps_wait.EXIT_WORKER_LOST),
        ("pss_exit.EXIT_COORDINATOR_LOST", pss_exit.EXIT_COORDINATOR_LOST)]
NOT_LOST = [("ps_wait.EXIT_TIMEOUT", ps_wait.EXIT_TIMEOUT), ("ps_wait.EXIT_WORKER_FAILED", ps_wait.EXIT_WORKER_FAILED),
            ("pss_exit.EXIT_COORDINATOR_NEVER_SEEN", pss_exit.EXIT_COORDINATOR_NEVER_SEEN),
            ("pss_exit.EXIT_TRAINING_FAILED", pss_exit.EXIT_TRAINING_FAILED)]


def test_every_lost_status_is_plan_requeue_s():
    assert requeue.LOST_STATUS == 69  # EX_UNAVAILABLE
    assert (ps_wait.EXIT_WORKER_LOST == pss_exit.EXIT_COORDINATOR_LOST == step_watch.LOST_STATUS
            == requeue.LOST_STATUS)
    # the names users import keep working, with the new value
    assert runtime.EXIT_WORKER_LOST == tf2.EXIT_COORDINATOR_LOST == requeue.LOST_STATUS
    assert runtime.EXIT_WORKER_FAILED == ps_wait.EXIT_WORKER_FAILED
    assert tf2.EXIT_COORDINATOR_NEVER_SEEN == pss_exit.EXIT_COORDINATOR_NEVER_SEEN


@pytest.mark.parametrize("name,status", LOST, ids=[n for n, _ in LOST])
def test_a_lost_peer_is_requeued_after_progress_only(name, status):
    advanced = requeue.decide("", status, 0, 10, checkpoint_step=300, target=800, start_step=100)
    assert advanced.requeue and "a task was lost" in advanced.reason, (name, advanced)
    stuck = requeue.decide("", status, 0, 10, checkpoint_step=100, target=800, start_step=100)
    assert not stuck.requeue and stuck.exit_status == status, (name, stuck)  # no loop without progress


@pytest.mark.parametrize("name,status", NOT_LOST, ids=[n for n, _ in NOT_LOST])
def test_timeouts_and_failures_are_neither_lost_nor_requeued(name, status):
    assert 0 < status < 128 and status != requeue.LOST_STATUS and not requeue.retryable_failure(status), name
    decision = requeue.decide("", status, 0, 10, checkpoint_step=300, target=800, start_step=100)
    assert not decision.requeue and decision.exit_status == status, (name, decision)


def test_the_timeouts_are_distinct_statuses():
    assert len({ps_wait.EXIT_OK, ps_wait.EXIT_WORKER_LOST, ps_wait.EXIT_WORKER_FAILED, ps_wait.EXIT_TIMEOUT}) == 4
    assert len({pss_exit.EXIT_COORDINATOR_LOST, pss_exit.EXIT_COORDINATOR_NEVER_SEEN,
                pss_exit.EXIT_TRAINING_FAILED}) == 3
