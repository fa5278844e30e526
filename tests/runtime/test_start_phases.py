"""An unmodified script's start-up phase through the shim (tf_slurm_start_phase): what it waits in (MWMS's start
barrier, a TF1 non-chief's wait for the chief's session, a PSS coordinator's connect), a ps serving, a task stuck
before its own `import tensorflow` named at its line, and full short runs that reach `stepping` (Keras fit in each
flavour under a 1-worker MWMS, a TF1 MonitoredTrainingSession, a PSS coordinator with in-process servers, a custom
loop's strategy.run).  Every line read is checked with plan.start_phase.parse_phase, the supervisor's reader.

Each script runs in a subprocess with the shim first on PYTHONPATH (as `tf-slurm exec` starts it) and
TF_SLURM_PHASE_FILE naming a file the test made (the supervisor's part).  A task that waits forever is read while
it waits and then killed by the test; a script that ends by itself reads its own file at the points it checks
(the phases are written before the patched call returns) and prints it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest
from ports import free_base_port

from tf_for_slurm._shim import tf_slurm_start_phase as shim
from tf_for_slurm.plan import start_phase
from tf_for_slurm.plan.start_phase import ORDER, Phase, parse_phase

SHIM = Path(__file__).resolve().parents[2] / "tf_for_slurm" / "_shim"
PY = sys.executable
HAS_TF = importlib.util.find_spec("tensorflow") is not None


def tf_test(test: Callable) -> Callable:
    """Marked `tf` and skipped without TensorFlow."""
    return pytest.mark.tf(pytest.mark.skipif(not HAS_TF, reason="needs TensorFlow")(test))


STUCK = """import sys, time
def load_data():
    time.sleep(600)  # line 3: a slow shared file system
load_data()
import tensorflow
"""

MWMS_WAIT = """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # line 2
"""

TF1_WORKER = """import json, os
import tensorflow.compat.v1 as tf
tf.disable_eager_execution()
spec = tf.train.ClusterSpec(json.loads(os.environ["TF_CONFIG"])["cluster"])
server = tf.distribute.Server(spec, job_name="worker", task_index=1)
step = tf.train.get_or_create_global_step()
train = tf.assign_add(step, 1)
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=False) as sess:  # line 8
    sess.run(train)
"""

PS = """import json, os
import tensorflow as tf
spec = tf.train.ClusterSpec(json.loads(os.environ["TF_CONFIG"])["cluster"])
server = tf.distribute.Server(spec, job_name="ps", task_index=0)
server.join()  # line 5
"""

PSS_WAIT = """import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)  # line 3
"""

# the scripts below end by themselves: each prints its own phase file at the points the test checks
SAY = """import sys
def say(what):
    print(what, open(sys.argv[1]).read().strip(), flush=True)
"""

MWMS_FIT = SAY + """import tensorflow as tf
say("imported")
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # line 6: a 1-worker cluster
say("built")
x = tf.random.uniform([64, 4])
dataset = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True))).batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, verbose=0)  # line 13: 2 batches
say("fitted")
print("keras", type(model).__module__.split(".")[0], flush=True)
"""

TF1_CHIEF = SAY + """import tensorflow.compat.v1 as tf
tf.disable_eager_execution()
step = tf.train.get_or_create_global_step()
train = tf.assign_add(step, 1)
with tf.train.MonitoredTrainingSession(master="", hooks=[tf.train.StopAtStepHook(last_step=5)]) as sess:  # 8
    say("created")
    while not sess.should_stop():
        sess.run(train)  # line 11
        say("ran")
from tensorflow.python.training import monitored_session
print("patched", hasattr(monitored_session._MonitoredSession.run, "_tf_slurm_start_phase"), flush=True)
"""

PSS_RUN = SAY + """import socket
import tensorflow as tf
def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
spec = {"worker": ["127.0.0.1:%d" % port()], "ps": ["127.0.0.1:%d" % port()]}
cluster = tf.train.ClusterSpec(spec)
servers = [tf.distribute.Server(cluster, job_name=job, task_index=0) for job in ("worker", "ps")]
say("servers")
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)  # line 15
say("connected")
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(0.0)
step = tf.function(lambda: strategy.run(lambda: v.assign_add(1.0)))
coordinator.schedule(step)  # line 21
say("scheduled")
coordinator.join()
"""

LOOP = SAY + """import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
strategy = tf.distribute.MirroredStrategy()
say("built")
strategy.run(lambda: tf.constant(1.0))  # line 8
say("ran")
print("patched", hasattr(distribute_lib.StrategyBase.run, "_tf_slurm_start_phase"), flush=True)
"""

CHILD = """import os, subprocess, sys
print("mine", os.environ.get("TF_SLURM_PHASE_FILE"), flush=True)
subprocess.run([sys.executable, "-c", "import os; print('child', os.environ.get('TF_SLURM_PHASE_FILE'))"],
               check=True, timeout=60)
