"""Issue 43 item 2: what Slurm 22.05 does with a batch job whose batch host (the allocation's first
node, where the batch script and batch-step run) is lost, under `sbatch --no-kill --requeue`.

    .venv/bin/python bench/probe_batch_host_loss.py [--requeue-at-once] [--watch 420]

The job: `sbatch --no-kill --requeue -N3 -n3`, its script one `srun --no-kill -N3 -n3 sleep` step (no
TensorFlow: only Slurm's behaviour is measured).  Once the step runs, node1 is lost
(tests/slurm_harness.py lose_node: its slurmd, the job's slurmstepd and processes there SIGKILLed at
once).  With --requeue-at-once, `scontrol requeue` is asked right after the loss, as a surviving
supervisor could.  Then every 5 s for --watch seconds: the job's state, reason, restarts, nodes and
batch host, and node1's state, each printed when it changes.  node1's slurmd is started again at the
end and the job cancelled.  Needs the local cluster (scripts/local_slurm.sh up; SlurmdTimeout=300 there).
Facts measured with it: docs/SLURM_NODE_LOSS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_short_limit_requeue import cluster_env, show  # noqa: E402
from slurm_harness import lose_node, restore_nodes  # noqa: E402

SCRIPT = """#!/bin/bash
echo "batch script on $(hostname) SLURMD_NODENAME=$SLURMD_NODENAME restart ${SLURM_RESTART_COUNT:-0} at $(date +%s)"
srun --no-kill -N3 -n3 sleep 1000
echo "srun ended $? at $(date +%s)"
"""


def node_state(env, node: str) -> str:
    out = subprocess.run(["scontrol", "show", "node", node], env=env, capture_output=True, text=True, timeout=30).stdout
    words = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return f"{words.get('State', '?')} {words.get('Reason', '')}".strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requeue-at-once", action="store_true")
    p.add_argument("--watch", type=float, default=420.0)
    p.add_argument("--probe", action="store_true",
                   help="right after the loss, `scancel --batch --signal=CONT JOB` (an RPC to the batch host)")
    p.add_argument("--requeue-when-gone", action="store_true",
                   help="`scontrol requeue JOB` once node1 is NOT_RESPONDING or DOWN, then start node1's slurmd again")
    p.add_argument("--srun-probe", action="store_true",
                   help="right after the loss, and every 10 s after: `srun --jobid JOB --overlap -N1 -n1 -w node1 "
                        "true` (does node1's slurmd still launch a step?)")
    p.add_argument("--every", type=float, default=5.0, help="seconds between two looks")
    args = p.parse_args()
    env = cluster_env()
    cluster = SimpleNamespace(dir=Path(env.get("TF_SLURM_LOCAL_DIR", "/tmp/tf_for_slurm-slurm")), nodes=3)
    with tempfile.TemporaryDirectory(prefix="probe_batch_host.") as tmp:
        script = Path(tmp) / "job.sh"
        script.write_text(SCRIPT)
        res = subprocess.run(["sbatch", "--parsable", "--no-kill", "--requeue", "-N3", "-n3", "-o",
                              f"{tmp}/job-%j.out", "--open-mode=append", str(script)],
                             env=env, cwd=tmp, capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise SystemExit(f"sbatch failed: {res.stderr}")
        job = res.stdout.strip().split(";")[0]
        try:
            deadline = time.monotonic() + 120
            while "srun" not in subprocess.run(["squeue", "-s", "-j", job, "-h"], env=env, capture_output=True,
                                               text=True, timeout=30).stdout and time.monotonic() < deadline:
                if f"{job}.0" in subprocess.run(["squeue", "-s", "-j", job, "-h", "-o", "%i"], env=env,
                                                capture_output=True, text=True, timeout=30).stdout.split():
                    break
                time.sleep(0.5)
            info = show(env, job)
            print(f"job {job}: {info.get('JobState')} on {info.get('NodeList')}, batch host {info.get('BatchHost')}")
            lost = time.time()
            lose_node(cluster, "node1", job)
            print("t=0: node1 lost (its slurmd, the job's slurmstepd and processes killed)", flush=True)
            if args.requeue_at_once:
                r = subprocess.run(["scontrol", "requeue", job], env=env, capture_output=True, text=True, timeout=60)
                print(f"t={time.time() - lost:.1f}: scontrol requeue: exit {r.returncode} {r.stderr.strip()}")
            if args.probe:
                r = subprocess.run(["scancel", "--batch", "--signal=CONT", job], env=env, capture_output=True,
                                   text=True, timeout=60)
                print(f"t={time.time() - lost:.1f}: scancel --batch --signal=CONT: exit {r.returncode} "
                      f"{r.stderr.strip()}", flush=True)
            requeued = False
            last = None
            probed = -1e9
            while time.time() - lost < args.watch:
                i = show(env, job)
                now = (i.get("JobState"), i.get("Reason"), i.get("Restarts"), i.get("NodeList"), i.get("BatchHost"),
                       node_state(env, "node1"))
                if now != last:
                    print(f"t={time.time() - lost:.0f}: job {now[0]} reason {now[1]} restarts {now[2]} nodes {now[3]} "
                          f"batch host {now[4]}; node1 {now[5]}", flush=True)
                    last = now
                if args.srun_probe and time.time() - probed >= 10 and not requeued:
                    probed = time.time()
                    try:
                        r = subprocess.run(["srun", "--jobid", job, "--overlap", "-N1", "-n1", "-w", "node1", "true"],
                                           env=env, capture_output=True, text=True, timeout=60)
                        said = f"exit {r.returncode} {' | '.join(r.stderr.strip().splitlines()[-2:])}"
                    except subprocess.TimeoutExpired:
                        said = "no answer within 60 s"
                    print(f"t={time.time() - lost:.1f}: srun probe of node1 ({time.time() - probed:.1f} s): {said}",
                          flush=True)
                gone = "NOT_RESPONDING" in now[5] or now[5].startswith("DOWN")
                if args.requeue_when_gone and gone and not requeued:
                    requeued = True
                    r = subprocess.run(["scontrol", "requeue", job], env=env, capture_output=True, text=True,
                                       timeout=60)
                    print(f"t={time.time() - lost:.1f}: scontrol requeue: exit {r.returncode} {r.stderr.strip()}")
                    restore_nodes(cluster)
                    print(f"t={time.time() - lost:.1f}: node1's slurmd started again", flush=True)
                if requeued and now[0] == "RUNNING" and now[2] not in (None, "0"):
                    print(f"t={time.time() - lost:.1f}: the requeued run is running", flush=True)
                    break
                time.sleep(args.every)
        finally:
            restore_nodes(cluster)
            subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
            subprocess.run(["scontrol", "update", "nodename=node1", "state=resume"], env=env, capture_output=True,
                           timeout=30)
        for out in sorted(Path(tmp).glob("job-*.out")):
            print(f"--- {out.name}\n{out.read_text(errors='replace')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
