"""`tf-slurm`: explain a plan, print TF_CONFIG or exports, run a command with them, and more.

Every usage or plan error is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from typing import Optional, Sequence

from tf_for_slurm.errors import SlurmEnvError, TfSlurmError, UsageError, bad_value

log = logging.getLogger("tf_for_slurm.cli")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _role_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("roles (default: TF_SLURM_TASKS, else TF_SLURM_PS, else 1 ps)")
    g.add_argument("--tasks", help="comma-separated roles, one per task, node by node, e.g. ps,worker,worker")
    g.add_argument("--ps", type=int, help="number of parameter servers: the first N tasks")
    g.add_argument("--placement", choices=["first", "per-node"], help="'per-node': one ps per node")
    g.add_argument("--chief", action="store_true", help="make the first worker an explicit chief")
    g.add_argument("--address", help="address policy: hostname | auto | template:{host}-ib | iface:ib0 | file:PATH")


def _offline_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("offline (plan a layout without being in a job)")
    g.add_argument("--nodelist", help="Slurm hostlist, e.g. 'gpu[01-04],cpu5'")
    g.add_argument("--tasks-per-node", help="e.g. '4' or '2(x3),1' (default 1)")
    g.add_argument("--job-id", default="0", help="the job's id: its tasks' ports derive from it")
    g.add_argument("--step-id", default="0", help="the step's id (0: the job's first srun)")
    g.add_argument("--port-scope", choices=["node", "step"],
                   help="ports unique per node (default) or across the step (TF_SLURM_PORT_SCOPE; emulated nodes)")
    g.add_argument("--rank", type=int, help="the task to print (default: this task)")
    g.add_argument("--gpus", metavar="IDS", help="GPU ids each node has, e.g. '0,1,2,3' (explain shows each task's share)")


def _command_in(argv: Optional[Sequence[str]]) -> Optional[str]:
    """The subcommand named in argv (first word that is not an option or an option's value)."""
    words = list(sys.argv[1:] if argv is None else argv)
    while words:
        word = words.pop(0)
        if word == "--log-level":
            words = words[1:]
        elif not word.startswith("-"):
            return word
    return None


def version() -> str:
    """The installed distribution's version (package metadata), for `tf-slurm --version`."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("tf_for_slurm")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _VersionAction(argparse.Action):
    """`--version`, looking the metadata up only when asked (start-up time of every other call)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        sys.stdout.write(f"tf-slurm {version()}\n")
        parser.exit(0)


# One line and an example per subcommand, for `tf-slurm COMMAND --help`.
HELP = {
    "explain": ("Print one table of every task of the plan: rank, node, role, address, GPUs.",
                "srun tf-slurm explain --ps 2\n  tf-slurm explain --nodelist 'gpu[01-04]' --tasks-per-node 2 "
                "--ps 2 --job-id 123456 --json"),
    "tf-config": ("Print this task's TF_CONFIG (JSON).",
                  "srun tf-slurm tf-config --ps 1\n  tf-slurm tf-config --nodelist 'n[1-3]' --rank 2"),
    "env": ("Print shell export lines for this task: TF_CONFIG, TF_SLURM_JOB_TYPE, TF_SLURM_TASK_INDEX, ...",
            'eval "$(tf-slurm env --ps 1)"'),
    "exec": ("Run this task's command with TF_CONFIG set, and end it when the step's training is over.",
             "srun tf-slurm exec --ps 1 -- python train.py --epochs 3"),
    "node-address": ("Print 'NODE ADDRESS' for a network interface of this node (for TF_SLURM_ADDRESS=file:FILE).",
                     "srun --ntasks-per-node=1 tf-slurm node-address --iface ib0 --append addresses.txt"),
    "mem": ("Print the memory per task in MB from the allocation, the partition or the nodes.",
            "tf-slurm mem --cpus-per-task 4 --partition-info <(scontrol show partition)\n"
            "  tf-slurm mem --per cpu   # MB per CPU, for srun --mem-per-cpu"),
    "local": ("Run N tasks on this machine with the environment a Slurm step would give them.",
              "tf-slurm local -n 3 --ps 1 -- python train.py"),
    "batch-settings": ("Print the sbatch templates' numbers, checked as integers: tasks, CPUs per task, workers, "
                       "MB per CPU, ports to reserve.",
                       "read -r NTASKS CPUS NUM_WORKERS MEM_PER_CPU RESV < <(tf-slurm batch-settings --num-ps 1)"),
    "batch-status": ("Print the job's exit status: that of the task srun reported failing first.",
                     'tf-slurm batch-status --srun-status "$status" --srun-log srun.err'),
    "batch-step": ("Run a batch job's training step (srun ...): pass it the time-limit warning WARN_MARGIN s "
                   "before the limit, exit with the first failing task's status, or requeue the job.",
                   'tf-slurm batch-step --checkpoint-dir runs/m --target 800 -- srun -n 3 tf-slurm exec -- '
                   'python train.py'),
}


def _subparser(sub, name: str, **kw) -> argparse.ArgumentParser:
    """A subcommand with its one-line description, an example, and --log-level after it too."""
    line, example = HELP[name]
    p = sub.add_parser(name, help=line[0].lower() + line[1:].rstrip("."), description=line,
                       epilog="example:\n  " + example, formatter_class=argparse.RawDescriptionHelpFormatter, **kw)
    p.add_argument("--log-level", default=argparse.SUPPRESS, help="as before the command: DEBUG..CRITICAL")
    return p


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="tf-slurm", description="Distributed TensorFlow on Slurm: plans, TF_CONFIG, launch.",
                     epilog="`tf-slurm COMMAND --help` describes each command.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("--log-level", default=os.environ.get("TF_SLURM_LOG_LEVEL", "WARNING"),
                        help="DEBUG, INFO, WARNING (default), ERROR, CRITICAL")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = _subparser(sub, "explain")
    _role_options(p)
    _offline_options(p)
    p.add_argument("--json", action="store_true",
                   help="JSON instead of a table: {'tasks': [...], 'chief': ..., 'notes': {...}}")

    p = _subparser(sub, "tf-config")
    _role_options(p)
    _offline_options(p)

    p = _subparser(sub, "env")
    _role_options(p)
    _offline_options(p)

    p = _subparser(sub, "exec")
    _role_options(p)
    p.add_argument("--strategy", choices=["auto", "tf1", "pss", "mwms"], default=None,
                   help="how the step ends (default: TF_SLURM_STRATEGY, else auto: ps+chief -> pss, ps -> tf1, "
                        "no ps -> mwms)")
    p.add_argument("--drain", type=float, default=None, metavar="SECONDS",
                   help="after the chief finished, how long other training tasks may run (default: "
                        "TF_SLURM_DRAIN, else 30)")
    p.add_argument("--no-device-filters", action="store_true",
                   help="do not give TF1 worker servers device filters (TF_SLURM_DEVICE_FILTERS=0)")
    p.add_argument("--no-supervise", "--no-sidecar", dest="no_supervise", action="store_true",
                   help="run the command without the supervisor (nothing ends the step for you)")
    p.add_argument("--supervisor-log-level", "--sidecar-log-level", dest="supervisor_log_level",
                   default=os.environ.get("TF_SLURM_SUPERVISOR_LOG_LEVEL")
                   or os.environ.get("TF_SLURM_SIDECAR_LOG_LEVEL") or None,
                   help="logging level of the supervisor: DEBUG..CRITICAL "
                        "(default: --log-level)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    p = _subparser(sub, "node-address")
    p.add_argument("--iface", required=True, help="network interface, e.g. ib0")
    p.add_argument("--append", metavar="FILE", help="append the line to FILE (for TF_SLURM_ADDRESS=file:FILE)")

    # these live in their own modules; import only the one being run (start-up time)
    chosen = _command_in(argv)
    for name, module, adder, runner in (("mem", "memory", "add_arguments", "main"),
                                        ("local", "launcher", "add_arguments", "main"),
                                        ("batch-settings", "batch", "add_arguments", "main"),
                                        ("batch-status", "batch", "add_status_arguments", "main_status"),
                                        ("batch-step", "batch_step", "add_arguments", "main")):
        p = _subparser(sub, name, add_help=chosen == name)
        if chosen == name:
            mod = _optional_module(module)
            if mod is not None:
                getattr(mod, adder)(p)
                p.set_defaults(_run=getattr(mod, runner))
    return parser


def _optional_module(name: str):
    import importlib

    try:
        return importlib.import_module(f"tf_for_slurm.{name}")
    except ImportError:
        return None


def _plan(args: argparse.Namespace):
    from tf_for_slurm.host.environment import plan_from_env, roles_for
    from tf_for_slurm.plan.addresses import parse_policy
    from tf_for_slurm.plan.cluster import build_plan
    from tf_for_slurm.plan.step import offline_step

    tasks = args.tasks.split(",") if args.tasks else None
    if getattr(args, "nodelist", None):
        step = offline_step(args.nodelist, args.tasks_per_node or "1", args.job_id, args.step_id)
        roles = roles_for(step, tasks, args.ps, args.placement or "first", args.chief, names={"ps": "--ps"})
        policy = parse_policy(args.address, "--address")
        if policy.kind == "auto":  # decided here, with this machine's resolver, as a task would
            from tf_for_slurm.host.environment import decide_address

            policy = decide_address(policy, step.nodes).policy
        from tf_for_slurm.host.environment import _env_int

        scope = args.port_scope or os.environ.get("TF_SLURM_PORT_SCOPE") or "auto"
        return build_plan(step, roles, address=policy, port_scope=scope,
                          base_port=_env_int(os.environ, "TF_SLURM_BASE_PORT"))
    if getattr(args, "port_scope", None):
        raise UsageError("--port-scope given without --nodelist: expected TF_SLURM_PORT_SCOPE in a job")
    if getattr(args, "tasks_per_node", None):
        raise UsageError("--tasks-per-node given without --nodelist: expected both for an offline plan")
    return plan_from_env(tasks=tasks, ps=args.ps, placement=args.placement, chief=args.chief,
                         address=args.address, check=args.command_name == "exec")


def _rank(args: argparse.Namespace, plan) -> int:
    rank = getattr(args, "rank", None)
    if rank is None:
        if plan.my_rank is None and getattr(args, "nodelist", None):
            raise UsageError("--rank is required for an offline plan: expected the task's rank")
        if plan.my_rank is None:
            missing = [n for n in ("SLURM_LOCALID", "SLURM_NODEID") if not os.environ.get(n)]
            if "SLURM_NODEID" in missing and os.environ.get("SLURMD_NODENAME"):
                missing.remove("SLURM_NODEID")
            raise SlurmEnvError(f"{' and '.join(missing) or 'SLURM_LOCALID'} not set: expected this task's ids, "
                                "as srun sets them (run under srun or `tf-slurm local`, or pass --rank R)")
        return plan.my_rank
    if not 0 <= rank < plan.size:
        raise UsageError(bad_value("--rank", rank, f"a rank in 0-{plan.size - 1}"))
    return rank


def cmd_explain(args: argparse.Namespace) -> int:
    from tf_for_slurm.plan.gpus import gpu_view, parse_gpu_list

    plan = _plan(args)
    chief = plan.chief
    pool = parse_gpu_list(args.gpus, "--gpus") if getattr(args, "gpus", None) is not None else None
    gpus = gpu_view(plan.tasks, plan.my_rank, os.environ.get("CUDA_VISIBLE_DEVICES"),
                    os.environ.get("SLURM_STEP_GPUS"), pool)
    rows = [{"rank": t.rank, "node": t.node, "local_id": t.local_id, "role": t.role, "index": t.index,
             "address": t.address, "aux_port": t.aux_port, "gpus": gpus[t.rank],
             "chief": chief is not None and t.rank == chief.rank, "me": t.rank == plan.my_rank} for t in plan.tasks]
    chief_note = None
    if chief is not None and chief.role != "chief":
        chief_note = (f"chief: worker {chief.index} (rank {chief.rank}) initialises variables and writes "
                      "checkpoints (no explicit chief)")
    if args.json:
        print(json.dumps({"tasks": rows, "chief": None if chief is None else chief.rank,
                          "notes": {**dict(plan.details), "text": list(plan.notes) + ([chief_note] if chief_note else [])}},
                         indent=None))
        return 0
    from tf_for_slurm.cli.table import render_table

    for row in rows:
        row["role"] += " (chief)" if row["chief"] and row["role"] != "chief" else ""
    print(render_table(rows, ["rank", "node", "local_id", "role", "index", "address", "gpus"], mark="me"))
    for note in list(plan.notes) + ([chief_note] if chief_note else []):
        print(f"# {note}")
    return 0


def cmd_tf_config(args: argparse.Namespace) -> int:
    plan = _plan(args)
    print(plan.tf_config_json(_rank(args, plan)))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from tf_for_slurm.host.task_env import task_env

    plan = _plan(args)
    env = task_env(plan, _rank(args, plan))
    if env.spill:
        raise UsageError(f"{env.note}; `tf-slurm env` cannot export it: expected `tf-slurm exec -- CMD` instead")
    for name, value in env.variables.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    from tf_for_slurm.supervise import task_exec

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.supervisor_log_level is not None:
        level = str(args.supervisor_log_level).strip().upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise UsageError(bad_value("--supervisor-log-level", args.supervisor_log_level,
                                       "DEBUG, INFO, WARNING, ERROR or CRITICAL"))
        logging.getLogger("tf_for_slurm.supervisor").setLevel(level)
    return task_exec.run(command, tasks=args.tasks.split(",") if args.tasks else None, ps=args.ps,
                         placement=args.placement, chief=args.chief, address=args.address,
                         strategy=args.strategy, drain=args.drain, device_filters=not args.no_device_filters,
                         supervise=not args.no_supervise)


def cmd_node_address(args: argparse.Namespace) -> int:
    import fcntl
    import socket

    from tf_for_slurm.host.network import interface_address

    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    line = f"{node} {interface_address(args.iface)}\n"
    if args.append:
        with open(args.append, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(line)
    else:
        sys.stdout.write(line)
    return 0


COMMANDS = {"explain": cmd_explain, "tf-config": cmd_tf_config, "env": cmd_env, "exec": cmd_exec,
            "node-address": cmd_node_address}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    level = str(args.log_level).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        sys.stderr.write(f"tf-slurm: error: --log-level={args.log_level!r}: expected DEBUG, INFO, WARNING, "
                         "ERROR or CRITICAL\n")
        return 2
    logging.basicConfig(level=level, format="tf-slurm: %(levelname)s: %(message)s")
    try:
        if hasattr(args, "_run"):
            return int(args._run(args) or 0)
        return COMMANDS[args.command_name](args)
    except TfSlurmError as exc:
        sys.stderr.write(f"tf-slurm {args.command_name}: error: {exc}\n")
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
