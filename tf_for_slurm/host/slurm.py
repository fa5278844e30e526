"""Slurm's variables: their names (the only place that spells them), and a step read from them.

STEP variables win; JOB variables are the fallback, so a batch script (outside any step) can plan
the step it is about to launch.  `fake_step_env` writes the variables of an emulated step (for
`tf-slurm local`), so the reader and the writer cannot disagree on a name.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Sequence

from tf_for_slurm.errors import SlurmEnvError, UsageError, bad_value
from tf_for_slurm.host import settings
from tf_for_slurm.plan.hetjob import het_step, whole_allocation
from tf_for_slurm.plan.step import (
    MAX_MEMORY_MB,
    SlurmStep,
    check_host_names,
    expand_nodelist,
    format_tasks_per_node,
    parse_port_list,
    parse_tasks_per_node,
)

JOB_ID, JOBID = "SLURM_JOB_ID", "SLURM_JOBID"
STEP_ID, STEPID = "SLURM_STEP_ID", "SLURM_STEPID"
JOB_NODELIST, STEP_NODELIST, NODELIST = "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST"
JOB_NUM_NODES, STEP_NUM_NODES, NNODES = "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES", "SLURM_NNODES"
TASKS_PER_NODE, STEP_TASKS_PER_NODE = "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE"
NTASKS, STEP_NUM_TASKS, NPROCS = "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS"
NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"
PROCID, LOCALID, NODEID = "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"
NODENAME = "SLURMD_NODENAME"
STEP_RESV_PORTS = "SLURM_STEP_RESV_PORTS"
CPUS_PER_TASK, CPUS_ON_NODE = "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"
MEM_PER_CPU, MEM_PER_NODE = "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE"
STEP_GPUS, JOB_GPUS = "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"
JOB_PARTITION = "SLURM_JOB_PARTITION"
SBATCH_PARTITION = "SBATCH_PARTITION"  # sbatch's input variable: the partition when -p is not given
RESTART_COUNT = "SLURM_RESTART_COUNT"
CONF = "SLURM_CONF"  # where Slurm's commands find slurm.conf (kept for an srun started from a task)
HET_SIZE = "SLURM_HET_SIZE"  # heterogeneous job: its number of components
PREFIXES = ("SLURM_", "SLURMD_")  # every variable Slurm sets starts with one of these
# not Slurm's, but read with its step: which GPUs CUDA may use
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
GPU_NAMES = (CUDA_VISIBLE_DEVICES, STEP_GPUS)  # the names plan.gpus' messages use (gpu_sources' order)


def het_nodelist_names(component: int) -> tuple:
    """The variables holding the allocation's node list of heterogeneous-job component `component`:
    the current spelling, then the one Slurm still sets (alone when srun itself made the allocation)."""
    return f"SLURM_JOB_NODELIST_HET_GROUP_{component}", f"SLURM_JOB_NODELIST_PACK_GROUP_{component}"


def het_tasks_per_node_names(component: int) -> tuple:
    """The variables holding the allocation's tasks per node of heterogeneous-job component `component`."""
    return f"SLURM_TASKS_PER_NODE_HET_GROUP_{component}", f"SLURM_TASKS_PER_NODE_PACK_GROUP_{component}"


def het_size(env: Mapping[str, str]) -> Optional[int]:
    """The number of components of the heterogeneous job this runs in, None outside one."""
    return _int(env, HET_SIZE, minimum=1)


def first(env: Mapping[str, str], *names: str) -> tuple:
    """(name, value) of the first of `names` set and non-empty in `env`, else (names[0], None)."""
    for n in names:
        v = env.get(n)
        if v is not None and v != "":
            return n, v
    return names[0], None


def in_step(env: Mapping[str, str]) -> bool:
    """True inside a job step (srun sets the STEP variables; a batch script has none)."""
    return bool(env.get(STEP_NODELIST) or env.get(STEP_NUM_TASKS) or env.get(STEP_ID) or env.get(STEPID))


