"""Reading a heterogeneous step from Slurm's variables (recorded and built as Slurm 22.05 writes them)."""

import hostlist
import pytest
from envs import step_env

from tf_for_slurm.errors import PlanError, SlurmEnvError, UsageError
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.host.slurm import step_from_env
from tf_for_slurm.plan.step import format_tasks_per_node

# sbatch -w node3 -n1 : -w node[1-2] --ntasks-per-node=2, then srun --het-group=0,1 (slurm-hetjob.md)
RECORDED = {"SLURM_JOB_ID": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node[1-3]",
            "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_NODELIST": "node[1-3]", "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
            "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_STEP_NUM_TASKS": "5", "SLURM_NTASKS": "5", "SLURM_HET_SIZE": "2",
            "SLURM_JOB_NODELIST_HET_GROUP_0": "node3", "SLURM_JOB_NODELIST_HET_GROUP_1": "node[1-2]"}
# rank -> (SLURMD_NODENAME, SLURM_NODEID, SLURM_LOCALID), as printed on the harness
RECORDED_IDS = {0: ("node3", 0, 0), 1: ("node1", 1, 0), 2: ("node1", 1, 1), 3: ("node2", 2, 0), 4: ("node2", 2, 1)}


def recorded(rank, **extra):
    node, nodeid, localid = RECORDED_IDS[rank]
    env = {**RECORDED, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(nodeid), "SLURM_LOCALID": str(localid),
           "SLURMD_NODENAME": node}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("rank", sorted(RECORDED_IDS))
def test_recorded_two_components_every_rank(rank):
    step = step_from_env(recorded(rank))
    assert step.nodes == ("node3", "node1", "node2") and step.tasks_per_node == (1, 2, 2)
    assert step.components == (0, 1, 1) and step.task_components == (0, 1, 1, 1, 1)
    plan = plan_from_env(recorded(rank), component_roles="ps,worker", check=False)
    me = plan.me
    assert me.rank == rank and me.node == RECORDED_IDS[rank][0] and me.local_id == RECORDED_IDS[rank][2]
    assert [(t.node, t.role, t.index) for t in plan.tasks] == [
        ("node3", "ps", 0), ("node1", "worker", 0), ("node1", "worker", 1), ("node2", "worker", 2),
        ("node2", "worker", 3)]
    assert plan.components == (0, 1, 1, 1, 1)


def het_envs(components, step_components=None, spelling="HET", **extra):
    """Every task's environment of a step over `step_components` (default all) of a het allocation whose
    component c is (nodelist, tasks per node): merged list sorted by name, block ranks by component."""
    step_components = range(len(components)) if step_components is None else step_components
    layout = []  # (node, count, component) in component order
    for c in step_components:
        nodes = hostlist.expand_hostlist(components[c][0])
        counts = hostlist.parse_slurm_tasks_per_node(components[c][1])
        counts = counts * len(nodes) if len(counts) == 1 else counts
        layout += [(n, k, c) for n, k in zip(nodes, counts)]
    merged = hostlist.numerically_sorted([n for n, _, _ in layout])
    count_of = {n: k for n, k, _ in layout}
    common = {"SLURM_JOB_ID": "70", "SLURM_STEP_ID": "1", "SLURM_HET_SIZE": str(len(components)),
              "SLURM_STEP_NODELIST": ",".join(merged), "SLURM_JOB_NODELIST": ",".join(merged),
              "SLURM_STEP_TASKS_PER_NODE": format_tasks_per_node([count_of[n] for n in merged]),
              "SLURM_STEP_NUM_TASKS": str(sum(count_of.values()))}
    for c, (nodelist, _) in enumerate(components):
        common[f"SLURM_JOB_NODELIST_{spelling}_GROUP_{c}"] = nodelist
    common.update(extra)
    envs = []
    for nodeid, (node, count, _) in enumerate(layout):
        for local in range(count):
            envs.append({**common, "SLURM_PROCID": str(len(envs)), "SLURM_NODEID": str(nodeid),
                         "SLURM_LOCALID": str(local), "SLURMD_NODENAME": node})
    return envs


