"""Every `TF_SLURM_*` setting in one registry (name, kind, default, meaning), and the readers.

Why one registry: a setting's name, its default and the words it accepts used to be repeated in
the modules that read it, and drifted (three different sets of true/false words).  Every module
takes a setting's name from here (`TASKS`, `PS`, ...), reads it through `text`, `flag`,
`seconds` or `integer`, and the settings table in docs/REFERENCE.md is checked against `REGISTRY`
by a test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.plan.numbers import parse_int, parse_seconds

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    """One environment variable tf_for_slurm reads or sets."""

    name: str
    kind: str  # 'text' | 'flag' | 'int' | 'seconds' | 'list'
    default: Optional[str]  # as documented; None: no default (unset means "not given")
    meaning: str
    internal: bool = False  # set by tf_for_slurm for the programs it starts, not by users


REGISTRY: Dict[str, Setting] = {}


def _setting(name: str, kind: str, default: Optional[str], meaning: str, internal: bool = False) -> str:
    REGISTRY[name] = Setting(name, kind, default, meaning, internal)
    return name


# -- the plan ------------------------------------------------------------------------------------
TASKS = _setting("TF_SLURM_TASKS", "list", None, "comma-separated ListOfTFTasks, one role per task")
PS = _setting("TF_SLURM_PS", "int", "1", "number of ps (the first N tasks)")
COMPONENT_ROLES = _setting("TF_SLURM_COMPONENT_ROLES", "list", None, "heterogeneous job: one role per component "
                           "of the step, e.g. `ps,worker` (every task of a component gets its role)")
PLACEMENT = _setting("TF_SLURM_PLACEMENT", "text", "first", "`first` or `per-node` (one ps per node)")
CHIEF = _setting("TF_SLURM_CHIEF", "flag", "0", "`1`: make the first worker an explicit chief")
ADDRESS = _setting("TF_SLURM_ADDRESS", "text", "hostname", "address policy: hostname, auto, template:..., "
                   "iface:..., file:...")
IB_TEMPLATE = _setting("TF_SLURM_IB_TEMPLATE", "text", "{host}-ib", "InfiniBand name template for NoIB=False, "
                       "IB=IB and auto")
BASE_PORT = _setting("TF_SLURM_BASE_PORT", "int", None, "fixed base port")
PORT_SCOPE = _setting("TF_SLURM_PORT_SCOPE", "text", "auto",
                      "`node`, `step` (ports unique across the step, for emulated nodes sharing one host: set "
                      "by `tf-slurm local` and the local Slurm harness) or `auto` (step when every node has "
                      "the same address)")
# -- logging -------------------------------------------------------------------------------------
LOG_LEVEL = _setting("TF_SLURM_LOG_LEVEL", "text", "WARNING", "the CLI's logging level")
SUPERVISOR_LOG_LEVEL = _setting("TF_SLURM_SUPERVISOR_LOG_LEVEL", "text", None, "the exec supervisor's logging level")
SIDECAR_LOG_LEVEL = _setting("TF_SLURM_SIDECAR_LOG_LEVEL", "text", None,
                             "the original name of TF_SLURM_SUPERVISOR_LOG_LEVEL")
# -- exec and its supervisor ---------------------------------------------------------------------
STRATEGY = _setting("TF_SLURM_STRATEGY", "text", "auto", "`auto`, `tf1`, `pss` or `mwms`: how exec ends the step")
DRAIN = _setting("TF_SLURM_DRAIN", "seconds", "30", "a TF1 worker still running after the chief finished")
KILL_GRACE = _setting("TF_SLURM_KILL_GRACE", "seconds", "3", "between SIGTERM and SIGKILL of a command")
HEARTBEAT = _setting("TF_SLURM_HEARTBEAT", "seconds", "2", "between a supervisor's heartbeats")
SILENCE = _setting("TF_SLURM_SILENCE", "seconds", "10", "without a heartbeat: the task's node is taken for dead")
CONNECT_GRACE = _setting("TF_SLURM_CONNECT_GRACE", "seconds", "300", "for a supervisor to reach the chief's")
REPORT_WAIT = _setting("TF_SLURM_REPORT_WAIT", "seconds", "5", "a supervisor waits this long for the ack of its "
                       "command's exit")
SECRET = _setting("TF_SLURM_SECRET", "text", None, "the secret a step's supervisors prove to each other "
                 "(at least 32 characters; batch-step and `tf-slurm local` set a fresh one when unset; else from "
                 "TF_SLURM_KEY_FILE); never printed")
KEY_FILE = _setting("TF_SLURM_KEY_FILE", "text", "~/.tf_slurm/key", "without TF_SLURM_SECRET: the per-user key the "
                    "step's secret is derived from (created 0600 when missing; the same file on every node)")
SUPERVISE = _setting("TF_SLURM_SUPERVISE", "flag", "1", "`0`: launch() does not re-run itself under exec")
DEVICE_FILTERS = _setting("TF_SLURM_DEVICE_FILTERS", "flag", "1", "`0`: no device filters for TF1 tasks under exec "
                            "and GetServerDictionary")
RECOVERY_WAIT = _setting("TF_SLURM_RECOVERY_WAIT", "seconds", "1", "seconds between a TF1 non-chief's looks for "
                         "the chief's model (TensorFlow's own: 30)")
STOP_SIGNALS = _setting("TF_SLURM_STOP_SIGNALS", "list", "USR1,USR2,TERM", "signals that stop training at the next "
                        "step (`none`: off)")
SIGNAL_HOLD = _setting("TF_SLURM_SIGNAL_HOLD", "seconds", "15", "seconds exec holds a SIGUSR1/SIGUSR2 that "
                       "arrives before the command handles it (`0`: off)")
MAX_RESTARTS = _setting("TF_SLURM_MAX_RESTARTS", "int", "3", "restarts in place allowed in one step (a PSS worker "
                        "or evaluator, a TF1 worker alone; every task for MWMS, a ps or a PSS coordinator; `0`: off, "
                        "any failure ends the step)")
REQUIRE_ALL_WORKERS = _setting("TF_SLURM_REQUIRE_ALL_WORKERS", "flag", "0", "`1`: a lost PSS worker, TF1 "
                                 "non-chief worker or evaluator (its node failed) ends the step; by default the step "
                                 "goes on without it")
MAX_TASK_RESTARTS = _setting("TF_SLURM_MAX_TASK_RESTARTS", "int", "3", "restarts in place allowed for one task")
RESTART_ON = _setting("TF_SLURM_RESTART_ON", "text", "signal", "which failures are restarted: `signal` (status "
                      "128-255: killed by a signal, OOM) or `any` non-zero status")
CRASH_WINDOW = _setting("TF_SLURM_CRASH_WINDOW", "seconds", "10", "a task failing again this soon after its restart "
                        "is a crash loop: the step ends")
RESTART_BACKOFF = _setting("TF_SLURM_RESTART_BACKOFF", "seconds", "1", "wait before a task's first restart, doubled "
                           "for each next one (at most 30 s)")
PROGRESS_DEADLINE = _setting("TF_SLURM_PROGRESS_DEADLINE", "seconds", "0", "a command stopped (SIGSTOP) this "
                             "long, or silent this long after it once reported progress "
                             "(`tf_for_slurm.report_progress()`), is hung: killed, then restarted or failed "
                             "(`0`: off)")
HANG_AFTER = _setting("TF_SLURM_HANG_AFTER", "seconds", "60", "a task that reported training progress (the "
                      "shim's, or `report_progress(step=...)`) and made none for max(TF_SLURM_HANG_FACTOR x its "
                      "median step time, this) is hung: its stacks to its log, then ended and restarted by the "
                      "restart policy (`0`: off)")
HANG_FACTOR = _setting("TF_SLURM_HANG_FACTOR", "factor", "10", "the hang bound in median step times (see "
                       "TF_SLURM_HANG_AFTER)")
PROGRESS_CAPTURE = _setting("TF_SLURM_PROGRESS_CAPTURE", "flag", "1", "`0`: the shim does not report an unmodified "
                            "script's training progress (Keras fit batches, optimizer steps, TF1 global step)")
START_WAIT = _setting("TF_SLURM_START_WAIT", "seconds", "300", "tasks waiting for their peers this long before "
                     "any training step (counted from the first that waits): the hub names the tasks they wait for, "
                     "with their phase, node and the line of the user's code they are at (`0`: off)")
START_FAULT = _setting("TF_SLURM_START_FAULT", "seconds", "1800", "waiting this long for peers before any training "
                      "step is a fault, handled as a hang by the restart policy (`0`: only named, never ended)")
PREFLIGHT = _setting("TF_SLURM_PREFLIGHT", "flag", "1", "`0`: no check, before the command starts, that the "
                     "tasks can reach each other's planned host:port")
PREFLIGHT_TIMEOUT = _setting("TF_SLURM_PREFLIGHT_TIMEOUT", "seconds", "30", "how long the check before the "
                             "command starts waits for an address to answer (and for a task that starts late)")
# -- batch-step ----------------------------------------------------------------------------------
MAX_REQUEUES = _setting("TF_SLURM_MAX_REQUEUES", "int", "10", "batch-step: requeues allowed")
MAX_RELAUNCHES = _setting("TF_SLURM_MAX_RELAUNCHES", "int", "2", "batch-step: times a step that lost a node is "
                          "started again at once on the allocation's healthy nodes (then: requeue decision)")
MIN_WORKERS = _setting("TF_SLURM_MIN_WORKERS", "int", None, "the fewest workers a step goes on with: batch-step "
                       "starts a step short of healthy nodes again with fewer workers, and a role list longer than "
                       "the allocation loses its last ones, down to this many (unset: the planned count, never "
                       "fewer; `tf-slurm submit --min-workers`)")
SPARE_NODES = _setting("TF_SLURM_SPARE_NODES", "int", "0", "batch-step: nodes of the allocation the first step "
                       "leaves free, to take a lost node's place (`tf-slurm submit --spare-nodes`)")
BATCH_HOST_WAIT = _setting("TF_SLURM_BATCH_HOST_WAIT", "seconds", "150", "a task that lost the step's supervisor "
                           "on the job's batch host waits this long for the evidence that the node is lost (two steps "
                           "its slurmd did not take, or Slurm's NOT_RESPONDING/DOWN); then it requeues the job, or "
                           "cancels it with no requeue left: nothing else would end it; `0`: off")
BATCH_HOST = _setting("TF_SLURM_BATCH_HOST", "text", None, "the node batch-step runs on (set by batch-step for its "
                      "steps' tasks)", internal=True)
REQUEUES_LEFT = _setting("TF_SLURM_REQUEUES_LEFT", "int", None, "the requeues batch-step has left (set by batch-step "
                         "for its steps' tasks)", internal=True)
WARN_MARGIN = _setting("TF_SLURM_WARN_MARGIN", "int", "60", "batch-step: seconds before the time limit at "
                       "which the tasks are told to stop")
CONTROLLER_WAIT = _setting("TF_SLURM_CONTROLLER_WAIT", "seconds", "600", "batch-step and submit: how long a Slurm "
                          "command (scontrol requeue, squeue, srun's step creation, sbatch) waits through an outage of "
                          "Slurm's controller before it counts as failed")
# -- the job folder (tf-slurm submit, status, logs) -----------------------------------------------
JOB_DIR = _setting("TF_SLURM_JOB_DIR", "text", None, "the job's folder: exec's hub writes `status.json` there and "
                   "batch-step `batch.json` (set by `tf-slurm submit`'s script, `tf-slurm local` and the templates)")
STATUS_FILE = _setting("TF_SLURM_STATUS_FILE", "text", None, "where exec's hub writes the step's status (default: "
                       "`status.json` in TF_SLURM_JOB_DIR; unset both: none)")
JOBS_ROOT = _setting("TF_SLURM_JOBS_ROOT", "text", "tf_slurm_jobs", "the folder holding one folder per job "
                     "(`tf-slurm submit --folder`, `status`, `logs`)")
# -- set by tf_for_slurm for the programs it starts ----------------------------------------------
JOB_TYPE = _setting("TF_SLURM_JOB_TYPE", "text", None, "this task's role", internal=True)
PROGRESS_FILE = _setting("TF_SLURM_PROGRESS_FILE", "text", None, "the file a task touches to report progress "
                         "(with a progress deadline)", internal=True)
PHASE_FILE = _setting("TF_SLURM_PHASE_FILE", "text", None, "the file the shim writes a task's start-up phase to "
                      "(plan/start_phase.py)", internal=True)
TASK_INDEX = _setting("TF_SLURM_TASK_INDEX", "int", None, "this task's index within its role", internal=True)
RANK = _setting("TF_SLURM_RANK", "int", None, "this task's rank in the step", internal=True)
NUM_PS = _setting("TF_SLURM_NUM_PS", "int", None, "number of ps in the step", internal=True)
FEWER_WORKERS = _setting("TF_SLURM_FEWER_WORKERS", "int", None, "set by batch-step for a step started again "
                         "with fewer workers: how many of the user's role list's last workers it leaves out",
                         internal=True)
NUM_WORKERS = _setting("TF_SLURM_NUM_WORKERS", "int", None, "number of workers in the step", internal=True)
IS_CHIEF = _setting("TF_SLURM_IS_CHIEF", "flag", None, "`1` when this task is the step's chief (the shim's plan hints)",
                    internal=True)
SELF_ADDRESS = _setting("TF_SLURM_SELF_ADDRESS", "text", None, "this task's host:port", internal=True)
TF_CONFIG_FILE = _setting("TF_SLURM_TF_CONFIG_FILE", "text", None, "the full TF_CONFIG when it exceeds 128 KiB",
                          internal=True)
SESSION_FILTERS = _setting("TF_SLURM_SESSION_FILTERS", "list", None, "device filters the shim installs",
                           internal=True)
SUPERVISED = _setting("TF_SLURM_SUPERVISED", "text", None, "the step tag of the exec the command runs under",
                      internal=True)
LAUNCH_REPORT = _setting("TF_SLURM_LAUNCH_REPORT", "text", None, "set by `tf-slurm local`: where the first "
                         "failure is noted", internal=True)
# -- the repository's scripts (read by bash, listed so the names have one home) ------------------
VENV = _setting("TF_SLURM_VENV", "text", ".venv", "scripts/setup.sh: the virtual environment")
REPO = _setting("TF_SLURM_REPO", "text", None, "sbatch templates: the repository (examples, scripts)")
LOCAL_DIR = _setting("TF_SLURM_LOCAL_DIR", "text", "/tmp/tf_for_slurm-slurm", "scripts/local_slurm.sh: its directory")
LOCAL_CPUS = _setting("TF_SLURM_LOCAL_CPUS", "int", "4", "scripts/local_slurm.sh: CPUs per emulated node")
LOCAL_MEM = _setting("TF_SLURM_LOCAL_MEM", "int", "4096", "scripts/local_slurm.sh: MB per emulated node")
LOCAL_PORT = _setting("TF_SLURM_LOCAL_PORT", "int", "16817", "scripts/local_slurm.sh: slurmctld's port")
LOCAL_RESV_PORTS = _setting("TF_SLURM_LOCAL_RESV_PORTS", "text", None, "scripts/local_slurm.sh: MpiParams ports")

# Variables of a Slurm step or an earlier run that `tf-slurm local` must not pass on to its tasks.
STALE_FOR_LOCAL: Tuple[str, ...] = (TASKS, PS, COMPONENT_ROLES, ADDRESS, PORT_SCOPE, JOB_TYPE, TASK_INDEX, RANK, NUM_PS,
                                    NUM_WORKERS, IS_CHIEF, SELF_ADDRESS, TF_CONFIG_FILE, SUPERVISED, LAUNCH_REPORT,
                                    SESSION_FILTERS, FEWER_WORKERS)


def text(env: Mapping[str, str], name: str) -> Optional[str]:
    """The setting's value, or None when unset or empty (empty means "not given" everywhere)."""
    value = env.get(name)
    return value if value else None


