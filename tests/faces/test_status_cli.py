"""`tf-slurm status` and `tf-slurm logs`: a real step (tf-slurm local) writes its status, the views
read it during the run and after; errors are one line and exit 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from envs import no_slurm_env
from report_shot import batch_json, recorded_job, status_json, timeline_lines

from tf_for_slurm.cli.status import gather, render
from tf_for_slurm.host.scontrol import JobAnswer
from tf_for_slurm.plan.goodput import account, status_line
from tf_for_slurm.plan.job_report import parse_timeline
from tf_for_slurm.supervise.batch_record import BatchRecord

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent.parent

# each task waits (bounded) for the file the test creates, then exits with a status per role/index
TASK = r"""
import os, sys, time
gate, deadline = sys.argv[1], time.monotonic() + 60
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.05)
role, index = os.environ["TF_SLURM_JOB_TYPE"], os.environ["TF_SLURM_TASK_INDEX"]
print(f"{role} {index} done", flush=True)
if os.environ.get("SAY_" + role.upper() + index):  # what this task says on stderr before it exits
    print(os.environ["SAY_" + role.upper() + index], file=sys.stderr, flush=True)
if role == "ps":
    time.sleep(120)  # a ps never ends by itself: the supervisor ends it
sys.exit(int(os.environ.get("FAIL_" + role.upper() + index, "0")))
"""


def cli(runs, *args, env, timeout=60):
    """`python -m tf_for_slurm ARGS`, forked from the cli_runs server (tests/cli_runs.py): the views
    run as they do from a fresh interpreter, without paying its start-up each time."""
    return runs.run(list(args), env, timeout=timeout)


@pytest.fixture
def no_slurm(tmp_path):
    """An environment whose scontrol knows no job (as when Slurm has forgotten it)."""
    return no_slurm_env(tmp_path)


def start_local(env, gate, job_id, extra_env=None, output=None):
    logs = ["--output", output] if output else []  # e.g. the job folder's task-%t.out, as submit's
    return subprocess.Popen([PY, "-m", "tf_for_slurm", "local", "-n", "3", "-N", "3", "--ps", "1", "--job-id", job_id,
                             "--kill-grace", "1", *logs, "--", PY, "-c", TASK, str(gate)], cwd=ROOT,
                            env={**env, **(extra_env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_status(path: Path, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text())
            if cond(data):
                return data
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{path}: not as expected within {timeout} s: {path.read_text() if path.exists() else None}")


@pytest.mark.timeout(90)
def test_status_during_the_run_and_after_a_clean_end(tmp_path, no_slurm, cli_runs):
    gate = tmp_path / "gate"
    proc = start_local(no_slurm, gate, "4242")
    try:
        folder = tmp_path / "jobs" / "4242"
        wait_status(folder / "status.json", lambda d: d["counts"] == {"running": 3})
        live = cli(cli_runs, "status", "4242", "--json", env=no_slurm)  # by job id, under TF_SLURM_JOBS_ROOT
        assert live.returncode == 0, live.stderr
        view = json.loads(live.stdout)
        assert view["slurm"] is None and view["job"] == "4242"
        step = view["step"]
        assert (step["state"], step["strategy"], step["chief"]) == ("running", "tf1", 1)
        assert [(t["role"], t["index"], t["node"], t["state"]) for t in step["tasks"]] == [
            ("ps", 0, "node1", "running"), ("worker", 0, "node2", "running"), ("worker", 1, "node3", "running")]
        table = cli(cli_runs, "status", str(folder), env=no_slurm)
        assert "step 4242.0: tf1, running (3 running)" in table.stdout
    finally:
        gate.write_text("")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "tf-slurm local: job 4242: `tf-slurm status" in err
    after = cli(cli_runs, "status", str(folder), env=no_slurm)
    assert after.returncode == 0, after.stderr
    rows = [line.split() for line in after.stdout.splitlines() if line[:3].strip().isdigit() or line.startswith("*")]
    assert [r[-7:-1] for r in rows] == [["ps", "0", "node1", "ended", "0", "0"],
                                        ["worker", "0", "node2", "exited", "0", "0"],
                                        ["worker", "1", "node3", "exited", "0", "0"]]
    assert "step 4242.0: tf1, ended with status 0 (1 ended, 2 exited)" in after.stdout
    assert "1: tf-slurm: INFO: step 4242.0 (tf1, 3 tasks) ended with status 0" in err  # the summary, in the log


@pytest.mark.timeout(90)
def test_a_failed_worker_is_the_first_failure(tmp_path, no_slurm, cli_runs):
    gate = tmp_path / "gate"
    gate.write_text("")
    proc = start_local(no_slurm, gate, "4343", {"FAIL_WORKER1": "3"})
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    res = cli(cli_runs, "status", "4343", env=no_slurm)
    assert res.returncode == 0, res.stderr
    # named once, in words (no task log here: no --output)
    assert "\nfirst failure: worker 1 on node3 failed (exit 3)\n" in res.stdout
    view = json.loads(cli(cli_runs, "status", "4343", "--json", env=no_slurm).stdout)
    assert view["step"]["status"] == 3 and view["step"]["state"] == "ended"
    assert {t["rank"]: t["state"] for t in view["step"]["tasks"]}[2] == "exited"


FIX = ("MultiWorkerMirroredStrategy cannot run with ps tasks (this step has 1 ps, the default); fix: run with --ps 0 "
       "(TF_SLURM_PS=0, or NUM_PS=0 in the sbatch templates)")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("said,shown", [
    (f"tf-slurm: {FIX}", FIX),  # our fix line, as the exec shim writes it
    ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\nValueError: bad shape (2,)",
     "ValueError: bad shape (2,)"),  # no fix line: the error
])
def test_the_first_failure_shows_what_the_task_said_in_its_log(tmp_path, no_slurm, cli_runs, said, shown):
    gate = tmp_path / "gate"
    gate.write_text("")
    folder = tmp_path / "jobs" / "4545"
    folder.mkdir(parents=True)  # as submit makes it, before the tasks write their logs in it
    proc = start_local(no_slurm, gate, "4545", {"FAIL_WORKER1": "1", "SAY_WORKER1": said},
                       output=str(folder / "task-%t.out"))
    proc.communicate(timeout=60)
    assert proc.returncode == 1
    res = cli(cli_runs, "status", "4545", env=no_slurm)
    assert res.returncode == 0, res.stderr
    first = [line for line in res.stdout.splitlines() if line.startswith("first failure: ")]
    assert first == [f"first failure: worker 1 on node3 failed (exit 1): {shown}"], res.stdout
    # the step's end line, in the chief's log, says the same once
    chief_log = (folder / "task-1.out").read_text().splitlines()
    end = [line for line in chief_log if "ended with status 1" in line]
    assert len(end) == 1 and end[0].endswith(f" s: worker 1 on node3 failed (exit 1): {shown}"), end
    assert not [line for line in chief_log if "first to end: worker 1" in line]  # the same task: not said twice


def test_status_reads_the_failing_tasks_log_when_the_hub_could_not(tmp_path):
    # the hub read nothing (the log was not there yet, or came from another node late): status reads it
    step = {"job": "9", "step": "0", "strategy": "mwms", "state": "ended", "status": 1, "updated_at": time.time(),
            "counts": {"exited": 2}, "chief": 0, "tasks": [
                {"rank": 0, "role": "worker", "index": 0, "node": "n1", "state": "exited", "status": 1, "restarts": 0},
                {"rank": 1, "role": "worker", "index": 1, "node": "n2", "state": "ended", "status": 1, "restarts": 0}],
            "first_failure": {"rank": 0, "role": "worker", "index": 0, "node": "n1", "status": 1,
                              "reason": "worker 0 on n1 failed (exit 1)", "note": None, "detail": None}}
    (tmp_path / "status.json").write_text(json.dumps(step))
    (tmp_path / "task-0.out").write_text(f"tf-slurm: {FIX}\n")
    view = gather(str(tmp_path), "9", lambda job: JobAnswer())
    assert view["step"]["first_failure"]["detail"] == FIX
    assert f"first failure: worker 0 on n1 failed (exit 1): {FIX}" in render(view, time.time()).splitlines()
    (tmp_path / "task-0.out").write_text("it printed nothing we know\n")  # then: where to read more
    view = gather(str(tmp_path), "9", lambda job: JobAnswer())
    assert "first failure: worker 0 on n1 failed (exit 1) (its log: tf-slurm logs 9 --task 0)" in render(
        view, time.time()).splitlines()


def test_status_names_the_lost_worker_the_step_went_on_without(tmp_path):
    at = time.time()
    step = {"job": "9", "step": "0", "strategy": "pss", "state": "running", "status": None, "updated_at": at,
            "counts": {"running": 3, "lost": 1}, "chief": 0,
            "tasks": [[0, "chief", 0, "n1", "running", None, 0, at], [1, "ps", 0, "n1", "running", None, 0, at],
                      [2, "worker", 0, "n2", "running", None, 0, at], [3, "worker", 1, "n3", "lost", None, 0, at]],
            "lost": [{"rank": 3, "role": "worker", "index": 1, "node": "n3", "at": at,
                      "reason": "worker 1 on n3 was lost (no word from its supervisor for 10.2 s)"}]}
    (tmp_path / "status.json").write_text(json.dumps(step))
    lines = render(gather(str(tmp_path), "9", lambda job: JobAnswer()), at).splitlines()
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    assert f"lost nodes: went on with 1 of 2 workers (worker 1 on n3 lost at {clock})" in lines, lines


@pytest.mark.parametrize("slurm,line", [
    ({"JobState": "PENDING", "NodeList": "", "RunTime": "00:00:00", "TimeLimit": "01:00:00", "Restarts": "0",
      "Reason": "PartitionNodeLimit"},
     "job 99: PENDING: it asks for more nodes than its partition allows: it will never start as it is (fewer nodes, "
     "or another --partition) (PartitionNodeLimit); time limit 01:00:00, requeued 0 time(s)"),
    ({"JobState": "PENDING", "NodeList": "(null)", "TimeLimit": "00:10:00", "Restarts": "1", "Reason": "Priority"},
     "job 99: PENDING: waiting for its turn: jobs of higher priority go first (Priority); time limit 00:10:00, "
     "requeued 1 time(s)"),
    ({"JobState": "PENDING", "NodeList": "", "TimeLimit": "00:10:00", "Reason": "NewCode"},
     "job 99: PENDING: (NewCode); time limit 00:10:00, requeued 0 time(s)"),
    ({"JobState": "FAILED", "NodeList": "node[1-2]", "RunTime": "00:00:09", "TimeLimit": "00:10:00", "Restarts": "0",
      "Reason": "NonZeroExitCode"},
     "job 99: FAILED on node[1-2], run time 00:00:09 of 00:10:00, requeued 0 time(s); a task exited non-zero "
     "(NonZeroExitCode)"),
])
def test_slurms_line_says_why_a_job_waits_in_words(tmp_path, slurm, line):
    view = gather(str(tmp_path), "99", lambda job: JobAnswer(slurm))
    assert render(view, time.time()).splitlines()[0] == line


def test_status_shows_slurm_and_the_checkpoint_against_the_target(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-420"\n')
    (tmp_path / "batch.json").write_text(json.dumps({"job": "99", "run": 2, "target": 600,
                                                     "checkpoint_dir": str(tmp_path / "ckpt")}))
    slurm = {"JobState": "RUNNING", "NodeList": "node[1-3]", "RunTime": "00:01:02", "TimeLimit": "00:10:00",
             "Restarts": "1", "Reason": "None", "Command": "x"}
    view = gather(str(tmp_path), "99", lambda job: JobAnswer(slurm if job == "99" else None))
    text = render(view, time.time())
    assert text.splitlines()[:2] == [
        "job 99: RUNNING on node[1-3], run time 00:01:02 of 00:10:00, requeued 1 time(s)",
        "run 2; checkpoint at step 420 of target 600"]
    assert "no step status yet" in text


def test_logs_of_a_role_a_task_and_the_batch_log(tmp_path, no_slurm, cli_runs):
    folder = tmp_path / "77"
    folder.mkdir()
    # a step whose hub stopped writing long ago (killed): --follow must not wait for it
    (folder / "status.json").write_text(json.dumps({"state": "running", "updated_at": time.time() - 100, "tasks": [
        {"rank": 0, "role": "ps", "index": 0}, {"rank": 1, "role": "worker", "index": 0},
        {"rank": 2, "role": "worker", "index": 1}]}))
    for rank in range(3):
        (folder / f"task-{rank}.out").write_text("".join(f"task {rank} line {i}\n" for i in range(30)))
    (folder / "job.out").write_text("batch line\n")
    res = cli(cli_runs, "logs", str(folder), "--role", "ps", "-n", "2", env=no_slurm)
    assert (res.returncode, res.stdout) == (0, "task 0 line 28\ntask 0 line 29\n"), res.stderr
    res = cli(cli_runs, "logs", str(folder), "--role", "worker", "-n", "1", env=no_slurm)
    assert res.stdout == (f"==> {folder}/task-1.out <==\ntask 1 line 29\n==> {folder}/task-2.out <==\n"
                          "task 2 line 29\n")
    assert cli(cli_runs, "logs", str(folder), "--task", "2", "-n", "0", env=no_slurm).stdout.count("\n") == 30
    assert cli(cli_runs, "logs", str(folder), env=no_slurm).stdout == "batch line\n"
    res = cli(cli_runs, "logs", str(folder), "--role", "worker", "--index", "1", "--follow", env=no_slurm, timeout=30)
    assert res.returncode == 0 and res.stdout.endswith("task 2 line 29\n")  # the job is over: follow ends


@pytest.mark.parametrize("args,message", [
    (["status", "12345"], "JOB=12345: no job folder"),
    (["status", "not/a/job"], "JOB='not/a/job': expected a job id or a job folder"),
    (["status", "1", "--watch", "0"], "--watch=0.0: expected seconds between 0.2 and 3600"),
    (["logs", "12345"], "JOB=12345: no job folder"),
    (["logs", ".", "--index", "1"], "--index given without --role"),
    (["logs", ".", "--task", "-1"], "--task=-1: expected a rank >= 0"),
    (["logs", ".", "--task", "3"], "no log file ./task-3.out (yet)"),
    (["logs", ".", "--role", "ps"], "--role ps: no status.json in . yet"),
])
def test_bad_arguments_are_one_line_exit_2(args, message, tmp_path, no_slurm, cli_runs):
    res = cli(cli_runs, *args, env={**no_slurm, "TF_SLURM_JOBS_ROOT": str(tmp_path)})
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_status_lists_the_jobs_lost_nodes_relaunches_and_requeues_in_order(tmp_path, monkeypatch):
    """batch.json carries the job's earlier runs: run 1 lost node2 (relaunched on the spare), then node3
    (no healthy node left: requeued); run 2 lost node1 and was relaunched."""
    monkeypatch.setenv("TF_SLURM_JOB_DIR", str(tmp_path))
    monkeypatch.delenv("TF_SLURM_STATUS_FILE", raising=False)
    said = []
    other = BatchRecord("98", 0, 10, None, None, None, say=said.append)  # another job's file is not carried
    other.end(0, None, "done", requeued=False)
    first = BatchRecord("99", 0, 10, 600, None, None, say=said.append)
    assert first.data["history"] == []
    first.relaunched(["node2"], ["node1", "node3"], ["node3"], 200)
    first.end(69, 300, "the step failed with status 69 (a task was lost): requeue 1 of at most 10", requeued=True)
    second = BatchRecord("99", 1, 10, 600, None, 300, say=said.append)
    second.relaunched(["node1"], ["node4", "node5"], [], 400)
    second.workers(3, 3)
    assert second.fewer_workers() == ""
    second.relaunched(["node4"], ["node5"], [], 500, workers=2)  # no spare left: fewer workers (--min-workers)
    second.workers(3, 2)
    assert second.fewer_workers() == "with 2 of 3 workers from global step 500"  # batch-step's end line says it
    assert said == []
    lines = render(gather(str(tmp_path), "99", lambda job: JobAnswer()), time.time()).splitlines()
    history = [line.split(" ", 3)[3] for line in lines if line.startswith("  ")]
    assert history == ["run 1: lost node2; relaunched on node1,node3, node3 in place",
                       "run 1: requeued: the step failed with status 69 (a task was lost): requeue 1 of at most 10",
                       "run 2: lost node1; relaunched on node4,node5",
                       "run 2: lost node4; relaunched on node5, 2 of 3 workers"], lines


def test_status_says_a_run_started_with_fewer_workers_than_its_role_list(tmp_path, monkeypatch):
    """issue 43 item 4: Slurm's --nodes=MIN-MAX started the run on fewer nodes than the list names."""
    monkeypatch.setenv("TF_SLURM_JOB_DIR", str(tmp_path))
    monkeypatch.delenv("TF_SLURM_STATUS_FILE", raising=False)
    record = BatchRecord("97", 0, 10, None, None, None, say=pytest.fail)
    record.workers(3, 2, first=True)
    assert record.fewer_workers() == "with 2 of 3 workers"
    lines = render(gather(str(tmp_path), "97", lambda job: JobAnswer()), time.time()).splitlines()
    history = [line.split(" ", 3)[3] for line in lines if line.startswith("  ")]
    assert history == ["run 1: started with 2 of 3 workers (an allocation smaller than the role list)"], lines


DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"  # Slurm 22.05, exit 1


def slurm_stand_ins(tmp_path, scontrol_body):
    """An environment whose scontrol runs `scontrol_body` and whose squeue says the controller is down."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("scontrol", scontrol_body), ("squeue", f"echo '{DOWN}' >&2\nexit 1\n")):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TF_SLURM_JOBS_ROOT": str(tmp_path / "jobs")}


def write_job_folder(folder, state, updated_at):
    folder.mkdir(parents=True)
    step = {"job": "4646", "step": "0", "strategy": "tf1", "state": state, "status": 0 if state == "ended" else None,
            "updated_at": updated_at, "counts": {"running": 2}, "chief": 1, "first_failure": None, "lost": [],
            "tasks": [[0, "ps", 0, "node1", "running", None, 0, updated_at],
                      [1, "worker", 0, "node2", "running", None, 0, updated_at]]}
    (folder / "status.json").write_text(json.dumps(step))
    earlier = {"run": 1, "state": "requeued", "ended_at": updated_at - 60,
               "decision": "the time limit is near: requeue 1"}
    (folder / "batch.json").write_text(json.dumps({"job": "4646", "run": 2, "target": 600, "history": [earlier]}))


def test_a_controller_that_does_not_answer_is_said_and_the_folder_still_shown(tmp_path, cli_runs):
    env = slurm_stand_ins(tmp_path, f"echo '{DOWN}' >&2\nexit 1\n")
    write_job_folder(tmp_path / "jobs" / "4646", "running", time.time())
    res = cli(cli_runs, "status", "4646", env=env)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"job 4646: Slurm's controller does not answer ({DOWN}); what the job folder knows follows"
    assert "Slurm does not know it" not in res.stdout
    assert lines[1] == "run 2; checkpoint at step none of target 600" and "run 1: requeued: the time limit" in lines[2]
    assert lines[3] == "step 4646.0: tf1, running (2 running)"
    assert [line.split()[-7:-2] for line in lines[4:] if line[:3].strip().isdigit() or line.startswith("*")] == [
        ["ps", "0", "node1", "running", "-"], ["worker", "0", "node2", "running", "-"]]
    view = json.loads(cli(cli_runs, "status", "4646", "--json", env=env).stdout)
    assert (view["slurm"], view["slurm_away"]) == (None, DOWN)
    # Slurm answered, and does not know the job: that is said as before
    forgot = slurm_stand_ins(tmp_path, "echo 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    res = cli(cli_runs, "status", "4646", env=forgot)
    assert res.stdout.splitlines()[0] == "job 4646: Slurm does not know it (ended a while ago, or not a Slurm job)"
    assert json.loads(cli(cli_runs, "status", "4646", "--json", env=forgot).stdout)["slurm_away"] is None


def _slurm_time(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


@pytest.mark.parametrize("ended_after,state", [
    (300, "COMPLETED (Slurm: TIMEOUT; the step had ended 0 at {clock}, before the time limit; Slurm's controller "
          "was away when the job ended)"),
    (601, "TIMEOUT"),  # the step ended after the time limit: Slurm's word stands
])
def test_a_timeout_slurm_recorded_for_a_step_that_had_ended_says_what_it_was(tmp_path, cli_runs, ended_after, state):
    """issue 44: the job's step had ended (batch-step decided 'ended', status 0) but Slurm's controller was
    away as the job ended, and Slurm recorded it TIMEOUT at its limit; status says what the folder knows,
    Slurm's word beside it."""
    start = float(int(time.time()) - 700)  # a 10-minute job, its limit 100 s ago
    env = slurm_stand_ins(tmp_path, "echo 'JobId=4949 JobName=train JobState=TIMEOUT Reason=TimeLimit "
                                    "Dependency=(null) Restarts=0 RunTime=00:10:00 TimeLimit=00:10:00 "
                                    f"StartTime={_slurm_time(start)} EndTime={_slurm_time(start + 660)} "
                                    "NodeList=node[1-2]'\n")
    folder = tmp_path / "jobs" / "4949"
    write_job_folder(folder, "ended", start + ended_after)
    step = json.loads((folder / "status.json").read_text())
    step.update(job="4949", decided_at=start + ended_after, counts={"exited": 2},
                tasks=[row[:4] + ["exited", 0] + row[6:] for row in step["tasks"]])
    (folder / "status.json").write_text(json.dumps(step))
    (folder / "batch.json").write_text(json.dumps({
        "job": "4949", "run": 1, "target": 600, "started_at": start + 1, "state": "ended", "status": 0,
        "ended_at": start + ended_after + 2, "decision": "training ended without a time-limit warning",
        "history": []}))
    res = cli(cli_runs, "status", "4949", env=env)
    assert res.returncode == 0, res.stderr
    why = "Slurm's reason: it reached its time limit (TimeLimit)" if state != "TIMEOUT" else \
        "it reached its time limit (TimeLimit)"
    clock = time.strftime("%H:%M:%S", time.localtime(start + ended_after))
    assert res.stdout.splitlines()[0] == (f"job 4949: {state.format(clock=clock)} on node[1-2], run time 00:10:00 of "
                                          f"00:10:00, requeued 0 time(s); {why}"), res.stdout
    assert "step 4949.0: tf1, ended with status 0" in res.stdout
    view = json.loads(cli(cli_runs, "status", "4949", "--json", env=env).stdout)
    assert (view["slurm"]["JobState"], view["slurm"]["StartTime"]) == ("TIMEOUT", _slurm_time(start))


