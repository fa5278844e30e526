"""When the plan does not fit an unmodified script, the step says so in one line and ends non-zero.

Without the shim's checks (measured): an MWMS script under the default 1-ps plan fails with TF's
"There is no id for task_type 'ps'"; a ParameterServerStrategy script without a chief never ends
(every task joins); a TF1 ps/worker script under --ps 0 ends 0 after the drain with worker 1 never
trained.  The scripts in tests/unmodified/ run as they are.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from tf_for_slurm._shim.tf_slurm_plan_hints import PREFIX, join_line, mwms_line, no_ps_line
from tf_for_slurm.host.settings import IS_CHIEF
from tf_for_slurm.host.task_env import task_env
from tf_for_slurm.plan import build_plan
from tf_for_slurm.plan.failure_words import why_from_log
from tf_for_slurm.plan.step import offline_step

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parents[1] / "unmodified"
PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TF_SLURM_")
       and k not in ("TF_CONFIG", "TF_USE_LEGACY_KERAS")}
ENV.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
BOUND = 90  # s: each run ends well within (5-10 s here); a hang fails the test, never blocks it

CASES = {
    "mwms-with-ps": (["-n", "2"], ["tf2_mwms_fit.py"],
                     "tf-slurm: MultiWorkerMirroredStrategy cannot run with ps tasks (this step has 1 ps, "
                     "the default); fix: run with --ps 0"),
    "pss-without-chief": (["-n", "3"], ["tf2_pss_fit.py"],
                          "tf-slurm: worker 0 is this step's chief (the plan has no chief task) and called "
                          "Server.join()"),
    "tf1-without-ps": (["-n", "2", "--ps", "0"], ["tf1_ps_worker.py", "--steps", "50"],
                       "tf-slurm: replica_device_setter found no ps in this step"),
}
FIX = {"mwms-with-ps": "--ps 0", "pss-without-chief": "--tasks chief,ps,worker", "tf1-without-ps": "--ps N"}
ROLES = {"mwms-with-ps": "2 tasks: ps 0, worker 0 (chief); step ends as tf1 (inferred: ps and no chief)",
         "pss-without-chief": "3 tasks: ps 0, worker 0 (chief), worker 1; step ends as tf1",
         "tf1-without-ps": "2 tasks: worker 0 (chief), worker 1; step ends as mwms (inferred: no ps)"}


def run_local(tmp_path: Path, options: list, script: list, script_dir: Optional[Path] = SCRIPTS) -> tuple:
    """(status, output, seconds) of `tf-slurm local OPTIONS -- python SCRIPT`; output read once it ended.
    script_dir None: `script` is python's arguments as they are."""
    first = [str(script_dir / script[0])] if script_dir is not None else script[:1]
    argv = [PY, "-m", "tf_for_slurm", "local", *options, "--folder", str(tmp_path / "jobs"), "--",
            PY, *first, *script[1:]]
    log = tmp_path / "log"
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        try:
            proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the launcher ends its tasks
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            pytest.fail(f"still running after {BOUND} s: {log.read_text(errors='replace')[-3000:]}")
    return proc.returncode, log.read_text(errors="replace"), time.monotonic() - start


@pytest.mark.tf
@pytest.mark.timeout(240)
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
@pytest.mark.parametrize("case", list(CASES))
def test_a_plan_that_does_not_fit_the_script_says_so_and_the_step_ends(tmp_path, case):
    options, script, line = CASES[case]
    rc, out, took = run_local(tmp_path, options, script)
    print(f"{case}: status {rc} after {took:.1f} s")
    assert rc != 0, out[-3000:]
    hints = [x for x in out.splitlines() if "; fix: " in x and "WARNING: " not in x]  # not exec's tf_keras one
    assert hints and all(line in x and FIX[case] in x for x in hints), out[-3000:]
    assert "Traceback" not in out, out[-3000:]  # the line, not TensorFlow's error
    assert f"tf-slurm local: {ROLES[case]}" in out, out[:2000]


@pytest.mark.timeout(60)
def test_local_shows_the_roles_and_the_strategy_first(tmp_path):
    # plain commands: the line comes from the plan, before any task runs (TensorFlow not needed)
    rc, out, _ = run_local(tmp_path, ["-n", "3", "--tasks", "ps,chief,worker"], ["-c", "pass"], script_dir=None)
    assert rc == 0, out[-3000:]
    lines = [x for x in out.splitlines() if x.startswith("tf-slurm local: 3 tasks")]
    want = "tf-slurm local: 3 tasks: ps 0, chief 0, worker 0; step ends as pss (inferred: ps and a chief)"
    assert lines == [want], out


# -- what the shim is told (TensorFlow not needed) ----------------------------------------------------

def chief_flags(*roles: str, nodes: str = "n[1-2]", tpn: str = "2(x2)") -> list:
    plan = build_plan(offline_step(nodes, tpn), roles)
    return [task_env(plan, rank).variables[IS_CHIEF] for rank in range(len(roles))]


def test_without_a_chief_task_worker_0_is_told_it_is_the_chief():
    assert chief_flags("ps", "worker", "worker", "worker") == ["0", "1", "0", "0"]


def test_with_a_chief_task_only_it_is_told():
    assert chief_flags("ps", "worker", "chief", "worker") == ["0", "0", "1", "0"]


