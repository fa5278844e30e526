"""The plan: ServerDictionary, (job_type, task_index), TF_CONFIG; properties over random layouts."""

import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from tf_for_slurm import plan_from_env
from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.plan import build_plan
from tf_for_slurm.host.slurm import format_tasks_per_node
from tf_for_slurm.plan.step import offline_step
from tf_for_slurm.host.task_env import MAX_ENV_STRING, task_env, trimmed_tf_config
from envs import step_env


def test_seeds_example_two_nodes_four_tasks_ps_on_each_node():
    tasks = ["ps", "worker", "worker", "worker", "ps", "worker", "worker", "worker"]
    env = step_env("node[1-2]", "4(x2)", slot=4, job_id="100")
    plan = plan_from_env(env, tasks=tasks, check=False)
    sd = plan.server_dictionary()
    assert [a.split(":")[0] for a in sd["ps"]] == ["node1", "node2"]
    assert [a.split(":")[0] for a in sd["worker"]] == ["node1"] * 3 + ["node2"] * 3
    assert (plan.job_type, plan.task_index) == ("ps", 1)
    assert plan.me.address == sd["ps"][1]


def test_tf_config_for_any_task_and_chief_keys():
    env = step_env("n[1-3]", "2,1(x2)", slot=2)
    plan = plan_from_env(env, tasks=["ps", "chief", "worker", "evaluator"], check=False)
    cfg = plan.tf_config(2)
    assert cfg["task"] == {"type": "worker", "index": 0}
    assert set(cfg["cluster"]) == {"ps", "chief", "worker", "evaluator"}
    assert plan.tf_config() == cfg
    assert json.loads(plan.tf_config_json(0))["task"] == {"type": "ps", "index": 0}


def test_workers_only_plan_has_no_empty_ps_job_in_tf_config():
    plan = plan_from_env(step_env("n[1-2]", "1(x2)"), ps=0, check=False)
    assert plan.tf_config()["cluster"] == {"worker": [t.address for t in plan.tasks]}
    assert plan.server_dictionary()["ps"] == []


def test_environment_roles_and_policies():
    env = step_env("n[1-2]", "2(x2)", slot=1, TF_SLURM_TASKS="worker,ps,worker,worker",
                   TF_SLURM_ADDRESS="template:{host}-ib")
    plan = plan_from_env(env, check=False)
    assert plan.me.role == "ps" and plan.me.host == "n1-ib"
    env = step_env("n[1-2]", "2(x2)", slot=3, TF_SLURM_PS="2", TF_SLURM_BASE_PORT="31000")
    plan = plan_from_env(env, check=False)
    assert plan.count("ps") == 2 and plan.me.port == 31001
    env = step_env("n[1-2]", "2(x2)", TF_SLURM_PLACEMENT="per-node")
    assert [t.role for t in plan_from_env(env, check=False).tasks] == ["ps", "worker", "ps", "worker"]


def test_shared_host_makes_ports_unique_across_the_step():
    env = step_env("node[1-3]", "2(x3)", TF_SLURM_ADDRESS="template:127.0.0.1")
    plan = plan_from_env(env, check=False)
    assert len({t.address for t in plan.tasks}) == 6
    env = step_env("node[1-3]", "2(x3)", TF_SLURM_PORT_SCOPE="step")
    assert len({t.port for t in plan_from_env(env, check=False).tasks}) == 6


def test_reserved_ports_are_used_per_node():
    env = step_env("n[1-2]", "2(x2)", slot=3, SLURM_STEP_RESV_PORTS="14000-14003")
    plan = plan_from_env(env, check=False)
    assert [t.port for t in plan.tasks] == [14000, 14001, 14000, 14001]
    assert plan.me.aux_port == 14003


def test_duplicate_node_in_list_still_gets_distinct_ports():
    plan = build_plan(offline_step("x[3,1,3]", "1"), ("ps", "worker", "worker"))
    assert len({t.address for t in plan.tasks}) == 3