"""


def _env(path: Path, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_SLURM_")}
    for name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "PYTHONPATH"):
        env.pop(name, None)
    env.update({"PYTHONPATH": str(SHIM), "TF_SLURM_PHASE_FILE": str(path), "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra or {})
    return env


def _cluster(jobs: Dict[str, int], task: Tuple[str, int]) -> str:
    """TF_CONFIG for `jobs` on free 127.0.0.1 ports, as task `task`."""
    port, cluster = free_base_port(sum(jobs.values())), {}
    for job, n in jobs.items():
        cluster[job] = [f"127.0.0.1:{port + i}" for i in range(n)]
        port += n
    return json.dumps({"cluster": cluster, "task": {"type": task[0], "index": task[1]}})


def _read(path: Path, seen: List[Phase]) -> Optional[Phase]:
    """The file's phase (None while it was never written); every written state must parse, and only go forward."""
    text = path.read_text()
    if not text:
        assert not seen, "the file was emptied"
        return None
    phase = parse_phase(text)
    assert phase is not None and text.endswith("\n") and len(text.encode()) <= start_phase.MAX_PHASE_BYTES, text
    if seen:
        assert ORDER[phase.phase] >= ORDER[seen[-1].phase] and phase.t >= seen[-1].t, (seen[-1], phase)
    if not seen or phase != seen[-1]:
        seen.append(phase)
    return phase


def _until_then_kill(tmp: Path, script: str, wanted: Callable[[Phase], bool], extra: Optional[Dict[str, str]] = None,
                     timeout: float = 90, end: str = "kill", watch: float = 0) -> Tuple[Phase, List[Phase], int]:
    """Run `script` until its phase file holds a phase `wanted` accepts, check for `watch` s that it stays there and
    the task alive, then end it (`end`: kill or terminate): (that phase, the phases read, the status it ended with)."""
    (tmp / "task.py").write_text(script)
    path = tmp / "phase"
    path.write_bytes(b"")
    with open(tmp / "log", "wb") as log:
        proc = subprocess.Popen([PY, str(tmp / "task.py"), str(path)], env=_env(path, extra), stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp)
    seen: List[Phase] = []
    try:
        deadline = time.monotonic() + timeout
        while True:
            phase = _read(path, seen)
            if phase is not None and wanted(phase):
                break
            alive = proc.poll() is None
            assert alive and time.monotonic() < deadline, (alive, seen, (tmp / "log").read_text()[-3000:])
            time.sleep(0.02)
        until = time.monotonic() + watch
        while time.monotonic() < until:  # it stays: every read says that phase, the task alive
            assert wanted(_read(path, seen) or seen[-1]) and proc.poll() is None, (seen, proc.returncode)
            time.sleep(0.02)
    finally:
        getattr(proc, end)()
        status = proc.wait(timeout=30)  # a task in any of these waits ends on a signal, at once
    return phase, seen, status


