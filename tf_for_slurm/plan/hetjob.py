"""A step over the components of a heterogeneous job, in component order.

Slurm gives a task of such a step the MERGED node list of its components, sorted by name, with the
task counts reordered to match, while its node id is the component's node offset plus the node's
position in that component, and ranks go component by component (block within a component).  So
the step is planned with its nodes reordered: component 0's nodes first (in the step list's order),
then component 1's, ...  With that order Slurm's node id is the index into the node list and the
plan's slot order (node by node, local id within node) is Slurm's rank order.

Pure: the variables' names come in as arguments, for messages only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional, Sequence

from tf_for_slurm.errors import SlurmEnvError, UsageError, bad_value
from tf_for_slurm.plan.step import SlurmStep, expand_nodelist, parse_tasks_per_node

# what each input is called in messages when the caller gives no names
DEFAULT_NAMES = {"nodes": "step node list", "procid": "procid", "localid": "localid", "nodeid": "nodeid",
                 "node_name": "node name", "ntasks": "number of tasks"}


def het_step(step: SlurmStep, component_nodes: Sequence[Sequence[str]], *,
             component_names: Optional[Sequence[str]] = None, names: Optional[Mapping[str, str]] = None,
             ntasks: Optional[int] = None) -> SlurmStep:
    """`step` (merged node list, as Slurm gives it) reordered by component, with `components` set.

    component_nodes: the allocation's node names of component c at index c. component_names: what
    each list is called (the variable read), names: what step's values are called ('nodes',
    'procid', 'localid', 'nodeid', 'node_name', 'ntasks'), for messages. Every inconsistency is
    one SlurmEnvError line naming the variable and what was expected.
    """
    names = {**DEFAULT_NAMES, **(names or {})}
    lists = [f"component {c}'s node list" for c in range(len(component_nodes))]
    lists = list(component_names) if component_names is not None else lists
    members = [set(nodes) for nodes in component_nodes]
    seen: set = set()
    owner = []
    for node in step.nodes:
        if node in seen:
            raise SlurmEnvError(f"{names['nodes']} lists node {node!r} twice: expected each node of a "
                                "heterogeneous step once (components sharing a node cannot be mapped)")
        seen.add(node)
        found = [c for c, m in enumerate(members) if node in m]
        if not found:
            raise SlurmEnvError(f"node {node!r} of {names['nodes']} is in none of {', '.join(lists) or 'no lists'}: "
                                "expected every node of the step in exactly one component")
        if len(found) > 1:
            raise SlurmEnvError(f"node {node!r} of {names['nodes']} is in {' and '.join(lists[c] for c in found)}: "
                                "expected distinct nodes per component (components sharing a node cannot be mapped)")
        owner.append(found[0])
    order = sorted(range(len(step.nodes)), key=lambda i: (owner[i], i))
    nodes = tuple(step.nodes[i] for i in order)
    counts = tuple(step.tasks_per_node[i] for i in order)
    components = tuple(owner[i] for i in order)
    total = sum(counts)
    if ntasks is not None and ntasks != total:
        raise SlurmEnvError(bad_value(names["ntasks"], ntasks, f"{total}, the sum of the step's task counts"))
    out = replace(step, nodes=nodes, tasks_per_node=counts, components=components)
    _check_me(out, names)
    return out


def _check_me(step: SlurmStep, names: Mapping[str, str]) -> None:
    """This task's ids against the component-ordered layout (see the module docstring)."""
    node = step.nodeid
    if node is not None and node >= len(step.nodes):
        raise SlurmEnvError(bad_value(names["nodeid"], node, f"a node index below {len(step.nodes)}"))
    if step.node_name is not None:
        if step.node_name not in step.nodes:
            raise SlurmEnvError(bad_value(names["node_name"], step.node_name, "one of the step's nodes"))
        if node is not None and step.nodes[node] != step.node_name:
            raise SlurmEnvError(
                f"{names['nodeid']}={node} names node {step.nodes[node]!r} of the step in component order "
                f"({', '.join(step.nodes[:8])}{', ...' if len(step.nodes) > 8 else ''}) but "
                f"{names['node_name']}={step.node_name!r}: expected them to agree")
        node = step.nodes.index(step.node_name) if node is None else node
    if node is None:
        return
    if step.localid is not None and step.localid >= step.tasks_per_node[node]:
        raise SlurmEnvError(bad_value(names["localid"], step.localid, f"a local id below "
                                      f"{step.tasks_per_node[node]}, the task count of node {step.nodes[node]!r}"))
    if step.procid is not None:
        comp = step.components[node]
        lo = sum(n for c, n in zip(step.components, step.tasks_per_node) if c < comp)
        hi = lo + sum(n for c, n in zip(step.components, step.tasks_per_node) if c == comp)
        if not lo <= step.procid < hi:
            raise SlurmEnvError(bad_value(
                names["procid"], step.procid,
                f"a rank in {lo}-{hi - 1}, those of component {comp} (node {step.nodes[node]!r}): "
                "the step's ranks must go component by component (no distribution across components)"))


