"""plan.roles.without_workers: the role list of a step started again with fewer workers (plan.relaunch)."""

import pytest

from tf_for_slurm.errors import PlanError
from tf_for_slurm.plan.roles import without_workers


# issue 43: a step started again with fewer workers keeps every other role, in the user's order
@pytest.mark.parametrize("tasks,count,want", [
    ("worker,worker,worker", 1, ["worker", "worker"]),
    ("chief,ps,worker,worker", 1, ["chief", "ps", "worker"]),
    (["worker", "ps", "worker"], 1, ["worker", "ps"]),
    ("ps,worker,evaluator,worker,worker", 2, ["ps", "worker", "evaluator"]),
    ("worker,ps", 0, ["worker", "ps"]),
])
def test_without_workers(tasks, count, want):
    assert without_workers(tasks, count) == want


@pytest.mark.parametrize("tasks,count", [("worker,ps", 1), ("chief,ps", 1), ("worker,worker", 2), ("worker", -1)])
def test_without_workers_keeps_at_least_one(tasks, count):
    with pytest.raises(PlanError, match="ListOfTFTasks"):
        without_workers(tasks, count)
