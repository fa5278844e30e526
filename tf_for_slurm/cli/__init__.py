"""`tf-slurm`: explain a plan, print TF_CONFIG or exports, run a command with them, and more.

Every usage or plan error is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from importlib import metadata
from typing import Any, Optional, Sequence, Union

from tf_for_slurm.cli import batch, batch_step, het, local, logs, mem, restart_options, status, submit
from tf_for_slurm.cli.table import render_table
from tf_for_slurm.errors import SlurmEnvError, TfSlurmError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.allocation import this_node
from tf_for_slurm.host.environment import decide_address, plan_from_env, roles_for
from tf_for_slurm.host.network import interface_address
from tf_for_slurm.host.task_env import task_env
from tf_for_slurm.host.user_files import append_line
from tf_for_slurm.plan.addresses import parse_policy
from tf_for_slurm.plan.cluster import build_plan
from tf_for_slurm.plan.gpus import gpu_view, parse_gpu_list
from tf_for_slurm.supervise import child_process, task_exec

log = logging.getLogger("tf_for_slurm.cli")


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _report(prog: str, exc: TfSlurmError) -> int:
    """The one way every error ends: one line on stderr; the exit code (2)."""
    sys.stderr.write(f"{prog}: error: {exc}\n")
    return exc.exit_code


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SystemExit(_report(self.prog, UsageError(message)))


def _level(value: object, name: str) -> str:
    """A logging level's name (any case), or one UsageError naming the option."""
    level = str(value).strip().upper()
    if level not in LEVELS:
        raise UsageError(bad_value(name, value, "DEBUG, INFO, WARNING, ERROR or CRITICAL"))
    return level