def step_tag(env: Mapping[str, str]) -> str:
    """'job.step.rank' of the task whose environment this is (empty parts outside Slurm)."""
    return ".".join(env.get(n, "") for n in (JOB_ID, STEP_ID, PROCID))


def gpu_sources(env: Mapping[str, str]) -> tuple:
    """(CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS) as Slurm left them, for plan.gpus."""
    return env.get(CUDA_VISIBLE_DEVICES), env.get(STEP_GPUS)


def fake_step_env(*, job_id: str, nodelist: str, tasks_per_node: Sequence[int], rank: int, local_id: int,
                  node_index: int, node_name: str) -> Dict[str, str]:
    """The variables srun would give task `rank` of a one-step job laid out as given (`tf-slurm local`)."""
    tpn = format_tasks_per_node(tasks_per_node)
    ntasks, nnodes = str(sum(tasks_per_node)), str(len(tasks_per_node))
    return {
        JOB_ID: job_id, JOBID: job_id, STEP_ID: "0", STEPID: "0",
        JOB_NODELIST: nodelist, STEP_NODELIST: nodelist, NODELIST: nodelist,
        JOB_NUM_NODES: nnodes, STEP_NUM_NODES: nnodes, NNODES: nnodes,
        TASKS_PER_NODE: tpn, STEP_TASKS_PER_NODE: tpn,
        NTASKS: ntasks, STEP_NUM_TASKS: ntasks, NPROCS: ntasks,
        PROCID: str(rank), LOCALID: str(local_id), NODEID: str(node_index),
        NODENAME: node_name, CPUS_ON_NODE: str(tasks_per_node[node_index]),
    }


def check_env(env: object, name: str = "env") -> Mapping[str, str]:
    """The environment argument of a public function: a mapping whose Slurm/tf_for_slurm values are
    strings (as in os.environ), so a wrong type is one error naming it, not a TypeError inside."""
    if not isinstance(env, Mapping):
        raise UsageError(bad_value(name, env, "a mapping of variable names to strings, like os.environ"))
    for key, value in env.items():
        if isinstance(key, str) and key.startswith(("SLURM", "TF_SLURM_")) and not isinstance(value, str):
            raise UsageError(bad_value(f"{name}[{key!r}]", value, "a string, as in os.environ"))
    return env


def _int(env: Mapping[str, str], *names: str, minimum: int = 0) -> Optional[int]:
    name, value = first(env, *names)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SlurmEnvError(bad_value(name, value, f"an integer >= {minimum}")) from None
    if number < minimum:
        raise SlurmEnvError(bad_value(name, value, f"an integer >= {minimum}"))
    return number