def test_the_goodput_line_once_training_started(tmp_path, no_slurm, cli_runs):
    """Before any task reported a step: no goodput line, "goodput": null.  The recorded job (requeued,
    relaunched, ended): the account's line right after the training line, once; --json has the account, as
    plan.goodput makes it of the same files, ended at batch.json's ended_at (not now)."""
    write_job_folder(tmp_path / "jobs" / "4646", "running", time.time())
    step = json.loads((tmp_path / "jobs" / "4646" / "status.json").read_text())
    for progress in (None, {"1": {"step": None, "history": []}}):  # nothing yet; a task with no step yet
        if progress is not None:
            step["progress"] = progress
            (tmp_path / "jobs" / "4646" / "status.json").write_text(json.dumps(step))
        res = cli(cli_runs, "status", "4646", env=no_slurm)
        assert res.returncode == 0 and "goodput" not in res.stdout, res.stdout
        view = json.loads(cli(cli_runs, "status", "4646", "--json", env=no_slurm).stdout)
        assert view["goodput"] is None and view["goodput_line"] is None
    recorded_job(tmp_path / "jobs" / "4242")
    res = cli(cli_runs, "status", "4242", env=no_slurm)
    assert res.returncode == 0, res.stderr
    expected = account("4242", status_json(), batch_json(), parse_timeline("\n".join(timeline_lines()), 20_000),
                       batch_json()["ended_at"])
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("training: step 800 of 800"))
    assert lines[at + 1] == status_line(expected) and lines[at + 1].startswith("goodput ")
    assert sum(line.startswith("goodput ") for line in lines) == 1, res.stdout
    view = json.loads(cli(cli_runs, "status", "4242", "--json", env=no_slurm).stdout)
    assert view["goodput"] == json.loads(json.dumps(expected.to_json()))
    assert view["goodput_line"] == lines[at + 1]
    assert isinstance(view["step"]["tasks"][0], dict)  # the rows still dicts for people and scripts


