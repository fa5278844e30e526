"""A lost node costs nothing where TensorFlow can go on (issue 24 item 1), under `tf-slurm local`:
an unmodified script's worker whose supervisor and command vanish together (its emulated node lost)
does not end the step.  ParameterServerStrategy's coordinator sends the lost worker's functions to
the others; TF1 asynchronous training goes on with the chief and the other workers.  The step ends
0 when training ends, its summary naming the lost worker and how many were left.

Each run also has a second fault at the same moment, one the supervisor restarts in place (a
worker's, or the TF1 chief's, command SIGKILLed): a loss during a recovery, and the restart tests
of these two scripts (the others: test_unmodified_scripts.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import List

import pytest
from test_unmodified_scripts import ENV, PY, ROOT, SCRIPTS, checkpoint_step, command_pids, new_run, wait_for_line

pytestmark = [pytest.mark.tf, pytest.mark.timeout(300),
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]


def supervisor_pid(command_pid: int) -> int:
    """The task's `tf-slurm exec` supervisor: its command's parent."""
    stat = Path(f"/proc/{command_pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def run_faults(roles: str, args: List[str], ready: List[str], killed: int, lost: int, log: Path) -> tuple:
    """`tf-slurm local` of the script with these roles (restarts on: TF_SLURM_MAX_RESTARTS=2); once
    every `ready` line is printed, rank `killed`'s command is SIGKILLed (its supervisor restarts it)
    and rank `lost`'s node is lost (its supervisor and command SIGKILLed at once). (status, output)."""
    argv = [PY, "-m", "tf_for_slurm", "local", "-n", str(roles.count(",") + 1), "--tasks", roles, "--",
            PY, str(SCRIPTS / args[0]), *args[1:]]
    run = new_run()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**ENV, "TF_SLURM_MAX_RESTARTS": "2", **run})
        try:
            for line in ready:
                wait_for_line(log, line, proc, timeout=150)
            victims = command_pids(args[0], killed, run)
            node = command_pids(args[0], lost, run)
            assert victims and node, (victims, node)
            for pid in [*victims, supervisor_pid(node[0]), *node]:
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, log.read_text(errors="replace")


def test_pss_fit_on_4_workers_goes_on_without_a_lost_worker_while_another_restarts(tmp_path):
    # as `fit` starts; paced (20 epochs, 0.3 s after each): training goes on for 6 s and more after the faults
    rc, out = run_faults("chief,ps,worker,worker,worker,worker",
                         ["tf2_pss_fit.py", "--epochs", "20", "--pace", "0.3"], ["coordinator training"],
                         killed=2, lost=4, log=tmp_path / "log")
    assert rc == 0, out[-4000:]
    assert "restarting worker 0 (rank 2, node1) in place" in out and "exited with status 137" in out, out[-4000:]
    assert "worker 2 (rank 4, node1) was lost (its supervisor went away" in out, out[-4000:]
    assert "coordinator done" in out, out[-4000:]
    assert re.search(r"ended with status 0 after [0-9.]+ s: training is over; finished with 3 of 4 workers "
                     r"\(worker 2 on node1 lost at \d\d:\d\d:\d\d\)", out), out[-4000:]
    assert "restarts: 1" in out, out[-4000:]


def test_tf1_async_training_reaches_its_last_step_without_a_lost_worker_while_the_chief_restarts(tmp_path):
    """The seed-style script with MonitoredTrainingSession's checkpoint_dir: the chief's command,
    killed, restarts alone and restores; worker 2's node is lost; worker 1 and the chief train on to
    the last step.  Paced: 300 steps of at least 0.02 s, the faults land mid-training on any machine."""
    model = tmp_path / "model"
    rc, out = run_faults("ps,worker,worker,worker",
                         ["tf1_ps_worker.py", "--steps", "300", "--checkpoint-dir", str(model), "--pace", "0.02"],
                         ["worker 1 training from step", "worker 0 training from step"],
                         killed=1, lost=3, log=tmp_path / "log")
    assert rc == 0, out[-4000:]
    assert "restarting worker 0 (rank 1, node1) in place in 1 s: exited with status 137" in out, out[-4000:]
    assert re.search(r"ended with status 0 after [0-9.]+ s: training is over; finished with 2 of 3 workers "
                     r"\(worker 2 on node1 lost at \d\d:\d\d:\d\d\)", out), out[-4000:]
    assert checkpoint_step(model) >= 300, out[-3000:]
