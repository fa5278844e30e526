"""A step over heterogeneous-job components, with plain data: reordering, this task's checks, roles, ports."""

import pytest

from tf_for_slurm.errors import PlanError, SlurmEnvError, UsageError
from tf_for_slurm.plan.cluster import build_plan
from tf_for_slurm.plan.gpus import devices_for_task
from tf_for_slurm.plan.hetjob import het_step, offline_het_step
from tf_for_slurm.plan.roles import roles_by_component
from tf_for_slurm.plan.step import SlurmStep

NAMES = {"nodes": "STEP_NODELIST", "procid": "PROCID", "localid": "LOCALID", "nodeid": "NODEID",
         "node_name": "NODENAME", "ntasks": "STEP_NUM_TASKS"}


def merged(nodes, counts, **ids):
    return SlurmStep(job_id="2", step_id="0", nodes=tuple(nodes), tasks_per_node=tuple(counts), **ids)


# (merged step nodes, counts, component lists, expected order, expected counts, expected components)
LAYOUTS = [
    # the recorded harness layout: sbatch -w node3 -n1 : -w node[1-2] --ntasks-per-node=2
    (("node1", "node2", "node3"), (2, 2, 1), [("node3",), ("node1", "node2")],
     ("node3", "node1", "node2"), (1, 2, 2), (0, 1, 1)),
    # three components, reversed: c0 = n5, c1 = n[3-4], c2 = n[1-2]
    (("n1", "n2", "n3", "n4", "n5"), (4, 4, 1, 1, 2), [("n5",), ("n3", "n4"), ("n1", "n2")],
     ("n5", "n3", "n4", "n1", "n2"), (2, 1, 1, 4, 4), (0, 1, 1, 2, 2)),
    # in name order already: nothing moves
    (("cpu1", "gpu1", "gpu2"), (1, 3, 2), [("cpu1",), ("gpu1", "gpu2")],
     ("cpu1", "gpu1", "gpu2"), (1, 3, 2), (0, 1, 1)),
    # one component's nodes only (srun --het-group=1): a plain step, components still set
    (("node1", "node2"), (2, 2), [("node3",), ("node1", "node2")], ("node1", "node2"), (2, 2), (1, 1)),
]


@pytest.mark.parametrize("nodes,counts,lists,order,new_counts,components", LAYOUTS)
def test_nodes_go_in_component_order(nodes, counts, lists, order, new_counts, components):
    step = het_step(merged(nodes, counts), lists, names=NAMES)
    assert (step.nodes, step.tasks_per_node, step.components) == (order, new_counts, components)
    assert len(step.task_components) == step.ntasks == sum(counts)


def slurm_ids(order, counts):
    """(procid, nodeid, localid, node) of every task as Slurm gives them: block within each component,
    node id = index into the component-ordered list."""
    out = []
    for nodeid, (node, count) in enumerate(zip(order, counts)):
        out += [(len(out) + local, nodeid, local, node) for local in range(count)]
    return out


@pytest.mark.parametrize("nodes,counts,lists,order,new_counts,components", LAYOUTS)
def test_every_rank_finds_its_slot(nodes, counts, lists, order, new_counts, components):
    for procid, nodeid, localid, node in slurm_ids(order, new_counts):
        step = het_step(merged(nodes, counts, procid=procid, nodeid=nodeid, localid=localid, node_name=node),
                        lists, names=NAMES, ntasks=sum(counts))
        assert step.my_slot == procid and step.nodes[step.my_node_index] == node


def test_recorded_ranks():
    # rank -> (SLURMD_NODENAME, SLURM_NODEID, SLURM_LOCALID) as the harness printed them
    recorded = {0: ("node3", 0, 0), 1: ("node1", 1, 0), 2: ("node1", 1, 1), 3: ("node2", 2, 0), 4: ("node2", 2, 1)}
    for rank, (node, nodeid, localid) in recorded.items():
        step = het_step(merged(("node1", "node2", "node3"), (2, 2, 1), procid=rank, nodeid=nodeid, localid=localid,
                               node_name=node), [("node3",), ("node1", "node2")], names=NAMES)
        assert step.my_slot == rank
        plan = build_plan(step, ("ps", "worker", "worker", "worker", "worker"))
        assert (plan.me.node, plan.me.local_id, plan.components[rank]) == (node, localid, 0 if rank == 0 else 1)


@pytest.mark.parametrize("ids,lists,needle", [
    ({}, [("node1", "node3"), ("node2", "node3")],
     "node 'node3' of STEP_NODELIST is in L0 and L1: expected distinct nodes per component"),
    ({}, [("node3",), ("node1",)], "node 'node2' of STEP_NODELIST is in none of L0, L1"),
    (dict(procid=0, nodeid=0, localid=0, node_name="node1"), [("node3",), ("node1", "node2")],
     "NODEID=0 names node 'node3' of the step in component order (node3, node1, node2) but NODENAME='node1'"),
    (dict(procid=0, nodeid=0, localid=1, node_name="node3"), [("node3",), ("node1", "node2")],
     "LOCALID=1: expected a local id below 1, the task count of node 'node3'"),
    # a non-block distribution across components: rank 1 on node3 (component 0 holds rank 0 only)
    (dict(procid=1, nodeid=0, localid=0, node_name="node3"), [("node3",), ("node1", "node2")],
     "PROCID=1: expected a rank in 0-0, those of component 0 (node 'node3')"),
    (dict(procid=0, nodeid=1, localid=0, node_name="node1"), [("node3",), ("node1", "node2")],
     "PROCID=0: expected a rank in 1-4, those of component 1"),
    (dict(nodeid=3), [("node3",), ("node1", "node2")], "NODEID=3: expected a node index below 3"),
])
def test_one_line_errors(ids, lists, needle):
    with pytest.raises(SlurmEnvError) as exc:
        het_step(merged(("node1", "node2", "node3"), (2, 2, 1), **ids), lists, names=NAMES,
                 component_names=["L0", "L1"])
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_total_must_match():
    with pytest.raises(SlurmEnvError, match=r"STEP_NUM_TASKS=6: expected 5"):
        het_step(merged(("node1", "node2", "node3"), (2, 2, 1)), [("node3",), ("node1", "node2")], names=NAMES,
                 ntasks=6)


