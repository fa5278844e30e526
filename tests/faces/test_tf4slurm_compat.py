"""Issue 8: the original tf4slurm call forms, the seed's command line, and IB=auto.

Pure parts (address decision, argument mapping, hooks' place in the cluster) run without
TensorFlow; the example's flags are checked through `tf-slurm local` (no TensorFlow is imported
before a flag error).  The multi-process TensorFlow runs are in test_tf4slurm_runs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from envs import step_env

from tf_for_slurm.host.settings import ADDRESS
from tf_for_slurm.plan.addresses import AddressPolicy, decide_auto, parse_policy
from tf_for_slurm.compat import ib_switch, info_from_plan, info_from_tf_config
from tf_for_slurm.host.environment import noib_address
from tf_for_slurm.errors import PlanError, UsageError
from tf_for_slurm.plan import localhost_plan

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mnist_distributed"


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    env.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **extra)
    return env


# -- IB=auto: the decision is a pure function of the node list and the resolver --------------------

def test_auto_takes_infiniband_names_only_when_every_node_resolves():
    nodes = ["node1", "node2", "node3", "node2"]  # a node listed twice counts once
    every = decide_auto(nodes, "{host}-ib", lambda name: name.endswith("-ib"))
    assert every.policy == AddressPolicy("template", "{host}-ib")
    assert every.reason.startswith("address policy template:{host}-ib (auto: the InfiniBand names of all 3 node(s)")
    known = {"node1-ib", "node3-ib"}
    some = decide_auto(nodes, "{host}-ib", known.__contains__)
    assert some.policy == AddressPolicy("hostname")
    assert "InfiniBand name 'node2-ib' of node node2 does not resolve" in some.reason
    assert some.reason.startswith("address policy hostname (auto:")


def test_auto_is_the_same_in_every_task_and_stops_at_the_first_failure():
    nodes = [f"n{i:02d}" for i in range(40)]
    asked: list = []

    def resolver(name: str) -> bool:
        asked.append(name)
        return name != "n05.ib"

    first = decide_auto(nodes, "{host}.ib", resolver)
    assert asked == [f"n{i:02d}.ib" for i in range(6)]  # node order; the first failure decides
    again = [decide_auto(nodes, "{host}.ib", lambda n: n != "n05.ib") for _ in range(3)]
    assert all(c == first for c in again) and first.policy.kind == "hostname"
    with pytest.raises(PlanError, match="at least one node"):
        decide_auto([], "{host}-ib", lambda n: True)


def test_auto_policy_spellings():
    assert parse_policy("auto") == AddressPolicy("auto")
    assert parse_policy("auto:{host}.ib0") == AddressPolicy("auto", "{host}.ib0")
    with pytest.raises(UsageError, match=r"TF_SLURM_ADDRESS='auto:\{node\}-ib': expected a template"):
        parse_policy("auto:{node}-ib", ADDRESS)
    with pytest.raises(UsageError, match="'auto' or 'auto:{host}-ib'"):
        parse_policy("automatic")
    assert noib_address(None, {}) == "auto"
    assert noib_address(True, {}) == "hostname"
    assert noib_address(False, {"TF_SLURM_IB_TEMPLATE": "{host}.ib"}) == "template:{host}.ib"
    assert noib_address(None, {"TF_SLURM_ADDRESS": "iface:ib0"}) == "iface:ib0"  # a site's choice wins


def test_original_infinyband_keyword_maps_to_noib():
    assert ib_switch() is None  # neither: auto
    assert ib_switch(InfinyBand=True) is False and ib_switch(InfinyBand=False) is True
    assert ib_switch(NoIB=True) is True and ib_switch(NoIB=0) is False
    assert ib_switch(NoIB=False, InfinyBand=True) is False  # both, agreeing
    with pytest.raises(UsageError, match="NoIB=True and InfinyBand=True: expected one of them"):
        ib_switch(NoIB=True, InfinyBand=True)
    with pytest.raises(UsageError, match="InfinyBand='yes': expected True or False"):
        ib_switch(InfinyBand="yes")


GSD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="LOG %(message)s", stream=sys.stdout)
from tf_for_slurm.ServerDictionary import GetServerDictionary
sd, job_type, index = GetServerDictionary(['ps', 'worker', 'worker', 'worker']{args})
print(json.dumps([sd, job_type, index]))
"""


