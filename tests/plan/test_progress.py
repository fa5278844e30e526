"""The hung-task rule as a table (plan/progress.py): stopped for the deadline, or silent for it after a report."""

import pytest

from tf_for_slurm.plan.progress import hung


@pytest.mark.parametrize("now,deadline,started,reported,stopped,words", [
    (100.0, 0.0, 0.0, None, 0.0, None),  # no deadline: never
    (100.0, 30.0, 0.0, None, None, None),  # never reported, running: an unmodified script is never killed
    (100.0, 30.0, 0.0, 80.0, None, None),  # reported 20 s ago
    (100.0, 30.0, 0.0, 70.0, None, "reported no progress for 30.0 s"),
    (100.0, 30.0, 90.0, 10.0, None, None),  # a report before its restart: the clock starts at the restart
    (100.0, 30.0, 0.0, None, 75.0, None),  # stopped 25 s
    (100.0, 30.0, 0.0, None, 70.0, "stopped (SIGSTOP) for 30.0 s"),
    (100.0, 30.0, 0.0, 99.0, 60.0, "stopped (SIGSTOP) for 40.0 s"),  # stopped wins over an old report
])
def test_hung(now, deadline, started, reported, stopped, words):
    why = hung(now, deadline, started=started, reported=reported, stopped_since=stopped)
    if words is None:
        assert why is None
    else:
        assert why is not None and words in why and "the progress deadline is 30 s" in why, why
