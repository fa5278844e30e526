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
