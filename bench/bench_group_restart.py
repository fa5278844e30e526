"""What a worker's failure costs a MultiWorkerMirroredStrategy job, with and without group restarts
(issue 14: "MWMS: from a SIGKILL to the first training step after the restore; the same job's
alternative cost"; target: the group back to training within 20 s).

    .venv/bin/python bench/bench_group_restart.py [--epochs 12] [--pace 0.1] [--kill-at 4]

Three runs of the unmodified tests/unmodified/tf2_mwms_backup.py (Keras `fit` with the tutorial's
BackupAndRestore; 10 steps an epoch, paced `--pace` s a step) under `tf-slurm local -n 2 --tasks
worker,worker` on this machine:
  clean      no fault: the job's own time;
  restart    worker 1's command SIGKILLed as epoch `--kill-at` begins, TF_SLURM_MAX_RESTARTS=2: seconds
             from the kill to the hub's decision, to every command running again, to the first epoch
             `fit` begins after restoring its backup (which epoch: the backup's), the job's time, status;
  no-restart the same kill with restarts off (TF_SLURM_MAX_RESTARTS=0): how soon the step fails; the job then has
             to be resubmitted (queue wait not counted) and resumes from the same backup.
Prints one line per run; compare ratios within one run of this script (the machine is noisy).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

from _procs import pids_of  # bench/ is sys.path[0] when a bench runs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "unmodified" / "tf2_mwms_backup.py"
VICTIM_RANK = 1  # worker 1


def run(args: argparse.Namespace, kill: bool, env_extra: Dict[str, str]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench_group_restart."))
    log = work / "log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_SLURM_LOG_LEVEL": "INFO",
           **env_extra}
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "2", "--tasks", "worker,worker", "--",
            sys.executable, str(SCRIPT), "--backup-dir", str(work / "backup"), "--epochs", str(args.epochs),
            "--steps-per-epoch", "10", "--pace", str(args.pace)]
    start = time.time()
    killed_at: Optional[float] = None
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            if kill:
                needle = f"worker 1 epoch {args.kill_at} at"
                while needle not in log.read_text(errors="replace"):
                    if proc.poll() is not None:
                        raise SystemExit(f"the job ended before {needle!r}: {log}")
                    time.sleep(0.05)
                for pid in pids_of(SCRIPT.name, VICTIM_RANK):
                    os.kill(pid, signal.SIGKILL)
                killed_at = time.time()
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    took = time.time() - start
    text = log.read_text(errors="replace")
    result = {"status": proc.returncode, "seconds": took, "log": str(log)}
    if killed_at is not None:
        result["failed_after"] = took - (killed_at - start)
        after = text[text.find("restarting every task"):] if "restarting every task" in text else ""
        resumed = re.findall(r"worker 0 epoch (\d+) at ([0-9.]+)", after)
        if resumed:
            result["resumed_epoch"] = int(resumed[0][0])
            result["back_training"] = float(resumed[0][1]) - killed_at
        again = re.findall(r"is running again, ([0-9.]+) s after its failure", after)
        if again:
            result["running_again"] = max(float(s) for s in again)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=12, help="epochs of 10 steps (default 12)")
    ap.add_argument("--pace", type=float, default=0.1, help="seconds a step at least (default 0.1)")
    ap.add_argument("--kill-at", type=int, default=4, help="kill worker 1 as this epoch begins (default 4)")
    args = ap.parse_args()
    clean = run(args, False, {})
    print(f"clean      : status {clean['status']}, {clean['seconds']:.1f} s")
    restart = run(args, True, {"TF_SLURM_MAX_RESTARTS": "2"})
    print(f"restart    : status {restart['status']}, {restart['seconds']:.1f} s; every command running again "
          f"{restart.get('running_again', float('nan')):.1f} s after its failure; fit resumed at epoch "
          f"{restart.get('resumed_epoch', '?')} (killed at {args.kill_at}) "
          f"{restart.get('back_training', float('nan')):.1f} s after the SIGKILL (target <= 20 s)")
    lost = run(args, True, {"TF_SLURM_MAX_RESTARTS": "0"})
    print(f"no-restart : status {lost['status']}, the step failed {lost.get('failed_after', float('nan')):.1f} s "
          f"after the SIGKILL; the job must be resubmitted (queue wait not counted) and resumes from the backup")
    print(f"restart costs {restart['seconds'] - clean['seconds']:+.1f} s over the clean run")


if __name__ == "__main__":
    main()