def test_a_trimmed_tf_config_still_carries_the_flag():
    roles = ("ps",) * 4 + ("worker",) * (16384 - 4)
    plan = build_plan(offline_step("node[0001-4096]", "4", job_id="8"), roles)
    assert task_env(plan, 4).spill and task_env(plan, 4).variables[IS_CHIEF] == "1"
    assert task_env(plan, 100).variables[IS_CHIEF] == "0"


def test_the_mwms_line_says_default_only_for_one_ps():
    assert "1 ps, the default); fix: run with --ps 0" in mwms_line(1)
    assert "2 ps); fix: run with --ps 0" in mwms_line(2)


@pytest.mark.parametrize("line", [mwms_line(1), join_line("chief", 0), join_line("worker", 0), no_ps_line()])
def test_each_line_is_a_fix_line_status_shows(line):
    # `tf-slurm status` and the step's end line find it in the task's log (plan.failure_words)
    assert why_from_log(f"some output\n{PREFIX}{line}\nmore output\n") == line


# -- the checks themselves, on a stand-in TensorFlow (fast; no TensorFlow needed) ---------------------

FAKE_TF = {
    "python/training/server_lib.py": ("class Server:\n    def join(self):\n        print('joined')\n\n"
                                      "class ClusterSpec:\n    def __init__(self, cluster):\n"
                                      "        self.jobs = list(cluster)\n"),
    "python/training/device_setter.py": ("from . import server_lib\n\n"
                                         "def replica_device_setter(ps_tasks=0, ps_device='/job:ps', "
                                         "worker_device=None, merge_devices=True, cluster=None):\n"
                                         "    return 'placed'\n"),
    "python/distribute/collective_all_reduce_strategy.py": (
        "class CollectiveAllReduceStrategy:\n    def __init__(self, cluster_resolver=None):\n"
        "        print('built')\n"),
}
PROGRAMS = {
    "join": "from tensorflow.python.training import server_lib\nserver_lib.Server().join()",
    "mwms": "from tensorflow.python.distribute import collective_all_reduce_strategy as c\n"
            "c.CollectiveAllReduceStrategy()",
    "setter": "from tensorflow.python.training import device_setter\n"
              "print(device_setter.replica_device_setter(worker_device='/job:worker/task:0', cluster={CLUSTER}))",
}


def run_shimmed(tmp_path: Path, program: str, role: str, index: int, chief: bool, num_ps: int,
                num_workers: int, cluster: str = "{'worker': ['h:1', 'h:2']}") -> tuple:
    """(status, output) of `python -c PROGRAM` with the exec shim and this task's variables."""
    for name, text in FAKE_TF.items():
        path = tmp_path / "tensorflow" / name
        for package in reversed(path.relative_to(tmp_path).parents[:-1]):  # tensorflow, tensorflow/python, ...
            (tmp_path / package).mkdir(exist_ok=True)
            (tmp_path / package / "__init__.py").touch()
        path.write_text(text)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "tf_for_slurm" / "_shim"), str(tmp_path)]),
           "TF_SLURM_JOB_TYPE": role, "TF_SLURM_TASK_INDEX": str(index), "TF_SLURM_NUM_PS": str(num_ps),
           "TF_SLURM_NUM_WORKERS": str(num_workers), IS_CHIEF: "1" if chief else "0"}
    proc = subprocess.run([PY, "-c", PROGRAMS[program].replace("{CLUSTER}", cluster)], env=env,
                          capture_output=True, text=True, timeout=30, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.timeout(60)
def test_the_chief_that_joins_says_so_and_exits_1_the_others_join(tmp_path):
    rc, out = run_shimmed(tmp_path, "join", "worker", 0, True, 1, 2)
    assert rc == 1 and out.startswith("tf-slurm: worker 0 is this step's chief") and "--chief" in out, out
    assert "joined" not in out
    assert run_shimmed(tmp_path, "join", "worker", 1, False, 1, 2) == (0, "joined\n")
    rc, out = run_shimmed(tmp_path, "join", "chief", 0, True, 1, 2)
    assert rc == 1 and out.startswith("tf-slurm: the chief called Server.join()"), out


@pytest.mark.timeout(60)
def test_mwms_is_stopped_only_when_the_step_has_ps(tmp_path):
    rc, out = run_shimmed(tmp_path, "mwms", "worker", 0, True, 2, 2)
    assert (rc, out) == (1, PREFIX + mwms_line(2) + "\n")
    assert run_shimmed(tmp_path, "mwms", "worker", 0, True, 0, 2) == (0, "built\n")


@pytest.mark.timeout(60)
def test_replica_device_setter_without_ps_stops_the_chief_only_when_workers_share(tmp_path):
    rc, out = run_shimmed(tmp_path, "setter", "worker", 0, True, 0, 2)
    assert rc == 1 and "--ps N" in out, out
    assert run_shimmed(tmp_path, "setter", "worker", 0, True, 0, 1, "{'worker': ['h:1']}") == (0, "placed\n")
    assert run_shimmed(tmp_path, "setter", "worker", 0, True, 1, 2, "{'ps': ['h:0'], 'worker': ['h:1']}") \
        == (0, "placed\n")


@pytest.mark.timeout(60)
def test_a_check_that_fails_leaves_the_program_alone(tmp_path):
    # a cluster the stand-in ClusterSpec cannot read: the check raises, the call goes on as it was
    assert run_shimmed(tmp_path, "setter", "worker", 0, True, 0, 2, "object()") == (0, "placed\n")
    assert run_shimmed(tmp_path, "join", "worker", 0, True, 1, 2)[0] == 1  # and the others still work