def _gsd(args: str, slot: int = 2, **extra: str) -> subprocess.CompletedProcess:
    env = _clean_env(**step_env("localhost,127.0.0.1", "2(x2)", slot=slot, **extra))
    return subprocess.run([sys.executable, "-c", GSD.format(args=args)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_get_server_dictionary_original_keyword_and_auto(tmp_path):
    r = _gsd(", InfinyBand=True", TF_SLURM_IB_TEMPLATE="{host}")  # IB names from a template that resolves
    assert r.returncode == 0, r.stderr
    sd, job_type, index = json.loads(r.stdout.splitlines()[-1])
    assert (job_type, index) == ("worker", 1) and sd["worker"][1].startswith("127.0.0.1:")
    r = _gsd(", InfinyBand=True")  # the original meaning: IB names, forced; 'localhost-ib' does not resolve
    assert r.returncode != 0 and "'127.0.0.1-ib'" in r.stderr and "does not resolve" in r.stderr
    r = _gsd(", InfinyBand=False")  # host names
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])[0]["ps"][0].startswith("localhost:")
    r = _gsd("")  # neither: auto -> host names here, and one line says why
    assert r.returncode == 0, r.stderr
    assert "LOG address policy hostname (auto: InfiniBand name 'localhost-ib' of node localhost" in r.stdout
    assert json.loads(r.stdout.splitlines()[-1])[0]["ps"][0].startswith("localhost:")
    r = _gsd("", TF_SLURM_IB_TEMPLATE="{host}")  # auto, every name resolves -> the template
    assert "LOG address policy template:{host} (auto: the InfiniBand names of all 2 node(s) resolve" in r.stdout
    r = _gsd(", NoIB=True", TF_SLURM_IB_TEMPLATE="{host}")  # today's keyword still forces host names
    assert r.returncode == 0 and "LOG address policy" not in r.stdout
    r = _gsd(", NoIB=True, InfinyBand=True")
    assert r.returncode != 0 and "UsageError: NoIB=True and InfinyBand=True: expected one of them" in r.stderr


# -- hooks in the original forms: where the worker index comes from --------------------------------

def test_task_info_from_plan_and_tf_config():
    plan = localhost_plan(["ps", "worker", "worker"], [1, 2, 3], my_rank=2)
    info = info_from_plan(plan, "GetServerDictionary")
    assert (info.job_type, info.task_index, info.n_ps, info.n_workers, info.worker_index) == ("worker", 1, 1, 2, 1)
    cfg = {"cluster": {"ps": ["a:1"], "chief": ["c:1"], "worker": ["w:1", "w:2"]}, "task": {"type": "worker",
                                                                                           "index": 1}}
    info = info_from_tf_config(cfg)
    assert (info.n_ps, info.n_workers, info.worker_index) == (1, 3, 2)  # chief first, then workers
    assert info_from_tf_config({**cfg, "task": {"type": "ps", "index": 0}}).worker_index is None
    with pytest.raises(UsageError, match="TF_CONFIG task="):
        info_from_tf_config({**cfg, "task": {"type": "worker", "index": 5}})
    with pytest.raises(UsageError, match="expected a JSON object with 'cluster' and 'task'"):
        info_from_tf_config({"cluster": {}})


HOOKS = """
import json, os, sys
from tf_for_slurm import BarrierOnChiefHook, PrintStepHook, QueueManagementHook, create_done_queue
from tf_for_slurm.errors import TfSlurmError
def show(make):
    try:
        h = make()
        print(json.dumps({k: getattr(h, k) for k in ("n_ps", "n_workers", "worker_index", "is_chief", "avoid")
                          if hasattr(h, k)}))
    except TfSlurmError as e:
        print("ERROR " + str(e))
if os.environ.get("GSD"):
    from tf_for_slurm.ServerDictionary import GetServerDictionary
    GetServerDictionary(os.environ["GSD"].split(","), NoIB=True)
show(lambda: QueueManagementHook(NumberOfPS=1, NumberOfWorkers=2))
show(lambda: QueueManagementHook(1, 2))
show(lambda: QueueManagementHook(NumberOfPS=1, NumberOfWorkers=3))
show(lambda: BarrierOnChiefHook(is_chief=False, chief_task_index=0, NumberOfWorkers=2))
show(lambda: BarrierOnChiefHook(is_chief=True, chief_task_index=0, NumberOfWorkers=2))
show(lambda: PrintStepHook(AvoidStep=[10, 90]))
show(lambda: PrintStepHook(AvoidStep="10-90"))
show(lambda: create_done_queue(0))
assert "tensorflow" not in sys.modules
"""