def test_no_folder_here_and_no_controller_to_ask_is_one_line(tmp_path, cli_runs):
    env = slurm_stand_ins(tmp_path, f"echo '{DOWN}' >&2\nexit 1\n")
    res = cli(cli_runs, "status", "4747", env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "JOB=4747: no job folder" in res.stderr and f"Slurm's controller does not answer ({DOWN})" in res.stderr


@pytest.mark.timeout(60)
def test_watch_redraws_through_an_outage_until_slurm_answers(tmp_path, cli_runs):
    # the step's file says ended: with Slurm silent, that is no proof the job ended (batch-step may requeue
    # it), so --watch goes on until Slurm answers; here, from its 4th call on, with the job COMPLETED
    calls = tmp_path / "calls"
    env = slurm_stand_ins(tmp_path, f"echo x >> {calls}\n"
                                    f"if [ $(wc -l < {calls}) -lt 4 ]; then echo '{DOWN}' >&2; exit 1; fi\n"
                                    "echo 'JobId=4646 JobState=COMPLETED Reason=None RunTime=00:00:09 "
                                    "TimeLimit=00:10:00 Restarts=1 NodeList=node[1-2]'\n")
    write_job_folder(tmp_path / "jobs" / "4646", "ended", time.time() - 100)
    (tmp_path / "jobs" / "4646" / "status.json").write_text(
        (tmp_path / "jobs" / "4646" / "status.json").read_text().replace('"running"', '"exited"'))
    res = cli(cli_runs, "status", "4646", "--watch", "0.2", env=env, timeout=30)
    assert res.returncode == 0, res.stderr
    heads = [line for line in res.stdout.splitlines() if line.startswith("job 4646: ")]
    assert heads[:-1] == [f"job 4646: Slurm's controller does not answer ({DOWN}); what the job folder knows "
                          "follows"] * 3, res.stdout
    assert heads[-1].startswith("job 4646: COMPLETED on node[1-2]"), res.stdout
    assert res.stdout.count("step 4646.0: tf1, ended with status 0") == 4


@pytest.mark.timeout(90)
def test_logs_follow_goes_on_through_an_outage_until_slurm_answers(tmp_path, cli_runs):
    """The step's file says ended, but Slurm is silent (batch-step may yet requeue): --follow goes on."""
    calls = tmp_path / "calls"
    env = slurm_stand_ins(tmp_path, f"echo x >> {calls}\n"
                                    f"if [ $(wc -l < {calls}) -lt 3 ]; then echo '{DOWN}' >&2; exit 1; fi\n"
                                    "echo 'JobId=4646 JobState=COMPLETED Reason=None NodeList=node[1-2]'\n")
    write_job_folder(tmp_path / "jobs" / "4646", "ended", time.time() - 100)
    (tmp_path / "jobs" / "4646" / "task-0.out").write_text("ps line\n")
    res = cli(cli_runs, "logs", "4646", "--task", "0", "--follow", env=env, timeout=60)
    assert res.returncode == 0 and res.stdout == "ps line\n", res.stderr
    assert calls.read_text().count("x") == 3  # asked again after each unanswered question, until COMPLETED


RESOLVE = ("tf-slurm exec: error: address host 'node{n}.nowhere.invalid' of worker:{i} (rank {r}, node node{n}) does "
           "not resolve (WHY): expected a resolvable name (check TF_SLURM_ADDRESS / the IB "
           "template)")


@pytest.mark.timeout(90)
def test_tasks_that_failed_before_the_step_status_say_why(tmp_path, no_slurm, cli_runs):
    # every task's exec fails on an address that does not resolve: no status.json, the logs say why
    folder = tmp_path / "jobs" / "4848"
    folder.mkdir(parents=True)
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "local", "-n", "2", "-N", "2", "--job-id", "4848",
                             "--slurm-env-only", "--output", str(folder / "task-%t.out"), "--", PY, "-m",
                             "tf_for_slurm", "exec", "--ps", "0", "--address", "template:{host}.nowhere.invalid",
                             "--", PY, "-c", "print('never')"], cwd=ROOT, env=no_slurm, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert not (folder / "status.json").exists()
    res = cli(cli_runs, "status", "4848", env=no_slurm)
    assert res.returncode == 0, res.stderr
    assert "no step status yet" not in res.stdout
    # the first task to fail gets the other ended, maybe before it wrote its own line: one or both say it
    said = [r for r in (0, 1) if "does not resolve" in (folder / f"task-{r}.out").read_text()]
    assert said, err
    # the resolver's own words differ with the network ('Name or service not known', 'Temporary failure...')
    shown = [re.sub(r"does not resolve \([^)]*\)", "does not resolve (WHY)", line) for line in res.stdout.splitlines()]
    assert shown[1:] == [
        f"no step status in {folder}: the tasks failed before it was written; their logs say:",
        *(f"  task {r}: " + RESOLVE.format(n=r + 1, i=r, r=r) for r in said),
        f"  (the whole log: tf-slurm logs 4848 --task {said[0]})"], res.stdout
    view = json.loads(cli(cli_runs, "status", "4848", "--json", env=no_slurm).stdout)
    assert [(e["rank"], e["log"]) for e in view["early_failures"]] == [(r, str(folder / f"task-{r}.out"))
                                                                      for r in said]


