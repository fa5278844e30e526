"""Issue 14, item 5: `sbatch --time=1 --signal=B:URG@30` of the MNIST template with its defaults and
more work than one allocation holds must complete via requeue, every time.

    .venv/bin/python bench/bench_short_limit_requeue.py [--jobs 3] [--iterations 7000] [--parallel 1]

Submits scripts/BASH_Distributed_MNIST.sh to the local Slurm cluster (scripts/local_slurm.sh up; 3
emulated nodes) `--jobs` times, `--parallel` at a time, each with only what a user must set (PYTHON,
DATA_DIR: the real MNIST digits, MODEL_DIR: a fresh folder) plus ITERATIONS (and MIN_STEP_SECONDS
when --pace is given); WARN_MARGIN, MAX_REQUEUES, IB... keep the template's defaults.  Watches each
job with `scontrol show job` (no accounting here: sacct does not work) until it ends, then prints,
per run of each job: the global step its checkpoint reached, how its batch-step handled the warning
(when Slurm's SIGUSR1 reached the shell, when the tasks were told), the decision, and the wait before
a requeued run started (EligibleTime: Slurm holds a requeued job until cred_expire, 10 s here);
then the job's final state, exit code, requeues, checkpoint and wall time.  Exits 1 unless every job
ended COMPLETED 0:0 with its checkpoint at the target.  Jobs are cancelled on Ctrl-C or timeout.

Measured here (2 cores, 3 emulated nodes, unpaced, one job at a time): a 1-minute run trains 2800-4300
global steps (~75-85 steps/s; Slurm's warning reached the shell 2-30 s into each run, batch-step told
the tasks 15 s before the limit, the chief's checkpoint followed in ~0.5 s, the requeue 1-3 s after
the tasks were told); a requeued run started 11-15 s after its requeue (EligibleTime = requeue + ~10 s:
scripts/local_slurm.sh's cred_expire=10; then the next 5 s scheduling pass).
  --iterations 7000: 3/3 COMPLETED, 1 requeue each, 94-107 s per job;
  --iterations 12000: 3/3 COMPLETED, 3 requeues each, 200-216 s per job.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from data_paths import mnist_dir  # noqa: E402
from slurm_harness import PYTHON, TERMINAL, parse_job  # noqa: E402

TEMPLATE = ROOT / "scripts" / "BASH_Distributed_MNIST.sh"
SCRIPT = ROOT / "scripts" / "local_slurm.sh"
SBATCH = ["--time=1", "--signal=B:URG@30"]
BATCH = re.compile(r"^tf-slurm batch-step: (\d\d:\d\d:\d\d) (.*)$", re.M)


def cluster_env() -> Dict[str, str]:
    """scripts/local_slurm.sh up (a no-op when up), then its environment for sbatch/scontrol."""
    subprocess.run(["bash", str(SCRIPT), "up"], check=True, capture_output=True, text=True, timeout=900)
    out = subprocess.run(["bash", str(SCRIPT), "env"], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    env = dict(os.environ)
    for m in re.finditer(r"^export (\w+)=(.*)$", out, re.M):
        env[m.group(1)] = m.group(2).strip("'\"")
    return env


def show(env: Dict[str, str], job: str) -> Dict[str, str]:
    res = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=30)
    return parse_job(res.stdout) if res.returncode == 0 else {}


class Job:
    def __init__(self, env: Dict[str, str], base: Path, n: int, iterations: int, pace: float):
        self.dir = base / f"job{n}"
        self.dir.mkdir(parents=True)
        self.model = self.dir / "model"
        self.target = iterations
        jenv = {**env, "PYTHON": PYTHON, "DATA_DIR": mnist_dir(), "MODEL_DIR": str(self.model),
                "ITERATIONS": str(iterations)}
        if pace:
            jenv["MIN_STEP_SECONDS"] = str(pace)
        self.t0 = time.monotonic()
        res = subprocess.run(["sbatch", "--parsable", *SBATCH, str(TEMPLATE)], env=jenv, cwd=str(self.dir),
                             capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise SystemExit(f"sbatch failed: {res.stderr}")
        self.id = res.stdout.strip().split(";")[0]
        self.runs: Dict[int, Dict[str, str]] = {}  # Restarts -> the record first seen RUNNING in that run
        self.info: Dict[str, str] = {}
        self.wall: Optional[float] = None

    def poll(self, env: Dict[str, str]) -> bool:
        """True once the job ended."""
        info = show(env, self.id)
        if not info:
            return False
        self.info = info
        if info.get("JobState") == "RUNNING":
            self.runs.setdefault(int(info.get("Restarts", "0")), info)
        if info.get("JobState") in TERMINAL:
            self.wall = time.monotonic() - self.t0
            return True
        return False

    @property
    def log(self) -> str:
        path = self.dir / f"tf_mnist-{self.id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def checkpoint(self) -> Optional[int]:
        try:
            m = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', (self.model / "checkpoint").read_text(), re.M)
        except OSError:
            return None
        return int(m.group(1)) if m else None

    def report(self) -> bool:
        log = self.log
        # one chunk of batch-step lines per run: a run begins where the template prints its first line
        chunks = re.split(r"^(?=job \d+: \d+ tasks on )", log, flags=re.M)[1:]
        print(f"job {self.id} (target {self.target}):")
        for i, chunk in enumerate(chunks):
            lines = BATCH.findall(chunk)
            ended = re.search(r"step ended with status (\d+).*?checkpoint at (?:global step )?(\S+)", chunk)
            warn = [f"{t} {m}" for t, m in lines if m.startswith(("SIG", "the step just started", "passed SIG"))]
            told = [t for t, m in lines if m.startswith("passed SIG")]
            decision = [m for t, m in lines if m.startswith(("requeued job", "not requeued"))]
            died = sorted(set(re.findall(r"[Ee]xited with exit code (\d+)", chunk)))
            rec = self.runs.get(i, {})
            wait = ""
            if i and rec.get("SubmitTime") and rec.get("StartTime"):
                sub = time.mktime(time.strptime(rec["SubmitTime"], "%Y-%m-%dT%H:%M:%S"))
                start = time.mktime(time.strptime(rec["StartTime"], "%Y-%m-%dT%H:%M:%S"))
                wait = f"; requeued->started {start - sub:.0f} s (EligibleTime {rec.get('EligibleTime', '?')[11:]})"
            print(f"  run {i + 1}: start {rec.get('StartTime', '?')[11:]}{wait}; step status "
                  f"{ended.group(1) if ended else '?'}, checkpoint {ended.group(2) if ended else '?'}")
            for w in warn:
                print(f"      warning: {w}")
            print(f"      {'' if told else 'tasks never told; '}{decision[0] if decision else 'no decision line'}"
                  + (f"; task statuses {died}" if died else ""))
        ckpt = self.checkpoint()
        info = self.info
        ok = (info.get("JobState") == "COMPLETED" and info.get("ExitCode") == "0:0" and ckpt is not None
              and ckpt >= self.target)
        print(f"  => {info.get('JobState')} {info.get('ExitCode')}, requeues {info.get('Restarts')}, runs "
              f"{len(chunks)}, checkpoint {ckpt}, wall {self.wall:.0f} s{'' if ok else '   <-- NOT OK'}")
        return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=1, help="jobs at once (they share the machine's cores)")
    ap.add_argument("--iterations", type=int, default=7000, help="ITERATIONS (~3 runs here)")
    ap.add_argument("--pace", type=float, default=0.0, help="MIN_STEP_SECONDS (default: unpaced, the template's)")
    ap.add_argument("--timeout", type=float, default=900, help="per job, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the job folders (logs, checkpoints)")
    args = ap.parse_args()
    env = cluster_env()
    base = Path(tempfile.mkdtemp(prefix="bench_short_limit_requeue."))
    pending, running, done = list(range(args.jobs)), [], []
    try:
        while pending or running:
            while pending and len(running) < args.parallel:
                running.append(Job(env, base, pending.pop(0), args.iterations, args.pace))
                print(f"submitted job {running[-1].id} (ITERATIONS={args.iterations})", flush=True)
            for job in list(running):
                if job.poll(env):
                    running.remove(job)
                    done.append(job)
                elif time.monotonic() - job.t0 > args.timeout:
                    raise TimeoutError(f"job {job.id} still {job.info.get('JobState')} after {args.timeout} s")
            time.sleep(0.5)
    finally:
        for job in running:
            subprocess.run(["scancel", job.id], env=env, timeout=30)
    ok = [job.report() for job in done]
    walls = [job.wall for job in done if job.wall]
    print(f"{sum(ok)}/{len(ok)} COMPLETED at the target; wall {min(walls):.0f}-{max(walls):.0f} s; logs in {base}"
          if walls else "no job ended")
    if not args.keep and all(ok):
        subprocess.run(["rm", "-rf", str(base)], check=False)
    return 0 if ok and all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