@pytest.mark.parametrize("components,step_components,spelling,roles", [
    ([("cpu[1-2]", "1"), ("gpu[01-02]", "4")], None, "HET", "ps,worker"),
    ([("z1", "1"), ("m[1-2]", "2"), ("a[1-3]", "3,1,2")], None, "HET", "chief,ps,worker"),  # 3, reversed, uneven
    ([("z1", "1"), ("m[1-2]", "2"), ("a[1-3]", "3,1,2")], None, "PACK", "chief,ps,worker"),  # srun-made allocation
    ([("node3", "1"), ("node[1-2]", "2")], [1], "HET", "worker"),  # srun --het-group=1 alone
    ([("n[10-11]", "2"), ("n[8-9]", "1")], None, "HET", "worker,ps"),  # name order would put n10 after n9
])
def test_every_task_of_a_het_step(components, step_components, spelling, roles):
    envs = het_envs(components, step_components, spelling)
    plans = [plan_from_env(env, component_roles=roles, check=False) for env in envs]
    for rank, (env, plan) in enumerate(zip(envs, plans)):
        assert plan.my_rank == rank and plan.me.node == env["SLURMD_NODENAME"]
        assert plan.me.local_id == int(env["SLURM_LOCALID"])
        assert plan.tasks == plans[0].tasks  # every task agrees on the cluster
    first = (step_components or [0])[0]
    assert plans[0].components[0] == first
    wanted = roles.split(",")
    present = sorted(set(plans[0].components))
    assert [t.role for t in plans[0].tasks] == [wanted[present.index(c)] for c in plans[0].components]


def test_setting_gives_roles_by_component_and_tasks_wins():
    env = recorded(0, TF_SLURM_COMPONENT_ROLES="ps,worker")
    assert [t.role for t in plan_from_env(env, check=False).tasks] == ["ps"] + ["worker"] * 4
    plan = plan_from_env(env, tasks="worker,ps,worker,worker,worker", check=False)
    assert plan.tasks[0].role == "worker"
    env["TF_SLURM_TASKS"] = "worker,worker,ps,worker,worker"
    assert plan_from_env(env, check=False).tasks[2].role == "ps"
    env = recorded(0, TF_SLURM_COMPONENT_ROLES="ps,worker", TF_SLURM_PS="3")
    assert plan_from_env(env, check=False).count("ps") == 1


def test_roles_by_component_errors():
    with pytest.raises(UsageError, match="component_roles and ps were both given"):
        plan_from_env(recorded(0), component_roles="ps,worker", ps=1, check=False)
    with pytest.raises(UsageError, match="expected a heterogeneous step"):
        plan_from_env(step_env("node[1-2]", "2(x2)"), component_roles="ps,worker", check=False)
    with pytest.raises(PlanError, match="TF_SLURM_COMPONENT_ROLES='ps,worker,worker' has 3 roles"):
        plan_from_env(recorded(0, TF_SLURM_COMPONENT_ROLES="ps,worker,worker"), check=False)
    with pytest.raises(PlanError, match="component 1 is 'chief' but has 4 tasks"):
        plan_from_env(recorded(0), component_roles=["ps", "chief"], check=False)


@pytest.mark.parametrize("changes,needle", [
    ({"SLURM_JOB_NODELIST_HET_GROUP_1": "node[1-3]"},
     "node 'node3' of SLURM_STEP_NODELIST is in SLURM_JOB_NODELIST_HET_GROUP_0='node3' and "
     "SLURM_JOB_NODELIST_HET_GROUP_1='node[1-3]': expected distinct nodes per component"),
    ({"SLURM_JOB_NODELIST_HET_GROUP_1": "node1"}, "node 'node2' of SLURM_STEP_NODELIST is in none of"),
    ({"SLURM_JOB_NODELIST_HET_GROUP_1": None},
     "SLURM_HET_SIZE='2' but neither SLURM_JOB_NODELIST_HET_GROUP_1 nor SLURM_JOB_NODELIST_PACK_GROUP_1 is set"),
    ({"SLURMD_NODENAME": "node1"}, "SLURM_NODEID=0 names node 'node3' of the step in component order"),
    ({"SLURM_PROCID": "1"}, "SLURM_PROCID=1: expected a rank in 0-0, those of component 0"),
    ({"SLURM_LOCALID": "1"}, "SLURM_LOCALID=1: expected a local id below 1"),
    ({"SLURM_HET_SIZE": "two"}, "SLURM_HET_SIZE='two': expected an integer >= 1"),
    ({"SLURM_STEP_NUM_TASKS": "4"}, "SLURM_STEP_NUM_TASKS='4': expected 5"),
])
def test_one_line_errors(changes, needle):
    with pytest.raises(SlurmEnvError) as exc:
        step_from_env(recorded(0, **changes))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_pack_spelling_and_batch_script_left_alone():
    env = recorded(3, SLURM_JOB_NODELIST_HET_GROUP_0=None, SLURM_JOB_NODELIST_HET_GROUP_1=None,
                   SLURM_JOB_NODELIST_PACK_GROUP_0="node3", SLURM_JOB_NODELIST_PACK_GROUP_1="node[1-2]")
    assert step_from_env(env).my_slot == 3
    # the batch script (no step): the JOB variables describe component 0 only, read as a plain job
    batch = {"SLURM_JOB_ID": "2", "SLURM_JOB_NODELIST": "node3", "SLURM_TASKS_PER_NODE": "1", "SLURM_NTASKS": "1",
             "SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_1": "node[1-2]"}
    step = step_from_env(batch)
    assert step.nodes == ("node3",) and step.components == ()


