"""Start-up of the `tf-slurm` command, whole process, against `python -c pass`.

Why: every task of a step starts `tf-slurm exec` (and its supervisor), and batch scripts call
`tf-slurm tf-config`/`env` per task; what the CLI imports at start is paid once per task.

Prints, for each command, the median wall time of N runs, the median of `python -c pass` runs
interleaved with them (same machine load), their ratio, and the same for CPU time (user + system):
  --version                      the parser alone
  tf-config (16384 tasks)        a step of 1024 nodes x 16 tasks, the task in slot 5000
  exec --ps 0 -- true (1 task)       a one-task step: exec plans, then execs `true` (no supervisor)
Run: .venv/bin/python bench/bench_startup.py [--repeat N] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def step_env(nodes: int, per_node: int, slot: int) -> Dict[str, str]:
    """The environment srun gives the task in `slot` of a block-distributed step (as tests/envs.py's).

    One node is 'localhost' (exec checks that its own address resolves); more are node1, node2, ...
    """
    node, local = divmod(slot, per_node)
    nodelist = f"node[1-{nodes}]" if nodes > 1 else "localhost"
    tpn = f"{per_node}(x{nodes})" if nodes > 1 else str(per_node)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env.update({
        "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist, "SLURM_TASKS_PER_NODE": tpn, "SLURM_STEP_TASKS_PER_NODE": tpn,
        "SLURM_NTASKS": str(nodes * per_node), "SLURM_STEP_NUM_TASKS": str(nodes * per_node),
        "SLURM_PROCID": str(slot), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
        "SLURMD_NODENAME": f"node{node + 1}" if nodes > 1 else "localhost",
    })
    return env


def tf_slurm(tree: Optional[str]) -> List[str]:
    """The installed console script next to this python, else (or with --tree) `python -m tf_for_slurm`."""
    script = os.path.join(os.path.dirname(sys.executable), "tf-slurm")
    return [script] if tree is None and os.access(script, os.X_OK) else [sys.executable, "-m", "tf_for_slurm"]


def wall(argv: Sequence[str], env: Dict[str, str], cwd: Optional[str] = None) -> Tuple[float, float]:
    """(wall, CPU) seconds one whole process takes; CPU (user + system) is what a busy machine leaves
    least changed.  A failing run stops the bench (a fast error is no figure)."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(list(argv), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.decode(errors='replace').strip()}")
    return took, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def _median(runs: List[Tuple[float, float]]) -> Tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def _in_tree(env: Dict[str, str], tree: Optional[str]) -> Dict[str, str]:
    return env if tree is None else {**env, "PYTHONPATH": tree}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21, help="runs of each command (default 21)")
    ap.add_argument("--tree", metavar="DIR", action="append", default=[],
                    help="run `python -m tf_for_slurm` from the package in DIR instead of the installed command "
                         "(repeat: the trees' runs interleave, so two versions compare under the same load)")
    args = ap.parse_args()
    trees: List[Optional[str]] = [os.path.abspath(t) for t in args.tree] or [None]
    # .pyc files as an installed package has them: the warm-up run writes what is missing or stale
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    true = shutil.which("true") or "true"
    cases = [
        ("tf-slurm --version", ["--version"], plain),
        ("tf-slurm tf-config (16384 tasks)", ["tf-config"], step_env(1024, 16, 5000)),
        ("tf-slurm exec --ps 0 -- true (1 task)", ["exec", "--ps", "0", "--", true], step_env(1, 1, 0)),
    ]
    baseline = [sys.executable, "-c", "pass"]
    print(f"{sys.executable} ({sys.version.split()[0]}), {os.cpu_count()} CPUs, median of {args.repeat} runs")
    for name, words, env in cases:
        runs = {tree: (tf_slurm(tree) + words, _in_tree(env, tree)) for tree in trees}
        for tree, (argv, tree_env) in runs.items():
            wall(argv, tree_env, cwd=tree)  # warm the file cache and the .pyc files
        ours: Dict[Optional[str], List[Tuple[float, float]]] = {tree: [] for tree in trees}
        base = []
        for _ in range(args.repeat):
            base.append(wall(baseline, plain))
            for tree, (argv, tree_env) in runs.items():
                ours[tree].append(wall(argv, tree_env, cwd=tree))  # cwd: `python -m` puts it first on sys.path
        b, b_cpu = _median(base)
        for tree in trees:
            m, m_cpu = _median(ours[tree])
            label = name if tree is None else f"{name} [{os.path.basename(tree)}]"
            print(f"{label:48s} {m * 1000:6.1f} ms (pass {b * 1000:5.1f}) {m / b:4.1f}x   "
                  f"CPU {m_cpu * 1000:6.1f} ms (pass {b_cpu * 1000:5.1f}) {m_cpu / b_cpu:4.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
