"""The shim's start-up phases (tf_slurm_start_phase), from scripts as users write them, one process each
with no supervisor: the phase file it writes says where the task waits and what for.  Each process is
ended by the test once its phase showed (a task stuck waiting is what is tested)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_base_port

from tf_for_slurm.plan.start_phase import ORDER, parse_phase

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "tf_for_slurm" / "_shim"
PY = sys.executable

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]


def _until(tmp: Path, script: str, tf_config: dict, wanted, timeout: float = 90) -> dict:
    """Run `script` under the shim until its phase file holds a phase `wanted` accepts; that phase's dict."""
    (tmp / "task.py").write_text(script)
    phase_file, progress = tmp / "phase", tmp / "progress"
    phase_file.write_text("")
    progress.write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT)]), "TF_CPP_MIN_LOG_LEVEL": "2",
           "TF_SLURM_PHASE_FILE": str(phase_file), "TF_SLURM_PROGRESS_FILE": str(progress),
           "TF_CONFIG": json.dumps(tf_config)}
    for name in ("TF_SLURM_PROGRESS_CAPTURE", "TF_USE_LEGACY_KERAS"):
        env.pop(name, None)
    proc = subprocess.Popen([PY, str(tmp / "task.py")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = phase_file.read_text()
            if text:
                phase = parse_phase(text)
                assert phase is not None, text  # every line the shim writes is one the supervisor reads
                if not seen or seen[-1] != phase.phase:
                    seen.append(phase.phase)
                if wanted(phase):
                    return {"phase": phase, "seen": seen}
            assert proc.poll() is None, (seen, proc.stdout.read().decode(errors="replace")[-3000:])
            time.sleep(0.1)
        raise AssertionError(f"phases seen: {seen}")
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def _cluster(jobs: dict) -> dict:
    base = free_base_port(sum(jobs.values()))
    out, port = {}, base
    for job, n in jobs.items():
        out[job] = [f"127.0.0.1:{port + i}" for i in range(n)]
        port += n
    return out


@pytest.mark.timeout(120)
def test_before_tensorflow_a_stuck_task_is_starting_at_its_line_of_code(tmp_path):
    script = "import time\n\ndef load_data():\n    time.sleep(600)\n\nload_data()\nimport tensorflow\n"
    got = _until(tmp_path, script, {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}},
                 lambda p: p.where == "task.py:4 in load_data")
    assert got["phase"].phase == "starting", got


@pytest.mark.timeout(120)
def test_tf1_a_non_chief_waits_for_the_chiefs_session_and_a_ps_serves(tmp_path):
    cluster = _cluster({"ps": 1, "worker": 2})
    worker = (
        "import json, os\nimport tensorflow.compat.v1 as tf\ntf.disable_eager_execution()\n"
        "spec = tf.train.ClusterSpec(json.loads(os.environ['TF_CONFIG'])['cluster'])\n"
        "server = tf.distribute.Server(spec, job_name='worker', task_index=1)\n"
        "with tf.device(tf.train.replica_device_setter(cluster=spec, worker_device='/job:worker/task:1')):\n"
        "    step = tf.train.get_or_create_global_step()\n    train = tf.assign_add(step, 1)\n"
        "with tf.train.MonitoredTrainingSession(master=server.target, is_chief=False) as sess:\n"
        "    sess.run(train)\n")
    got = _until(tmp_path, worker, {"cluster": cluster, "task": {"type": "worker", "index": 1}},
                 lambda p: p.phase == "waiting")
    assert got["phase"].detail == "the chief's session", got
    assert got["seen"] == sorted(got["seen"], key=ORDER.__getitem__), got  # only forward
    ps = ("import json, os\nimport tensorflow as tf\n"
          "spec = tf.train.ClusterSpec(json.loads(os.environ['TF_CONFIG'])['cluster'])\n"
          "server = tf.distribute.Server(spec, job_name='ps', task_index=0)\nserver.join()\n")
    (tmp_path / "ps").mkdir()
    got = _until(tmp_path / "ps", ps, {"cluster": cluster, "task": {"type": "ps", "index": 0}},
                 lambda p: p.phase == "serving")
    assert got["phase"].detail == "Server.join()" and got["phase"].where == "task.py:5 in <module>", got


@pytest.mark.timeout(120)
def test_pss_a_coordinator_whose_workers_never_start_waits_connecting(tmp_path):
    cluster = _cluster({"chief": 1, "ps": 1, "worker": 1})
    script = ("import tensorflow as tf\n"
              "resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()\n"
              "strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)\n")
    got = _until(tmp_path, script, {"cluster": cluster, "task": {"type": "chief", "index": 0}},
                 lambda p: p.phase == "waiting")
    assert got["phase"].detail == "connecting to its ps and workers", got
