"""The job's allocation as Slurm's variables give it: memory per task and the sbatch templates' numbers.

Why here: which variable answers which question (SLURM_CPUS_PER_TASK, else 1; SLURM_NTASKS_PER_NODE,
else the busiest node of the step's or the job's task counts) is the host's knowledge; the
arithmetic is `tf_for_slurm.plan.memory` and `tf_for_slurm.plan.batch_settings` (pure), and the
commands are `tf_for_slurm.cli.mem` and `tf_for_slurm.cli.batch`.  Each function takes the
environment as a mapping (default: this process's) and names the variables in its messages.
"""

from __future__ import annotations

import socket
from typing import Dict, Mapping, Optional

from tf_for_slurm.host import settings, slurm
from tf_for_slurm.plan.batch_settings import (
    SETTINGS,
    first_failure,
    job_counts,
    mem_per_cpu_for_task,
    strict_int,
    template_settings,
)
from tf_for_slurm.plan.memory import (
    MemoryAnswer,
    busiest_node,
    memory_from,
    parse_count,
    parse_memory_mb,
    parse_scontrol_records,
    positive_int,
)

# The public names of the modules `tf_for_slurm.memory` and `tf_for_slurm.batch` were before the
# layers (their commands aside, now in tf_for_slurm.cli): this module can stand for both old paths.
__all__ = ["MemoryAnswer", "SETTINGS", "batch_settings", "first_failure", "memory_per_task", "parse_count",
           "parse_memory_mb", "parse_scontrol_records", "strict_int", "tasks_on_node_from", "this_node"]

# where the arguments of the pure functions come from, for their messages
_MEMORY_NAMES = {"mem_per_cpu": slurm.MEM_PER_CPU, "mem_per_node": slurm.MEM_PER_NODE,
                 "partition": f"{slurm.JOB_PARTITION} or --partition"}
_BATCH_NAMES = {"ntasks": slurm.NTASKS, "cpus_per_task": slurm.CPUS_PER_TASK, "tasks_per_node": slurm.TASKS_PER_NODE}


def tasks_on_node_from(env: Mapping[str, str]) -> int:
    """Tasks sharing one node's memory: SLURM_NTASKS_PER_NODE, else the busiest node of
    SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE (one --mem-per-cpu must fit every node), else 1."""
    raw = env.get(slurm.NTASKS_PER_NODE)
    if raw:
        return parse_count(raw, slurm.NTASKS_PER_NODE)
    for name in (slurm.STEP_TASKS_PER_NODE, slurm.TASKS_PER_NODE):
        raw = env.get(name)
        if raw:
            return busiest_node(raw, name)
    return 1


def memory_per_task(
    env: Optional[Mapping[str, str]] = None,
    *,
    cpus_per_task: Optional[int] = None,
    tasks_on_node: Optional[int] = None,
    partition_info: Optional[str] = None,
    node_info: Optional[str] = None,
    partition: Optional[str] = None,
) -> MemoryAnswer:
    """Memory per CPU and per task (MB) from the allocation, else the partition, else the nodes.

    `env` defaults to os.environ. `tasks_on_node` defaults to SLURM_NTASKS_PER_NODE, else the
    busiest node of SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE (one --mem-per-cpu must fit
    every node), else 1. `cpus_per_task` defaults to SLURM_CPUS_PER_TASK, else 1.
    `partition` defaults to SLURM_JOB_PARTITION; this node (SLURMD_NODENAME) is looked for in `node_info`.
    """
    env = settings.environ() if env is None else env
    if cpus_per_task is None:
        raw = env.get(slurm.CPUS_PER_TASK)
        cpus_per_task = parse_count(raw, slurm.CPUS_PER_TASK) if raw else 1
    else:
        positive_int(cpus_per_task, "cpus_per_task")
    if tasks_on_node is None:
        tasks_on_node = tasks_on_node_from(env)
    else:
        positive_int(tasks_on_node, "tasks_on_node")
    return memory_from(cpus_per_task=cpus_per_task, tasks_on_node=tasks_on_node,
                       mem_per_cpu=env.get(slurm.MEM_PER_CPU), mem_per_node=env.get(slurm.MEM_PER_NODE),
                       partition_info=partition_info, node_info=node_info,
                       partition=partition or env.get(slurm.JOB_PARTITION), node_name=env.get(slurm.NODENAME),
                       names=_MEMORY_NAMES)


def batch_settings(env: Mapping[str, str], *, num_ps: str, min_ps: int = 0, mem_per_task_mb: str = "",
                   partition_info: Optional[str] = None, node_info: Optional[str] = None,
                   partition: Optional[str] = None, spare_nodes: int = 0) -> Dict[str, int]:
    """The template's numbers (plan.batch_settings.SETTINGS) from the job's environment and its
    settings (all given as text): SLURM_NTASKS, SLURM_CPUS_PER_TASK, SLURM_TASKS_PER_NODE, and the
    memory from MEM_PER_TASK_MB, else from the allocation, partition or nodes (`memory_per_task`)."""
    ntasks, cpus, workers, busiest = job_counts(
        ntasks=env.get(slurm.NTASKS), cpus_per_task=env.get(slurm.CPUS_PER_TASK),
        tasks_per_node=env.get(slurm.TASKS_PER_NODE), num_ps=num_ps, min_ps=min_ps, names=_BATCH_NAMES,
        spare_nodes=spare_nodes)
    if mem_per_task_mb:
        mem_per_cpu = mem_per_cpu_for_task(mem_per_task_mb, cpus)
    else:
        mem_per_cpu = memory_per_task(env, cpus_per_task=cpus, partition_info=partition_info,
                                      node_info=node_info, partition=partition).per_cpu
    return template_settings(ntasks, cpus, workers, mem_per_cpu, busiest)


def this_node(env: Optional[Mapping[str, str]] = None) -> str:
    """This node's name: SLURMD_NODENAME (as Slurm calls it), else the host name."""
    env = settings.environ() if env is None else env
    return settings.text(env, slurm.NODENAME) or socket.gethostname()