@pytest.mark.parametrize("components,roles,expected", [
    ((0, 1, 1, 1, 1), "ps,worker", ("ps", "worker", "worker", "worker", "worker")),
    ((0, 1, 2, 2), ["chief", "ps", "worker"], ("chief", "ps", "worker", "worker")),
    ((0, 0, 1, 1), "worker,evaluator", None),  # two evaluators
    ((1, 1), "worker", ("worker", "worker")),  # one component of the allocation in the step
    ((0, 1, 1), " PS , Worker ", ("ps", "worker", "worker")),
])
def test_roles_by_component(components, roles, expected):
    if expected is None:
        with pytest.raises(PlanError, match="at most one 'evaluator'"):
            roles_by_component(components, roles, "R")
    else:
        assert roles_by_component(components, roles, "R") == expected


@pytest.mark.parametrize("components,roles,needle", [
    ((0, 1, 1), "ps", "R='ps' has 1 role: expected one per component of the heterogeneous step (2: components 0, 1)"),
    ((0, 1, 1), "ps,worker,worker", "has 3 roles: expected one per component"),
    ((0, 0, 1), "chief,worker", "R='chief,worker': component 0 is 'chief' but has 2 tasks: expected exactly one"),
    ((0, 1), "ps,ps", "expected at least one 'worker'"),
    ((0, 1), "ps,boss", "R[1]='boss'"),
])
def test_roles_by_component_errors(components, roles, needle):
    with pytest.raises(PlanError) as exc:
        roles_by_component(components, roles, "R")
    assert needle in str(exc.value)


def test_indices_follow_rank_order_across_components():
    step = het_step(merged(("a1", "b1", "b2"), (2, 1, 1)), [("b1", "b2"), ("a1",)])
    plan = build_plan(step, roles_by_component(step.task_components, "worker,worker"))
    assert [(t.node, t.role, t.index) for t in plan.tasks] == [
        ("b1", "worker", 0), ("b2", "worker", 1), ("a1", "worker", 2), ("a1", "worker", 3)]


def test_reserved_ports_not_used_across_components():
    step = het_step(merged(("node1", "node2", "node3"), (2, 2, 1), procid=0, nodeid=0, localid=0,
                           node_name="node3", resv_ports=tuple(range(12000, 12008))),
                    [("node3",), ("node1", "node2")])
    plan = build_plan(step, ("ps",) + ("worker",) * 4, names={"reserved": "RESV"})
    assert dict(plan.details)["port_policy"] == "window"
    assert any(n.startswith("reserved ports (RESV) not used") for n in plan.notes)
    one = het_step(merged(("node1", "node2"), (2, 2), resv_ports=tuple(range(12000, 12004))),
                   [("node3",), ("node1", "node2")])
    assert dict(build_plan(one, ("ps",) + ("worker",) * 3).details)["port_policy"] == "reserved"


def test_gpus_of_this_node_go_to_its_workers_ps_none():
    # rank 3: node2 of component 1, whose step GPUs are 0,1; rank 0 (the ps on node3) sees none
    step = het_step(merged(("node1", "node2", "node3"), (2, 2, 1), procid=3, nodeid=2, localid=0,
                           node_name="node2", gpus=("0", "1")), [("node3",), ("node1", "node2")])
    plan = build_plan(step, roles_by_component(step.task_components, "ps,worker"))
    assert plan.me.gpus == ("0", "1")
    assert devices_for_task(plan.tasks, 3, None, "0,1") == "0"
    assert devices_for_task(plan.tasks, 4, None, "0,1") == "1"
    assert devices_for_task(plan.tasks, 0, None, None) == ""


def test_offline_components():
    step = offline_het_step(["cpu[1-2]:1(x2)", "gpu[01-04]:4"], job_id="9")
    assert step.nodes == ("cpu1", "cpu2", "gpu01", "gpu02", "gpu03", "gpu04")
    assert step.tasks_per_node == (1, 1, 4, 4, 4, 4) and step.components == (0, 0, 1, 1, 1, 1)
    assert offline_het_step(["z9", "a1:2"]).tasks_per_node == (1, 2)


@pytest.mark.parametrize("specs,needle", [
    (["cpu[1-2]:1", "cpu2:1"], "--component='cpu2:1': node 'cpu2' is also in component 0"),
    (["cpu[1-2:1"], "--component 'cpu[1-2:1': node list='cpu[1-2'"),
    (["cpu1:x"], "--component 'cpu1:x': tasks per node='x'"),
    (["cpu[1-2]:1,2,3"], "expected one task count per node (2 nodes) or a single count, got 3"),
    ([""], "--component='': expected NODELIST:TASKS_PER_NODE"),
])
def test_offline_component_errors(specs, needle):
    with pytest.raises((UsageError, SlurmEnvError)) as exc:
        offline_het_step(specs)
    assert needle in str(exc.value) and "\n" not in str(exc.value)
