"""A step batch-step started again with fewer workers (TF_SLURM_FEWER_WORKERS, issue 43): the user's
role list loses its last workers, so the plan fits the smaller step; a ps-count plan needs nothing."""

import pytest

from envs import step_env
from tf_for_slurm.errors import PlanError
from tf_for_slurm.host.environment import plan_from_env


def _roles(plan):
    return [(t.role, t.node) for t in plan.tasks]


def test_a_role_list_loses_its_last_workers():
    # planned worker,ps,worker on node[1-3]; node2 lost: worker,ps on node1,node3
    env = step_env("node[1,3]", "1(x2)", TF_SLURM_TASKS="worker,ps,worker", TF_SLURM_FEWER_WORKERS="1")
    assert _roles(plan_from_env(env, check=False)) == [("worker", "node1"), ("ps", "node3")]


def test_the_command_lines_list_too():
    # exec --tasks chief,ps,worker,worker (PSS); node1 lost: the coordinator moves to node2
    env = step_env("node[2-4]", "1(x3)", TF_SLURM_FEWER_WORKERS="1")
    plan = plan_from_env(env, tasks=["chief", "ps", "worker", "worker"], check=False)
    assert _roles(plan) == [("chief", "node2"), ("ps", "node3"), ("worker", "node4")]


def test_a_ps_count_plan_is_smaller_by_itself():
    env = step_env("node[1,3]", "1(x2)", TF_SLURM_PS="0", TF_SLURM_FEWER_WORKERS="1")
    assert _roles(plan_from_env(env, check=False)) == [("worker", "node1"), ("worker", "node3")]


def test_more_than_the_list_has_is_one_error():
    env = step_env("node1", "1", TF_SLURM_TASKS="worker,ps", TF_SLURM_FEWER_WORKERS="1")
    with pytest.raises(PlanError, match="TF_SLURM_TASKS"):
        plan_from_env(env, check=False)


# issue 43 item 4: Slurm's --nodes=MIN-MAX started the job on fewer nodes than the role list names
def test_an_allocation_smaller_than_the_list_trains_with_fewer_workers_when_allowed():
    env = step_env("node[1-2]", "1(x2)", TF_SLURM_TASKS="worker,ps,worker", TF_SLURM_MIN_WORKERS="1")
    plan = plan_from_env(env, check=False)
    assert _roles(plan) == [("worker", "node1"), ("ps", "node2")]
    assert dict(plan.details)["workers_left_out"] == 1
    assert plan.notes[-1] == ("TF_SLURM_TASKS names 3 roles for the step's 2 tasks (an allocation smaller than "
                              "asked): its last 1 worker(s) left out (TF_SLURM_MIN_WORKERS allows it)")


def test_without_the_minimum_the_list_must_fit_as_before():
    env = step_env("node[1-2]", "1(x2)", TF_SLURM_TASKS="worker,ps,worker")
    with pytest.raises(PlanError, match=r"TF_SLURM_TASKS has 3 roles: expected one per task of the step \(2 tasks\)"):
        plan_from_env(env, check=False)


def test_never_below_the_minimum():
    env = step_env("node[1-2]", "1(x2)", TF_SLURM_TASKS="worker,ps,worker", TF_SLURM_MIN_WORKERS="2")
    with pytest.raises(PlanError, match="below TF_SLURM_MIN_WORKERS 2"):
        plan_from_env(env, check=False)


def test_a_relaunch_of_a_smaller_allocation_leaves_out_what_batch_step_counted():
    # 4 workers listed, the allocation had room for 3 (1 left out); a node lost: batch-step counts from
    # the list's 4 and asks for 2 fewer, the step has 2 tasks
    env = step_env("node[1-2]", "1(x2)", TF_SLURM_TASKS="worker,worker,worker,worker", TF_SLURM_MIN_WORKERS="1",
                   TF_SLURM_FEWER_WORKERS="2")
    plan = plan_from_env(env, check=False)
    assert _roles(plan) == [("worker", "node1"), ("worker", "node2")] and "workers_left_out" not in dict(plan.details)
