"""`tf-slurm submit`: the script --dry-run prints (golden files), bad options (one line, exit 2),
hostile values reaching the job literally, sbatch's own errors passed on, what is caught before
submitting (a misspelt script, a job its partition can never start, a python without tf_keras) and
--parsable's stdout.

Stand-ins on PATH play sbatch, scontrol, scancel and srun (they record what they were given); the
real-Slurm runs are in tests/slurm/test_submit_slurm.py.

The golden files (tests/faces/golden/submit_*.txt) are the exact --dry-run output, with this
test's temporary folder written <TMP>.  After a deliberate change to the script, regenerate them
with `UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/faces/test_submit.py -k golden` and review
the diff.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from submit_cases import NODES, PARTITIONS

from tf_for_slurm.host.batch_script import time_limit_seconds

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"

FAKES = {
    # records its argv (NUL-separated: values may hold newlines) and the script on stdin
    "sbatch": """#!/bin/bash
printf '%s\\0' "$@" > "$FAKE_DIR/sbatch.args"
cat > "$FAKE_DIR/sbatch.stdin"
if [[ -n "${FAKE_SBATCH_FAIL:-}" ]]; then printf '%b' "$FAKE_SBATCH_FAIL" >&2; exit 1; fi
calls=$(( $(cat "$FAKE_DIR/sbatch.calls" 2>/dev/null || echo 0) + 1 )); echo $calls > "$FAKE_DIR/sbatch.calls"
if (( calls <= ${FAKE_SBATCH_AWAY:-0} )); then
    echo "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)" >&2; exit 1
fi
echo "4242;cluster"
""",
    # `show partition|node` print $FAKE_PARTITIONS / $FAKE_NODES (files) when set, else fail as without slurmctld
    "scontrol": """#!/bin/bash
printf '%s\\n' "$*" >> "$FAKE_DIR/scontrol.calls"
if [[ "$1" == release ]]; then
    if [[ -n "${FAKE_RELEASE_FAIL:-}" ]]; then echo "scontrol: error: Access/permission denied" >&2; exit 1; fi
    exit 0
fi
if [[ "$1 $2" == "show partition" && -n "${FAKE_PARTITIONS:-}" ]]; then exec cat "$FAKE_PARTITIONS"; fi
if [[ "$1 $2" == "show node" && -n "${FAKE_NODES:-}" ]]; then exec cat "$FAKE_NODES"; fi
exit 1
""",
    # the command's `python` (whatever this machine's PATH holds): this test's interpreter
    "python": f"""#!/bin/sh
exec {shlex.quote(PY)} "$@"
""",
    "scancel": """#!/bin/bash
printf '%s\\n' "$*" >> "$FAKE_DIR/scancel.calls"
""",
    "srun": """#!/bin/bash
printf '%s\\0' "$@" > "$FAKE_DIR/srun.args"
printf '%s' "$TF_SLURM_JOB_DIR" > "$FAKE_DIR/srun.job_dir"
""",
}


@pytest.fixture
def fake(tmp_path):
    """(environment with the stand-ins first on PATH and no TF_SLURM_/SLURM_ variables, record folder);
    the job's folder (tmp_path) holds the script the commands name, train.py."""
    bin_dir, rec = tmp_path / "bin", tmp_path / "rec"
    bin_dir.mkdir()
    rec.mkdir()
    (tmp_path / "train.py").write_text("print('training')\n")
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_SLURM_", "SLURM_"))}
    env.update({"PATH": f"{bin_dir}:{env['PATH']}", "FAKE_DIR": str(rec), "PYTHONPATH": str(ROOT)})
    return env, rec