def _hooks(**env: str) -> list:
    r = subprocess.run([sys.executable, "-c", HOOKS], env=_clean_env(**env), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return [line if line.startswith("ERROR") else json.loads(line) for line in r.stdout.splitlines()]


def test_hooks_with_original_arguments_find_the_worker_index_in_tf_config():
    cfg = {"cluster": {"ps": ["a:1"], "worker": ["w:1", "w:2"]}, "task": {"type": "worker", "index": 1}}
    out = _hooks(TF_CONFIG=json.dumps(cfg))
    assert out[0] == {"n_ps": 1, "n_workers": 2, "worker_index": 1}
    assert out[1] == out[0]  # positional counts, as the original allowed
    assert out[2] == "ERROR NumberOfWorkers=3: expected 2, the number in this step (from TF_CONFIG)"
    assert out[3] == {"n_workers": 2, "worker_index": 1, "is_chief": False}
    assert out[4].startswith("ERROR is_chief=True on worker 1 with chief_task_index=0")
    assert out[5] == {"avoid": [10, 90]}
    assert out[6] == "ERROR AvoidStep='10-90': expected None or a pair [first, last] of global steps not to log"
    assert out[7] == "ERROR create_done_queue: expected the number of workers (WorkersNumber, or n_workers)"


def test_hooks_use_the_plan_of_get_server_dictionary_first():
    # slot 1 of ['ps', 'worker', 'worker']: GetServerDictionary's plan says worker 0, the (stale) TF_CONFIG
    # would say worker 1: the plan this process built wins.
    cfg = {"cluster": {"ps": ["a:1"], "worker": ["w:1", "w:2"]}, "task": {"type": "worker", "index": 1}}
    env = step_env("127.0.0.1", "3", slot=1, TF_SLURM_PORT_SCOPE="step")
    out = _hooks(GSD="ps,worker,worker", TF_CONFIG=json.dumps(cfg), **env)
    assert out[0] == {"n_ps": 1, "n_workers": 2, "worker_index": 0}
    assert out[4] == {"n_workers": 2, "worker_index": 0, "is_chief": True}


def test_hooks_from_the_slurm_step_alone():
    out = _hooks(**step_env("127.0.0.1", "3", slot=2, TF_SLURM_PORT_SCOPE="step"))  # default: first task is the ps
    assert out[0] == {"n_ps": 1, "n_workers": 2, "worker_index": 1}


def test_hooks_without_any_step_say_what_to_pass():
    out = _hooks()
    assert out[0].startswith("ERROR QueueManagementHook: this task's place in the cluster is unknown")
    assert "expected worker_index= and the counts" in out[0]
    assert out[3].startswith("ERROR BarrierOnChiefHook: this task's place in the cluster is unknown")
    out = _hooks(TF_CONFIG=json.dumps({"cluster": {"ps": ["a:1"], "worker": ["w:1"]}, "task": {"type": "ps"}}))
    assert out[0] == ("ERROR QueueManagementHook: this task is ps:0 (from TF_CONFIG): expected it only on a "
                      "worker or chief task, or pass worker_index=")


def test_todays_signatures_still_work():
    from tf_for_slurm.runtime import BarrierOnChiefHook, PrintStepHook, QueueManagementHook

    h = QueueManagementHook(1, 3, worker_index=2)
    assert (h.n_ps, h.n_workers, h.worker_index, h.report_in_end) == (1, 3, 2, True)
    b = BarrierOnChiefHook(3, 0, True, timeout_s=5)
    assert (b.n_workers, b.worker_index, b.is_chief, b.timeout_s) == (3, 0, True, 5.0)
    p = PrintStepHook(50, name="w")
    assert (p.every_n_steps, p.per_step) == (50, False)
    with pytest.raises(UsageError, match="n_workers=2 and NumberOfWorkers=3: expected only one of them"):
        QueueManagementHook(1, 2, 0, NumberOfWorkers=3)


def test_package_exports_original_names_without_tensorflow():
    code = ("import sys, tf_for_slurm; assert 'tf_for_slurm.runtime' not in sys.modules; "
            "from tf_for_slurm import (GetServerDictionary, QueueManagementHook, BarrierOnChiefHook, "
            "PrintStepHook, create_done_queue, create_done_queues); "
            "from tf_for_slurm.runtime.hooks import PrintStepHook as P; assert P is PrintStepHook; "
            "assert 'tensorflow' not in sys.modules, 'TF imported'; "
            "import tf_for_slurm as t; assert 'PrintStepHook' in dir(t)\n"
            "try:\n    t.NoSuchName\nexcept AttributeError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "module 'tf_for_slurm' has no attribute 'NoSuchName'"


# -- the example's command line: the seed's flags, no counts, bad counts -----------------------------

def test_example_parses_the_seeds_command_line():
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))  # the example imports its neighbours (defaults, mnist_data)
    from LaunchTFServerWithHooks import list_of_tf_tasks, parse_args

    seed = "-ps 1 -workers 3 --data_dir D --model_dir M -batch_size 50 -Iterations 1000 --NoIB".split()
    a = parse_args(seed)
    assert (a.ps, a.workers, a.batch_size, a.Iterations, a.NoIB) == (1, 3, 50, 1000, True)
    b = parse_args("--ps 1 --workers 3 --data_dir D --model_dir M --batch_size 50 --Iterations 1000 --NoIB".split())
    assert vars(a) == vars(b)
    c = parse_args("--data_dir D --model_dir M".split())
    assert (c.ps, c.workers, c.IB, c.NoIB) == (1, None, "auto", False)
    assert list_of_tf_tasks(1, None, 4) == ["ps", "worker", "worker", "worker"]
    assert list_of_tf_tasks(2, None, 3) == ["ps", "ps", "worker"]
    with pytest.raises(UsageError, match="--NoIB and --IB IB: expected one of them"):
        parse_args("--data_dir D --model_dir M --IB IB --NoIB".split())


