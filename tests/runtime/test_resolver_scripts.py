"""Scripts written for TensorFlow's SlurmClusterResolver (tests/unmodified/resolver_*.py, in the style
of HPC centres' documentation) run unmodified under `tf-slurm local` (exec under every task): the
resolver answers with the step's plan; a script whose jobs= or tasks_per_node= contradict the plan
ends the step at once with one fix line.  The drop-in `tf_for_slurm.SlurmClusterResolver` is the
same script with one import line changed.  Real Slurm: tests/slurm/test_resolver_slurm.py.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "unmodified"
PY = sys.executable

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
for _name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "TF_SLURM_PS", "CUDA_VISIBLE_DEVICES"):
    ENV.pop(_name, None)


def local(args: List[str], script: Path, *script_args: str, env: Optional[Dict[str, str]] = None,
          timeout: float = 150) -> tuple:
    """(status, output, seconds) of `tf-slurm local ARGS -- python SCRIPT ...`."""
    start = time.monotonic()
    proc = subprocess.run([PY, "-m", "tf_for_slurm", "local", *args, "--", PY, str(script), *script_args],
                          env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def clusters(out: str) -> Dict[str, dict]:
    """rank -> the cluster the script's resolver answered ('R: cluster {...} task T I gpus G' lines)."""
    found = {}
    for m in re.finditer(r"^(\d+): cluster (\{.*\}) task (\w+) (\d+) gpus (\d+)$", out, re.M):
        found[m.group(1)] = {"cluster": ast.literal_eval(m.group(2)), "task": (m.group(3), int(m.group(4))),
                             "gpus": int(m.group(5))}
    return found


def test_centre_mwms_fit_answers_with_the_plan_and_completes():
    rc, out, _ = local(["-n", "2", "-N", "2", "--ps", "0"], SCRIPTS / "resolver_mwms_fit.py")
    assert rc == 0, out[-4000:]
    seen = clusters(out)
    assert sorted(seen) == ["0", "1"], out[-4000:]
    cluster = seen["0"]["cluster"]
    assert seen["1"]["cluster"] == cluster and set(cluster) == {"worker"} and len(cluster["worker"]) == 2
    ports = [int(a.rsplit(":", 1)[1]) for a in cluster["worker"]]
    assert 15000 not in ports and 15001 not in ports  # the plan's ports, not the script's port_base
    assert [seen[r]["task"] for r in ("0", "1")] == [("worker", 0), ("worker", 1)]
    assert seen["0"]["gpus"] == 0  # a CPU machine: no nvidia-smi, no GPU
    assert out.count(" done at ") == 2, out[-4000:]
    assert "ended with status 0" in out


def test_tf1_course_script_with_jobs_and_two_tasks_per_node_completes():
    rc, out, _ = local(["-n", "4", "-N", "2"], SCRIPTS / "resolver_tf1_ps_worker.py", "--steps", "100")
    assert rc == 0, out[-4000:]
    seen = clusters(out)
    assert {r: v["task"] for r, v in seen.items()} == {"0": ("ps", 0), "1": ("worker", 0), "2": ("worker", 1),
                                                       "3": ("worker", 2)}, out[-4000:]
    assert all(v["gpus"] == 0 for v in seen.values())  # gpus_per_node=2 on CPU nodes: the plan's none
    assert len(re.findall(r"worker \d done at", out)) == 3, out[-4000:]


@pytest.mark.parametrize("args, script, fix", [
    (["-n", "2", "-N", "2"], "resolver_mwms_fit.py", "fix: run with --ps 0"),  # exec's default: 1 ps
    (["-n", "4", "-N", "4"], "resolver_tf1_ps_worker.py", "fix: run 2 tasks on each node"),
    (["-n", "4", "-N", "2", "--ps", "2"], "resolver_tf1_ps_worker.py", "fix: run with --ps 1"),
])
def test_a_contradiction_ends_the_step_with_one_fix_line(args, script, fix):
    rc, out, took = local(args, SCRIPTS / script, timeout=90)
    assert rc == 1, out[-4000:]
    lines = [line for line in out.splitlines() if re.match(r"^\d+: tf-slurm: SlurmClusterResolver", line)]
    assert len(lines) == 1 and fix in lines[0], out[-4000:]  # said once, by the chief
    assert " done at " not in out and " training" not in out
    assert "Traceback" not in out, out[-4000:]