def test_reserved_ports_fall_back_to_the_window_with_a_note():
    plan = plan_from_env(recorded(1, SLURM_STEP_RESV_PORTS="12000-12007"), component_roles="ps,worker", check=False)
    assert dict(plan.details)["port_policy"] == "window"
    assert any("SLURM_STEP_RESV_PORTS" in n and "not used" in n for n in plan.notes)


def test_gpus_per_node_under_components():
    plan = plan_from_env(recorded(4, SLURM_STEP_GPUS="0,1"), component_roles="ps,worker", check=False)
    assert plan.me.gpus == ("0", "1") and plan.tasks[0].gpus == ()


def separate_steps(components, spelling="HET"):
    """Every task's environment when each component runs its own step (srun --het-group=c), the
    allocation's per-component layouts inherited from the batch script; the steps get different ids."""
    layouts = {}
    for c, (nodelist, tpn) in enumerate(components):
        counts = hostlist.parse_slurm_tasks_per_node(tpn)
        counts = counts * len(hostlist.expand_hostlist(nodelist)) if len(counts) == 1 else counts
        layouts[f"SLURM_TASKS_PER_NODE_{spelling}_GROUP_{c}"] = format_tasks_per_node(counts)  # as Slurm writes it
    return [het_envs(components, [c], spelling, SLURM_STEP_ID=str(5 + c), **layouts) for c in range(len(components))]


@pytest.mark.parametrize("components,roles", [
    ([("node3", "1"), ("node[1-2]", "2(x2)")], "ps,worker"),  # the harness's job, component order != name order
    ([("z1", "1"), ("m[1-2]", "2"), ("a[1-3]", "3,1,2")], "chief,ps,worker"),
])
@pytest.mark.parametrize("spelling", ["HET", "PACK"])
def test_one_step_per_component_plans_the_whole_allocation(components, roles, spelling):
    steps = separate_steps(components, spelling)
    plans = [[plan_from_env(env, component_roles=roles, check=False) for env in envs] for envs in steps]
    whole = [plan for per_step in plans for plan in per_step]
    assert [p.my_rank for p in whole] == list(range(len(whole)))  # ranks continue across the steps
    for plan in whole:
        assert plan.tasks == whole[0].tasks and plan.step_id == "het"  # one cluster, one port window
    for c, envs in enumerate(steps):
        for env, plan in zip(envs, plans[c]):
            assert plan.me.node == env["SLURMD_NODENAME"] and plan.components[plan.my_rank] == c
    wanted = roles.split(",")
    assert [t.role for t in whole[0].tasks] == [wanted[c] for c in whole[0].components]
    assert len({(t.node, t.port) for t in whole[0].tasks}) == len(whole)


def test_one_component_step_alone_stays_its_own_cluster():
    """Roles for one component only: the step is its own cluster (no whole-allocation plan)."""
    envs = separate_steps([("node3", "1"), ("node[1-2]", "2(x2)")])[1]
    plan = plan_from_env(envs[0], component_roles="worker", check=False)
    assert len(plan.tasks) == 4 and plan.step_id == "6"


@pytest.mark.parametrize("change,needle", [
    ({"SLURM_TASKS_PER_NODE_HET_GROUP_1": "1(x2)"}, "expected one step per component with the allocation's layout"),
    ({"SLURM_TASKS_PER_NODE_HET_GROUP_0": None}, "SLURM_TASKS_PER_NODE_HET_GROUP_0 nor"),
])
def test_one_step_per_component_errors(change, needle):
    env = {**separate_steps([("node3", "1"), ("node[1-2]", "2(x2)")])[1][0], **change}
    env = {k: v for k, v in env.items() if v is not None}
    with pytest.raises(SlurmEnvError) as info:
        plan_from_env(env, component_roles="ps,worker", check=False)
    assert needle in str(info.value) and "\n" not in str(info.value)