def test_plan_errors():
    with pytest.raises(UsageError, match="tasks and ps were both given"):
        plan_from_env(step_env("n1", "2"), tasks=["ps", "worker"], ps=1, check=False)
    with pytest.raises(UsageError, match="TF_SLURM_PS='x': expected an integer"):
        plan_from_env(step_env("n1", "2", TF_SLURM_PS="x"), check=False)
    with pytest.raises(PlanError, match="TF_SLURM_PORT_SCOPE='host': expected 'node' or 'step'"):
        plan_from_env(step_env("n1", "2", TF_SLURM_PORT_SCOPE="host"), check=False)
    with pytest.raises(PlanError, match="offline plan"):
        build_plan(offline_step("n1", "2"), ("ps", "worker")).me
    with pytest.raises(PlanError, match="TF_SLURM_ADDRESS='file:/nonexistent/f'"):
        plan_from_env(step_env("n1", "2", TF_SLURM_ADDRESS="file:/nonexistent/f"), check=False)
    with pytest.raises(UsageError, match="placement='every': expected 'first' or 'per-node'"):
        plan_from_env(step_env("n1", "2"), placement="every", check=False)


def test_own_host_is_resolved_when_checking():
    with pytest.raises(PlanError, match="does not resolve"):
        plan_from_env(step_env("nosuchnode[1-2].invalid", "1(x2)"))


def test_large_tf_config_is_trimmed_for_the_environment():
    plan = build_plan(offline_step("node[0001-4096]", "4", job_id="8"), ("ps",) * 4 + ("worker",) * (16384 - 4))
    assert len(plan.tf_config_json(100)) > MAX_ENV_STRING
    env = task_env(plan, 100)
    assert env.spill and len(env.variables["TF_CONFIG"]) < 1000
    trimmed = json.loads(env.variables["TF_CONFIG"])
    assert trimmed == trimmed_tf_config(plan, 100)
    assert trimmed["cluster"]["worker"] == {"96": plan.tasks[100].address}
    assert len(trimmed["cluster"]["ps"]) == 4
    assert json.loads(env.full_tf_config) == plan.tf_config(100)


layouts = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(layouts, st.integers(min_value=0, max_value=3), st.sampled_from(["block", "cyclic"]),
       st.sampled_from([None, "template:127.0.0.1", "template:{host}-ib"]), st.integers(1, 10**7))
def test_every_rank_finds_itself_once_addresses_distinct_role_counts_as_asked(counts, n_ps, dist, address, job):
    total = sum(counts)
    n_ps = min(n_ps, total - 1)
    nodelist = ",".join(f"node{i}" for i in range(1, len(counts) + 1))
    tpn = format_tasks_per_node(counts)
    extra = {"TF_SLURM_ADDRESS": address} if address else {}
    seen = []
    for slot in range(total):
        env = step_env(nodelist, tpn, slot=slot, job_id=str(job), distribution=dist, **extra)
        plan = plan_from_env(env, ps=n_ps, check=False)
        seen.append(plan.my_rank)
        assert plan.me.node == env["SLURMD_NODENAME"]
    assert sorted(seen) == list(range(total))
    assert len({t.address for t in plan.tasks}) == total
    assert plan.count("ps") == n_ps and plan.count("worker") == total - n_ps
    sd = plan.server_dictionary()
    assert len(sd["ps"]) == n_ps and len(sd["worker"]) == total - n_ps


def test_apply_tf_config_sets_the_full_spec_in_process_at_any_size(monkeypatch):
    from tf_for_slurm.host.task_env import apply_tf_config

    plan = build_plan(offline_step("node[0001-4096]", "4", job_id="8"), ("ps",) * 4 + ("worker",) * (16384 - 4))
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "TF_CONFIG"})  # restored after
    apply_tf_config(plan, 100)
    assert json.loads(os.environ["TF_CONFIG"]) == plan.tf_config(100)
    assert os.environ["TF_SLURM_JOB_TYPE"] == "worker" and os.environ["TF_SLURM_TASK_INDEX"] == "96"