def test_drop_in_is_the_same_script_with_one_import_line_changed(tmp_path):
    """Without exec (--slurm-env-only: the step's Slurm variables only), planned by tf_for_slurm."""
    text = (SCRIPTS / "resolver_mwms_fit.py").read_text()
    changed = text.replace("import tensorflow as tf\n", "import tensorflow as tf\nfrom tf_for_slurm import "
                           "SlurmClusterResolver\n").replace("tf.distribute.cluster_resolver.SlurmClusterResolver(",
                                                             "SlurmClusterResolver(")
    assert changed.count("SlurmClusterResolver") == text.count("SlurmClusterResolver") + 1
    script = tmp_path / "train.py"
    script.write_text(changed)
    # Keras 3 `fit` cannot run a multi-worker step: the user's fix, as exec's warning says (plan.keras)
    rc, out, _ = local(["--slurm-env-only", "-n", "2", "-N", "2"], script, env={"TF_USE_LEGACY_KERAS": "1"})
    assert rc == 0, out[-4000:]
    seen = clusters(out)
    assert [seen[r]["task"] for r in ("0", "1")] == [("worker", 0), ("worker", 1)], out[-4000:]
    ports = [int(a.rsplit(":", 1)[1]) for a in seen["0"]["cluster"]["worker"]]
    assert len(set(ports)) == 2 and 15000 not in ports
    assert out.count(" done at ") == 2, out[-4000:]


PROBE = """import os
import tensorflow as tf
r = tf.distribute.cluster_resolver.SlurmClusterResolver(port_base=15000)
spec = r.cluster_spec()
print(f"probe {r.task_type} {r.task_id} gpus {r.num_accelerators()['GPU']} "
      f"visible {os.environ.get('CUDA_VISIBLE_DEVICES')!r} workers {len(spec.as_dict()['worker'])}", flush=True)
"""


@pytest.mark.parametrize("variables, expected", [
    # a node of 4 GPUs and 4 tasks: exec gives each task one, the resolver says 1 (TensorFlow's: 4 // 4 of the
    # one GPU it sees, after exec narrowed CUDA_VISIBLE_DEVICES)
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {0: ("1", "'0'"), 1: ("1", "'1'"), 2: ("1", "'2'"), 3: ("1", "'3'")}),
    # more tasks than GPUs (TensorFlow's: "Requested more GPUs per node than available" or 0 each)
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, {0: ("1", "'0'"), 1: ("1", "'1'"), 2: ("1", "'0'"), 3: ("1", "'1'")}),
    # a CPU node: no GPU variable, no nvidia-smi call (TensorFlow's: FileNotFoundError)
    ({}, {r: ("0", "None") for r in range(4)}),
])
def test_gpu_layouts_from_recorded_variables_without_gpus(tmp_path, variables, expected):
    """(SLURM_STEP_GPUS: `tf-slurm local` sets the step's own Slurm variables, so that source is covered
    with recorded environments in tests/runtime/test_slurm_resolver_answers.py.)"""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    rc, out, _ = local(["-n", "4", "--ps", "0"], script, env=variables, timeout=120)
    assert rc == 0, out[-4000:]
    seen = {int(m.group(1)): (m.group(3), m.group(4))
            for m in re.finditer(r"^(\d+): probe worker (\d+) gpus (\d+) visible (\S+) workers 4$", out, re.M)}
    assert seen == expected, out[-4000:]
