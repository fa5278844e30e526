"""TensorFlow's SlurmClusterResolver answered from the step's plan.  Pure: values in, values out.

A script built for `tf.distribute.cluster_resolver.SlurmClusterResolver` states what it expects
(`jobs`, `tasks_per_node`, GPU counts); the plan already decided roles, addresses, ports and
GPUs.  This module says whether the two agree (else one fix line: what the script asked, what
the step has, the option that makes them agree), what the resolver answers (the plan's cluster,
this task's type and index, its GPU count), and how a subclass's host renaming applies to the
plan's addresses.  runtime/slurm_resolver.py carries it out (the patched TensorFlow class under
`tf-slurm exec`, and the drop-in `tf_for_slurm.SlurmClusterResolver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from tf_for_slurm.errors import PlanError, bad_value

# TensorFlow's constructor, in its order (2.15.1 to 2.21): the shape the drop-in and the patch accept
ARGUMENTS = ("jobs", "port_base", "gpus_per_node", "gpus_per_task", "tasks_per_node", "auto_set_gpu", "rpc_layer")
DEFAULTS = {"jobs": None, "port_base": 8888, "gpus_per_node": None, "gpus_per_task": None, "tasks_per_node": None,
            "auto_set_gpu": True, "rpc_layer": "grpc"}
CLASS = "SlurmClusterResolver"


@dataclass(frozen=True)
class Answer:
    """What the resolver says: the cluster (role -> addresses in index order), this task's place, its GPUs."""

    cluster: dict
    task_type: str
    task_id: int
    rank: int
    gpus: int  # GPUs this task uses: num_accelerators()['GPU']


def role_counts(cluster: Mapping[str, Sequence[str]]) -> dict:
    return {role: len(addresses) for role, addresses in cluster.items() if len(addresses)}


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def wanted_jobs(jobs: object, ntasks: int) -> dict:
    """The script's `jobs` as {role: count} without zero counts; None means TensorFlow's default,
    every task a worker.  A value TensorFlow could not use either: PlanError naming `jobs`."""
    if jobs is None:
        return {"worker": ntasks}
    if not isinstance(jobs, Mapping) or not all(isinstance(k, str) and k and _is_count(v) for k, v in jobs.items()):
        raise PlanError(bad_value(f"{CLASS}(jobs=...)", jobs, "a dict of job name -> number of tasks, like "
                                  "{'ps': 1, 'worker': 3}"))
    wanted = {role: count for role, count in jobs.items() if count}
    if not wanted:
        raise PlanError(bad_value(f"{CLASS}(jobs=...)", jobs, "at least one job with tasks, like {'worker': 4}"))
    return wanted


def _brief(counts: Mapping[str, int], most: int = 6) -> str:
    """'1 ps, 3 workers' (at most `most` roles named: a fix line stays one short line)."""
    words = [f"{n} {role}" + ("" if n == 1 or role == "ps" else "s") for role, n in sorted(counts.items())]
    return ", ".join(words[:most]) + (f" and {len(words) - most} more roles" if len(words) > most else "")


def roles_fix(wanted: Mapping[str, int], have: Mapping[str, int], ps_name: str = "", chief_name: str = "") -> str:
    """The options that give the step the script's roles (ps first, then an optional chief, the
    rest workers, as exec plans by default), or the ListOfTFTasks that does."""
    total = sum(wanted.values())
    if total != sum(have.values()):
        return (f"run {total} tasks (srun -n {total}, sbatch --ntasks={total}), or let the script's jobs= "
                f"add up to this step's {sum(have.values())}")
    if set(wanted) <= {"ps", "worker", "chief"} and wanted.get("chief", 0) <= 1 and "worker" in wanted:
        opts = []
        ps = wanted.get("ps", 0)
        if ps != have.get("ps", 0):
            opts.append(f"--ps {ps}" + (f" ({ps_name}={ps})" if ps_name else ""))
        if wanted.get("chief", 0) != have.get("chief", 0):
            opts.append(("--chief" + (f" ({chief_name}=1)" if chief_name else "")) if wanted.get("chief")
                        else "no --chief")
        if opts:
            return "run with " + " and ".join(opts)
    roles = [role for role in sorted(wanted) for _ in range(wanted[role])]
    listed = ",".join(roles) if len(roles) <= 12 else ",".join(roles[:11]) + ",... (one role per task)"
    return f"run with --tasks {listed}"


def jobs_misfit(jobs: object, have: Mapping[str, int], ps_name: str = "", chief_name: str = "") -> Optional[str]:
    """None when the script's jobs= (None: every task a worker) are the plan's roles and counts;
    else the fix line's text (without the `tf-slurm: ` prefix)."""
    have = {role: n for role, n in have.items() if n}
    if jobs is None:  # TensorFlow's default, every task a worker: any plan without ps trains so
        if not have.get("ps"):
            return None
        wanted = {role: n for role, n in have.items() if role != "ps"}
        wanted["worker"] = wanted.get("worker", 0) + have["ps"]
    else:
        wanted = wanted_jobs(jobs, sum(have.values()))
    if wanted == have:
        return None
    asked = (f"{CLASS}() without jobs= makes every task a worker" if jobs is None
             else f"{CLASS}(jobs=...) asks for {_brief(wanted)}")
    return f"{asked}, but this step's plan has {_brief(have)}; fix: {roles_fix(wanted, have, ps_name, chief_name)}"


