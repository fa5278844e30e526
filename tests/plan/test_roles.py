"""plan.roles.without_workers and fitted_to_step: the role list of a step with fewer workers (a relaunch
short of nodes, plan.relaunch; an allocation smaller than asked)."""

import pytest

from tf_for_slurm.errors import PlanError
from tf_for_slurm.plan.roles import fitted_to_step, without_workers


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


# issue 43 item 4: an allocation smaller than asked (Slurm's --nodes=MIN-MAX) trains with fewer workers
@pytest.mark.parametrize("tasks,ntasks,fewest,want", [
    ("ps,worker,worker,worker", 3, 2, (["ps", "worker", "worker"], 1)),
    ("worker,ps,worker", 2, 1, (["worker", "ps"], 1)),  # the user's order: the last worker goes
    ("chief,ps,worker,worker,worker,worker", 4, 1, (["chief", "ps", "worker", "worker"], 2)),
    ("worker,ps,worker", 3, 1, (["worker", "ps", "worker"], 0)),  # it fits: as it is
    ("worker,ps,worker", 2, None, (["worker", "ps", "worker"], 0)),  # not allowed: roles_from_list says so
    ("worker,ps", 3, 1, (["worker", "ps"], 0)),  # too short: roles_from_list says so
])
def test_fitted_to_step(tasks, ntasks, fewest, want):
    assert fitted_to_step(tasks, ntasks, fewest) == want


@pytest.mark.parametrize("tasks,ntasks,fewest,left", [("worker,ps,worker", 2, 2, 1), ("chief,ps,worker", 1, 1, 0),
                                                       ("ps,ps,worker", 2, 1, 0)])
def test_fitted_to_step_never_below_the_minimum(tasks, ntasks, fewest, left):
    with pytest.raises(PlanError, match=rf"TF_SLURM_TASKS has 3 roles for the step's {ntasks} tasks: .* would "
                                        rf"leave {left}, below TF_SLURM_MIN_WORKERS {fewest}"):
        fitted_to_step(tasks, ntasks, fewest, "TF_SLURM_TASKS", "TF_SLURM_MIN_WORKERS")