def offline_het_step(specs: Sequence[str], job_id: str = "0", step_id: str = "0",
                     name: str = "--component") -> SlurmStep:
    """A step over components described by hand, each 'NODELIST[:TASKS_PER_NODE]' (component c: the c-th),
    already in component order (for `tf-slurm explain --component ...`); no task of its own."""
    nodes: list = []
    counts: list = []
    components: list = []
    owner: dict = {}
    for c, spec in enumerate(specs):
        if not isinstance(spec, str) or not spec.strip():
            raise UsageError(bad_value(name, spec, "NODELIST:TASKS_PER_NODE, e.g. 'gpu[01-04]:4'"))
        nodelist, sep, tpn = spec.strip().rpartition(":")
        if not sep:
            nodelist, tpn = tpn, "1"
        these = expand_nodelist(nodelist, f"{name} {spec!r}: node list")
        per = parse_tasks_per_node(tpn, f"{name} {spec!r}: tasks per node")
        if len(per) == 1 and len(these) > 1:
            per = per * len(these)
        if len(per) != len(these):
            raise UsageError(f"{name}={spec!r}: expected one task count per node ({len(these)} nodes) or a "
                             f"single count, got {len(per)}")
        for node in these:
            if owner.get(node, c) != c:
                raise UsageError(f"{name}={spec!r}: node {node!r} is also in component {owner[node]}: expected "
                                 "distinct nodes per component")
            owner[node] = c
        nodes += these
        counts += per
        components += [c] * len(these)
    return SlurmStep(job_id=str(job_id), step_id=str(step_id), nodes=tuple(nodes), tasks_per_node=tuple(counts),
                     components=tuple(components), source="offline")


# Every step of one job that plans its whole heterogeneous allocation uses this step id: one port
# window and one supervision tag, whatever ids Slurm gave the separate steps.
WHOLE_STEP_ID = "het"


def whole_allocation(step: SlurmStep, component_nodes: Sequence[Sequence[str]],
                     component_counts: Sequence[Sequence[int]], *,
                     component_names: Optional[Sequence[str]] = None) -> SlurmStep:
    """A step of ONE component (`srun --het-group=c` alone, one step per component started together)
    planned as the whole allocation: every component's nodes and task counts, in component order,
    this task's node id and rank moved by the earlier components'.

    The step must use its component's default layout (the allocation's nodes and task counts), since
    the other steps' layouts are known only from the allocation; otherwise one SlurmEnvError line.
    """
    names = list(component_names) if component_names is not None else [
        f"component {c}'s layout" for c in range(len(component_nodes))]
    present = sorted(set(step.components))
    if len(present) != 1:
        raise SlurmEnvError(f"this step spans components {', '.join(map(str, present)) or 'none'}: expected a step "
                            "of one component to plan the whole allocation from")
    c = present[0]
    owner: dict = {}
    for k, nodes in enumerate(component_nodes):
        for node in nodes:
            if owner.setdefault(node, k) != k:
                raise SlurmEnvError(f"node {node!r} is in {names[owner[node]]} and {names[k]}: expected distinct "
                                    "nodes per component (components sharing a node cannot be mapped)")
        if len(component_counts[k]) != len(nodes):
            raise SlurmEnvError(f"{names[k]}: {len(nodes)} nodes but {len(component_counts[k])} task counts: "
                                "expected one count per node")
    mine = (tuple(component_nodes[c]), tuple(component_counts[c]))
    if (tuple(step.nodes), tuple(step.tasks_per_node)) != mine:
        raise SlurmEnvError(
            f"this step of component {c} runs {_layout(step.nodes, step.tasks_per_node)} but the allocation's "
            f"component {c} is {_layout(*mine)} ({names[c]}): expected one step per component with the "
            f"allocation's layout (srun --het-group={c}, no -n/-N/-w), or one step over every component "
            "(srun --het-group=0,1,...)")
    node_offset = sum(len(component_nodes[k]) for k in range(c))
    rank_offset = sum(sum(component_counts[k]) for k in range(c))
    return replace(
        step, step_id=WHOLE_STEP_ID, resv_ports=(),
        nodes=tuple(n for nodes in component_nodes for n in nodes),
        tasks_per_node=tuple(int(x) for counts in component_counts for x in counts),
        components=tuple(k for k, nodes in enumerate(component_nodes) for _ in nodes),
        nodeid=None if step.nodeid is None else step.nodeid + node_offset,
        procid=None if step.procid is None else step.procid + rank_offset)


def _layout(nodes: Sequence[str], counts: Sequence[int]) -> str:
    shown = ", ".join(f"{n}:{k}" for n, k in list(zip(nodes, counts))[:6])
    return f"[{shown}{', ...' if len(nodes) > 6 else ''}]"
