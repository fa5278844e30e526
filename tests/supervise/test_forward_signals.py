"""supervise.child_process.ForwardSignals: once the command is gone, a late signal cannot kill the
supervisor before it has written the step's end and exited with the step's status; and a signal that
came while there was no command yet (before it, or while it started) reaches it once it runs.

Why: under `srun --kill-on-bad-exit` the step cancel's SIGTERM reached the hub after its loop had
ended; the handler restored then was SIG_DFL, the hub died by signal 15 with its status file still
at "ending" (CI run 21, tests/slurm/test_slurm_e2e.py)."""

import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LATE = """
import os, signal, sys
from tf_for_slurm.supervise.child_process import ForwardSignals, Wake
wake = Wake()
with ForwardSignals(wake) as sigs:
    pass
wake.close()
os.kill(os.getpid(), signal.{name})
sys.stdout.write("finished its end after %s\\n" % sigs.received)
sys.exit(3)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"])
def test_a_signal_after_the_command_is_gone_does_not_kill_the_supervisor(name):
    res = subprocess.run([sys.executable, "-c", LATE.format(name=name)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 3, (res.returncode, res.stderr[-2000:])  # its own status, not -signal
    stop = int(getattr(signal, name)) not in (signal.SIGUSR1, signal.SIGUSR2)
    recorded = f"[{int(getattr(signal, name))}]" if stop else "[]"  # a late warning is ignored
    assert f"finished its end after {recorded}" in res.stdout, res.stdout


# the command: says it got SIGINT and ends 0; else it runs until killed
TRAPPING = ["sh", "-c", "trap 'echo got-INT; exit 0' INT; while true; do sleep 0.05; done"]

EARLY = """
import os, signal, sys, time
from tf_for_slurm.supervise import task_command
from tf_for_slurm.supervise.child_process import ForwardSignals, Wake
argv = {argv!r}
wake = Wake()
with ForwardSignals(wake) as sigs:
    if {when!r} == "before":  # a Ctrl-C before the command started
        os.kill(os.getpid(), signal.SIGINT)
    else:  # ... while it started: after Popen, before start() returned (a shell's first lines ran already)
        real = task_command.start_command
        def starting(*args):
            child = real(*args)
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs here, at the next bytecode
            return child
        task_command.start_command = starting
    command = task_command.TaskCommand(argv, dict(os.environ), wake, sigs, 0.0, 5.0)
    assert command.start(time.monotonic())
    status = command.child.proc.wait(timeout=20)  # without the signal: TimeoutExpired
    sys.stdout.write("status %d after %s\\n" % (status, sigs.received))
wake.close()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["before", "while-starting"])
def test_a_signal_with_no_command_to_take_it_reaches_the_command_once_it_runs(when):
    """CI (stop 49) and 1 run in ~20 under load: `tf-slurm local`'s Ctrl-C reached a supervisor while its
    `sh -c` command had started but Popen had not returned: recorded, never passed on; the command ran on
    until the launcher's SIGKILL."""
    res = subprocess.run([sys.executable, "-c", EARLY.format(argv=TRAPPING, when=when)], capture_output=True,
                         text=True, timeout=50, env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 0, res.stderr[-2000:]
    # it got the SIGINT: in its trap, or (sent before the shell had set the trap) by its default action
    assert res.stdout.splitlines() in (["got-INT", f"status 0 after [{int(signal.SIGINT)}]"],
                                       [f"status {-signal.SIGINT} after [{int(signal.SIGINT)}]"]), res.stdout