def _mem_mb(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if not value:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([MGT]?)\s*", value)
    if not m:
        raise SlurmEnvError(bad_value(name, value, "memory in MB like '4000' (or '4G')"))
    mb = int(m.group(1)) * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    if mb > MAX_MEMORY_MB:
        raise SlurmEnvError(bad_value(name, value, f"memory of at most {MAX_MEMORY_MB} MB (1 EiB)"))
    return mb


def _gpu_list(value: Optional[str]) -> tuple:
    if not value or value.strip().lower() in ("", "none", "nodevfiles"):
        return ()
    return tuple(g.strip() for g in value.split(",") if g.strip())


def step_from_env(env: Mapping[str, str]) -> SlurmStep:
    """Build and validate the SlurmStep from a mapping like os.environ."""
    check_env(env)
    job_name, job_id = first(env, JOB_ID, JOBID)
    if job_id is None:
        raise SlurmEnvError(
            "SLURM_JOB_ID is not set: expected to run inside a Slurm job (sbatch/salloc/srun), "
            "under `tf-slurm local`, or with offline options (--nodelist ...)"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", job_id):
        raise SlurmEnvError(bad_value(job_name, job_id, "a job id like '12345'"))
    step_name, step_id = first(env, STEP_ID, STEPID)
    nl_name, nl = first(env, STEP_NODELIST, JOB_NODELIST, NODELIST)
    if nl is None:
        raise SlurmEnvError("SLURM_JOB_NODELIST is not set: expected a Slurm hostlist like 'node[1-3]'")
    nodes = expand_nodelist(nl, nl_name)
    tpn_name, tpn = first(env, STEP_TASKS_PER_NODE, TASKS_PER_NODE)
    if tpn is None:
        raise SlurmEnvError("SLURM_TASKS_PER_NODE is not set: expected task counts like '2(x3),1'")
    counts = parse_tasks_per_node(tpn, tpn_name)
    if len(counts) != len(nodes):
        raise SlurmEnvError(
            f"{tpn_name}={tpn!r}: expected one count per node of {nl_name}={nl!r} "
            f"({len(nodes)} nodes), got {len(counts)}"
        )
    nt_name, ntasks = first(env, STEP_NUM_TASKS, NTASKS, NPROCS)
    if ntasks is not None:
        try:
            n = int(ntasks)
        except ValueError:
            raise SlurmEnvError(bad_value(nt_name, ntasks, "an integer")) from None
        if n != sum(counts):
            raise SlurmEnvError(
                f"{nt_name}={ntasks!r}: expected {sum(counts)}, the sum of {tpn_name}={tpn!r}"
            )
    resv_name, resv = first(env, STEP_RESV_PORTS)
    het = _int(env, HET_SIZE, minimum=1) if in_step(env) else None
    step = SlurmStep(
        job_id=job_id,
        step_id=step_id if step_id is not None else "0",
        nodes=nodes,
        tasks_per_node=counts,
        procid=_int(env, PROCID),
        localid=_int(env, LOCALID),
        nodeid=_int(env, NODEID),
        node_name=env.get(NODENAME) or None,
        resv_ports=parse_port_list(resv, resv_name) if resv else (),
        cpus_per_task=_int(env, CPUS_PER_TASK, minimum=1),
        mem_per_cpu_mb=_mem_mb(env, MEM_PER_CPU),
        mem_per_node_mb=_mem_mb(env, MEM_PER_NODE),
        gpus=_gpu_list(first(env, STEP_GPUS, JOB_GPUS)[1]),
        source="slurm-step" if in_step(env) else "slurm-job",
    )
    if het is not None:
        step = _het_step(env, step, het, nl_name, nt_name if ntasks is not None else None)
    validate_me(step)
    return step


def _het_step(env: Mapping[str, str], step: SlurmStep, size: int, nodes_name: str,
              ntasks_name: Optional[str]) -> SlurmStep:
    """A step inside a heterogeneous allocation (SLURM_HET_SIZE): nodes in component order (plan.hetjob).

    A step over several components inside a plain allocation (`srun A : B` without SLURM_HET_SIZE)
    cannot be told apart from a plain step and is read as one.
    """
    lists, names = [], []
    for c in range(size):
        name, value = first(env, *het_nodelist_names(c))
        if value is None:
            spelled = " nor ".join(het_nodelist_names(c))
            raise SlurmEnvError(f"{HET_SIZE}={env.get(HET_SIZE)!r} but neither {spelled} is set: expected the "
                                f"node list of every component 0-{size - 1} of the heterogeneous job")
        lists.append(expand_nodelist(value, name))
        names.append(f"{name}={value!r}")
    return het_step(step, lists, component_names=names, ntasks=_int(env, ntasks_name) if ntasks_name else None,
                    names={"nodes": nodes_name, "procid": PROCID, "localid": LOCALID, "nodeid": NODEID,
                           "node_name": NODENAME, "ntasks": ntasks_name or NTASKS})


def whole_het_allocation(env: Mapping[str, str], step: SlurmStep) -> SlurmStep:
    """This one-component step planned as the whole heterogeneous allocation (one step per component,
    started together: plan.hetjob.whole_allocation), from the allocation's per-component variables."""
    size = het_size(env) or 0
    nodes, counts, names = [], [], []
    for c in range(size):
        nl_name, nl = first(env, *het_nodelist_names(c))
        tpn_name, tpn = first(env, *het_tasks_per_node_names(c))
        if nl is None or tpn is None:
            missing = " nor ".join(het_nodelist_names(c) if nl is None else het_tasks_per_node_names(c))
            raise SlurmEnvError(f"neither {missing} is set: expected every component's layout to plan the whole "
                                "heterogeneous allocation from one component's step")
        nodes.append(expand_nodelist(nl, nl_name))
        counts.append(parse_tasks_per_node(tpn, tpn_name))
        names.append(f"{nl_name}={nl!r}, {tpn_name}={tpn!r}")
    whole = whole_allocation(step, nodes, counts, component_names=names)
    validate_me(whole)
    return whole


def validate_me(step: SlurmStep) -> None:
    """Check this task's ids against the layout, so a wrong slot fails loudly instead of silently."""
    if step.procid is not None and step.procid >= step.ntasks:
        raise SlurmEnvError(bad_value(PROCID, step.procid, f"a rank below {step.ntasks}"))
    if step.nodeid is not None and step.nodeid >= len(step.nodes):
        raise SlurmEnvError(bad_value(NODEID, step.nodeid, f"a node index below {len(step.nodes)}"))
    if step.node_name is not None:
        check_host_names([step.node_name], NODENAME)
        if step.node_name not in step.nodes:
            raise SlurmEnvError(
                bad_value(NODENAME, step.node_name, f"one of the step's nodes {_short(step.nodes)}")
            )
        if step.nodeid is None and step.nodes.count(step.node_name) > 1:
            raise SlurmEnvError(
                bad_value(NODEID, None, f"a node index: {step.node_name!r} appears more than once")
            )
        if step.nodeid is not None and step.nodes[step.nodeid] != step.node_name:
            raise SlurmEnvError(
                f"SLURM_NODEID={step.nodeid} names node {step.nodes[step.nodeid]!r} but "
                f"SLURMD_NODENAME={step.node_name!r}: expected them to agree"
            )
    node = step.my_node_index
    if step.localid is not None and node is not None and step.localid >= step.tasks_per_node[node]:
        raise SlurmEnvError(
            bad_value(LOCALID, step.localid,
                      f"a local id below {step.tasks_per_node[node]}, the task count of node {step.nodes[node]!r}")
        )


def _short(items: Sequence[str]) -> str:
    items = list(items)
    return repr(items) if len(items) <= 6 else repr(items[:6])[:-1] + ", ...]"


def outside_step(env: Mapping[str, str], example: str = "srun tf-slurm exec -- python train.py") -> Optional[str]:
    """A one-line reason when `env` is a job's batch script (no step) of more than one task, else None.

    Why: `tf-slurm exec` run by the batch script itself (srun forgotten) would plan the job's first
    task and wait for peers that never start.  Inside any step Slurm sets the STEP variables.
    """
    job = env.get(JOB_ID) or env.get(JOBID)
    if not job or in_step(env):
        return None
    ntasks = env.get(NTASKS) or env.get(NPROCS) or "1"
    if not ntasks.isdigit() or int(ntasks) <= 1:
        return None
    return (f"SLURM_NTASKS={ntasks} but no job step (SLURM_STEP_ID unset): this is the batch script of "
            f"job {job}, not one of its {ntasks} tasks; launch them with srun, e.g. `{example}`")


def step_of_size(env: Mapping[str, str], size: int) -> bool:
    """True inside a job step of exactly `size` tasks where this task knows its rank."""
    ntasks = first(env, STEP_NUM_TASKS, NTASKS)[1] or ""
    return in_step(env) and size > 1 and ntasks.isdigit() and int(ntasks) == size and env.get(PROCID) is not None


def under_exec(env: Mapping[str, str]) -> bool:
    """True when this process is the command of a `tf-slurm exec` supervisor of this very task."""
    tag = env.get(settings.SUPERVISED)
    return bool(tag) and tag == step_tag(env)
