"""The time-limit warning never kills a batch shell by its timing (issue 35 item 1).

Slurm sent the warning 44 ms after launching a requeued run, before the shell's first line (its
trap) ran, and SIGUSR1's default action killed the shell: the job ended FAILED.  The design: the
warning is SIGURG (`--signal=B:URG@N`), whose default action is to do nothing, so a shell that has not
trapped it yet survives it, and batch-step's backstop stops the step at the same moment anyway.

Here the moment is made exact, not waited for: bash reads its script from a pipe this test holds, so
it has run no line when the signal comes; the script is written only afterwards.  SIGUSR1 at that
moment kills it (the old design's failure, kept as the control).  Under real Slurm, the same warning
sent at every moment of a run: tests/slurm/test_rough_edges_slurm.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_for_slurm.host.batch_script import warn_trap

pytestmark = pytest.mark.templates

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = ["tf_slurm_job.sh", "BASH_Distributed_MNIST.sh", "tf_slurm_hetjob.sh"]


def _signal_before_the_first_line(script: str, signo: int, tmp: Path) -> subprocess.CompletedProcess:
    """bash started on a script it cannot read yet, `signo` sent, then the script given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    proc = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**env, "TMPDIR": str(tmp)}, cwd=str(tmp), text=True)
    # Popen returns once the child exec'd bash: bash is running and has read nothing of the script
    os.kill(proc.pid, signo)
    try:
        out, err = proc.communicate(script, timeout=60)
    except BrokenPipeError:  # killed before it read: nothing to give
        out, err = "", ""
        proc.wait(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_warning_before_the_shells_first_line_is_survived(template, tmp_path):
    text = (REPO / "scripts" / template).read_text()
    assert "#SBATCH --signal=B:URG@" in text  # the warning the template asks Slurm for
    res = _signal_before_the_first_line(text, signal.SIGURG, tmp_path)
    # the shell lived: it ran the template up to its first check (no SLURM_JOB_ID here), which ends it with 2
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "SLURM_JOB_ID is not set" in res.stderr


@pytest.mark.timeout(120)
def test_the_old_warning_at_that_moment_killed_the_shell(tmp_path):
    """The control: SIGUSR1 (the old --signal=B:USR1@N) at the same moment ends the shell by the signal."""
    text = (REPO / "scripts" / "tf_slurm_job.sh").read_text()
    res = _signal_before_the_first_line(text, signal.SIGUSR1, tmp_path)
    assert res.returncode == -signal.SIGUSR1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signo,word", [(signal.SIGURG, "USR1"), (signal.SIGUSR1, "USR1"),
                                        (signal.SIGUSR2, "USR2"), (signal.SIGTERM, "TERM")])
def test_once_trapped_the_warning_is_written_down_for_batch_step(signo, word, tmp_path):
    """After the trap, SIGURG is the warning batch-step knows as USR1 (its warning file's word)."""
    script = warn_trap("job.sh") + f'kill -{signal.Signals(signo).name[3:]} $$\nkill -URG $$\ncat "$warn_file"\n'
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [word, "USR1"], lines
    assert not list(tmp_path.iterdir())  # the private folder is removed with the shell


FAKE_SRUN = "#!/bin/bash\nsleep 0.2\nexit 0\n"


def _warned_throughout(template: str, tmp: Path) -> int:
    """The template run with a stand-in srun that trains 0.2 s, the warning sent to its shell every
    20 ms from start to end (as often as `scancel --batch` can be run): its exit status."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", "#!/bin/bash\nexit 1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp / "train.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    env.update({"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": sys.executable, "TF_SLURM_REPO": str(REPO),
                "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_CPUS_PER_TASK": "1",
                "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_MEM_PER_CPU": "100",
                "SLURM_SUBMIT_DIR": str(tmp), "MODEL_DIR": str(tmp / "model"), "DATA_DIR": str(tmp),
                "TMPDIR": str(tmp), "NUM_PS": "0", "TF_SLURM_JOBS_ROOT": str(tmp / "jobs")})
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / template), "train.py"], env=env, cwd=str(tmp),
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "err.txt", "w"))
    while proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGURG)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    return proc.wait(timeout=60)


@pytest.mark.timeout(300)
def test_a_warning_as_the_step_ends_never_changes_the_jobs_status(tmp_path):
    """The shell's wait for batch-step, interrupted by a trapped warning just as the step ended, took the
    interruption's 151 for the job's status (CI: a COMPLETED job recorded FAILED); a warning written
    while the shell exited (its folder gone) made it 1.  Warned every
    20 ms through 10 whole runs, the template exits with batch-step's own 0 every time."""
    statuses = [_warned_throughout("tf_slurm_job.sh", tmp_path) for _ in range(10)]
    assert statuses == [0] * 10, (statuses, (tmp_path / "err.txt").read_text()[-3000:])
