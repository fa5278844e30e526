"""The heterogeneous-job template scripts/tf_slurm_hetjob.sh: ps in component 0, workers in component 1.

Real Slurm (the local 3-node cluster): `sbatch -w node3 : -w node[1-2] tf_slurm_hetjob.sh
tf1_ps_worker.py --steps 40` puts component 0 (the template's one ps) on node3 and component 1 (the
template's `--nodes=2 --ntasks-per-node=1`) on node[1-2]: the component order is opposite to the
node names' order.  (sbatch options without `:` apply to every component: `sbatch -w node3
template` asks for node3 in both, and Slurm refuses it: "Invalid node name specified".)  The
unmodified TF1 script trains; the step's status file (tf_slurm_jobs/<job id>/status.json under the
submit directory) says where every task ran.

No cluster: the template runs under bash with a stand-in srun that records its arguments; every
setting is checked (one line, exit 2, srun never started) and no value is evaluated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_harness import PYTHON, REPO

# the no-cluster half runs side by side in the full command; the real-Slurm test is also `slurm`
pytestmark = pytest.mark.templates

TEMPLATE = REPO / "scripts" / "tf_slurm_hetjob.sh"
TF1 = REPO / "tests" / "unmodified" / "tf1_ps_worker.py"


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_hetjob_template_ps_on_node3_workers_on_node1_and_node2(slurm_cluster, tmp_path):
    env = {"PYTHON": PYTHON, "TF_SLURM_REPO": str(REPO), "IB": "NoIB", "MODEL_DIR": str(tmp_path / "model"),
           "TF_SLURM_JOBS_ROOT": ""}  # the template's default: tf_slurm_jobs/<job id> under the submit directory
    args = ["-w", "node3", ":", "-w", "node[1-2]", str(TEMPLATE), str(TF1), "--steps", "40"]
    job, info = slurm_cluster.sbatch_poll(args, timeout=240, env=env, cwd=str(tmp_path))
    out = tmp_path / f"tf_hetjob-{job}.out"
    log = out.read_text() if out.exists() else ""
    assert info["JobState"] == "COMPLETED", (info, log[-5000:])
    assert f"job {job}: component 0 (ps): nodes node3" in log, log[-5000:]
    assert f"job {job}: component 1 (worker): nodes node[1-2]" in log, log[-5000:]
    assert "srun exit status 0" in log, log[-5000:]
    step = json.loads((tmp_path / "tf_slurm_jobs" / job / "status.json").read_text())
    rows = [dict(zip(step["columns"], row)) for row in step["tasks"]]
    tasks = [(t["role"], t["index"], t["node"], t["status"]) for t in rows]
    assert (step["state"], step["status"]) == ("ended", 0), step
    assert tasks == [("ps", 0, "node3", 0), ("worker", 0, "node1", 0), ("worker", 1, "node2", 0)], (step, log[-5000:])


# -- no cluster: the template under bash with a stand-in srun ------------------------------------
FAKE_SRUN = "#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$FAKE_DIR/srun.args\"\nexit 0\n"


@pytest.fixture
def fake_bin(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakebin")
    for name, text in (("srun", FAKE_SRUN), ("scontrol", "#!/bin/bash\nexit 1\n")):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def run_template(tmp: Path, fake_bin: Path, **env: str) -> subprocess.CompletedProcess:
    (tmp / "train.py").write_text("print('training')\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    base.update({
        "PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp), "PYTHON": sys.executable,
        "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4242", "SLURM_HET_SIZE": "2",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "node3", "SLURM_JOB_NODELIST_HET_GROUP_1": "node[1-2]",
        "SLURM_TASKS_PER_NODE_HET_GROUP_0": "1", "SLURM_TASKS_PER_NODE_HET_GROUP_1": "1(x2)",
        "SLURM_SUBMIT_DIR": str(tmp), "MODEL_DIR": str(tmp / "model"),
    })
    base.update(env)
    return subprocess.run(["bash", str(TEMPLATE), "train.py", "--steps", "3"], env=base, cwd=str(tmp),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(120)
def test_hetjob_template_step_spans_both_components(tmp_path, fake_bin):
    r = run_template(tmp_path, fake_bin)
    assert r.returncode == 0, r.stderr[-2000:]
    args = (tmp_path / "srun.args").read_text().splitlines()
    assert args[0] == "--het-group=0,1" and "--kill-on-bad-exit=1" in args, args
    assert not {"-n", "-c", "--ntasks"} & set(args) and not any(a.startswith(("--mem", "--resv-ports")) for a in args)
    exec_opts = args[args.index("exec") + 1:args.index("--")]
    assert exec_opts[:2] == ["--roles-by-component", "ps,worker"] and "--chief" not in exec_opts, args
    assert args[args.index("--") + 1:] == [sys.executable, "train.py", "--steps", "3"], args
    assert "component 0 (ps): nodes node3, tasks per node 1" in r.stdout, r.stdout
    assert "component 1 (worker): nodes node[1-2], tasks per node 1(x2)" in r.stdout, r.stdout
    assert (tmp_path / "tf_slurm_jobs" / "4242").is_dir()

    run = tmp_path / "chief"
    run.mkdir()
    r = run_template(run, fake_bin, CHIEF="1", COMPONENT_ROLES="ps,worker")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--chief" in (run / "srun.args").read_text().splitlines()


BAD = [("COMPONENT_ROLES", "ps"), ("COMPONENT_ROLES", "ps,,worker"), ("COMPONENT_ROLES", "PS,worker"),
       ("COMPONENT_ROLES", "ps, worker"), ("COMPONENT_ROLES", "ps,worker,worker"), ("CHIEF", "yes"),
       ("IB", "ib"), ("WARN_MARGIN", "1e3"), ("MAX_REQUEUES", "-1"), ("SLURM_HET_SIZE", "1"),
       ("SLURM_HET_SIZE", ""), ("TRAIN_SCRIPT", "")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable,value", BAD, ids=[f"{v}={x!r}" for v, x in BAD])
def test_hetjob_template_refuses_a_bad_setting_in_one_line(variable, value, tmp_path, fake_bin):
    if variable == "TRAIN_SCRIPT":  # no script argument, no TRAIN_SCRIPT
        (tmp_path / "train.py").write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
        r = subprocess.run(["bash", str(TEMPLATE)], env={**env, "PATH": f"{fake_bin}:{os.environ['PATH']}",
                                                         "FAKE_DIR": str(tmp_path), "SLURM_JOB_ID": "1"},
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    else:
        r = run_template(tmp_path, fake_bin, **{variable: value})
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tf_slurm_hetjob.sh: error:"), r.stderr
    assert variable in lines[0] or variable == "TRAIN_SCRIPT", lines
    assert not (tmp_path / "srun.args").exists()


PAYLOADS = ["$(touch {m})", "`touch {m}`", "a[$(touch {m})]"]
VARIABLES = ["COMPONENT_ROLES", "CHIEF", "IB", "WARN_MARGIN", "MAX_REQUEUES", "SLURM_HET_SIZE", "TARGET",
             "MODEL_DIR", "LOG_LEVEL", "SLURM_JOB_NODELIST_HET_GROUP_1", "SLURM_TASKS_PER_NODE_HET_GROUP_1",
             "TF_SLURM_IB_TEMPLATE"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variable", VARIABLES)
def test_hetjob_template_evaluates_no_value(variable, tmp_path, fake_bin):
    for i, payload in enumerate(PAYLOADS):
        marker = tmp_path / f"MARK{i}"
        run = tmp_path / f"run{i}"
        run.mkdir()
        r = run_template(run, fake_bin, **{variable: payload.format(m=marker)})
        assert not marker.exists(), (variable, payload, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