def _role_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(f"roles (default: {settings.TASKS}, else {settings.PS}, else 1 ps)")
    g.add_argument("--tasks", help="comma-separated roles, one per task, node by node, e.g. ps,worker,worker")
    g.add_argument("--ps", type=int, help="number of parameter servers: the first N tasks")
    g.add_argument("--placement", choices=["first", "per-node"], help="'per-node': one ps per node")
    g.add_argument("--chief", action="store_true", help="make the first worker an explicit chief")
    het.add_role_option(g)
    g.add_argument("--address", help="address policy: hostname | auto | template:{host}-ib | iface:ib0 | file:PATH")


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
    try:
        return metadata.version("tf_for_slurm")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _VersionAction(argparse.Action):
    """`--version`, looking the metadata up only when asked (start-up time of every other call)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Union[str, Sequence[Any], None], option_string: Optional[str] = None) -> None:
        sys.stdout.write(f"tf-slurm {version()}\n")
        parser.exit(0)


# How each task of a step gets its own exports (the batch script itself is no task: see _refuse_batch_script).
ENV_EXAMPLE = "srun bash -c 'eval \"$(tf-slurm env)\"; python train.py'"

# One line and an example per subcommand, for `tf-slurm COMMAND --help`.
HELP = {
    "explain": ("Print one table of every task of the plan: rank, node, role, address, GPUs.",
                "srun tf-slurm explain --ps 2\n  tf-slurm explain --nodelist 'gpu[01-04]' --tasks-per-node 2 "
                "--ps 2 --job-id 123456 --json"),
    "tf-config": ("Print this task's TF_CONFIG (JSON).",
                  "srun tf-slurm tf-config --ps 1\n  tf-slurm tf-config --nodelist 'n[1-3]' --rank 2"),
    "env": (f"Print shell export lines for this task: TF_CONFIG, {settings.JOB_TYPE}, {settings.TASK_INDEX}, ...",
            "srun bash -c 'eval \"$(tf-slurm env --ps 1)\"; python train.py'\n"
            "  tf-slurm env --ps 1 --rank 2   # in the batch script: task 2's"),
    "exec": ("Run this task's command with TF_CONFIG set, and end it when the step's training is over.",
             "srun tf-slurm exec --ps 1 -- python train.py --epochs 3"),
    "node-address": (f"Print 'NODE ADDRESS' for a network interface of this node (for {settings.ADDRESS}=file:FILE).",
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
    "status": ("Print every task of a job's step (role, node, state, exit status) and Slurm's state of the job.",
               "tf-slurm status 123456\n  tf-slurm status tf_slurm_jobs/123456 --watch\n"
               "  tf-slurm status 123456 --json"),
    "submit": ("Write a batch script into a job folder and submit it with sbatch (--dry-run: print it and the plan).",
               "tf-slurm submit -N 3 --ntasks-per-node 1 --ps 1 -t 1:00:00 -- python train.py --epochs 3\n"
               "  tf-slurm submit -N 2 -n 4 --tasks chief,ps,worker,worker --dry-run -- python pss.py"),
    "logs": ("Print a job's log files from its folder: the batch log, a task's, or a role's; --follow.",
             "tf-slurm logs 123456 --role ps\n  tf-slurm logs 123456 --task 2 --follow"),
}


# The subcommands that live in their own modules: (command, options `add(parser)`, run `main(args) -> int`).
MODULE_COMMANDS = (
    ("mem", mem.add_arguments, mem.main),
    ("local", local.add_arguments, local.main),
    ("batch-settings", batch.add_arguments, batch.main),
    ("batch-status", batch.add_status_arguments, batch.main_status),
    ("batch-step", batch_step.add_arguments, batch_step.main),
    ("status", status.add_arguments, status.main),
    ("logs", logs.add_arguments, logs.main),
    ("submit", submit.add_arguments, submit.main),
)


def _subparser(sub, name: str, **kw) -> argparse.ArgumentParser:
    """A subcommand with its one-line description, an example, and --log-level after it too."""
    line, example = HELP[name]
    p = sub.add_parser(name, help=line[0].lower() + line[1:].rstrip("."), description=line,
                       epilog="example:\n  " + example, formatter_class=argparse.RawDescriptionHelpFormatter, **kw)
    p.add_argument("--log-level", default=argparse.SUPPRESS, help="as before the command: DEBUG..CRITICAL")
    return p


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """Every command's options; a module command's only when it is the one in `argv` (start-up time)."""
    parser = _Parser(prog="tf-slurm", description="Distributed TensorFlow on Slurm: plans, TF_CONFIG, launch.",
                     epilog="`tf-slurm COMMAND --help` describes each command.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    env = settings.environ()
    parser.add_argument("--log-level", default=settings.text(env, settings.LOG_LEVEL)
                        or settings.default_text(settings.LOG_LEVEL),
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
                   help=f"how the step ends (default: {settings.STRATEGY}, else auto: ps+chief -> pss, ps -> tf1, "
                        "no ps -> mwms)")
    p.add_argument("--drain", type=float, default=None, metavar="SECONDS",
                   help="after the chief finished, how long other training tasks may run (default: "
                        f"{settings.DRAIN}, else {settings.default_seconds(settings.DRAIN):g})")
    p.add_argument("--no-device-filters", action="store_true",
                   help=f"do not give TF1 worker servers device filters ({settings.DEVICE_FILTERS}=0)")
    restart_options.add_arguments(p)
    p.add_argument("--no-supervise", "--no-sidecar", dest="no_supervise", action="store_true",
                   help="run the command without the supervisor (nothing ends the step for you)")
    p.add_argument("--supervisor-log-level", "--sidecar-log-level", dest="supervisor_log_level",
                   default=settings.text(env, settings.SUPERVISOR_LOG_LEVEL)
                   or settings.text(env, settings.SIDECAR_LOG_LEVEL),
                   help="logging level of the supervisor: DEBUG..CRITICAL "
                        "(default: --log-level)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")

    p = _subparser(sub, "node-address")
    p.add_argument("--iface", required=True, help="network interface, e.g. ib0")
    p.add_argument("--append", metavar="FILE", help=f"append the line to FILE (for {settings.ADDRESS}=file:FILE)")

    chosen = _command_in(argv)
    for name, adder, runner in MODULE_COMMANDS:
        p = _subparser(sub, name, add_help=chosen == name)
        if chosen == name:
            adder(p)
            p.set_defaults(_run=runner)
    return parser


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
    if getattr(args, "port_scope", None):
        raise UsageError(f"--port-scope given without --nodelist: expected {settings.PORT_SCOPE} in a job")
    if getattr(args, "tasks_per_node", None):
        raise UsageError("--tasks-per-node given without --nodelist: expected both for an offline plan")
    return plan_from_env(tasks=tasks, ps=args.ps, placement=args.placement, chief=args.chief, address=args.address,
                         check=args.command_name == "exec", component_roles=het.component_roles(args))


def _refuse_batch_script(args: argparse.Namespace, example: str) -> None:
    """One UsageError when no --rank was given in the batch script of a job of several tasks.

    Why: Slurm gives the batch script task 0's ids, so `eval "$(tf-slurm env)"` before srun would
    hand every task task 0's TF_CONFIG; `tf-slurm exec` refuses the same way (host.slurm.outside_step).
    """
    if getattr(args, "rank", None) is not None or getattr(args, "nodelist", None) or getattr(args, "component", None):
        return
    reason = slurm.outside_step(settings.environ(), example)
    if reason:
        raise UsageError(f"{reason}, or ask for one task with --rank R (`tf-slurm explain` lists them)")


def _rank(args: argparse.Namespace, plan) -> int:
    rank = getattr(args, "rank", None)
    if rank is None:
        if plan.my_rank is None and (getattr(args, "nodelist", None) or getattr(args, "component", None)):
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


def cmd_explain(args: argparse.Namespace) -> int:
    """`tf-slurm explain`: the plan as a table (or JSON), this task marked."""
    plan = _plan(args)
    chief = plan.chief
    pool = parse_gpu_list(args.gpus, "--gpus") if getattr(args, "gpus", None) is not None else None
    cuda_visible_devices, step_gpus = slurm.gpu_sources(settings.environ())
    gpus = gpu_view(plan.tasks, plan.my_rank, cuda_visible_devices, step_gpus, pool)
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


def cmd_tf_config(args: argparse.Namespace) -> int:
    """`tf-slurm tf-config`: this task's TF_CONFIG."""
    _refuse_batch_script(args, "srun tf-slurm tf-config")
    plan = _plan(args)
    print(plan.tf_config_json(_rank(args, plan)))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    """`tf-slurm env`: this task's variables as shell exports."""
    _refuse_batch_script(args, ENV_EXAMPLE)
    plan = _plan(args)
    env = task_env(plan, _rank(args, plan))
    if env.spill:
        raise UsageError(f"{env.note}; `tf-slurm env` cannot export it: expected `tf-slurm exec -- CMD` instead")
    for name, value in env.variables.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    """`tf-slurm exec -- CMD`: run the command with its TF_CONFIG, under the supervisor."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.supervisor_log_level is not None:
        level = _level(args.supervisor_log_level, "--supervisor-log-level")
        logging.getLogger(child_process.LOGGER).setLevel(level)
    if logging.getLogger().getEffectiveLevel() <= logging.WARNING:  # the step's summary, unless asked for less
        logging.getLogger(child_process.SUMMARY_LOGGER).setLevel(logging.INFO)
    return task_exec.run(command, tasks=args.tasks.split(",") if args.tasks else None, ps=args.ps,
                         placement=args.placement, chief=args.chief, address=args.address,
                         component_roles=het.component_roles(args),
                         strategy=args.strategy, drain=args.drain, device_filters=not args.no_device_filters,
                         supervise=not args.no_supervise, **restart_options.values(args))


def cmd_node_address(args: argparse.Namespace) -> int:
    """`tf-slurm node-address`: 'NODE ADDRESS' of an interface, printed or appended to a shared file."""
    line = f"{this_node()} {interface_address(args.iface)}\n"
    if args.append:
        append_line(args.append, line)
    else:
        sys.stdout.write(line)
    return 0


COMMANDS = {"explain": cmd_explain, "tf-config": cmd_tf_config, "env": cmd_env, "exec": cmd_exec,
            "node-address": cmd_node_address}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`tf-slurm ARGS`: run one command; its errors are one line on stderr and exit code 2."""
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        level = _level(args.log_level, "--log-level")
    except UsageError as exc:
        return _report(parser.prog, exc)
    logging.basicConfig(level=level, format="tf-slurm: %(levelname)s: %(message)s")
    try:
        if hasattr(args, "_run"):
            return int(args._run(args) or 0)
        return COMMANDS[args.command_name](args)
    except TfSlurmError as exc:
        return _report(f"{parser.prog} {args.command_name}", exc)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
