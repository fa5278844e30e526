"""What a worker's failure costs a ParameterServerStrategy job, with and without restarts in place
(issue 14: "seconds from a worker's SIGKILL to its command running again"; "the same job's
alternative cost").

    .venv/bin/python bench/bench_restart.py [--epochs 200] [--backoff 1]

Three runs of the unmodified tests/unmodified/tf2_pss_fit.py under `tf-slurm local -n 4 --tasks
chief,ps,worker,worker` on this machine:
  clean     no fault: the job's own time;
  restart   worker 1's command SIGKILLed once the coordinator trains, TF_SLURM_MAX_RESTARTS=2:
            the seconds until its command runs again (the supervisor's own figure), the job's time
            and status;
  no-restart the same kill with restarts off (TF_SLURM_MAX_RESTARTS=0): how soon the step fails; the job then
            has to be resubmitted and start over (queue wait not counted).
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
SCRIPT = ROOT / "tests" / "unmodified" / "tf2_pss_fit.py"
ROLES = "chief,ps,worker,worker"
VICTIM_RANK = 3  # worker 1


def run(epochs: int, kill: bool, env_extra: Dict[str, str]) -> dict:
    log = Path(tempfile.mkstemp(prefix="bench_restart.", suffix=".log")[1])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", **env_extra}
    argv = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "4", "--tasks", ROLES, "--",
            sys.executable, str(SCRIPT), "--epochs", str(epochs)]
    start = time.monotonic()
    killed_at: Optional[float] = None
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            if kill:
                while "coordinator training" not in log.read_text(errors="replace"):
                    if proc.poll() is not None or time.monotonic() - start > 300:
                        raise SystemExit(f"the job ended or hung before training: {log}")
                    time.sleep(0.05)
                for pid in pids_of(SCRIPT.name, VICTIM_RANK):
                    os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    end = time.monotonic()
    text = log.read_text(errors="replace")
    again = re.search(r"command started again \(restart 1 of this task\), ([0-9.]+) s after it failed", text)
    log.unlink()
    return {"status": proc.returncode, "seconds": end - start,
            "after_kill": None if killed_at is None else end - killed_at,
            "running_again": float(again.group(1)) if again else None,
            "trained": "coordinator done" in text}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=200, help="epochs of 20 steps (default 200)")
    ap.add_argument("--backoff", default="1", help="TF_SLURM_RESTART_BACKOFF for the restart run (default 1 s)")
    args = ap.parse_args()
    clean = run(args.epochs, False, {})
    print(f"clean       status {clean['status']}, {clean['seconds']:.1f} s, trained to the end: {clean['trained']}")
    restarted = run(args.epochs, True, {"TF_SLURM_MAX_RESTARTS": "2", "TF_SLURM_RESTART_BACKOFF": args.backoff})
    print(f"restart     status {restarted['status']}, {restarted['seconds']:.1f} s "
          f"({restarted['seconds'] / clean['seconds']:.2f}x clean), worker 1 running again "
          f"{restarted['running_again']} s after its SIGKILL (backoff {args.backoff} s), "
          f"trained to the end: {restarted['trained']}")
    failed = run(args.epochs, True, {"TF_SLURM_MAX_RESTARTS": "0"})
    print(f"no-restart  status {failed['status']}, the step ended {failed['after_kill']:.1f} s after the SIGKILL "
          f"(after {failed['seconds']:.1f} s); the alternative: resubmit and run again, at least "
          f"{clean['seconds']:.1f} s more plus the queue (without a checkpoint, the whole job)")


if __name__ == "__main__":
    main()
