"""The roles line `tf-slurm local` (and `submit`) print first: roles, the chief, the strategy and why."""

from collections import namedtuple

import pytest

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan.summary import roles_line, task_names

T = namedtuple("T", "rank role index")


def tasks(*roles):
    seen: dict = {}
    out = []
    for rank, role in enumerate(roles):
        out.append(T(rank, role, seen.get(role, 0)))
        seen[role] = seen.get(role, 0) + 1
    return out


def test_the_default_plan_says_tf1_inferred_from_ps_and_no_chief():
    assert roles_line(tasks("ps", "worker", "worker")) == \
        "3 tasks: ps 0, worker 0 (chief), worker 1; step ends as tf1 (inferred: ps and no chief)"


def test_no_ps_is_mwms_and_runs_of_one_role_are_joined():
    assert roles_line(tasks(*["worker"] * 8), "auto") == \
        "8 tasks: worker 0 (chief), worker 1-7; step ends as mwms (inferred: no ps)"


def test_an_explicit_chief_is_not_marked_twice():
    assert roles_line(tasks("chief", "ps", "ps", "worker", "worker", "evaluator")) == \
        "6 tasks: chief 0, ps 0-1, worker 0-1, evaluator 0; step ends as pss (inferred: ps and a chief)"


def test_a_given_strategy_names_its_source():
    line = roles_line(tasks("ps", "worker"), "pss", "TF_SLURM_STRATEGY")
    assert line == "2 tasks: ps 0, worker 0 (chief); step ends as pss (given by TF_SLURM_STRATEGY)"
    assert roles_line(tasks("worker"), None).startswith("1 task: worker 0 (chief); ")


def test_rank_order_is_kept_and_breaks_runs():
    # per-node placement: a ps first on every node
    roles = tasks("ps", "worker", "worker", "ps", "worker", "worker")
    assert task_names(roles, chief_rank=1) == "ps 0, worker 0 (chief), worker 1, ps 1, worker 2-3"
    assert task_names(roles) == "ps 0, worker 0-1, ps 1, worker 2-3"


def test_a_bad_strategy_is_the_usual_usage_error():
    with pytest.raises(UsageError, match="--strategy"):
        roles_line(tasks("ps", "worker"), "sync")