def _run(tmp: Path, script: str, extra: Optional[Dict[str, str]] = None) -> Tuple[str, List[Phase], Path]:
    """Run `script` to its end, its phase file read all along: (its output, the phases read, the file)."""
    (tmp / "task.py").write_text(script)
    path, progress = tmp / "phase", tmp / "progress"
    path.write_bytes(b"")
    progress.write_bytes(b"")
    env = _env(path, {"TF_SLURM_PROGRESS_FILE": str(progress), **(extra or {})})
    with open(tmp / "log", "wb") as log:
        proc = subprocess.Popen([PY, str(tmp / "task.py"), str(path)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp)
    seen: List[Phase] = []
    try:
        deadline = time.monotonic() + 150
        while proc.poll() is None:
            assert time.monotonic() < deadline, (seen, (tmp / "log").read_text()[-3000:])
            _read(path, seen)
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    _read(path, seen)
    out = (tmp / "log").read_text()
    assert proc.returncode == 0, out[-3000:]
    return out, seen, progress


def said(out: str, what: str) -> Phase:
    """The phase the script printed at `what` (its line "WHAT {json}"), checked with parse_phase."""
    lines = [line[len(what) + 1:] for line in out.splitlines() if line.startswith(what + " ")]
    assert lines, out[-3000:]
    phase = parse_phase(lines[-1])
    assert phase is not None, lines[-1]
    return phase


# -- without TensorFlow --------------------------------------------------------------------------------------------

def test_the_shims_bounds_and_words_are_the_contracts():
    assert shim.PHASES == tuple(p for p in start_phase.PHASES if p in start_phase.WRITTEN)
    assert (shim.MAX_BYTES, shim.MAX_WHERE, shim.MAX_DETAIL) == (
        start_phase.MAX_PHASE_BYTES, start_phase.MAX_WHERE, start_phase.MAX_DETAIL)
    for detail in (shim.BARRIER, shim.CHIEF, shim.SESSION, shim.CLUSTER, shim.FIRST, shim.JOIN):
        assert len(detail) <= start_phase.MAX_DETAIL and detail.isprintable(), detail


@pytest.mark.parametrize("where", ["", "train.py:41 in load_data", "é" * 120, "x" * 120])
def test_every_line_the_shim_writes_is_one_the_supervisor_reads(where):
    line = shim._line("waiting", 1795806241.25, 1795806230.0, where, shim.BARRIER)
    assert len(line) <= start_phase.MAX_PHASE_BYTES and line.endswith(b"\n")
    phase = parse_phase(line.decode())
    assert phase is not None and phase.phase == "waiting" and phase.detail == shim.BARRIER, line
    assert where.startswith(phase.where) and (phase.where or not where), (where, phase)


def test_where_is_the_innermost_frame_of_the_users_code():
    here = f"{Path(__file__).name}:{sys._getframe().f_lineno + 3} in {sys._getframe().f_code.co_name}"
    library = {"user_frame": shim.user_frame}
    exec(compile("def call():\n    return user_frame()\n", "/opt/x/site-packages/lib.py", "exec"), library)
    assert library["call"]() == here  # the site-packages frame is skipped, the shim's own too


@pytest.mark.timeout(60)
def test_a_task_stuck_before_importing_tensorflow_is_starting_at_its_line(tmp_path):
    phase, seen, status = _until_then_kill(tmp_path, STUCK, lambda p: p.where == "task.py:3 in load_data")
    assert phase.phase == "starting" and not phase.detail and phase.t > phase.since, phase  # the looker wrote it
    assert seen[0].phase == "starting" and status == -9, (seen, status)


@pytest.mark.timeout(60)
def test_the_variable_is_this_process_own(tmp_path):
    path = tmp_path / "phase"
    path.write_bytes(b"")
    (tmp_path / "task.py").write_text(CHILD)
    proc = subprocess.run([PY, str(tmp_path / "task.py")], env=_env(path), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "mine None" in proc.stdout and "child None" in proc.stdout, proc
    phase = parse_phase(path.read_text())
    assert phase is not None and phase.phase == "starting", path.read_text()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["off", "missing", "symlink"])
def test_off_missing_or_symlink_nothing_written_and_the_program_goes_on(tmp_path, case):
    path, target = tmp_path / "phase", tmp_path / "target"
    target.write_bytes(b"")
    extra = {"TF_SLURM_PROGRESS_CAPTURE": "Off"} if case == "off" else {}
    if case == "off":
        path.write_bytes(b"")
    elif case == "symlink":
        path.symlink_to(target)
    (tmp_path / "task.py").write_text("print('ran')\n")
    proc = subprocess.run([PY, str(tmp_path / "task.py")], env=_env(path, extra), capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc
    assert target.read_bytes() == b"" and (path.exists() or case == "missing")
    if case == "off":
        assert path.read_bytes() == b"" and proc.stderr == "", proc.stderr
    elif case == "missing":
        assert not path.exists() and proc.stderr == "", proc.stderr  # never created
    else:
        assert proc.stderr.count("tf_for_slurm: start-up phase capture off: OSError") == 1, proc.stderr


# -- tasks that wait: read while they wait, then killed --------------------------------------------------------------

@pytest.mark.timeout(120)
@tf_test
def test_mwms_worker_whose_peer_never_starts_waits_in_the_start_barrier(tmp_path):
    config = _cluster({"worker": 2}, ("worker", 0))
    phase, seen, _ = _until_then_kill(tmp_path, MWMS_WAIT, lambda p: p.phase == "waiting", {"TF_CONFIG": config},
                                      watch=3.0)
    assert phase.detail == "MultiWorkerMirroredStrategy's start barrier" and phase.where == "task.py:2 in <module>"
    assert all(p.phase != "server" for p in seen), seen  # its server starts in the barrier's own call


@pytest.mark.timeout(120)
@tf_test
def test_tf1_non_chief_whose_chief_never_starts_waits_for_the_chiefs_session(tmp_path):
    config = _cluster({"worker": 2}, ("worker", 1))
    phase, seen, _ = _until_then_kill(tmp_path, TF1_WORKER, lambda p: p.phase == "waiting", {"TF_CONFIG": config})
    assert phase.detail == "the chief's session" and phase.where == "task.py:8 in <module>", phase
    assert "server" in [p.phase for p in seen] or seen[0].phase == "waiting", seen


@pytest.mark.timeout(120)
@tf_test
def test_a_ps_that_joins_is_serving(tmp_path):
    config = _cluster({"ps": 1, "worker": 1}, ("ps", 0))
    phase, _, _ = _until_then_kill(tmp_path, PS, lambda p: p.phase == "serving", {"TF_CONFIG": config})
    assert phase.detail == "Server.join()" and phase.where == "task.py:5 in <module>", phase


@pytest.mark.timeout(120)
@tf_test
def test_pss_coordinator_whose_cluster_never_starts_waits_connecting_and_ends_on_sigterm(tmp_path):
    config = _cluster({"chief": 1, "ps": 1, "worker": 1}, ("chief", 0))
    phase, _, status = _until_then_kill(tmp_path, PSS_WAIT, lambda p: p.phase == "waiting", {"TF_CONFIG": config},
                                        end="terminate")
    assert phase.detail == "connecting to its ps and workers" and phase.where == "task.py:3 in <module>", phase
    assert status == -15, status  # the wait is a plain blocking call: a SIGTERM ends it


# -- full short runs -------------------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
@tf_test
@pytest.mark.parametrize("legacy", ["", "1"])
def test_mwms_fit_with_one_worker_goes_through_the_barrier_to_its_first_step(tmp_path, legacy):
    if legacy and importlib.util.find_spec("tf_keras") is None:
        pytest.skip("needs tf_keras")
    out, seen, progress = _run(tmp_path, MWMS_FIT, {"TF_CONFIG": _cluster({"worker": 1}, ("worker", 0)),
                                                    "TF_USE_LEGACY_KERAS": legacy})
    assert said(out, "imported").phase == "imported", out
    built = said(out, "built")
    assert built.phase == "ready" and built.where == "task.py:6 in <module>", built  # waiting then ready
    fitted = said(out, "fitted")
    # MWMS's first collective is its first variable's broadcast, before fit: `stepping` from there on
    assert fitted.phase == "stepping" and fitted.detail == "its first collective (its variables)", fitted
    assert fitted.where.startswith("task.py:") and seen[-1].phase == "stepping", (fitted, seen)
    assert ("keras tf_keras" in out) == bool(legacy), out  # the flavour asked for trained
    assert json.loads(progress.read_text())["step"] == 2  # the progress capture still counts


@pytest.mark.timeout(180)
@tf_test
def test_tf1_chief_creates_its_session_then_steps_and_run_is_tensorflows_again(tmp_path):
    out, seen, progress = _run(tmp_path, TF1_CHIEF)
    created = said(out, "created")
    assert created.phase == "ready" and created.where == "task.py:8 in <module>", created
    ran = said(out, "ran")
    assert ran.phase == "stepping" and ran.where == "task.py:11 in <module>" and ran.since >= created.since, ran
    assert "patched False" in out and seen[-1].phase == "stepping", out  # the first run only
    assert json.loads(progress.read_text())["step"] == 5  # the progress capture's own wrapper stayed


@pytest.mark.timeout(180)
@tf_test
def test_pss_coordinator_with_its_servers_connects_then_schedules(tmp_path):
    out, seen, _ = _run(tmp_path, PSS_RUN)
    assert said(out, "servers").phase == "server", out
    connected = said(out, "connected")
    assert connected.phase == "ready" and connected.where == "task.py:15 in <module>", connected
    scheduled = said(out, "scheduled")
    assert scheduled.phase == "stepping" and scheduled.where == "task.py:21 in <module>", scheduled


@pytest.mark.timeout(180)
@tf_test
def test_a_custom_loops_first_strategy_run_is_its_first_step(tmp_path):
    out, seen, _ = _run(tmp_path, LOOP)
    assert said(out, "built").phase == "imported", out  # a local strategy waits for no one
    ran = said(out, "ran")
    assert ran.phase == "stepping" and ran.where == "task.py:8 in <module>", ran
    assert "patched False" in out, out  # TensorFlow's own run once the first one passed
