"""Issue 35 item 4: chaos on real local Slurm.  Time-limited jobs that need 3+ runs each must still
end COMPLETED at their target while the controller, a node's slurmd and the warnings misbehave.

    .venv/bin/python bench/bench_chaos.py --quick [--seed 1]        (2 jobs, a few faults, ~12 min)
    .venv/bin/python bench/bench_chaos.py [--jobs-per-kind 2] [--seed 1] [--baseline mnist=S,keras=S]

The jobs (`--time=1`, 1-minute allocations; pacing makes every target need 3+ runs on any machine):
- mnist: `sbatch --time=1 --signal=B:URG@30 scripts/BASH_Distributed_MNIST.sh` (1 ps + 2 async
  workers, MIN_STEP_SECONDS=0.24, ITERATIONS=800: at most 2 * (floor(65 / 0.24) + 1) = 542 steps
  an allocation; the chief checkpoints every 500 global steps and when told to stop);
- keras: `tf-slurm submit -N 2 --ps 0 -t 1 --warn-margin 15 --checkpoint-dir M --target 700 --
  python bench/_chaos_keras.py M 700 --pace 0.1` (MWMS Keras `fit` with StopAndResume: at most
  floor(65 / 0.1) + 1 = 651 steps an allocation; it saves when told to stop and at the target).
First a fault-free baseline of each kind (together; skipped with --baseline), then the chaos jobs
(together) while an injector with a seeded generator (--seed) fires its faults, one at a time, each
armed at a random moment:
- ctld-random: slurmctld stopped (`scripts/local_slurm.sh controller stop`, state kept) for 5-20 s;
- ctld-at-warning: the same, the moment a job's log says batch-step told the step's tasks to stop;
- ctld-at-requeue: the same, the moment a job's log says "requeued job";
- slurmd-restart: `scripts/local_slurm.sh restart-slurmd node2`;
- urg-at-start: `scancel --batch --signal=URG JOB` as soon as one of a job's runs is RUNNING.
Printed: each fault (when, whom); per job its runs (the step each resumed from, the furthest step
each reached, from the logs), the state, requeues, wall time; then the figures beside the target:
jobs COMPLETED at their target / all, FAILED, requeues, steps redone per fault (furthest step of a
run minus the step the next run resumed from), time over the fault-free run of the same kind.
Exits 1 unless the target is met.  The cluster: the one SLURM_CONF / TF_SLURM_LOCAL_DIR name (both
needed: the injector runs scripts/local_slurm.sh there), else its own, started under
/tmp/tf_for_slurm-chaos with slurmctld on port 16917 and taken down at the end (--keep-cluster).
A hard overall timeout (--timeout) cancels every job and restarts the controller if it is down.

Measured here (2 cores, 3 emulated nodes, --quick --seed 1), before and after the fix it found:
- 336 s: baselines mnist 137 s, keras 155 s (3 runs each); chaos: keras COMPLETED (3 runs, 0 steps
  redone, +27 s); mnist FAILED 75:0 in run 3: its StartTime fell 2 s before an 11.5 s controller stop,
  the batch shell began 12 s into the allocation, TensorFlow's start-up took the rest up to the stop
  15 s before the limit, and batch-step refused the requeue ("this run saved nothing past global step
  731") with the checkpoint short of 800.
- 364 s, with plan.requeue's LATE_START (a run Slurm started late is requeued even without progress):
  5/5 faults fired; both jobs COMPLETED at their target (mnist 4 runs: run 3 resumed from 731 and
  reached 731, requeued all the same; keras 3 runs), 0 FAILED, 0 steps redone at every requeue, time
  over the fault-free run: mnist +68 s (1.50x), keras +46 s (1.29x).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from data_paths import mnist_dir  # noqa: E402
from slurm_harness import PYTHON, parse_job  # noqa: E402

LOCAL = ROOT / "scripts" / "local_slurm.sh"
TEMPLATE = ROOT / "scripts" / "BASH_Distributed_MNIST.sh"
KERAS = ROOT / "bench" / "_chaos_keras.py"
DEFAULT_DIR, DEFAULT_PORT = "/tmp/tf_for_slurm-chaos", "16917"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
MNIST_PACE, MNIST_TARGET, MNIST_CKPT_EVERY = 0.24, 800, 500
KERAS_PACE, KERAS_TARGET = 0.1, 700
WARNED = re.compile(r"telling the step's tasks to stop|passed SIGUSR1 on to the step")
REQUEUED = re.compile(r"requeued job \d+")


class BenchTimeoutError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Cluster:
    def __init__(self, keep: bool):
        self.started = False
        if os.environ.get("SLURM_CONF") and os.environ.get("TF_SLURM_LOCAL_DIR"):
            self.env = dict(os.environ)
        else:
            self.env = {**os.environ, "TF_SLURM_LOCAL_DIR": os.environ.get("TF_SLURM_LOCAL_DIR", DEFAULT_DIR),
                        "TF_SLURM_LOCAL_PORT": os.environ.get("TF_SLURM_LOCAL_PORT", DEFAULT_PORT)}
            self.local("up", timeout=900)
            self.started = not keep
            out = self.local("env").stdout
            for m in re.finditer(r"^export (\w+)=(.*)$", out, re.M):
                self.env[m.group(1)] = m.group(2).strip("'\"")
        self.ctld_down = False

    def local(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(LOCAL), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=True)

    def run(self, cmd: List[str], timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env={**self.env, **kw.pop("env", {})}, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def show(self, job: str) -> Dict[str, str]:
        try:
            res = self.run(["scontrol", "show", "job", job], timeout=15)
        except subprocess.TimeoutExpired:
            return {}
        return parse_job(res.stdout) if res.returncode == 0 else {}

    def controller(self, action: str) -> None:
        self.local("controller", action)
        self.ctld_down = action == "stop"


class Job:
    def __init__(self, cluster: Cluster, base: Path, kind: str, name: str):
        self.kind, self.name, self.cluster = kind, name, cluster
        self.dir = base / name
        self.dir.mkdir(parents=True)
        self.model = self.dir / "model"
        self.info: Dict[str, str] = {}
        self.ended_seen = 0
        self.wall: Optional[float] = None
        self.runs_seen: set = set()
        self.t0 = time.monotonic()
        if kind == "mnist":
            self.target = MNIST_TARGET
            env = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(ROOT), "PYTHONPATH": str(ROOT), "DATA_DIR": mnist_dir(),
                   "MODEL_DIR": str(self.model), "ITERATIONS": str(MNIST_TARGET), "NUM_PS": "1", "IB": "NoIB",
                   "LOG_LEVEL": "INFO", "TF_CPP_MIN_LOG_LEVEL": "2", "MIN_STEP_SECONDS": str(MNIST_PACE)}
            res = cluster.run(["sbatch", "--parsable", "--time=1", "--signal=B:URG@30", "-o",
                               str(self.dir / "job-%j.out"), str(TEMPLATE)], env=env, cwd=str(self.dir), timeout=60)
            self.id = res.stdout.strip().split(";")[0]
        else:
            self.target = KERAS_TARGET
            res = cluster.run([PYTHON, "-m", "tf_for_slurm", "submit", "--parsable", "--python", PYTHON,
                               "--folder", str(self.dir), "-N", "2", "--ntasks-per-node", "1", "--ps", "0", "-t", "1",
                               "--warn-margin", "15", "--checkpoint-dir", str(self.model), "--target",
                               str(KERAS_TARGET), "--", PYTHON, str(KERAS), str(self.model), str(KERAS_TARGET),
                               "--pace", str(KERAS_PACE)],
                              env={"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=str(self.dir),
                              timeout=120)
            self.id = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if res.returncode != 0 or not self.id.isdigit():
            raise SystemExit(f"{name}: submission failed: {res.stdout} {res.stderr}")
        log(f"submitted {name} as job {self.id} (target {self.target})")

    @property
    def log_path(self) -> Path:
        return self.dir / f"job-{self.id}.out" if self.kind == "mnist" else self.dir / self.id / "job.out"

    def text(self) -> str:
        p = self.log_path
        return p.read_text(errors="replace") if p.exists() else ""

    def poll(self) -> bool:
        """True once the job ended (an end state seen on two polls in a row, the controller up)."""
        if self.wall is not None:
            return True
        info = self.cluster.show(self.id)
        if not info:
            return False
        self.info = info
        self.ended_seen = self.ended_seen + 1 if info.get("JobState") in ENDED else 0
        if self.ended_seen >= 2:
            self.wall = time.monotonic() - self.t0
        return self.wall is not None

    def checkpoint(self) -> Optional[int]:
        try:
            m = re.search(r'^model_checkpoint_path: ".*-(\d+)"$', (self.model / "checkpoint").read_text(), re.M)
        except OSError:
            return None
        return int(m.group(1)) if m else None

    def runs(self) -> List[Dict[str, Optional[int]]]:
        """Per run: the step it resumed from and the furthest step its logs show."""
        out: List[Dict[str, Optional[int]]] = []
        if self.kind == "mnist":
            for chunk in re.split(r"^(?=job \d+: \d+ tasks on )", self.text(), flags=re.M)[1:]:
                m = re.search(r"resumed from \S+ at global step (\d+)", chunk)
                steps = [int(s) for s in re.findall(r"global step (\d+)", chunk)]
                out.append({"resumed": int(m.group(1)) if m else (0 if not out else None),
                            "furthest": max(steps) if steps else None})
        else:
            p = self.dir / self.id / "task-0.out"
            text = p.read_text(errors="replace") if p.exists() else ""
            for chunk in re.split(r"(?=worker \d+: resumed from step )", text)[1:]:
                m = re.match(r"worker \d+: resumed from step (\d+)", chunk)
                steps = [int(s) for s in re.findall(r"worker \d+: (?:step|end) (\d+)", chunk)]
                steps += [int(s) for s in re.findall(r"written at global step (\d+)", chunk)]
                out.append({"resumed": int(m.group(1)), "furthest": max(steps) if steps else int(m.group(1))})
        return out


class Injector:
    KINDS = ("ctld-random", "ctld-at-warning", "ctld-at-requeue", "slurmd-restart", "urg-at-start")

    def __init__(self, cluster: Cluster, rng: random.Random, kinds: List[str], window: float):
        self.cluster, self.rng = cluster, rng
        self.faults = [{"kind": k, "arm": rng.uniform(0, window), "fired": None, "whom": "", "down": None}
                       for k in kinds]
        self.t0 = time.monotonic()
        self.busy_until = 0.0
        self.ctld_back_at: Optional[float] = None
        self.counts: Dict[str, Dict[str, int]] = {}
        self.starts: List[tuple] = []  # (when, job): runs newly RUNNING, kept 8 s for urg-at-start

    def _ctld_stop(self, fault: dict, now: float) -> None:
        fault["down"] = round(self.rng.uniform(5, 20), 1)
        self.cluster.controller("stop")
        self.ctld_back_at = now + fault["down"]

    def step(self, jobs: List[Job]) -> None:
        now = time.monotonic()
        if self.ctld_back_at is not None and now >= self.ctld_back_at:
            self.cluster.controller("start")
            log("slurmctld started again")
            self.ctld_back_at = None
            self.busy_until = now + 5
        # events in the logs since the last look, and runs newly RUNNING
        events: Dict[str, List[Job]] = {"warning": [], "requeue": [], "start": []}
        for job in jobs:
            if job.wall is not None:
                continue
            text = job.text()
            seen = self.counts.setdefault(job.id, {"warning": 0, "requeue": 0})
            for key, pat in (("warning", WARNED), ("requeue", REQUEUED)):
                n = len(pat.findall(text))
                if n > seen[key]:
                    events[key].append(job)
                seen[key] = n
            if job.info.get("JobState") == "RUNNING":
                run = int(job.info.get("Restarts", "0"))
                if run not in job.runs_seen:
                    job.runs_seen.add(run)
                    self.starts.append((now, job))
        self.starts = [(t, j) for t, j in self.starts if now - t < 8 and j.wall is None]
        events["start"] = [j for _, j in self.starts]
        if self.ctld_back_at is not None or now < self.busy_until:
            return
        elapsed = now - self.t0
        for fault in self.faults:
            if fault["fired"] is not None or elapsed < fault["arm"]:
                continue
            kind, whom = fault["kind"], None
            if kind == "ctld-random":
                whom = "all"
                self._ctld_stop(fault, now)
            elif kind == "slurmd-restart":
                whom = "node2"
                self.cluster.local("restart-slurmd", "node2")
            elif kind in ("ctld-at-warning", "ctld-at-requeue"):
                hit = events["warning" if kind == "ctld-at-warning" else "requeue"]
                if hit:
                    whom = f"{hit[0].name} (job {hit[0].id})"
                    self._ctld_stop(fault, now)
            elif kind == "urg-at-start" and events["start"]:
                job = events["start"][0]
                whom = f"{job.name} (job {job.id}) run {int(job.info.get('Restarts', '0')) + 1}"
                self.cluster.run(["scancel", "--batch", "--signal=URG", job.id])
                self.starts = [(t, j) for t, j in self.starts if j is not job]
            if whom is not None:
                fault["fired"], fault["whom"] = round(elapsed, 1), whom
                log(f"fault {kind} at +{elapsed:.0f} s: {whom}"
                    + (f", controller down {fault['down']} s" if fault["down"] else ""))
                self.busy_until = now + 10
                return

    def restore(self) -> None:
        if self.cluster.ctld_down:
            self.cluster.controller("start")


def wait_all(cluster: Cluster, jobs: List[Job], injector: Optional[Injector]) -> None:
    while True:
        if injector:
            injector.step(jobs)
        if (not cluster.ctld_down) and all(job.poll() for job in jobs):
            return
        time.sleep(1.0)


def report(job: Job) -> Dict[str, object]:
    runs = job.runs()
    redone = []
    for a, b in zip(runs, runs[1:]):
        if a["furthest"] is not None and b["resumed"] is not None:
            redone.append(max(0, a["furthest"] - b["resumed"]))
    ckpt = job.checkpoint()
    state, code = job.info.get("JobState"), job.info.get("ExitCode")
    at_target = state == "COMPLETED" and code == "0:0" and ckpt is not None and ckpt >= job.target
    print(f"{job.name} (job {job.id}, {job.kind}, target {job.target}): {state} {code}, requeues "
          f"{job.info.get('Restarts')}, checkpoint {ckpt}, wall {job.wall or 0:.0f} s"
          + ("" if at_target else "   <-- NOT at target"))
    for i, r in enumerate(runs):
        print(f"    run {i + 1}: resumed from {r['resumed']}, reached {r['furthest']}"
              + (f"; redone by the next run: {redone[i]}" if i < len(redone) else ""))
    acc = goodput(job)
    if acc:
        parts = ", ".join(f"{k} {v:.0f}" for k, v in acc["parts"].items() if v)
        print(f"    goodput {100 * (acc['goodput'] or 0):.0f}% of {acc['node_s'] / 3600:.2f} node-hours; "
              f"{acc['total_s']:.0f} s: {parts} (tf-slurm goodput)")
    if state == "FAILED" or not at_target:
        tail = [ln for ln in job.text().splitlines() if "batch-step" in ln or "error" in ln.lower()][-12:]
        print("    log (batch-step / error lines):\n      " + "\n      ".join(tail))
    return {"ok": at_target, "failed": state == "FAILED", "requeues": int(job.info.get("Restarts", "0") or 0),
            "redone": redone, "wall": job.wall, "kind": job.kind, "runs": len(runs),
            "goodput": acc["goodput"] if acc else None}


def goodput(job: Job) -> Optional[Dict[str, Any]]:
    """`tf-slurm goodput --json` of the job's folder (submit's, else the template's under tf_slurm_jobs/)."""
    for folder in (job.dir / job.id, job.dir / "tf_slurm_jobs" / job.id):
        if folder.is_dir():
            res = subprocess.run([PYTHON, "-m", "tf_for_slurm", "goodput", str(folder), "--json"], capture_output=True,
                                 text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
            return json.loads(res.stdout) if res.returncode == 0 else None
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 job of each kind, 5 faults (one of each)")
    ap.add_argument("--jobs-per-kind", type=int, default=2)
    ap.add_argument("--faults-per-kind", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline", default="", help="mnist=S,keras=S: fault-free walls, no baseline phase")
    ap.add_argument("--timeout", type=float, default=0, help="hard overall limit, s (default 900 quick, 2400)")
    ap.add_argument("--keep", action="store_true", help="keep the job folders")
    ap.add_argument("--keep-cluster", action="store_true", help="leave a cluster this bench started up")
    args = ap.parse_args()
    per_kind = 1 if args.quick else args.jobs_per_kind
    kinds = list(Injector.KINDS) * (1 if args.quick else args.faults_per_kind)
    limit = args.timeout or (900 if args.quick else 2400)
    rng = random.Random(args.seed)
    rng.shuffle(kinds)

    def on_alarm(signum, frame):
        raise BenchTimeoutError(f"the bench's hard timeout ({limit:.0f} s)")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(limit))
    t_start = time.monotonic()
    cluster = Cluster(args.keep_cluster)
    base = Path(tempfile.mkdtemp(prefix="bench_chaos."))
    jobs: List[Job] = []
    injector: Optional[Injector] = None
    baseline: Dict[str, float] = {}
    for item in filter(None, args.baseline.split(",")):
        k, _, v = item.partition("=")
        baseline[k.strip()] = float(v)
    rc = 1
    try:
        log(f"cluster {cluster.env.get('TF_SLURM_LOCAL_DIR')}, folders in {base}, seed {args.seed}, "
            f"faults {kinds}")
        if not baseline:
            base_jobs = [Job(cluster, base, k, f"baseline-{k}") for k in ("mnist", "keras")]
            jobs += base_jobs
            wait_all(cluster, base_jobs, None)
            print("--- baseline (no faults)")
            for job in base_jobs:
                r = report(job)
                baseline[job.kind] = job.wall or 0.0
                if not r["ok"]:
                    log(f"baseline {job.name} did not complete at its target")
        chaos = [Job(cluster, base, k, f"chaos-{k}{i + 1}") for i in range(per_kind) for k in ("mnist", "keras")]
        jobs += chaos
        # arm the faults over about two runs' time
        injector = Injector(cluster, rng, kinds, window=150 if args.quick else 300)
        wait_all(cluster, chaos, injector)
        print("--- faults")
        for f in injector.faults:
            print(f"    {f['kind']:16s} armed +{f['arm']:.0f} s: "
                  + (f"fired +{f['fired']} s on {f['whom']}" + (f", controller down {f['down']} s" if f["down"]
                                                                 else "") if f["fired"] is not None
                     else "never fired (its event did not come while armed)"))
        print("--- chaos jobs")
        rows = [report(job) for job in chaos]
        fired = sum(1 for f in injector.faults if f["fired"] is not None)
        redone = [x for r in rows for x in r["redone"]]
        ok = sum(1 for r in rows if r["ok"])
        failed = sum(1 for r in rows if r["failed"])
        interval = {"mnist": MNIST_CKPT_EVERY, "keras": 0}
        worst = {k: max([x for r in rows if r["kind"] == k for x in r["redone"]], default=0) for k in interval}
        over = [f"{r['kind']} {r['wall'] - baseline[r['kind']]:+.0f} s ({r['wall'] / baseline[r['kind']]:.2f}x)"
                for r in rows if r["wall"] and baseline.get(r["kind"])]
        print("--- figures (target in brackets)")
        print(f"jobs COMPLETED at their target: {ok}/{len(rows)}   [all]")
        print(f"jobs FAILED: {failed}   [0]")
        print(f"runs per job: {[r['runs'] for r in rows]}; requeues: {[r['requeues'] for r in rows]} "
              f"(total {sum(r['requeues'] for r in rows)})   [3+ runs each]")
        print(f"faults fired: {fired}/{len(injector.faults)}")
        print(f"steps redone at each requeue: {redone}; per fault {sum(redone) / max(fired, 1):.1f} on average; "
              f"worst mnist {worst['mnist']}, keras {worst['keras']}   [at most one checkpoint interval per fault: "
              f"mnist {MNIST_CKPT_EVERY} (checkpoint_every; the chief also saves when told to stop), keras 0 "
              f"(StopAndResume saves when told to stop)]")
        print(f"time over the fault-free run of the same job: {'; '.join(over) or '-'} (baseline "
              + ", ".join(f"{k} {v:.0f} s" for k, v in baseline.items()) + ")")
        print("goodput: " + "; ".join(f"{r['kind']} {100 * r['goodput']:.0f}%" for r in rows if r["goodput"])
              + "   (beside the time over the fault-free run; each job's parts above)")
        met = (ok == len(rows) and failed == 0 and worst["mnist"] <= MNIST_CKPT_EVERY
               and worst["keras"] <= max(interval["keras"], 0))
        print(f"target met: {'yes' if met else 'NO'}; bench took {time.monotonic() - t_start:.0f} s; logs in {base}")
        rc = 0 if met else 1
    except BenchTimeoutError as exc:
        log(f"{exc}: cancelling every job")
        for job in jobs:
            print(f"    {job.name} (job {job.id}): last seen {job.info.get('JobState')} requeues "
                  f"{job.info.get('Restarts')}; runs {job.runs()}; log {job.log_path}")
    finally:
        signal.alarm(0)
        if injector is not None:
            injector.restore()
        elif cluster.ctld_down:
            cluster.controller("start")
        for job in jobs:
            if job.wall is None:
                cluster.run(["scancel", job.id])
        if cluster.started:
            time.sleep(2)
            cluster.local("down", timeout=300)
        if rc == 0 and not args.keep:
            subprocess.run(["rm", "-rf", str(base)], check=False)
    return rc


if __name__ == "__main__":
    sys.exit(main())