def submit(*args, env, cwd, timeout=60):
    return subprocess.run([PY, "-m", "tf_for_slurm", "submit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


GOLDEN_CASES = {
    "tf1": ["-N", "3", "--ntasks-per-node", "1", "--ps", "1", "-t", "30", "--", "python", "train.py", "--epochs", "3"],
    "pss_all_options": [
        "-N", "2", "-n", "4", "--tasks", "chief,ps,worker,worker", "-c", "2", "-t", "1-00:00:00", "-p", "gpu,debug",
        "--gpus-per-node", "a100:2", "--mem-per-cpu", "4G", "-A", "proj", "--qos", "high", "-J", "my pss",
        "--exclusive", "--sbatch-arg=--constraint=ib", "--sbatch-arg=--mail-type=END", "--strategy", "pss",
        "--address", "template:{host}-ib", "--checkpoint-dir", "runs/pss", "--target", "500", "--warn-margin", "30",
        "--max-requeues", "3", "--", "python", "tf2_parameter_server.py", "--ps", "1", "--workers", "2"],
    "mwms": ["-n", "2", "--ps", "0", "--", "python", "-u", "mwms.py"],
    "hetjob": ["--roles-by-component", "ps,worker", "--chief", "-t", "2:00:00", "-n", "2", "-p", "cpu", ":", "-N", "2",
               "--ntasks-per-node", "4", "-p", "gpu", "--gpus-per-node", "4", "--", "python", "pss.py"],
    "chief_per_node": ["-N", "2", "--ntasks-per-node", "2", "--ps", "1", "--chief", "--address", "auto", "--",
                       "./run.sh", "it's $HOME"],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_dry_run_golden(case, tmp_path, fake):
    env, rec = fake
    res = submit("--folder", str(tmp_path / "jobs"), "--python", "python3", "--dry-run", *GOLDEN_CASES[case],
                 env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    out = res.stdout.replace(str(tmp_path), "<TMP>")
    path = GOLDEN / f"submit_{case}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(out)
    assert out == path.read_text(), f"--dry-run output differs from {path} (UPDATE_GOLDEN=1 regenerates it)"
    assert not (rec / "sbatch.args").exists() and not (tmp_path / "jobs").exists()  # nothing submitted or made
    # the whole output is a bash script (the plan is comment lines): it parses
    check = subprocess.run(["bash", "-n"], input=res.stdout, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr


BAD = [
    # heterogeneous jobs: ': OPTIONS' per further component, tf-slurm's own options before the first ':'
    (["-n", "1", "--roles-by-component", "ps,worker", ":", "-N", "0"], "--nodes='0'"),
    (["-n", "1", "--roles-by-component", "ps,worker", ":", "--roles-by-component", "x"], "go before the first ':'"),
    (["-n", "1", "--roles-by-component", "ps,worker", ":"], "component 1's options='(none)'"),
    (["-n", "1", "--roles-by-component", "ps,worker,chief", ":", "-n", "2"], "one per component"),
    (["-n", "2", "--roles-by-component", "ps,worker"], "a heterogeneous step"),
    (["-N", "0"], "--nodes='0'"),
    (["-N", "x"], "--nodes='x'"),
    (["-N", "2", "-n", "4", "--ntasks-per-node", "1"], "-n/--ntasks=4"),
    (["-N", "4", "-n", "2"], "-N/--nodes=4"),
    ([], "no task count"),
    (["-t", "1h"], "--time='1h'"),
    (["--mem-per-cpu", "4X"], "--mem-per-cpu='4X'"),
    (["--gpus-per-node", "a:b"], "--gpus-per-node='a:b'"),
    (["-p", "a b"], "--partition='a b'"),
    (["-J", "two\nlines"], "--job-name="),
    (["--sbatch-arg=constraint"], "--sbatch-arg='constraint'"),
    (["--sbatch-arg=--output=x.out"], "--output"),
    (["--sbatch-arg=--out=x.out"], "--output"),
    (["--sbatch-arg=--wrap=hostname"], "--wrap"),
    (["--sbatch-arg=-N2"], "use -N/--nodes"),
    (["--sbatch-arg=--array=1-3"], "--array"),
    (["--ps", "3"], "--ps=3"),
    (["--ps", "x"], "--ps='x'"),
    (["--tasks", "ps,worker"], "--tasks has 2 roles"),
    (["--tasks", "ps,boss,worker"], "--tasks[1]"),
    (["--tasks", "ps,worker,worker", "--ps", "1"], "--tasks and --ps"),
    (["--tasks", "ps,ps,ps"], "worker"),
    (["--target", "0"], "--target='0'"),
    (["--warn-margin", "-1"], "--warn-margin='-1'"),
    (["-t", "1"], "--warn-margin=60: expected fewer seconds than the time limit -t 1 (60 s)"),
    (["-t", "0:30", "--warn-margin", "30"], "--warn-margin=30"),
    (["--max-requeues", "many"], "--max-requeues='many'"),
    (["--spare-nodes", "x"], "--spare-nodes='x'"),
    (["-n", "3", "--spare-nodes", "1"], "--spare-nodes=1: expected -N/--nodes with the same number of tasks on each"),
    (["-N", "2", "-n", "3", "--spare-nodes", "1"], "--spare-nodes=1: expected -N/--nodes with the same number"),
    (["--max-relaunches", "-1"], "--max-relaunches='-1'"),
    (["-N", "3-2"], "-N/--nodes='3-2': expected a node count N >= 1, or a range MIN-MAX with MIN <= MAX"),
    (["-N", "2-x"], "--nodes='2-x': expected a node count N >= 1, or a range MIN-MAX"),
    (["-N", "2-3", "--ntasks-per-node", "1"], "-N/--nodes='2-3': expected a count N with -n/--ntasks or "
                                              "--ntasks-per-node"),
    (["-N", "2-3", "-n", "3"], "-N/--nodes='2-3': expected a count N with -n/--ntasks"),
    (["-N", "2-3", "--spare-nodes", "1"], "--spare-nodes='1': expected 0 with -N MIN-MAX"),
    (["-N", "2-3", "--tasks", "worker,ps,worker", "--min-workers", "2"],
     "-N/--nodes=2-3: on 2 node(s): --tasks has 3 roles for the step's 2 tasks: leaving 1 of its 2 workers out "
     "would leave 1, "
     "below --min-workers 2"),
    (["-N", "1-3", "--tasks", "ps,worker,worker"], "-N/--nodes=1-3: on 1 node(s): --tasks has 3 roles for the step's 1"),
    (["-N", "1-3", "--ps", "1"], "-N/--nodes=1-3: on 1 node(s): --ps=1: expected"),
    (["-N", "2-3", "-p", "cpu", ":", "-N", "2", "--"], "-N/--nodes='2-3': expected one count in a heterogeneous"),
    (["--address", "bogus:x"], "--address='bogus:x'"),
    (["--python", "/nonexistent/python"], "--python='/nonexistent/python'"),
    (["--strategy", "fast"], "--strategy"),
    (["--folder", "a\\b"], "--folder='a\\\\b'"),
    (["--checkpoint-dir", "a\nb"], "--checkpoint-dir="),
]


@pytest.mark.timeout(180)
def test_bad_options_are_one_line_and_exit_2(tmp_path, fake, cli_runs):
    env, rec = fake
    for extra, expected in BAD:  # forked from one server (tests/cli_runs.py): a table of quick refusals
        counts = [] if any(a in extra for a in ("-N", "-n", "--ntasks-per-node")) or not extra else ["-N", "3"]
        res = cli_runs.run(["submit", *counts, *extra, "--", "python", "train.py"], env, cwd=str(tmp_path))
        assert res.returncode == 2, (extra, res.returncode, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tf-slurm submit: error: "), (extra, res.stderr)
        assert expected in lines[0], (extra, expected, lines[0])
        assert "Traceback" not in res.stderr and res.stdout == ""
    res = submit("-N", "3", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "a command after '--'" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (rec / "sbatch.args").exists()  # nothing was submitted


def test_time_limit_seconds():
    cases = {"1": 60, "90": 5400, "1:30": 90, "1:00:00": 3600, "2-3": 183600, "1-2:03": 93780,
             "1-2:3:4": 93784, "0": None, "UNLIMITED": None, "infinite": None}
    assert {text: time_limit_seconds(text) for text in cases} == cases


@pytest.mark.timeout(120)
def test_submit_holds_writes_the_folder_then_releases(tmp_path, fake):
    env, rec = fake
    res = submit("-N", "3", "--ps", "1", "--folder", "jobs", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "jobs" / "4242"
    lines = res.stdout.splitlines()
    assert lines[0] == "Submitted batch job 4242"
    assert f"job folder: {folder} (job.sh; batch log job.out; one log per task task-<rank>.out)" == lines[1]
    assert lines[2] == "plan: 3 tasks: ps 0, worker 0 (chief), worker 1; step ends as tf1 (inferred: ps and no chief)"
    assert "tf-slurm status 4242 --folder" in lines[3]
    args = (rec / "sbatch.args").read_text().split("\0")[:-1]
    assert args[:2] == ["--parsable", "--hold"] and f"--output={tmp_path}/jobs/%j/job.out" in args, args
    assert (folder / "job.sh").read_text() == (rec / "sbatch.stdin").read_text()
    # asked for the partition before (this stand-in fails as without slurmctld: not checked), released after
    assert (rec / "scontrol.calls").read_text() == "show partition -o\nrelease 4242\n"
    assert not (rec / "scancel.calls").exists()


@pytest.mark.timeout(120)
def test_sbatch_error_is_passed_on_in_one_line(tmp_path, fake):
    env, rec = fake
    env["FAKE_SBATCH_FAIL"] = ("sbatch: error: invalid partition specified: nope\n"
                               "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    res = submit("-N", "3", "-p", "nope", "--folder", "jobs", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("tf-slurm submit: error: sbatch: error: invalid partition specified: nope | "
                          "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert list((tmp_path / "jobs").iterdir()) == []  # no job folder
    assert "release" not in (rec / "scontrol.calls").read_text()


@pytest.mark.timeout(120)
def test_sbatch_waits_through_a_controller_outage_with_one_line(tmp_path, fake):
    """sbatch's request never left (connect failure): sent again after 1 s, then 2 s; one line for the outage."""
    env, rec = fake
    res = submit("-N", "2", "--folder", "jobs", "--", "python", "train.py", env={**env, "FAKE_SBATCH_AWAY": "2"},
                 cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (rec / "sbatch.calls").read_text().strip() == "3"
    assert res.stderr.count("sbatch: Slurm's controller does not answer") == 1, res.stderr
    assert "sbatch: Slurm's controller answered again after" in res.stderr, res.stderr
    assert "release 4242" in (rec / "scontrol.calls").read_text()


@pytest.mark.timeout(120)
def test_an_sbatch_that_timed_out_is_not_sent_twice(tmp_path, fake):
    """Socket timed out: the controller may have taken the job; submitting again would make two."""
    env, rec = fake
    env["FAKE_SBATCH_FAIL"] = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"
    res = submit("-N", "2", "--folder", "jobs", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "a held job may have been submitted: see squeue --me" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.timeout(120)
def test_a_failure_after_sbatch_cancels_the_job(tmp_path, fake):
    env, rec = fake
    res = submit("-N", "3", "--folder", "jobs", "--", "python", "train.py", env={**env, "FAKE_RELEASE_FAIL": "1"},
                 cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr == ("tf-slurm submit: error: scontrol release 4242: scontrol: error: Access/permission denied "
                          "(job 4242 cancelled)\n")
    assert (rec / "scancel.calls").read_text() == "4242\n"
    # a folder that exists already (a job id used before) is never mixed into: cancelled too
    (rec / "scancel.calls").unlink()
    res = submit("-N", "3", "--folder", "jobs", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 2 and "exists already" in res.stderr and len(res.stderr.splitlines()) == 1
    assert (rec / "scancel.calls").read_text() == "4242\n"


HOSTILE = "$(touch {m})"


@pytest.mark.timeout(180)
def test_hostile_values_reach_the_job_literally(tmp_path, fake):
    """Every value a user gives is in the script quoted or on sbatch's argv: the script, run under bash
    with the stand-ins, hands srun the command word for word, and no payload ever runs."""
    env, rec = fake
    marker = tmp_path / "MARK"
    payloads = [p.format(m=marker) for p in ("$(touch {m})", "`touch {m}`", "a[$(touch {m})]", "x;touch {m}")]
    command = ["python", "train.py", *payloads, "it's", 'say "hi"', "$HOME", "*", "a b", "two\nlines $(touch "
               + str(marker) + ")", "\\", ""]
    # paths: payloads without '/' (the marker relative to the job's working folder, tmp_path)
    in_name = [p.format(m="MARK") for p in ("$(touch {m})", "`touch {m}`", "a[$(touch {m})]")]
    python = tmp_path / f"py {in_name[0]} 'q'"  # a python whose path is hostile too
    python.write_text(f"#!/bin/sh\nexec {PY} \"$@\"\n")
    python.chmod(0o755)
    folder = tmp_path / f"jobs {in_name[1]}"
    ckpt = f"ck {in_name[2]}"
    res = submit("-N", "3", "--ps", "1", "-J", payloads[0], f"--sbatch-arg=--comment={payloads[3]}",
                 "--folder", str(folder), "--python", str(python), "--checkpoint-dir", ckpt, "--target", "5",
                 "--", *command, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    args = (rec / "sbatch.args").read_text().split("\0")[:-1]
    assert f"--job-name={payloads[0]}" in args and f"--comment={payloads[3]}" in args, args
    assert f"--output={folder}/%j/job.out" in args
    job_dir = folder / "4242"
    job_env = {**env, "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "3", "SLURM_CPUS_PER_TASK": "1",
               "SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_MEM_PER_CPU": "100"}
    run = subprocess.run(["bash", str(job_dir / "job.sh")], env=job_env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert not marker.exists()
    srun = (rec / "srun.args").read_text().split("\0")[:-1]
    at = srun.index("exec")
    assert srun[srun.index("--", at) + 1:] == command, srun
    assert srun[at - 5:at] == [str(python), "-m", "tf_for_slurm", "--log-level", "INFO"], srun
    assert f"--output={folder}/%j/task-%t.out" in srun, srun
    assert (rec / "srun.job_dir").read_text() == str(job_dir)
    assert (tmp_path / ckpt).is_dir()  # the checkpoint folder was made, under its literal name
    assert not marker.exists() and not (tmp_path / "MARK").exists()


@pytest.mark.timeout(120)
def test_spare_nodes_are_allocated_and_left_free_by_the_step(tmp_path, fake):
    """-N 3 --ntasks-per-node 2 --spare-nodes 1: sbatch allocates 4 nodes (8 tasks' worth); the script's
    batch-settings counts the tasks of the first 3, and batch-step gets the spare count."""
    env, rec = fake
    res = submit("-N", "3", "--ntasks-per-node", "2", "-n", "6", "--spare-nodes", "1", "--max-relaunches", "1",
                 "--folder", "jobs", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    args = (rec / "sbatch.args").read_text().split("\0")
    assert "--nodes=4" in args and "--ntasks-per-node=2" in args and "--ntasks=8" in args, args
    assert not any(a in args for a in ("--nodes=3", "--ntasks=6")), args
    script = (tmp_path / "jobs" / "4242" / "job.sh").read_text()
    assert "--spare-nodes 1 \\\n" in script and "--max-relaunches 1 --spare-nodes 1 " in script, script


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n,roles,fewest,note", [
    ("2-3", ["--ps", "1"], None, "layout: Slurm gives 2 to 3 nodes, a task on each (shown: 3)\n"),
    ("2-3", ["--tasks", "worker,ps,worker"], "1",
     "(shown: 3); on 2, --tasks loses its last 1 worker(s) (--min-workers 1)"),
    ("2-4", ["--tasks", "worker,ps,worker,worker", "--min-workers", "1"], "1",
     "(shown: 4); on 2, --tasks loses its last 2 worker(s) (--min-workers 1)"),
])
def test_a_node_range_lets_slurm_give_fewer_nodes(tmp_path, fake, n, roles, fewest, note):
    """-N 2-3 (issue 43 item 4): sbatch gets the range and no task count (a task on each node Slurm gives:
    batch-settings counts them); a role list is shortened on fewer nodes, down to --min-workers (by
    default what MIN nodes keep)."""
    env, rec = fake
    res = submit("-N", n, *roles, "--folder", "jobs", "--dry-run", "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert note in res.stdout, res.stdout
    sbatch_line = next(line for line in res.stdout.splitlines() if line.startswith("#   sbatch "))
    assert f"--nodes={n} " in sbatch_line and "--ntasks" not in sbatch_line, sbatch_line
    assert (f"--min-workers {fewest} " in res.stdout) == (fewest is not None), res.stdout


def test_parsable_prints_only_the_job_id(tmp_path, fake):
    """`JOB=$(tf-slurm submit --parsable ...)` holds the job id, as with sbatch --parsable; the rest is on stderr."""
    env, rec = fake
    res = subprocess.run(["bash", "-c", 'JOB=$("$0" -m tf_for_slurm submit --parsable -N 3 --folder jobs -- python '
                                        'train.py) && echo "job=$JOB"', PY], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "job=4242\n", (res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["job folder", "plan", "see"], lines
    assert "Submitted batch job" not in res.stderr
    assert (tmp_path / "jobs" / "4242" / "job.sh").is_file()


MWMS_FIT = """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(loss="mse")
model.fit(dataset, epochs=3)
"""


@pytest.fixture
def user_files(tmp_path, fake):
    """As a newcomer's folder holds them: the MWMS script, a venv whose python has Keras 3 and no tf_keras
    (a stand-in answering submit's probe), and what `scontrol show partition|node` says (3 nodes x 4 CPUs)."""
    env, rec = fake
    (tmp_path / "train_mwms.py").write_text(MWMS_FIT)
    (tmp_path / "partitions").write_text(PARTITIONS)
    (tmp_path / "nodes").write_text(NODES)
    env = {**env, "FAKE_PARTITIONS": str(tmp_path / "partitions"), "FAKE_NODES": str(tmp_path / "nodes")}
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    probe = '{"have": {"tf_for_slurm": true, "tensorflow": true, "tf_keras": false, "keras": true}, ' \
            '"tensorflow": "2.21.0", "keras": "3.15.1"}'
    (venv / "python").write_text(f"#!/bin/sh\n[ \"$1\" = -c ] && echo '{probe}' && exit 0\n"
                                 f"exec {shlex.quote(PY)} \"$@\"\n")
    (venv / "python").chmod(0o755)
    return env, rec, str(venv / "python")


def _one_line(res, *needles):
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and res.stdout == "" and len(lines) == 1, (res.returncode, res.stdout, res.stderr)
    assert lines[0].startswith("tf-slurm submit: error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.timeout(180)
def test_what_is_caught_before_submitting(tmp_path, user_files):
    """Each as a user types it: one line with the fix, exit 2, nothing submitted."""
    env, rec, k3 = user_files
    jobs = ["--folder", "jobs"]
    _one_line(submit("-N", "3", "--ps", "0", *jobs, "--", "python", "trian_mwms.py", env=env, cwd=tmp_path),
              f"command: 'trian_mwms.py' does not exist in {tmp_path} (the job's working directory)",
              "did you mean 'train_mwms.py'?")
    _one_line(submit("-N", "3", "--ps", "0", *jobs, "--", "pyhton", "train_mwms.py", env=env, cwd=tmp_path),
              "command: 'pyhton' is not a program on PATH", "did you mean 'python'?")
    _one_line(submit("-N", "5", "--ps", "0", *jobs, "--", "python", "train.py", env=env, cwd=tmp_path),
              "-N/--nodes=5: expected at most 3: partition 'debug' has 3 node(s), so the job would pend forever")
    _one_line(submit("-n", "13", "--ps", "0", *jobs, "--", "python", "train.py", env=env, cwd=tmp_path),
              "partition 'debug' has 12 CPUs on 3 node(s)")
    _one_line(submit("-N", "3", "--ps", "0", "--python", k3, *jobs, "--", k3, "train_mwms.py", env=env, cwd=tmp_path),
              f"--python={k3!r}: tf_keras is not installed: Keras 3 `fit` fails under MultiWorkerMirroredStrategy",
              f"fix: {k3} -m pip install --no-deps 'tf-keras~=2.21.0'")
    _one_line(submit("-N", "3", *jobs, "--", "python", "train_mwms.py", env=env, cwd=tmp_path),  # --ps 1 by default
              "train_mwms.py uses MultiWorkerMirroredStrategy, which cannot run with ps tasks (the plan has 1 ps, "
              "the default); fix: --ps 0")
    system = tmp_path / "usr" / "python3"  # a python without tf_for_slurm (a stand-in answering the probe)
    system.parent.mkdir()
    system.write_text("#!/bin/sh\necho '{\"have\": {\"tf_for_slurm\": false}}'\n")
    system.chmod(0o755)
    _one_line(submit("-N", "3", "--python", str(system), *jobs, "--", "python", "train.py", env=env, cwd=tmp_path),
              f"--python={str(system)!r}: expected a python that has tf_for_slurm (every task runs "
              f"`{system} -m tf_for_slurm exec`)")
    assert not (rec / "sbatch.args").exists() and not (tmp_path / "jobs").exists()
    # the same job fits: submitted, scontrol asked for the partition and its nodes
    res = submit("-N", "3", "--ps", "0", *jobs, "--", "python", "train.py", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (rec / "scontrol.calls").read_text().splitlines()[-3:] == ["show partition -o", "show node -o",
                                                                       "release 4242"]


@pytest.mark.timeout(120)
def test_no_checks_and_dry_run_submit_or_show_anyway(tmp_path, user_files):
    env, rec, k3 = user_files
    res = submit("-N", "5", "--dry-run", "--", "python", "trian_mwms.py", env=env, cwd=tmp_path)
    assert res.returncode == 0 and "trian_mwms.py" in res.stdout, res.stderr  # --dry-run asks nothing
    assert not (rec / "scontrol.calls").exists()
    res = submit("-N", "5", "--no-checks", "--folder", "jobs", "--", "python", "trian_mwms.py", env=env, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("Submitted batch job 4242\n"), res.stderr
    assert (rec / "scontrol.calls").read_text() == "release 4242\n"


def test_help_says_the_ps_default_and_the_escape(cli_runs, fake):
    env, _ = fake
    res = cli_runs.run(["submit", "--help"], env)
    text = " ".join(res.stdout.split())
    assert "--ps N number of parameter servers: the first N tasks (default: TF_SLURM_PS, else 1; 0 for " \
           "MultiWorkerMirroredStrategy, which has no ps)" in text, text
    assert "--parsable print only the job id on stdout" in text and "--no-checks submit without the checks" in text
