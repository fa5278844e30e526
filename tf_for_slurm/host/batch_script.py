"""The batch script `tf-slurm submit` writes, and sbatch's command line for it.  Pure: a record in, text out.

Why generated: a user's own batch script loses what only the templates got right (the trap that
writes Slurm's warning down, --signal/--requeue/--open-mode, the numbers from batch-settings,
srun's -c and --mem-per-cpu, the step under batch-step and exec, the wait loop).  Every user value
is embedded with shlex.quote, or passed on sbatch's argv (a list, no shell): a value with spaces,
quotes, `$(...)` or backticks reaches the job literally and runs nothing.  The script reads the job
id from Slurm at run time, so the same text is shown by --dry-run and submitted.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import job_folder, settings, slurm


class SbatchOption(NamedTuple):
    """One sbatch option `submit` has its own name for.  Why one table: `submit`'s parser declares each
    from it (cli/submit.py) and sbatch_words checks each with it, so the two cannot drift apart."""

    flags: Tuple[str, ...]  # sbatch's own spellings, the long one last (what sbatch's command line gets)
    kind: str  # how the value is checked: a key of _KINDS
    metavar: Optional[str] = None
    help: Optional[str] = None

    @property
    def option(self) -> str:
        """The long option, as sbatch's command line gets it."""
        return self.flags[-1]

    @property
    def dest(self) -> str:
        """argparse's name for the value (the long option's)."""
        return self.option[2:].replace("-", "_")


