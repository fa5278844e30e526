"""`tf-slurm explain`, `tf-config` and `env`: the plan printed, in a step or offline (--nodelist).

Why one module: the three share the role and offline options and the way a plan is made; none of
them runs a command, so none imports the supervisor.
"""

from __future__ import annotations

import argparse
import json
import shlex

from tf_for_slurm.cli import het, role_options
from tf_for_slurm.cli.table import render_table
from tf_for_slurm.errors import SlurmEnvError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.environment import decide_address, plan_from_env, roles_for
from tf_for_slurm.host.task_env import task_env
from tf_for_slurm.plan.addresses import parse_policy
from tf_for_slurm.plan.cluster import build_plan
from tf_for_slurm.plan.gpus import gpu_view, parse_gpu_list

# How each task of a step gets its own exports (the batch script itself is no task: see _refuse_batch_script).
ENV_EXAMPLE = "srun bash -c 'eval \"$(tf-slurm env)\"; python train.py'"


def _offline_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("offline (plan a layout without being in a job)")
    g.add_argument("--nodelist", help="Slurm hostlist, e.g. 'gpu[01-04],cpu5'")
    g.add_argument("--tasks-per-node", help="e.g. '4' or '2(x3),1' (default 1)")
    het.add_offline_option(g)
    g.add_argument("--job-id", default="0", help="the job's id: its tasks' ports derive from it")
    g.add_argument("--step-id", default="0", help="the step's id (0: the job's first srun)")
    g.add_argument("--port-scope", choices=["node", "step"],
                   help=f"ports unique per node (default) or across the step ({settings.PORT_SCOPE}; emulated nodes)")
    g.add_argument("--rank", type=int,
                   help="the task to print (default: this task under srun; needed in a batch script of several tasks)")
    g.add_argument("--gpus", metavar="IDS",
                   help="GPU ids each node has, e.g. '0,1,2,3' (explain shows each task's share)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm tf-config` and `tf-slurm env`."""
    role_options.add_arguments(parser)
    _offline_options(parser)


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm explain`: tf-config's, and --json."""
    add_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="JSON instead of a table: {'tasks': [...], 'chief': ..., 'notes': {...}}")


def _plan(args: argparse.Namespace):
    tasks = args.tasks.split(",") if args.tasks else None
    step = het.offline(args)
    if step is not None:
        roles = roles_for(step, tasks, args.ps, args.placement or "first", args.chief,
                          component_roles=het.component_roles(args),
                          names={"ps": "--ps", "component_roles": "--roles-by-component"})
        policy = parse_policy(args.address, "--address")
        if policy.kind == "auto":  # decided here, with this machine's resolver, as a task would
            policy = decide_address(policy, step.nodes).policy
        env = settings.environ()
        scope = args.port_scope or settings.text(env, settings.PORT_SCOPE) or settings.default_text(settings.PORT_SCOPE)
        return build_plan(step, roles, address=policy, port_scope=scope,
                          base_port=settings.integer(env, settings.BASE_PORT))
    if args.port_scope:
        raise UsageError(f"--port-scope given without --nodelist: expected {settings.PORT_SCOPE} in a job")
    if args.tasks_per_node:
        raise UsageError("--tasks-per-node given without --nodelist: expected both for an offline plan")
    return plan_from_env(tasks=tasks, ps=args.ps, placement=args.placement, chief=args.chief, address=args.address,
                         check=False, component_roles=het.component_roles(args))


def _refuse_batch_script(args: argparse.Namespace, example: str) -> None:
    """One UsageError when no --rank was given in the batch script of a job of several tasks.

    Why: Slurm gives the batch script task 0's ids, so `eval "$(tf-slurm env)"` before srun would
    hand every task task 0's TF_CONFIG; `tf-slurm exec` refuses the same way (host.slurm.outside_step).
    """
    if args.rank is not None or args.nodelist or args.component:
        return
    reason = slurm.outside_step(settings.environ(), example)
    if reason:
        raise UsageError(f"{reason}, or ask for one task with --rank R (`tf-slurm explain` lists them)")


def _rank(args: argparse.Namespace, plan) -> int:
    rank = args.rank
    if rank is None:
        if plan.my_rank is None and (args.nodelist or args.component):
            raise UsageError("--rank is required for an offline plan: expected the task's rank")
        if plan.my_rank is None:
            env = settings.environ()
            missing = [n for n in (slurm.LOCALID, slurm.NODEID) if not env.get(n)]
            if slurm.NODEID in missing and env.get(slurm.NODENAME):
                missing.remove(slurm.NODEID)
            raise SlurmEnvError(f"{' and '.join(missing) or slurm.LOCALID} not set: expected this task's ids, "
                                "as srun sets them (run under srun or `tf-slurm local`, or pass --rank R)")
        return plan.my_rank
    if not 0 <= rank < plan.size:
        raise UsageError(bad_value("--rank", rank, f"a rank in 0-{plan.size - 1}"))
    return rank


def explain(args: argparse.Namespace) -> int:
    """`tf-slurm explain`: the plan as a table (or JSON), this task marked."""
    plan = _plan(args)
    chief = plan.chief
    pool = parse_gpu_list(args.gpus, "--gpus") if args.gpus is not None else None
    cuda_visible_devices, step_gpus = slurm.gpu_sources(settings.environ())
    gpus = gpu_view(plan.tasks, plan.my_rank, cuda_visible_devices, step_gpus, pool, slurm.GPU_NAMES)
    rows = [{"rank": t.rank, "node": t.node, "local_id": t.local_id, "role": t.role, "index": t.index,
             "address": t.address, "aux_port": t.aux_port, "gpus": gpus[t.rank],
             "chief": chief is not None and t.rank == chief.rank, "me": t.rank == plan.my_rank} for t in plan.tasks]
    chief_note = None
    if chief is not None and chief.role != "chief":
        chief_note = (f"chief: worker {chief.index} (rank {chief.rank}) initialises variables and writes "
                      "checkpoints (no explicit chief)")
    notes = list(plan.notes) + ([chief_note] if chief_note else [])
    component = het.component_column(plan, rows)
    if args.json:
        print(json.dumps({"tasks": rows, "chief": None if chief is None else chief.rank,
                          "notes": {**dict(plan.details), "text": notes}}, indent=None))
        return 0
    for row in rows:
        row["role"] += " (chief)" if row["chief"] and row["role"] != "chief" else ""
    print(render_table(rows, ["rank", "node", *component, "local_id", "role", "index", "address", "gpus"], mark="me"))
    for note in notes:
        print(f"# {note}")
    return 0


def tf_config(args: argparse.Namespace) -> int:
    """`tf-slurm tf-config`: this task's TF_CONFIG."""
    _refuse_batch_script(args, "srun tf-slurm tf-config")
    plan = _plan(args)
    print(plan.tf_config_json(_rank(args, plan)))
    return 0


def env(args: argparse.Namespace) -> int:
    """`tf-slurm env`: this task's variables as shell exports."""
    _refuse_batch_script(args, ENV_EXAMPLE)
    plan = _plan(args)
    variables = task_env(plan, _rank(args, plan))
    if variables.spill:
        raise UsageError(f"{variables.note}; `tf-slurm env` cannot export it: expected `tf-slurm exec -- CMD` instead")
    for name, value in variables.variables.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0