def _local_example(args: list, n: int = 3) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tf_for_slurm", "local", "-n", str(n), "--",
           sys.executable, str(EXAMPLE / "LaunchTFServerWithHooks.py"), "--data_dir", "/nonexistent",
           "--model_dir", "/nonexistent/m", *args]
    return subprocess.run(cmd, cwd=str(REPO), env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60)


BAD_COUNTS = [
    (["-ps", "1", "-workers", "3"], "--ps=1 + --workers=3 = 4: expected the number of tasks in the step (3)"),
    (["-ps", "2", "-workers", "2"], "--ps=2 + --workers=2 = 4: expected the number of tasks in the step (3)"),
    (["-ps", "0"], "--ps=0: expected at least 1 parameter server"),
    (["-ps", "3"], "--ps=3 leaves no worker among the step's 3 tasks: expected --ps < 3"),
    (["-workers", "0"], "--workers=0: expected at least 1 worker"),
    (["--ps", "1", "--workers", "1"], "--ps=1 + --workers=1 = 2: expected the number of tasks in the step (3)"),
    (["-ps", "one"], "argument -ps/--ps: invalid int value: 'one'"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args,message", BAD_COUNTS,
                         ids=["workers-too-many", "sum-too-big", "no-ps", "no-worker-left", "no-worker",
                              "sum-too-small", "not-int"])
def test_example_bad_counts_are_one_line_errors(args, message):
    # one task of a 3-task step (the check is the same in every task; the launcher's run is below)
    r = subprocess.run([sys.executable, str(EXAMPLE / "LaunchTFServerWithHooks.py"), "--data_dir", "/nonexistent",
                        "--model_dir", "/nonexistent/m", *args], cwd=str(REPO),
                       env=_clean_env(**step_env("localhost", "3", slot=1)), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "LaunchTFServerWithHooks.py: error:" in lines[0] and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(120)
def test_example_bad_counts_through_the_launcher_are_one_line_errors():
    args, message = BAD_COUNTS[0]
    r = _local_example(args)
    assert r.returncode == 2, r.stdout[-2000:]
    lines = [line for line in r.stdout.splitlines() if "LaunchTFServerWithHooks.py: error:" in line]
    # one line in each task that got that far (the first to exit ends the others)
    assert lines and all(message in line for line in lines), r.stdout[-2000:]
    assert "Traceback" not in r.stdout
