"""Issue 24: a lost node -> training again, inside the allocation (relaunch) against the requeue path,
on the same harness with the same job.

    .venv/bin/python bench/bench_node_loss.py [--runs 1] [--modes relaunch,requeue]
    .venv/bin/python bench/bench_node_loss.py --modes fewer,requeue-all     (issue 43: no spare)

The job: `SPARE_NODES=1 NUM_PS=0 sbatch -N3 -n3 scripts/tf_slurm_job.sh tests/unmodified/tf2_mwms_backup.py`
(MultiWorkerMirroredStrategy `fit` with BackupAndRestore, 2 workers, node3 spare), paced so training
lasts.  At worker 1's epoch 2, node2 is lost (tests/slurm_harness.py lose_node: its slurmd, the job's
slurmstepd and task there SIGKILLed at once).  Then:
- relaunch (the default): batch-step starts the step again at once on node1 and node3;
- requeue (MAX_RELAUNCHES=0): batch-step requeues the job; node2's slurmd is started again as soon as
  the requeue is logged (on a real cluster another node would take its place), and Slurm starts the
  requeued run when it will.
- fewer (issue 43): no spare, 3 workers, MIN_WORKERS=2: batch-step goes on at once with 2 workers on
  node1 and node3;
- requeue-all: the same job without MIN_WORKERS: requeued, and the requeued run waits for 3 nodes.
Printed per run: seconds from the loss to the first epoch that begins after it (training again), to
the last worker's `fit` end, and to the job's end (node2's slurmd is started again once the run ended:
Slurm keeps a job COMPLETING until every node of it answers), and the epochs begun again (the epoch
the loss cut short and any before it that the backup did not hold).  Needs the local cluster
(scripts/local_slurm.sh up).

Measured here (2 cores, 3 emulated nodes, 2026-11-26), two runs of the pair:
  relaunch: training again 13.5 s and 10.9 s after the loss (batch-step relaunched ~6 s after it: the
            hub's end at once, srun ended 3 s + 2 s later; then TensorFlow's start and the restore);
  requeue:  26.8 s and 24.6 s (Slurm starts a requeued job ~10 s after the requeue here, cred_expire;
            on a busy cluster it waits in the queue: hours).
And the pair with no spare (2026-11-28, one run): fewer 11.7 s (2 of 3 workers, no requeue), requeue-all
24.1 s (1 requeue, the run waiting here only for node2's slurmd); one epoch begun again in each.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_short_limit_requeue import cluster_env, show  # noqa: E402
from slurm_harness import PYTHON, TERMINAL, lose_node, restore_nodes, wait_for_log  # noqa: E402

SCRIPT = ROOT / "tests" / "unmodified" / "tf2_mwms_backup.py"
TEMPLATE = ROOT / "scripts" / "tf_slurm_job.sh"
EPOCH = re.compile(r"worker \d epoch (\d+) at ([0-9.]+)")
DONE = re.compile(r"worker \d done at ([0-9.]+)")


# each mode's template settings (the job is -N3 -n3 in all)
MODES = {
    "relaunch": {"SPARE_NODES": "1", "MAX_RELAUNCHES": "2"},
    "requeue": {"SPARE_NODES": "1", "MAX_RELAUNCHES": "0"},
    "fewer": {"SPARE_NODES": "0", "MAX_RELAUNCHES": "2", "MIN_WORKERS": "2"},
    "requeue-all": {"SPARE_NODES": "0", "MAX_RELAUNCHES": "2"},
}


def one_run(env: Dict[str, str], base: Path, mode: str, cluster_dir: str) -> Dict[str, Optional[float]]:
    folder = base / mode
    folder.mkdir()
    backup = folder / "backup"
    jenv = {**env, "PYTHON": PYTHON, "PYTHONPATH": str(ROOT), "NUM_PS": "0", "IB": "NoIB",
            "TF_CPP_MIN_LOG_LEVEL": "2", "MODEL_DIR": str(backup / "chief"), "TF_SLURM_JOBS_ROOT": str(folder),
            **MODES[mode]}
    res = subprocess.run(["sbatch", "--parsable", "-N3", "-n3", "-o", str(folder / "job.out"), str(TEMPLATE),
                          str(SCRIPT), "--backup-dir", str(backup), "--epochs", "8", "--pace", "0.1"],
                         env=jenv, cwd=str(folder), capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise SystemExit(f"sbatch failed: {res.stderr}")
    job = res.stdout.strip().split(";")[0]
    log = folder / "job.out"
    cluster = SimpleNamespace(dir=Path(cluster_dir), nodes=3)
    try:
        wait_for_log(log, r"worker 1 epoch 2 at", 300)
        lose_node(cluster, "node2", job)
        lost = time.time()
        # requeue: the requeued run needs 3 nodes; relaunch: the job is COMPLETING until node2 answers
        wait_for_log(log, r"requeued job|not requeued" if mode.startswith("requeue") else r"step ended with status",
                     300)
        restore_nodes(cluster)
        deadline = time.monotonic() + 600
        while show(env, job).get("JobState") not in TERMINAL or show(env, job).get("JobState") == "REQUEUED":
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job} did not end within 600 s")
            time.sleep(0.5)
        ended = time.time()
    finally:
        restore_nodes(cluster)
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
    info = show(env, job)
    text = log.read_text(errors="replace")
    epochs = [(int(e), float(t)) for e, t in EPOCH.findall(text)]
    again = [t for _, t in epochs if t > lost + 0.5]
    before = [e for e, t in epochs if t <= lost]
    after = [e for e, t in epochs if t > lost + 0.5]
    done = [float(t) for t in DONE.findall(text) if float(t) > lost]
    return {"job": job, "state": info.get("JobState"), "restarts": info.get("Restarts"),
            "redone": (max(before) - min(after) + 1) if before and after else None,
            "training_again_s": (min(again) - lost) if again else None,
            "done_s": (max(done) - lost) if done else None, "end_s": ended - lost}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--modes", default="relaunch,requeue",
                   help=f"two of {','.join(MODES)}: the first against the second")
    args = p.parse_args()
    modes = args.modes.split(",")
    if len(modes) != 2 or not set(modes) <= MODES.keys():
        p.error(f"--modes {args.modes!r}: expected two of {','.join(MODES)}")
    env = cluster_env()
    cluster_dir = env.get("TF_SLURM_LOCAL_DIR", "/tmp/tf_for_slurm-slurm")
    ok = True
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench_node_loss.") as tmp:
            rows = {mode: one_run(env, Path(tmp), mode, cluster_dir) for mode in modes}
        for mode, r in rows.items():
            again, done = ("-" if r[k] is None else f"{r[k]:.1f}" for k in ("training_again_s", "done_s"))
            print(f"run {n + 1} {mode:11s}: job {r['job']} {r['state']} (requeued {r['restarts']} time(s)); "
                  f"node lost -> training again {again} s, -> training done {done} s, -> job ended "
                  f"{r['end_s']:.1f} s; epochs begun again: {r['redone']}", flush=True)
        a, b = rows[modes[0]]["training_again_s"], rows[modes[1]]["training_again_s"]
        if a is None or b is None or a >= b or rows[modes[0]]["state"] != "COMPLETED":
            ok = False
        else:
            print(f"run {n + 1}: {modes[0]} is {b / a:.1f}x faster to train again than {modes[1]} "
                  f"({a:.1f} s vs {b:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