def tasks_per_node_misfit(tasks_per_node: object, nodes: Sequence[str], counts: Sequence[int]) -> Optional[str]:
    """None when the script's tasks_per_node= (an int, or {host: tasks}) is what the step runs."""
    if tasks_per_node is None:
        return None
    step = dict(zip(nodes, counts))
    shown = ",".join(str(c) for c in counts) if len(counts) <= 8 else f"{min(counts)} to {max(counts)}"
    if _is_count(tasks_per_node) and int(tasks_per_node) > 0:  # type: ignore[call-overload]
        tpn = int(tasks_per_node)  # type: ignore[call-overload]
        if all(c == tpn for c in counts):
            return None
        return (f"{CLASS}(tasks_per_node={tpn}) but this step runs {shown} tasks per node "
                f"({len(nodes)} nodes); fix: run {tpn} task{'' if tpn == 1 else 's'} on each node "
                f"(sbatch --ntasks-per-node={tpn})")
    if isinstance(tasks_per_node, Mapping) and all(_is_count(v) for v in tasks_per_node.values()):
        given = {str(k): int(v) for k, v in tasks_per_node.items() if v}
        same = given == step if set(given) == set(step) else sorted(given.values()) == sorted(counts)
        if same:
            return None
        return (f"{CLASS}(tasks_per_node={given!r}) but this step runs {shown} tasks per node on "
                f"{','.join(nodes[:8])}{',...' if len(nodes) > 8 else ''}; fix: give the step that layout "
                "(sbatch --nodes and --ntasks-per-node), or leave tasks_per_node= out")
    raise PlanError(bad_value(f"{CLASS}(tasks_per_node=...)", tasks_per_node,
                              "a number of tasks per node >= 1, or a dict of host -> tasks"))


def roles_from_jobs(jobs: object, ntasks: int) -> tuple:
    """Roles in rank order as TensorFlow gives them: job names sorted, each job a block of ranks."""
    wanted = wanted_jobs(jobs, ntasks)
    if sum(wanted.values()) != ntasks:
        raise PlanError(f"{CLASS}(jobs=...) asks for {sum(wanted.values())} tasks but this step has {ntasks}; "
                        f"fix: {roles_fix(wanted, {'worker': ntasks})}")
    return tuple(role for role in sorted(wanted) for _ in range(wanted[role]))


def cluster_from_tf_config(config: Mapping) -> tuple:
    """(cluster as role -> address list, task type, task index) from a parsed TF_CONFIG.

    Sparse maps ({"7": "host:port"}, a trimmed TF_CONFIG) become lists in index order; the
    caller makes sure it holds the full one (the shim loads it in-process).
    """
    cluster = config.get("cluster") or {}
    task = config.get("task") or {}
    out = {}
    for role, addrs in cluster.items():
        if isinstance(addrs, Mapping):
            out[role] = [addrs[k] for k in sorted(addrs, key=int)]
        else:
            out[role] = list(addrs)
    if not task.get("type") or not isinstance(task.get("index"), int):
        raise PlanError(bad_value("TF_CONFIG", config.get("task"), "a task with a type and an index"))
    return out, str(task["type"]), int(task["index"])


def rank_in(cluster: Mapping[str, Sequence[str]], task_type: str, task_id: int) -> int:
    """This task's position in TensorFlow's order (job names sorted, then index): its `_rank`."""
    rank = 0
    for role in sorted(cluster):
        if role == task_type and 0 <= task_id < len(cluster[role]):
            return rank + task_id
        rank += len(cluster[role])
    raise PlanError(bad_value("task", f"{task_type}:{task_id}", f"a task of the cluster ({', '.join(cluster)})"))


def renamed(cluster: Mapping[str, Sequence[str]], nodes: Sequence[str], new_names: Sequence[str]) -> Optional[dict]:
    """The cluster with each node's host name replaced by the subclass's (`_resolve_hostlist`'s
    list, in the step's node order); ports unchanged.  Addresses whose host is not a node name (IP,
    InfiniBand or loopback addresses the plan chose) keep it.  None when the lists do not pair up."""
    if len(new_names) != len(nodes) or not all(isinstance(n, str) and n for n in new_names):
        return None
    names = dict(zip(nodes, new_names))

    def rename(address: str) -> str:
        host, sep, port = address.rpartition(":")
        return f"{names[host]}:{port}" if sep and host in names else address

    return {role: [rename(a) for a in addrs] for role, addrs in cluster.items()}


def node_table(nodes: Sequence[str], counts: Sequence[int]) -> dict:
    """TensorFlow's `_task_configuration`: {host: tasks} in the step's node order."""
    return dict(zip(nodes, counts))


def check_gpu_arguments(gpus_per_node: object, gpus_per_task: object) -> None:
    """A PlanError naming the argument for a GPU count TensorFlow could not use, on any node."""
    node_pool(gpus_per_node)
    gpu_share((), gpus_per_task)


def gpu_share(share: Sequence[str], gpus_per_task: object) -> tuple:
    """The task's GPUs: the plan's share, cut to the script's gpus_per_task= when that asks for fewer."""
    if gpus_per_task is None:
        return tuple(share)
    if not _is_count(gpus_per_task):
        raise PlanError(bad_value(f"{CLASS}(gpus_per_task=...)", gpus_per_task, "a number of GPUs >= 0"))
    return tuple(share)[:int(gpus_per_task)]  # type: ignore[call-overload]


def node_pool(gpus_per_node: object) -> tuple:
    """GPU ids '0'..'n-1' for the script's gpus_per_node= when Slurm says nothing of the node's GPUs."""
    if gpus_per_node is None:
        return ()
    if not _is_count(gpus_per_node):
        raise PlanError(bad_value(f"{CLASS}(gpus_per_node=...)", gpus_per_node, "a number of GPUs >= 0"))
    return tuple(str(i) for i in range(int(gpus_per_node)))  # type: ignore[call-overload]
