"""`tf-slurm`: the parser and the dispatch to each subcommand's module.

Why a table of module names: every task of a step starts `tf-slurm exec`, and batch scripts call
`tf-slurm tf-config`/`env` per task; a subcommand's module (and what it imports) is imported only
when that subcommand runs, so no call pays for submit's, status's or logs' code.

Every usage or plan error is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Union

from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value
from tf_for_slurm.host import settings

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _report(prog: str, exc: TfSlurmError) -> int:
    """The one way every error ends: one line on stderr; the exit code (2)."""
    sys.stderr.write(f"{prog}: error: {exc}\n")
    return exc.exit_code


def closest(word: str, known: Sequence[str]) -> Optional[str]:
    """The known word a typo most likely meant (difflib's ratio >= 0.6), or None."""
    import difflib  # noqa: PLC0415 (lazy: only a usage error needs it, not every task's start-up)

    found = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_words_line(words: Sequence[str], options: Sequence[str]) -> str:
    """'unrecognized option --partiton: did you mean --partition?' for argparse's left-over words."""
    first = words[0]
    if not first.startswith("-"):
        return f"unexpected argument {' '.join(words)!r}: see --help"
    name = first.partition("=")[0]
    known = [o for o in options if o not in ("-h", "--help") and (o.startswith("--") or not name.startswith("--"))]
    guess = closest(name, known)
    more = f" (and {len(words) - 1} more word(s))" if len(words) > 1 else ""
    hint = f": did you mean {guess}?" if guess else ": see --help"
    return f"unrecognized option {name}{more}{hint}"


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit code 2, with the closest name for a typo."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._commands: Dict[str, "_Parser"] = {}  # the subcommands' parsers (set on the top one)
        self._words: Sequence[str] = ()  # the command line, for a typo that left a required option missing

    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse says "argument --ps: " before a type's message; ours name the option already ("--ps='x': ...")
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument ") and rest.startswith(tuple(f"{n}=" for n in head[9:].split("/"))):
            message = rest
        if message.startswith("the following arguments are required"):
            typos = [w for w in self._words[:self._words.index("--") if "--" in self._words else None]
                     if w.startswith("--") and w.partition("=")[0] not in self._option_string_actions]
            message = unknown_words_line(typos, list(self._option_string_actions)) if typos else message
        choice = re.search(r"^argument COMMAND: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            guess = closest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
            message = f"unknown command {choice.group(1)!r}: " + (f"did you mean {guess!r}?" if guess else
                                                                  "`tf-slurm --help` lists the commands")
        raise SystemExit(_report(self.prog, UsageError(message)))

    def parse_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                   namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
        """argparse's, but left-over words are reported by the subcommand that was given them."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            name = getattr(parsed, "command_name", None)
            chosen = self._commands.get(name) if name else None
            where = chosen or self
            where.error(unknown_words_line(extras, list(where._option_string_actions)))
        return parsed


def log_level(value: object, name: str) -> str:
    """A logging level's name (any case), or one UsageError naming the option."""
    level = str(value).strip().upper()
    if level not in LEVELS:
        raise UsageError(bad_value(name, value, "DEBUG, INFO, WARNING, ERROR or CRITICAL"))
    return level


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
    metadata: Any = importlib.import_module("importlib.metadata")  # only when asked: ~10 ms of every start
    try:
        return str(metadata.version("tf_for_slurm"))
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


class Command(NamedTuple):
    """A subcommand: its module (imported only when it runs), its help, and the module's two functions."""

    name: str
    module: str  # relative to tf_for_slurm.cli
    line: str  # `tf-slurm --help`'s line and `tf-slurm NAME --help`'s description
    example: str
    add: str = "add_arguments"  # add(parser): the command's options
    run: str = "main"  # run(args) -> the exit status


COMMANDS = (
    Command("explain", "plan_commands", "Print one table of every task of the plan: rank, node, role, address, GPUs.",
            "srun tf-slurm explain --ps 2\n  tf-slurm explain --nodelist 'gpu[01-04]' --tasks-per-node 2 "
            "--ps 2 --job-id 123456 --json", add="add_explain_arguments", run="explain"),
    Command("tf-config", "plan_commands", "Print this task's TF_CONFIG (JSON).",
            "srun tf-slurm tf-config --ps 1\n  tf-slurm tf-config --nodelist 'n[1-3]' --rank 2", run="tf_config"),
    Command("env", "plan_commands",
            f"Print shell export lines for this task: TF_CONFIG, {settings.JOB_TYPE}, {settings.TASK_INDEX}, ...",
            "srun bash -c 'eval \"$(tf-slurm env --ps 1)\"; python train.py'\n"
            "  tf-slurm env --ps 1 --rank 2   # in the batch script: task 2's", run="env"),
    Command("exec", "exec_command",
            "Run this task's command with TF_CONFIG set, and end it when the step's training is over.",
            "srun tf-slurm exec --ps 1 -- python train.py --epochs 3"),
    Command("node-address", "node_address",
            f"Print 'NODE ADDRESS' for a network interface of this node (for {settings.ADDRESS}=file:FILE).",
            "srun --ntasks-per-node=1 tf-slurm node-address --iface ib0 --append addresses.txt"),
    Command("mem", "mem", "Print the memory per task in MB from the allocation, the partition or the nodes.",
            "tf-slurm mem --cpus-per-task 4 --partition-info <(scontrol show partition)\n"
            "  tf-slurm mem --per cpu   # MB per CPU, for srun --mem-per-cpu"),
    Command("local", "local", "Run N tasks on this machine with the environment a Slurm step would give them.",
            "tf-slurm local -n 3 --ps 1 -- python train.py"),
    Command("batch-settings", "batch", "Print the sbatch templates' numbers, checked as integers: tasks, CPUs per "
            "task, workers, MB per CPU, ports to reserve.",
            "read -r NTASKS CPUS NUM_WORKERS MEM_PER_CPU RESV < <(tf-slurm batch-settings --num-ps 1)"),
    Command("batch-status", "batch", "Print the job's exit status: that of the task srun reported failing first.",
            'tf-slurm batch-status --srun-status "$status" --srun-log srun.err',
            add="add_status_arguments", run="main_status"),
    Command("batch-step", "batch_step", "Run a batch job's training step (srun ...): pass it the time-limit warning "
            "WARN_MARGIN s before the limit, exit with the first failing task's status, or requeue the job.",
            'tf-slurm batch-step --checkpoint-dir runs/m --target 800 -- srun -n 3 tf-slurm exec -- '
            'python train.py'),
    Command("status", "status", "Print every task of a job's step (role, node, state, exit status) and Slurm's "
            "state of the job.",
            "tf-slurm status 123456\n  tf-slurm status tf_slurm_jobs/123456 --watch\n"
            "  tf-slurm status 123456 --json"),
    Command("submit", "submit", "Write a batch script into a job folder and submit it with sbatch (--dry-run: print "
            "it and the plan).",
            "tf-slurm submit -N 3 --ntasks-per-node 1 --ps 1 -t 1:00:00 -- python train.py --epochs 3\n"
            "  tf-slurm submit -N 2 -n 4 --tasks chief,ps,worker,worker --dry-run -- python pss.py"),
    Command("logs", "logs", "Print a job's log files from its folder: the batch log, a task's, or a role's; --follow.",
            "tf-slurm logs 123456 --role ps\n  tf-slurm logs 123456 --task 2 --follow"),
    Command("report", "report", "Write one self-contained HTML page of a job's timeline into its folder: every "
            "task's runs, restarts, hangs, losses, relaunches and requeues, and each worker's step over time.",
            "tf-slurm report 123456\n  tf-slurm report tf_slurm_jobs/123456 --output /tmp/job.html"),
    Command("goodput", "goodput", "Print where each job's time went: queue, start-up, training, saves, redone "
            "steps, faults, end wait, other; the goodput and what would raise it.",
            "tf-slurm goodput 123456 123457\n  tf-slurm goodput 123456 --json\n"
            "  tf-slurm goodput $(ls tf_slurm_jobs) --csv > goodput.csv"),
)


def module_of(command: Command) -> Any:
    """The command's module, imported now (the first time it is asked for)."""
    return importlib.import_module(f"{__name__}.{command.module}")


def _subparser(sub, command: Command, chosen: bool) -> "_Parser":
    """A subcommand with its one-line description, an example, and --log-level after it too; its own
    options (and its module) only when it is the command being run."""
    line = command.line
    short = line[:-1] if line.endswith(".") and not line.endswith("..") else line  # a sentence's end, not "..."
    p = sub.add_parser(command.name, help=short[0].lower() + short[1:], description=line,
                       epilog="example:\n  " + command.example, formatter_class=argparse.RawDescriptionHelpFormatter,
                       add_help=chosen)
    p.add_argument("--log-level", default=argparse.SUPPRESS, help="as before the command: DEBUG..CRITICAL")
    if chosen:
        module = module_of(command)
        getattr(module, command.add)(p)
        p.set_defaults(_run=getattr(module, command.run))
    return p


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """Every command's name and line; the options of the one named in `argv` only (start-up time)."""
    parser = _Parser(prog="tf-slurm", description="Distributed TensorFlow on Slurm: plans, TF_CONFIG, launch.",
                     epilog="`tf-slurm COMMAND --help` describes each command.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    env = settings.environ()
    parser.add_argument("--log-level", default=settings.text(env, settings.LOG_LEVEL)
                        or settings.default_text(settings.LOG_LEVEL),
                        help="DEBUG, INFO, WARNING (default), ERROR, CRITICAL")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    chosen = _command_in(argv)
    parser._commands = {c.name: _subparser(sub, c, c.name == chosen) for c in COMMANDS}
    if chosen in parser._commands:
        parser._commands[chosen]._words = list(sys.argv[1:] if argv is None else argv)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`tf-slurm ARGS`: run one command; its errors are one line on stderr and exit code 2."""
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        level = log_level(args.log_level, "--log-level")
    except UsageError as exc:
        return _report(parser.prog, exc)
    logging.basicConfig(level=level, format="tf-slurm: %(levelname)s: %(message)s")
    try:
        return int(args._run(args) or 0)
    except TfSlurmError as exc:
        return _report(f"{parser.prog} {args.command_name}", exc)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