def flag(env: Mapping[str, str], name: str) -> bool:
    """A true/false setting: TRUE_WORDS or FALSE_WORDS (any case); unset or empty: its default."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return REGISTRY[name].default in TRUE_WORDS
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    raise UsageError(bad_value(name, env.get(name), "1 or 0 (true/false, yes/no, on/off)"))


def integer(env: Mapping[str, str], name: str, minimum: Optional[int] = None) -> Optional[int]:
    """An integer setting (plan.numbers.parse_int's grammar), or None when unset or empty."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return parse_int(raw, name, minimum)


def seconds(env: Mapping[str, str], name: str, lo: float = 0.0, hi: Optional[float] = None,
            lo_open: bool = False, *, given: Optional[float] = None,
            given_name: Optional[str] = None) -> Optional[float]:
    """A number of seconds in [lo, hi) (or (lo, hi) with lo_open), or None when unset or empty.

    given: an option's value (None: not given), which wins over the setting; a bad one is named
    `given_name` in the message.  Why here: every seconds setting, with or without an option in
    front of it, is read and checked by this one function (plan.numbers.parse_seconds).
    """
    known = REGISTRY.get(name)
    unit = "a factor" if known is not None and known.kind == "factor" else "seconds"  # TF_SLURM_HANG_FACTOR
    if given is not None:
        return parse_seconds(given, given_name or name, lo, hi, lo_open, unit)
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return parse_seconds(raw, name, lo, hi, lo_open, unit)


def default_seconds(name: str) -> float:
    """The registry's default of a 'seconds' setting."""
    default = REGISTRY[name].default
    assert default is not None, name
    return float(default)


def default_int(name: str) -> int:
    """The registry's default of an 'int' setting."""
    default = REGISTRY[name].default
    assert default is not None, name
    return int(default)


# -- settings that more than one layer reads -----------------------------------------------------
def environ() -> Mapping[str, str]:
    """This process's environment (the faces pass it on; only this layer touches os.environ)."""
    return os.environ


def device_filters_on(env: Optional[Mapping[str, str]] = None) -> bool:
    """TF_SLURM_DEVICE_FILTERS (default on): device filters for TF1 tasks' sessions."""
    return flag(os.environ if env is None else env, DEVICE_FILTERS)


def recovery_wait(env: Optional[Mapping[str, str]] = None) -> float:
    """TF_SLURM_RECOVERY_WAIT as seconds in (0, 3600), else its default (1).

    A TF1 non-chief that finds the chief's model not yet initialised sleeps this long before it
    looks again; TensorFlow's own 30 s made an original-style 3-task job take 36 s, not 8.
    """
    value = seconds(os.environ if env is None else env, RECOVERY_WAIT, 0.0, 3600.0, lo_open=True)
    return default_seconds(RECOVERY_WAIT) if value is None else value


def markdown_table(include_internal: bool = False) -> str:
    """The settings table of docs/REFERENCE.md, made from REGISTRY (a test keeps the page equal to it)."""
    rows = ["| setting | kind | default | meaning |", "|---|---|---|---|"]
    for s in REGISTRY.values():
        if s.internal and not include_internal:
            continue
        default = f"`{s.default}`" if s.default is not None else "unset"
        rows.append(f"| `{s.name}` | {s.kind} | {default} | {s.meaning} |")
    return "\n".join(rows)


def set_in_environment(name: str, value: str) -> None:
    """Set `name` in this process's environment: how the runtime writes TF_CONFIG and
    CUDA_VISIBLE_DEVICES for TensorFlow, which reads them from there (only this layer touches os.environ)."""
    os.environ[name] = value


def count_from(env: Mapping[str, str], name: str, default: int) -> int:
    """A non-negative integer variable of `env` (absent or empty: `default`), or one UsageError line.

    The grammar is `integer`'s (plan.numbers.parse_int); batch-step's counts (its settings, Slurm's
    restart count) say "a whole number", as they did when this lived in plan.requeue.
    """
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    return parse_int(raw, name, 0, noun="a whole number")


def default_text(name: str) -> str:
    """The registry's default of a 'text' setting (the CLI's option defaults)."""
    default = REGISTRY[name].default
    assert default is not None, name
    return default
