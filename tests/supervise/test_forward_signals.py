"""supervise.child_process.ForwardSignals: once the command is gone, a late signal cannot kill the
supervisor before it has written the step's end and exited with the step's status.

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
