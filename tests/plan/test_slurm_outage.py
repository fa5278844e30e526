"""plan.slurm_outage: which failures are the controller being away, and the retry rule (plain values)."""

import pytest

from tf_for_slurm.plan.slurm_outage import BACKOFF, GiveUp, Outage, Refused, TryAgain, away_reason

AWAY = [
    "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
    "scontrol: error: Unexpected message received for job 3",
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    "srun: error: Unable to create step for job 7: Zero Bytes were transmitted or received",
    "srun: Job 12 step creation temporarily disabled, retrying (Requested nodes are busy)",
]
REFUSED = [
    "sbatch: error: Batch job submission failed: Invalid partition name specified",
    "slurm_load_jobs error: Invalid job id specified",
    "scontrol: error: Requested operation is presently disabled for job 12",
    "",
]


@pytest.mark.parametrize("text", AWAY)
def test_the_controller_away_is_recognised(text):
    assert away_reason("some line\n" + text) == text


@pytest.mark.parametrize("text", REFUSED)
def test_a_refusal_is_not_an_outage(text):
    assert away_reason(text) is None


def test_only_a_request_that_never_left_is_safe_to_send_twice():
    assert away_reason(AWAY[0], not_sent_only=True) == AWAY[0]
    assert away_reason(AWAY[2], not_sent_only=True) is None  # sbatch may have submitted it


def test_one_line_per_outage_and_bounded_backoff():
    out = Outage("scontrol requeue 12", patience=100)
    steps = [out.failed("Unable to contact slurm controller", t) for t in (0, 1, 3, 7, 15, 30, 45)]
    assert all(isinstance(s, TryAgain) for s in steps)
    assert [s.delay for s in steps] == [*BACKOFF, 15.0, 15.0]
    lines = [s.line for s in steps if s.line]
    assert len(lines) == 1 and "scontrol requeue 12: Slurm's controller does not answer" in lines[0]
    assert "answered again after 50 s (7 failed tries)" in out.answered(50)


def test_gives_up_after_its_patience_never_waits_past_it():
    out = Outage("squeue", patience=10)
    first = out.failed("Socket timed out on send/recv", 0)
    assert first == TryAgain(1.0, "squeue: Slurm's controller does not answer (Socket timed out on send/recv): "
                                  "trying again for up to 10 s")
    assert out.failed("Socket timed out on send/recv", 9.5).delay == 0.5  # never past the patience
    last = out.failed("Socket timed out on send/recv", 10)
    assert isinstance(last, GiveUp) and "did not answer for 10 s (3 tries" in last.line


def test_a_refusal_is_never_retried_and_no_outage_means_no_line():
    out = Outage("sbatch", patience=60)
    assert isinstance(out.failed(None, 0), Refused)
    assert out.answered(1) is None
