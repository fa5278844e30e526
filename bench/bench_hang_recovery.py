"""A hung training, from its last step to training again, under MultiWorkerMirroredStrategy and TF1
(issue: "hang detected -> training again"; target: detection + restart ~ the hang bound + the
restart's own time).

    .venv/bin/python bench/bench_hang_recovery.py [--repeat 3] [--bound 10] [--scenarios mwms,tf1] [--quick]

The unmodified scripts of tests/runtime/test_hang.py under `tf-slurm local` (no Slurm), with
TF_SLURM_HANG_AFTER=`--bound` (the bound's floor: the median step is ~0.1 s, so 10 x median is below it):
  mwms  tests/unmodified/tf2_mwms_backup.py, 2 workers (--ps 0): Keras `fit` with BackupAndRestore,
        10 steps an epoch paced 0.1 s; worker 1 blocks forever at epoch 1, batch 3 (--hang-once);
        the hub ends one hung worker, the group restarts from the backup (epoch 1);
  tf1   tests/unmodified/tf1_ps_worker.py, ps + 2 workers: MonitoredTrainingSession, steps paced 0.05 s;
        worker 1's session.run blocks forever at its 20th step; worker 1 alone is restarted while
        worker 0 trains on (enough steps that it still trains when worker 1 is back).
Every time comes from the processes: the hub's status.json in the job folder (`tf-slurm local
--folder`): `hangs[].at` (the hub's clock when it found the hang; without it, when the hub's
`hung:` line arrived here) and each task's progress `history` (the task's own clock at the step it
reported: exec's shim writes a Keras step at most every 0.5 s and the TF1 global step once a
second, so a step time is the reported one, up to that late):
  (a) detection: the last step a hung task reported -> the hang found (the bound, plus up to the
      hub's once-a-second look);
  (b) restart:   the hang found -> the first step reported after it (mwms: by any worker, the group
      steps together; tf1: by the restarted worker), which includes the hung command's end (SIGQUIT,
      SIGKILL 1 s later), the restart policy's backoff (1 s), under mwms the rest of the group's end
      (SIGTERM, then SIGKILL after TF_SLURM_KILL_GRACE), TensorFlow's start-up and the restore;
      split by the `started again` lines' arrival: hang -> every command running again -> first step;
  (c) total:     (a) + (b), the last step before the hang -> training again.
A clean run of each scenario (no hang) gives the restart's own reference: the step's start
(status.json `started_at`) -> its first reported step (tf1: worker 1's).  Prints median/min/max over
`--repeat` runs (1 with --quick) and the ratios (c) / (bound + clean start-up) and (b) / clean start-up.

Measured on this repository's 2-core machine (TensorFlow 2.21 CPU, nothing else running; defaults:
3 hang runs, 2 clean runs, bound 10 s), median [min, max] seconds:
  mwms  (a) 11.14 [10.58, 11.16]  (b) 5.98 [5.65, 6.06]  (c) 16.79 [16.64, 17.14]  clean 3.77: (c)/(bound+clean) 1.22
  tf1   (a) 10.25 [10.13, 10.63]  (b) 4.88 [4.37, 5.12]  (c) 15.13 [14.51, 15.75]  clean 3.76: (c)/(bound+clean) 1.10
(b) holds the hung command's SIGQUIT -> SIGKILL second and the restart's 1 s backoff, which a clean
start does not.  Before two fixes this bench found, mwms measured (b) 8.32 [7.34, 13.92]: a hung worker
that was not the hang's victim waited out TF_SLURM_KILL_GRACE (3 s) when its group restarted (a
multi-worker TensorFlow catches SIGTERM), now at most the stacks' 1 s; and 1 mwms run in 3 had two
`hung:` lines (the workers' last reports one interval apart: the second worker was found a look
later, while the group restart was under way), now the group's clocks start again with the hang.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "unmodified"
PY = sys.executable


def scenario_argv(name: str, work: Path, hang: bool, args: argparse.Namespace) -> List[str]:
    marker = ["--hang-once", str(work / "hung-once")] if hang else []
    if name == "mwms":
        return ["-n", "2", "--ps", "0", "--", PY, str(SCRIPTS / "tf2_mwms_backup.py"), "--backup-dir",
                str(work / "backup"), "--epochs", "4", "--steps-per-epoch", "10", "--pace", "0.1", *marker]
    steps = args.tf1_steps if hang else 100
    return ["-n", "3", "--", PY, str(SCRIPTS / "tf1_ps_worker.py"), "--steps", str(steps), "--pace", "0.05", *marker]


def run(name: str, hang: bool, args: argparse.Namespace) -> Dict:
    """One `tf-slurm local` run; its lines stamped as they arrive, its status.json."""
    work = Path(tempfile.mkdtemp(prefix=f"bench_hang_recovery.{name}."))
    job = str(random.randint(10 ** 6, 10 ** 7))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_SLURM_HANG_AFTER": f"{args.bound:g}"}
    for var in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "TF_SLURM_PS", "TF_SLURM_PROGRESS_CAPTURE", "TF_SLURM_STATUS_FILE",
                "TF_SLURM_JOB_DIR"):
        env.pop(var, None)
    argv = [PY, "-m", "tf_for_slurm", "local", "--folder", str(work / "jobs"), "--job-id", job,
            *scenario_argv(name, work, hang, args)]
    lines = []  # (arrival time, line)
    with open(work / "log", "w") as out:
        proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        deadline = time.time() + args.timeout
        try:
            for line in proc.stdout:
                lines.append((time.time(), line.rstrip("\n")))
                out.write(f"{lines[-1][0]:.3f} {line}")
                if time.time() > deadline:
                    break
        finally:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=max(1.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    status_path = work / "jobs" / job / "status.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    return {"rc": proc.returncode, "lines": lines, "status": status, "log": str(work / "log")}


def _history(status: Dict, rank: int) -> List[List[float]]:
    return (status.get("progress") or {}).get(str(rank), {}).get("history") or []


def _first_after(status: Dict, ranks: List[int], after: float) -> Optional[float]:
    times = [t for r in ranks for t, _step in _history(status, r) if t > after]
    return min(times) if times else None


def clean_figures(name: str, r: Dict) -> Dict:
    status = r["status"]
    ranks = [0, 1] if name == "mwms" else [2]  # tf1: worker 1 (rank 2), the one the hang run restarts
    start = status.get("started_at")
    first = _first_after(status, ranks, float("-inf"))
    return {"rc": r["rc"], "startup": None if start is None or first is None else first - start, "log": r["log"]}


def hang_figures(name: str, r: Dict) -> Dict:
    status, lines = r["status"], r["lines"]
    fig: Dict = {"rc": r["rc"], "log": r["log"]}
    hung = [(at, line) for at, line in lines if "hung: no training step for" in line]
    fig["hung_lines"] = len(hung)
    if not hung:
        return fig
    at_line, line = hung[0]
    bound = re.search(r"\(bound: (.*?) = ([0-9.]+) s", line)
    fig["bound_text"] = bound.group(0)[1:] if bound else "?"
    victims = [int(v) for v in re.findall(r"\(rank (\d+),", line.split("; ending ", 1)[-1])]
    record = [h for h in status.get("hangs") or [] if isinstance(h, dict)]
    if record:  # the hub's own clock (status.json `hangs`, when this version of the hub writes it)
        hung_at, hung_ranks, fig["hung_clock"] = record[0]["at"], sorted({h["rank"] for h in record
                                                                         if h["at"] == record[0]["at"]}), "hub"
    else:  # when the hub's line arrived here
        names = line.split("):", 1)[-1].split("; ending ")[0]
        hung_at, hung_ranks, fig["hung_clock"] = at_line, [int(v) for v in re.findall(r"\(rank (\d+),", names)], "line"
    fig["hung_ranks"], fig["victims"] = hung_ranks, victims
    last = [t for rk in hung_ranks for t, _s in _history(status, rk) if t <= hung_at]
    back_ranks = hung_ranks if name == "mwms" else victims
    first = _first_after(status, back_ranks, hung_at)
    again = [at for at, text in lines if at > at_line and "started again" in text]
    if last:
        fig["detect"] = hung_at - max(last)
    if first is not None:
        fig["restart"] = first - hung_at
    if last and first is not None:
        fig["total"] = first - max(last)
    if again:
        fig["running_again"] = max(again[: (2 if name == "mwms" else 1)]) - at_line
    return fig


def _stats(values: List[Optional[float]]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return f"{'-':>20}"
    return f"{statistics.median(vals):>6.2f} [{min(vals):5.2f},{max(vals):5.2f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each scenario with a hang (default 3)")
    ap.add_argument("--clean", type=int, default=None, help="clean runs of each scenario (default: min(--repeat, 2))")
    ap.add_argument("--bound", type=float, default=10.0, help="TF_SLURM_HANG_AFTER, seconds (default 10)")
    ap.add_argument("--scenarios", default="mwms,tf1")
    ap.add_argument("--tf1-steps", type=int, default=700, help="global steps of the tf1 hang run (default 700)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a run may take (default 180)")
    ap.add_argument("--quick", action="store_true", help="one run of each")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.clean = 1, 1
    clean_n = args.clean if args.clean is not None else min(args.repeat, 2)
    results = {}
    for name in args.scenarios.split(","):
        cleans = [clean_figures(name, run(name, False, args)) for _ in range(clean_n)]
        for c in cleans:
            print(f"  {name} clean: status {c['rc']}, start -> first step {c['startup'] or float('nan'):.2f} s "
                  f"({c['log']})", flush=True)
        hangs = []
        for _ in range(args.repeat):
            h = hang_figures(name, run(name, True, args))
            hangs.append(h)
            print(f"  {name} hang : status {h['rc']}, {h['hung_lines']} hung line(s) ({h.get('bound_text', '?')}; "
                  f"hung {h.get('hung_ranks')}, ended {h.get('victims')}, clock: {h.get('hung_clock')}); "
                  f"(a) {h.get('detect', float('nan')):.2f} s, (b) {h.get('restart', float('nan')):.2f} s "
                  f"(commands running again after {h.get('running_again', float('nan')):.2f} s), "
                  f"(c) {h.get('total', float('nan')):.2f} s ({h['log']})", flush=True)
        results[name] = (cleans, hangs)
    print()
    print(f"hang -> training again, TF_SLURM_HANG_AFTER={args.bound:g} s; seconds, median [min, max] over "
          f"{args.repeat} hang run(s) and {clean_n} clean run(s) per scenario ({os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f})")
    head = (f"{'scenario':9} {'(a) last step->hung':>20} {'(b) hung->step':>20} {'  of which: running':>20} "
            f"{'(c) total':>20} {'clean start->step':>20} {'(c)/(bound+clean)':>18} {'(b)/clean':>10}")
    print(head)
    print("-" * len(head))
    for name, (cleans, hangs) in results.items():
        clean = [c["startup"] for c in cleans if c["startup"] is not None]
        ref = statistics.median(clean) if clean else None
        totals = [h["total"] for h in hangs if "total" in h]
        restarts = [h["restart"] for h in hangs if "restart" in h]
        r1 = f"{statistics.median(totals) / (args.bound + ref):.2f}" if ref and totals else "-"
        r2 = f"{statistics.median(restarts) / ref:.2f}" if ref and restarts else "-"
        print(f"{name:9} {_stats([h.get('detect') for h in hangs])} {_stats([h.get('restart') for h in hangs])} "
              f"{_stats([h.get('running_again') for h in hangs])} {_stats([h.get('total') for h in hangs])} "
              f"{_stats(clean)} {r1:>18} {r2:>10}")
    bad = [(n, h["rc"]) for n, (_c, hs) in results.items() for h in hs if h["rc"] != 0 or h["hung_lines"] != 1]
    if bad:
        print(f"runs that did not end 0 with exactly one hang: {bad}")
    print("(a) counts from the hung task's last REPORTED step (the shim writes a Keras step at most every 0.5 s, "
          "the TF1 global step once a second); `running` = hung -> the last `started again` line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
