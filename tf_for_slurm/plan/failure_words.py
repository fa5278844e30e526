"""A task's failure in plain words: its exit status, the signal that stops a step, and the line of
its log that says why it failed.  Pure: numbers and text in, one short line out.

Why here: `tf-slurm status` and the step's end line (plan.step_status) say the first failure once,
with the task's own explanation; the hub's decisions (plan.step_watch) say how a task ended.  A
newcomer reads these lines first, so they name what happened, not the rule that applied.

Where the explanation comes from (`why_from_log`, given the end of the failing task's log):
- a fix line, ours: `tf-slurm: <what is wrong>; fix: <what to do>`, written by tf_for_slurm to
  the task's stderr (the exec shim's plan checks, exec's warnings; a logged one has its level after
  `tf-slurm: `).  The last one wins;
- else the last Python traceback's exception line ("ValueError: ..."), or a line that says a
  command could not run (python's "can't open file", a shell's "command not found", exec's "cannot
  run"), or Slurm's out-of-memory line; when such an error comes after a fix line, both are said.
"""

from __future__ import annotations

import re
import signal
from typing import List, Optional, Tuple

from tf_for_slurm.plan.requeue import CHECKPOINTED_STATUSES

#: how a fix line looks (tf_for_slurm/_shim/tf_slurm_plan_hints.py and exec's warnings write it)
FIX_LINE = re.compile(r"^tf-slurm(?: [a-z-]+)?: (?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL): )?"
                      r"(?P<line>\S.*?; fix: \S.*?)\s*$")
ERROR_CHARS = 200  # an error line is cut to this many characters
FIX_CHARS = 400  # a fix line is ours: longer, but still bounded
TRACEBACK = "Traceback (most recent call last):"
# lines that say why a command did not run or was killed, when no traceback says it
ERROR_LINES = (
    re.compile(r"^\S*python[\w.]*: can't open file "),  # python SCRIPT, a SCRIPT that does not exist
    re.compile(r"^tf-slurm exec: cannot run "),  # a command exec could not start
    re.compile(r"^\S*sh: .*not found\s*$"),  # a shell's "command not found"
    re.compile(r"^slurmstepd: error: .*\boom[-_]kill", re.I),  # Slurm's out-of-memory line
    OWN_ERROR := re.compile(r"^tf-slurm(?: [a-z-]+)?: error: \S"),  # a tf-slurm command's one-line error
)
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
#: what reaches the chief's supervisor when a step is stopped, in words (supervise.child_process.STOPPING)
STOP_CAUSES = {
    "SIGTERM": "Slurm is ending the step: scancel, the time limit, a preemption, or srun after a task failed",
    "SIGINT": "Ctrl-C, or srun passing one on",
    "SIGHUP": "the terminal or session that started the step went away",
    "SIGUSR1": "the job's time limit is near: Slurm's warning, passed on by batch-step so the tasks save and stop",
    "SIGUSR2": "a stop asked for now (scancel --batch --signal=USR2), passed on by batch-step",
}


def signal_label(signo: int) -> str:
    """'SIGTERM' for 15; 'signal 70' for a number without a name."""
    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


def exit_words(status: int) -> str:
    """'exit 1'; 'exit 137, killed by SIGKILL' (a shell's 128 + signal); 'exit 127, command not run'."""
    if 128 < status < 128 + 65:
        verb = "ended" if status - 128 in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) else "killed"
        return f"exit {status}, {verb} by {signal_label(status - 128)}"
    if status == 127:
        return "exit 127, command not run"
    return f"exit {status}"


def stop_words(signo: Optional[int]) -> str:
    """Why the step is being stopped, from the signal that reached the chief's supervisor."""
    if signo is None:
        return "the chief's supervisor was told to stop"
    label = signal_label(signo)
    cause = STOP_CAUSES.get(label)
    return f"{label} reached the chief's supervisor" + (f" ({cause})" if cause else "")


def _clean(line: str, limit: int) -> str:
    """One line as a terminal can show it: control characters replaced, at most `limit` characters."""
    line = _UNPRINTABLE.sub("?", line.strip())
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


def _exception_line(lines: List[str], start: int) -> Optional[Tuple[int, str]]:
    """(index, text) of the exception line of the traceback whose header is lines[start]: the first
    line after it that is not indented (the frames are); None when the text ends first."""
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line[0].isspace():
            return i, line
    return None


def _last_error(lines: List[str]) -> Optional[Tuple[int, str]]:
    """(index, text) of the last error: the last traceback's exception line, or a later error line."""
    found: Optional[Tuple[int, str]] = None
    header = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() == TRACEBACK), None)
    if header is not None:
        found = _exception_line(lines, header)
    after = found[0] if found is not None else -1
    for i in range(len(lines) - 1, after, -1):
        if any(p.search(lines[i]) for p in ERROR_LINES) and not FIX_LINE.match(lines[i]):
            return i, lines[i]
    return found


def log_explains(status: int) -> bool:
    """Whether a task that ended the step with `status` has a failure its log may explain (not a
    planned stop: a checkpointed exit says nothing wrong)."""
    return status != 0 and status not in CHECKPOINTED_STATUSES


def why_from_log(text: str) -> Optional[str]:
    """The line that says why a task failed, from the end of its log (see the module's docstring); None
    when the log says nothing recognisable."""
    lines = text.splitlines()
    fix: Optional[Tuple[int, str]] = None
    for i in range(len(lines) - 1, -1, -1):
        m = FIX_LINE.match(lines[i])
        if m:
            fix = i, _clean(m.group("line"), FIX_CHARS)
            break
    error = _last_error(lines)
    if error is None:
        return None if fix is None else fix[1]
    said = _clean(error[1], FIX_CHARS if OWN_ERROR.match(error[1]) else ERROR_CHARS)  # ours: bounded already
    if fix is None:
        return said
    return fix[1] if fix[0] > error[0] else f"{said}; it warned earlier: {fix[1]}"
