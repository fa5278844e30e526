"""What `tf-slurm submit` checks before it submits: each mistake one UsageError, one line with the fix.

Why before: a misspelt script fails a second into the step behind lines a newcomer cannot read; a job
asking for more nodes than its partition has pends forever; a python without TensorFlow or tf_keras
fails in every task.  Each is told here, before anything is queued:
- the command: its program on PATH (or a file), the script a Python command runs (did you mean ...?);
- the partition (`scontrol show partition|node`): a job that can never start there;
- the job's python (`--python`) and the script's: tf_for_slurm, TensorFlow, tf_keras where a Keras
  `fit` under a multi-task strategy needs it (plan.keras's rule, the one exec warns with).
Bounded and quiet when it cannot tell: every command under a timeout; scontrol missing, failing or
slow, or a python that cannot be asked, skips that check (debug log).  The rules are plan's
(plan/submit_checks.py, plan/keras.py); here: the file system, scontrol and the pythons.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import slurm
from tf_for_slurm.plan import keras as keras_rule
from tf_for_slurm.plan.submit_checks import (
    Ask,
    closest_name,
    is_python,
    never_starts,
    node_records,
    option_value,
    partition_records,
    plan_misfit,
    python_target,
)

log = logging.getLogger(__name__)

SCONTROL_TIMEOUT = 5.0  # seconds: a slurmctld that does not answer skips the check, never hangs submit
PROBE_TIMEOUT = 10.0  # seconds for `python -c PROBE`
SCRIPT_BYTES = 1 << 20  # how much of the script is read
SKIP = "--no-checks skips the checks"
_TENSORFLOW = re.compile(r"\btensorflow\b")
_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                     "tf-nightly", "tf-nightly-cpu")
# run by the job's python: what it has, found without importing it (find_spec), as one JSON line
PROBE = f"""import json
from importlib.util import find_spec
def version(*names):
    try:
        from importlib.metadata import version as v
    except ImportError:
        return None
    for name in names:
        try:
            return v(name)
        except Exception:
            pass
    return None
have = {{m: find_spec(m) is not None for m in ("tf_for_slurm", "tensorflow", "tf_keras", "keras")}}
print(json.dumps({{"have": have, "tensorflow": version(*{_TF_DISTRIBUTIONS!r}) if have["tensorflow"] else None,
                  "keras": version("keras") if have["keras"] else None}}))
"""


class Program(NamedTuple):
    """The command as the checks read it: its program (a path), and the Python script's text."""

    path: str  # the program, resolved on PATH or against the job's directory
    python: bool  # whether the program is a Python interpreter
    script: Optional[str]  # what the python runs, as shown to the user ('train.py', '-c code', None)
    text: str  # the script's text (at most SCRIPT_BYTES), or -c's code; '' when not known


def job_directory(sbatch_words: Sequence[str], cwd: str) -> str:
    """Where the batch script and the step run: sbatch's -D/--chdir when given (relative to `cwd`),
    else the directory submit runs in (sbatch's default; the script does not change it)."""
    chdir = option_value(sbatch_words, "--chdir", "-D")
    return os.path.normpath(os.path.join(cwd, chdir)) if chdir else cwd


def check_command(command: Sequence[str], workdir: str, env: Mapping[str, str]) -> Program:
    """The command's program exists (on PATH, or a file), and so does the script a Python runs."""
    program = _program(command[0], workdir, env)
    if not is_python(command[0]):
        return Program(program, False, None, "")
    kind, value = python_target(command[1:])
    if kind == "code" and value is not None:
        return Program(program, True, "-c CODE", value)
    if kind != "file" or value is None:
        return Program(program, True, None, "")
    path = _existing(value, workdir)
    return Program(program, True, value, _read_head(path))


def _program(word: str, workdir: str, env: Mapping[str, str]) -> str:
    if "/" in word:
        path = _existing(word, workdir)
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise UsageError(f"command: {word!r} is not an executable file: expected `chmod +x {word}`, or "
                             f"its interpreter first (e.g. -- bash {word})")
        return path
    found = shutil.which(word, path=env.get("PATH", os.defpath))
    if found is None:
        guess = closest_name(word, _programs_on_path(env.get("PATH", os.defpath)))
        raise UsageError(f"command: {word!r} is not a program on PATH: expected a program on PATH or a "
                         "file's path" + (f"; did you mean {guess!r}?" if guess else ""))
    return found


def _programs_on_path(path: str) -> List[str]:
    names = set()
    for folder in path.split(os.pathsep):
        try:
            names.update(os.listdir(folder or "."))
        except OSError:
            continue
    return sorted(names)


def _existing(word: str, workdir: str) -> str:
    """`word` as a path from the job's directory, when it exists; else one UsageError with a guess."""
    path = os.path.join(workdir, word)
    if os.path.exists(path):
        return path
    folder, name = os.path.split(path)
    try:
        guess = closest_name(name, os.listdir(folder or "."))
    except OSError:
        guess = None
    where = "" if os.path.isabs(word) else f" in {workdir} (the job's working directory)"
    hint = f"; did you mean {os.path.join(os.path.dirname(word), guess)!r}?" if guess else ""
    raise UsageError(f"command: {word!r} does not exist{where}: expected the script's path{hint}")