def test_a_heterogeneous_jobs_batch_log_and_the_batch_log_alone(tmp_path):
    # srun -l's labelled lines in job.out (a heterogeneous job: no task-RANK.out)
    (tmp_path / "job.out").write_text(
        "job 9: component 0: nodes node1, tasks per node 1\n"
        f" 0: {RESOLVE.format(n=1, i=0, r=0)}\n"
        " 1: Traceback (most recent call last):\n 1:   File \"x.py\", line 1, in <module>\n 1: OSError: no GPU\n"
        "srun: error: node1: task 0: Exited with exit code 2\n")
    lines = render(gather(str(tmp_path), "9", lambda job: JobAnswer()), time.time()).splitlines()
    assert lines[1:] == [f"no step status in {tmp_path}: the tasks failed before it was written; their logs say:",
                         "  task 0: " + RESOLVE.format(n=1, i=0, r=0), "  task 1: OSError: no GPU",
                         "  (the whole log: tf-slurm logs 9 --task 0)"], lines
    # nothing from a task: the batch log's own error (here batch-step's)
    (tmp_path / "job.out").write_text("job 9: 2 tasks\ntf-slurm batch-step: error: TF_SLURM_X=y: expected z\n")
    lines = render(gather(str(tmp_path), "9", lambda job: JobAnswer()), time.time()).splitlines()
    assert lines[1:] == [f"no step status in {tmp_path}: the batch log says:",
                         "  batch log: tf-slurm batch-step: error: TF_SLURM_X=y: expected z",
                         "  (the whole log: tf-slurm logs 9)"], lines
    (tmp_path / "job.out").write_text("job 9: 2 tasks\n")  # nothing said: as before
    assert render(gather(str(tmp_path), "9", lambda job: JobAnswer()), time.time()).splitlines()[1] == \
        f"no step status yet in {tmp_path} (the step has not started, or exec wrote none)"


def test_many_tasks_that_said_why_show_three_and_a_count(tmp_path):
    for rank in range(5):
        (tmp_path / f"task-{rank}.out").write_text(f"tf-slurm exec: error: task {rank} cannot\n")
    (tmp_path / "task-5.out").write_text("it said nothing we know\n")
    lines = render(gather(str(tmp_path), "9", lambda job: JobAnswer()), time.time()).splitlines()
    assert lines[2:] == [f"  task {r}: tf-slurm exec: error: task {r} cannot" for r in range(3)] + [
        "  (2 more; the whole log: tf-slurm logs 9 --task 0)"], lines