NAMED_OPTIONS: Tuple[SbatchOption, ...] = (
    SbatchOption(("-N", "--nodes"), "nodes", "N", "nodes, or a range MIN-MAX (Slurm may start the job on fewer: a "
                 "task on each node it gives; --tasks then loses its last workers, down to --min-workers)"),
    SbatchOption(("-n", "--ntasks"), "count", "N", "tasks (default: nodes x --ntasks-per-node)"),
    SbatchOption(("--ntasks-per-node",), "count", "N", "tasks on each node (default with -N alone: 1)"),
    SbatchOption(("-c", "--cpus-per-task"), "count", "N", "CPUs per task (srun gets -c too)"),
    SbatchOption(("-t", "--time"), "time", None, "time limit: MINUTES, HH:MM:SS, D-HH:MM, ..."),
    SbatchOption(("-p", "--partition"), "names"),
    SbatchOption(("--gpus-per-node",), "gpus", "[TYPE:]N"),
    SbatchOption(("--mem-per-cpu",), "memory", "SIZE", "MB (or with K, M, G, T) per CPU"),
    SbatchOption(("-A", "--account"), "names"),
    SbatchOption(("--qos",), "names"),
    SbatchOption(("-J", "--job-name"), "text", None, "default: the command's .py file"),
)
_KINDS = {
    "count": (re.compile(r"[1-9][0-9]{0,6}"), "an integer >= 1"),
    "nodes": (re.compile(r"[1-9][0-9]{0,6}(?:-[1-9][0-9]{0,6})?"), "a node count N >= 1, or a range MIN-MAX"),
    "time": (re.compile(r"(?:[0-9]+-)?[0-9]+(?::[0-9]+){0,2}|(?i:unlimited|infinite)"),
             "Slurm's time: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    "names": (re.compile(r"[A-Za-z0-9_.+-]+(?:,[A-Za-z0-9_.+-]+)*"), "a name (or names separated by commas)"),
    "gpus": (re.compile(r"(?:[A-Za-z0-9_.-]+:)?[0-9]+"), "a GPU count, or TYPE:COUNT"),
    "memory": (re.compile(r"[0-9]+[KMGTkmgt]?"), "a size in MB, or with a unit K, M, G or T"),
    "text": (re.compile(r"[^\x00-\x1f\x7f]+"), "text on one line"),
}
# sbatch options --sbatch-arg may not pass (getopt_long also takes a unique prefix: '--out' is --output)
REFUSED = {
    "--output": "the batch log is the job folder's", "--parsable": "use submit's own --parsable",
    "--wait": "submit returns at once; `tf-slurm status JOB --watch` follows the job",
    "--wrap": "the command goes after '--'", "--array": "one job folder per job: array jobs are not supported",
    "--test-only": "use --dry-run", "--nodes": "use -N/--nodes", "--ntasks": "use -n/--ntasks",
    "--ntasks-per-node": "use --ntasks-per-node", "--hold": "use `scontrol hold JOB` after submitting",
}
_SHORT = {"-o": "--output", "-W": "--wait", "-a": "--array", "-N": "--nodes", "-n": "--ntasks", "-H": "--hold"}
SIGNAL_EARLY = 60  # Slurm may send --signal's warning up to 60 s early: ask for it that much before the margin
EXEC_LOG_LEVEL, SUPERVISOR_LOG_LEVEL = "INFO", "WARNING"  # as the templates' LOG_LEVEL and PS_LOG_LEVEL

# The time-limit warning's trap and its private file, set just before the step starts.  The templates
# (scripts/*.sh) carry the same lines: a house test checks each holds warn_trap(its own name) verbatim.
_WARN_TRAP = r"""# The time-limit warning is SIGURG (--signal=B:URG@N): it reaches only this shell, which ignored it
# until here (its default action), so a warning sent as the job starts (a requeued run started by the
# backfill scheduler got it 44 ms in) cannot kill the shell; batch-step's backstop stops the step at the
# same moment anyway. From here on the trap writes it (and SIGUSR1, SIGUSR2, SIGTERM: scancel,
# preemption) down for `tf-slurm batch-step`, in a folder only this user can use, with a random name
# (mktemp -d: 0700): other users see job ids and can write to /tmp, and a file of theirs must not stop
# or requeue the job. The traps come after every command substitution of the script: bash 5.2 can fail
# to parse a `$(...)` that a trap interrupts, and that ends the shell.
warn_dir="$(mktemp -d "${{TMPDIR:-/tmp}}/tf_slurm.XXXXXXXXXX")" \
    || {{ echo "{script}: error: cannot make a private folder in ${{TMPDIR:-/tmp}}" >&2; exit 2; }}
warn_file="$warn_dir/warning"
trap 'trap "" URG USR1 USR2 TERM; rm -rf -- "$warn_dir"' EXIT   # removed however the shell ends
for sig in URG USR1 USR2 TERM; do word=${{sig/URG/USR1}}
    trap "printf -v warn_line '%s %(%s)T' $word -1; echo \"\$warn_line\" >>\"\$warn_file\" || true" "$sig"; done
"""


def warn_trap(script: str) -> str:
    """The warning trap's lines, for the batch script named `script` (its error line names it)."""
    return _WARN_TRAP.format(script=script)



@dataclass(frozen=True)
class JobSpec:
    """Everything the script and sbatch's command line are made from (values checked by the CLI)."""

    command: Tuple[str, ...]  # the user's command, run by every task under `tf-slurm exec`
    python: str  # the python that has tf_for_slurm (on the compute nodes)
    jobs_root: str  # absolute: the job's folder is <jobs_root>/<job id>
    ntasks: int  # tasks of the step (sbatch --ntasks)
    sbatch_args: Tuple[str, ...] = ()  # the user's sbatch options, as sbatch's argv words (sbatch_words)
    ps: int = 1  # parameter servers, unless `tasks` names every role
    tasks: Optional[Tuple[str, ...]] = None
    chief: bool = False
    strategy: Optional[str] = None  # None: exec infers it
    address: Optional[str] = None  # None: exec's default
    checkpoint_dir: Optional[str] = None
    target: Optional[int] = None
    # batch-step's budgets: their defaults are the settings' (host/settings.py), one home each
    warn_margin: int = field(default_factory=lambda: settings.default_int(settings.WARN_MARGIN))
    max_requeues: int = field(default_factory=lambda: settings.default_int(settings.MAX_REQUEUES))
    spare_nodes: int = 0  # nodes allocated beyond the step's (sbatch --nodes counts them; batch-step leaves them free)
    max_relaunches: int = field(default_factory=lambda: settings.default_int(settings.MAX_RELAUNCHES))
    min_workers: Optional[int] = None  # a relaunch short of nodes goes on with this many workers (None: never fewer)
    # a heterogeneous job: the sbatch words of components 1, 2, ... (component 0's are sbatch_args),
    # each component's task count, and one role per component (exec --roles-by-component)
    more_components: Tuple[Tuple[str, ...], ...] = ()
    component_ntasks: Tuple[int, ...] = ()
    component_roles: Optional[Tuple[str, ...]] = None

    @property
    def het(self) -> bool:
        """Whether this is a heterogeneous job (one step over every component)."""
        return bool(self.more_components)

    @property
    def num_ps(self) -> int:
        """The number of parameter servers, for batch-settings."""
        return self.tasks.count("ps") if self.tasks is not None else self.ps


def one_line(value: str, name: str) -> str:
    """`value` when it is non-empty text on one line (what sbatch and a log line can carry), else one UsageError."""
    if not value or re.search(r"[\x00-\x1f\x7f]", value):
        raise UsageError(bad_value(name, value, "non-empty text on one line (no control characters)"))
    return value


def sbatch_words(values: Mapping[str, Optional[str]], *, exclusive: bool = False,
                 extra: Sequence[str] = ()) -> Tuple[str, ...]:
    """sbatch's argv words for the named options given (`values` by argparse dest) and --sbatch-arg's,
    each checked; one UsageError naming the option otherwise."""
    words: List[str] = []
    for named in NAMED_OPTIONS:
        value = values.get(named.dest)
        if value is None:
            continue
        pattern, expected = _KINDS[named.kind]
        if not pattern.fullmatch(str(value)):
            raise UsageError(bad_value(named.option, value, expected))
        words.append(f"{named.option}={value}")
    if exclusive:
        words.append("--exclusive")
    for word in extra:
        words.append(_passthrough(word))
    return tuple(words)


def _passthrough(word: str) -> str:
    """One --sbatch-arg word: an option (a value would be taken for the script), not one submit owns."""
    one_line(word, "--sbatch-arg")
    if not word.startswith("-") or word in ("-", "--"):
        raise UsageError(bad_value("--sbatch-arg", word, "one sbatch option, its value joined with '=', "
                                   "e.g. --sbatch-arg=--constraint=a100"))
    name = word.split("=", 1)[0]
    if not name.startswith("--"):
        name = _SHORT.get(name[:2], "")
    for refused, why in REFUSED.items():
        if len(name) > 3 and refused.startswith(name):
            raise UsageError(bad_value("--sbatch-arg", word, f"an option other than {refused} ({why})"))
    return word


def time_limit_seconds(text: str) -> Optional[int]:
    """Seconds in a --time value of Slurm's forms (MINUTES, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]), None for
    no limit ('unlimited', 'infinite', 0); the value was checked by sbatch_words first."""
    if text.lower() in ("unlimited", "infinite"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        parts += [0] * (3 - len(parts))
        seconds = int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:
        seconds = sum(p * f for p, f in zip(parts, {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]))
    return seconds or None


def job_name(command: Sequence[str]) -> str:
    """The default job name: the first `.py` file of the command, else its program (not 'sbatch')."""
    for word in command:
        if word.endswith(".py"):
            return os.path.basename(word) or "tf_job"
    base = os.path.basename(command[0]) if command else ""
    return base if base and not re.search(r"[\x00-\x1f\x7f]", base) else "tf_job"


def _slurm_path(path: str) -> str:
    """`path` with '%' doubled: sbatch and srun read %j, %t, ... in --output; '%%' is a '%'."""
    return path.replace("%", "%%")


def _with_ntasks(words: Sequence[str], ntasks: int) -> List[str]:
    """`words` with --ntasks first unless given (so the job knows its count: -N alone sets none), or
    unless --nodes is a range MIN-MAX: then Slurm runs a task on each node it gives."""
    named = {w.partition("=")[0]: w.partition("=")[2] for w in words}
    return list(words) if "--ntasks" in named or "-" in named.get("--nodes", "") else [f"--ntasks={ntasks}", *words]


def sbatch_argv(spec: JobSpec) -> List[str]:
    """The options sbatch is given (after `sbatch --parsable --hold`; the script comes on stdin); a
    heterogeneous job's components separated by ':' as sbatch takes them (component 0's options,
    --time included, apply to the whole job)."""
    counts = spec.component_ntasks or (spec.ntasks,)
    words = _with_ntasks(spec.sbatch_args, counts[0])
    named = [w.split("=", 1)[0] for w in spec.sbatch_args]
    if "--job-name" not in named and not any(w.startswith(("-J", "--job-name")) for w in spec.sbatch_args):
        words.append(f"--job-name={job_name(spec.command)}")
    log = os.path.join(_slurm_path(spec.jobs_root), "%j", job_folder.BATCH_LOG)
    words.append(f"--output={log}")
    for extra, ntasks in zip(spec.more_components, counts[1:]):
        words += [":", *_with_ntasks(extra, ntasks)]
    return words


def _step_lines(spec: JobSpec, exec_opts: List[str]) -> Tuple[str, str]:
    """(what the script prepares, the srun line) for a plain job or a heterogeneous one."""
    q = shlex.quote
    if spec.het:
        groups = ",".join(str(c) for c in range(len(spec.component_ntasks)))
        roles = ",".join(spec.component_roles or ())
        if spec.component_roles is not None:
            exec_opts[0] = f"--roles-by-component {q(roles)}"
        k = len(spec.component_ntasks)
        prepare = f"""# A heterogeneous job of {k} components: one step over all of them. srun takes each component's
# tasks, CPUs and memory from its allocation (no -n/-c/--mem: one value would apply to every
# component); reserved ports are not used (each component's are reserved on its own nodes only).
for c in {' '.join(str(c) for c in range(len(spec.component_ntasks)))}; do
    nodes_var="{slurm.JOB_NODELIST}_HET_GROUP_$c"; tasks_var="{slurm.TASKS_PER_NODE}_HET_GROUP_$c"
    echo "job ${slurm.JOB_ID}: component $c: nodes ${{!nodes_var:-?}}, tasks per node ${{!tasks_var:-?}}"
done
echo "job ${slurm.JOB_ID}: logs in ${settings.JOB_DIR}\""""
        # -l, not one log per task: in a heterogeneous step Slurm 22.05 expands --output's %j to each
        # component's own job id and numbers %t wrongly after component 0 (measured: rank 1 wrote task 2)
        srun = f'srun --het-group={groups} --kill-on-bad-exit=1 --no-kill --mpi=none -l'
        return prepare, srun
    prepare = f"""# Tasks (on the nodes the step uses: it leaves --spare-nodes free), CPUs per task, workers, MB per
# CPU (srun --mem-per-cpu) and ports to reserve, from the job's variables, each checked to be a plain
# integer by one tested helper (nothing here is evaluated).
settings="$("$python" -m tf_for_slurm batch-settings --num-ps {spec.num_ps} --min-ps 0 \\
    --spare-nodes {spec.spare_nodes} \\
    --partition-info <(scontrol show partition "${{{slurm.JOB_PARTITION}:-}}" 2>/dev/null) \\
    --node-info <(scontrol show node "${{{slurm.JOB_NODELIST}:-}}" 2>/dev/null))" || exit 2
read -r ntasks cpus_per_task workers mem_per_cpu resv_count <<<"$settings"
for v in "$ntasks" "$cpus_per_task" "$workers" "$mem_per_cpu" "$resv_count"; do
    [[ "$v" =~ ^[0-9]+$ ]] || {{ echo "job.sh: batch-settings printed '$settings': expected 5 integers" >&2; exit 2; }}
done
# Reserved ports only where the site configured them (MpiParams=ports=...), always with a count.
resv_ports=()
slurm_config="$(scontrol show config 2>/dev/null || true)"
if grep -Eq '^MpiParams[[:space:]]*=[[:space:]]*ports=' <<<"$slurm_config"; then
    resv_ports=(--resv-ports="$resv_count")
fi
echo "job ${slurm.JOB_ID}: $ntasks tasks ($workers not ps) on ${{{slurm.JOB_NODELIST}:-?}}," \\
     "$cpus_per_task CPU(s) and $mem_per_cpu MB per CPU per task; logs in ${settings.JOB_DIR}\""""
    task_log = os.path.join(_slurm_path(spec.jobs_root), "%j", job_folder.TASK_LOG_PATTERN)
    srun = ('srun --kill-on-bad-exit=1 --no-kill --mpi=none -n "$ntasks" -c "$cpus_per_task" '
            '--mem-per-cpu="${mem_per_cpu}M" '
            f'\\\n    "${{resv_ports[@]}}" --output={shlex.quote(task_log)} --open-mode=append')
    return prepare, srun


def _comment(text: str) -> str:
    """`text` as comment lines, whatever it holds."""
    return "\n".join("# " + line for line in text.split("\n"))


def script_text(spec: JobSpec) -> str:
    """The batch script: the templates' settings with this job's values, every one quoted."""
    q = shlex.quote
    job_id = f'"${slurm.JOB_ID}"'
    roles = f"--tasks {q(','.join(spec.tasks))}" if spec.tasks is not None else f"--ps {spec.ps}"
    exec_opts = [roles] + (["--chief"] if spec.chief else [])
    exec_opts += [f"--strategy {q(spec.strategy)}"] if spec.strategy else []
    exec_opts += [f"--address {q(spec.address)}"] if spec.address else []
    step_opts = [f"--checkpoint-dir {q(spec.checkpoint_dir)}"] if spec.checkpoint_dir else []
    step_opts += [f"--target {spec.target}"] if spec.target is not None else []
    step_opts += [f"--max-requeues {spec.max_requeues}", f"--warn-margin {spec.warn_margin}",
                  f"--max-relaunches {spec.max_relaunches}", f"--spare-nodes {spec.spare_nodes}"]
    step_opts += [f"--min-workers {spec.min_workers}"] if spec.min_workers is not None else []
    mkdir = f"mkdir -p -- {q(spec.checkpoint_dir)}\n" if spec.checkpoint_dir else ""
    submitted = " ".join(["sbatch", "--parsable", "--hold"] + [q(w) for w in sbatch_argv(spec)]) + " < job.sh"
    prepare, srun = _step_lines(spec, exec_opts)
    return f"""#!/bin/bash
{_comment("Written by `tf-slurm submit`: it ran (the options on sbatch's command line, no shell)")}
{_comment("  " + submitted)}
# and released the job once its folder existed. The template's settings (scripts/tf_slurm_job.sh):
#SBATCH --requeue
#SBATCH --no-kill
#SBATCH --open-mode=append
#SBATCH --signal=B:URG@{spec.warn_margin + SIGNAL_EARLY}

set -euo pipefail

python={q(spec.python)}
# The job folder: exec's hub writes the step's state there (`tf-slurm status`), batch-step the run's.
export {settings.JOB_DIR}={q(spec.jobs_root)}/{job_id}
export GRPC_POLL_STRATEGY=poll          # gRPC's epoll engines misbehave on some cluster kernels
export TF_CPP_MIN_LOG_LEVEL="${{TF_CPP_MIN_LOG_LEVEL:-2}}"
{mkdir}
{prepare}

# batch-step passes the warning on to every task --warn-margin s before the limit (training stops,
# the chief checkpoints), exits with the first failing task's status, and requeues the job when the
# warning stopped training before the target. Each task's output goes to its own log (appended
# after a requeue).
{warn_trap("job.sh")}{{ "$python" -m tf_for_slurm batch-step {' '.join(step_opts)} --warn-file "$warn_file" -- \\
    {srun} \\
    "$python" -m tf_for_slurm --log-level {EXEC_LOG_LEVEL} exec {' '.join(exec_opts)} \\
    --supervisor-log-level {SUPERVISOR_LOG_LEVEL} -- \\
    {' '.join(q(w) for w in spec.command)} \\
    && status=0 || status=$?
  echo "$status" >"$warn_dir/status"; }} &
step=$!
# a trapped signal (the warning) cuts `wait` short, and bash's own record of the step's status is not to
# be trusted then (a warning as the step ended made a COMPLETED job FAILED 151, or 255): wait until the
# step has ended, then take the status it wrote
while kill -0 "$step" 2>/dev/null; do wait "$step" || true; done
read -r status <"$warn_dir/status" || status=1
[[ "$status" =~ ^[0-9]{{1,3}}$ ]] || status=1
exit "$status"
"""