def _read_head(path: str) -> str:
    """The start of the script's text ('' when it is not a readable file)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(SCRIPT_BYTES).decode("utf-8", "replace")
    except OSError as exc:  # a folder (python runs its __main__.py), no permission, ...
        log.debug("not reading %s: %s", path, exc)
        return ""


def check_partitions(asks: Sequence[Tuple[Optional[str], Ask]], env: Mapping[str, str]) -> None:
    """Each component's ask fits its partition (any of them, when -p names several); one UsageError
    naming the partition's size otherwise.  Skipped when scontrol cannot be asked."""
    parts = _scontrol(["show", "partition", "-o"])
    if parts is None:
        return
    nodes: Optional[str] = None
    for names, ask in asks:
        records = partition_records(parts, names or env.get(slurm.SBATCH_PARTITION) or None)
        if not records:
            log.debug("partition %s not in scontrol's answer: not checked", names or "(default)")
            continue
        if nodes is None:
            nodes = _scontrol(["show", "node", "-o"]) or ""
        problems = [never_starts(r, node_records(nodes, r["PartitionName"]), ask) for r in records]
        if all(problems):
            raise UsageError(f"{problems[0]} ({SKIP})")


def _scontrol(args: List[str]) -> Optional[str]:
    """scontrol's answer, None when it is missing, fails or does not answer in time."""
    try:
        res = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("scontrol %s: %s: not checked", " ".join(args), exc)
        return None
    if res.returncode != 0:
        log.debug("scontrol %s: status %s: %s", " ".join(args), res.returncode, res.stderr.strip()[:200])
        return None
    return res.stdout


def probe(python: str, workdir: str, env: Mapping[str, str]) -> Optional[Dict]:
    """What `python` has (tf_for_slurm, tensorflow, tf_keras, keras and their versions), asked in the
    job's directory with submit's environment (the job's: sbatch exports it); None when it cannot tell."""
    try:
        res = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                             cwd=workdir, env=dict(env), stdin=subprocess.DEVNULL)
        answer = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        log.debug("%s -c PROBE: %s: not checked", python, exc)
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("have"), dict):
        log.debug("%s -c PROBE: status %s, %r: not checked", python, res.returncode, res.stderr[-200:])
        return None
    return answer


def check_pythons(job_python: str, program: Program, strategy: str, multi_task: bool, workdir: str,
                  env: Mapping[str, str]) -> None:
    """The job's python (--python) has tf_for_slurm; the python that runs the script has TensorFlow when
    the script names it, and tf_keras when plan.keras says a Keras `fit` of this step needs it."""
    job_path = shutil.which(job_python, path=env.get("PATH", os.defpath)) or job_python
    seen = probe(job_path, workdir, env)
    if seen is not None and not seen["have"].get("tf_for_slurm"):
        raise UsageError(f"--python={job_python!r}: expected a python that has tf_for_slurm (every task runs "
                         f"`{job_python} -m tf_for_slurm exec`): install it there ({job_path} -m pip install "
                         f"<tf_for_slurm's source folder>), or give --python the one that has it ({SKIP})")
    if not program.python or not _needs_tensorflow(program.text):
        return
    same = os.path.abspath(program.path) == os.path.abspath(job_path)
    if not same:
        seen = probe(program.path, workdir, env)
    if seen is None:
        return
    who = f"--python={job_python!r}" if same else f"the command's python {program.path!r}"
    pip = f"{program.path} -m pip"
    if not seen["have"].get("tensorflow"):
        raise UsageError(f"{who}: expected a python that has TensorFlow ({program.script} imports it): "
                         f"{pip} install tensorflow-cpu (or tensorflow, for GPUs) ({SKIP})")
    if not keras_rule.multi_task_keras(program.text) or keras_rule.user_decides(env.get(keras_rule.LEGACY_KERAS)):
        return
    step_strategy = keras_rule.script_strategy(program.text) or strategy
    if keras_rule.lacks_tf_keras(step_strategy, multi_task, bool(seen["have"].get("tf_keras")), _keras_major(seen)):
        raise UsageError(f"{who}: {keras_rule.missing_tf_keras('', seen.get('tensorflow'), pip)} ({program.script} "
                         f"calls Keras fit under {step_strategy}; {keras_rule.LEGACY_KERAS}=0 keeps Keras 3; {SKIP})")


def _needs_tensorflow(text: str) -> bool:
    """Whether the script's text names TensorFlow (or is a multi-task Keras program, which runs on it)."""
    return bool(_TENSORFLOW.search(text)) or keras_rule.multi_task_keras(text)


def _keras_major(seen: Mapping) -> Optional[int]:
    """Keras's major version in the probed python: its own, else TensorFlow's bundled one (Keras 2
    before TensorFlow 2.16, Keras 3 since)."""
    major = keras_rule.keras_major(seen.get("keras"))
    tf_version = re.match(r"(\d+)\.(\d+)", seen.get("tensorflow") or "")
    if major is None and tf_version is not None:
        return 2 if (int(tf_version.group(1)), int(tf_version.group(2))) < (2, 16) else 3
    return major


def before_submit(command: Sequence[str], job_python: str, sbatch_words: Sequence[str],
                  asks: Sequence[Tuple[Optional[str], Ask]], *, strategy: str, multi_task: bool,
                  env: Mapping[str, str], cwd: Optional[str] = None, roles: Sequence[str] = ()) -> None:
    """Every check, cheapest first: the command and its script, the plan against the script (`roles`:
    the plan's, in rank order), the pythons, the partitions."""
    workdir = job_directory(sbatch_words, cwd or os.getcwd())
    program = check_command(command, workdir, env)
    misfit = plan_misfit(program.text, roles, program.script or command[0]) if program.python else None
    if misfit is not None:
        raise UsageError(f"{misfit} ({SKIP})")
    check_pythons(job_python, program, strategy, multi_task, workdir, env)
    check_partitions(asks, env)
