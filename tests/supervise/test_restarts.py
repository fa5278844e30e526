"""Restarts in place under `tf-slurm exec` (no TensorFlow: shell commands stand in for tasks).

Every task is started as `tf-slurm exec` directly, as srun would, with a hard timeout: a worker
whose command SIGKILLs itself is restarted by its supervisor (same rank, environment), a crash
loop ends the step naming the task, and a status the policy does not retry fails the step as before.
Nothing here waits on a clock: each command waits for files the others write.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from envs import step_env
from tf_for_slurm.plan.step_timeline import parse_line

pytestmark = pytest.mark.procs  # real processes on real timers: left out of the fast subset (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
PSS = "ps,chief,worker,worker"  # rank 3 is worker 1 (node4)


def run_step(tmp_path: Path, roles: str, body: str, *exec_args: str, extra=None, timeout: float = 60) -> list:
    """Start every task as `tf-slurm exec EXEC_ARGS -- sh -c BODY` and wait; each task's stderr in
    tmp_path/err.RANK. Returns the exit statuses by rank."""
    return wait_step(start_step(tmp_path, roles, body, *exec_args, extra=extra), timeout, tmp_path)


def start_step(tmp_path: Path, roles: str, body: str, *exec_args: str, extra=None) -> list:
    n = len(roles.split(","))
    marker = f"m{uuid.uuid4().hex}"
    job = str(int(time.time() * 1000) % 9_000_000 + 1_000_000)
    procs = []
    for slot in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM", "GRPC_FAIL_FAST"))}
        env.update(step_env(f"node[1-{n}]", f"1(x{n})", slot=slot, job_id=job, TF_SLURM_ADDRESS="template:127.0.0.1",
                            TF_SLURM_PORT_SCOPE="step", TF_SLURM_TASKS=roles, TF_SLURM_LOG_LEVEL="INFO",
                            **(extra or {})))
        procs.append(subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", *exec_args, "--", "sh", "-c", body, marker],
                                      env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=(tmp_path / f"err.{slot}").open("w"), start_new_session=True))
    return procs


def wait_step(procs: list, timeout: float, logs: Path = None) -> list:
    end = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                text = "".join(f"{f.name}:\n{f.read_text()}" for f in sorted(logs.glob("err.*"))) if logs else ""
                raise AssertionError(f"task pid {p.pid} still running {timeout} s on\n{text}") from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return [p.returncode for p in procs]


def err(tmp_path: Path, rank: int) -> str:
    return (tmp_path / f"err.{rank}").read_text()


# worker 1's command: the first run SIGKILLs itself, a second one runs until it is ended
ONCE = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && {{ '
        '[ -f {d}/ran ] && {{ echo "$TF_CONFIG" > {d}/again.tmp; mv {d}/again.tmp {d}/again; exec sleep 600; }}; '
        'echo "$TF_CONFIG" > {d}/first; touch {d}/ran; kill -9 $$; }}; ')
# the coordinator (pss chief) finishes once worker 1 runs again; everyone else serves
CHIEF_WAITS = ('[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ echo "$GRPC_FAIL_FAST" > {d}/grpc; '
               'until [ -f {d}/again ]; do sleep 0.05; done; exit 0; }}; exec sleep 600')


@pytest.mark.timeout(90)
def test_a_sigkilled_pss_worker_is_restarted_in_place_and_the_step_ends_0(tmp_path):
    body = ONCE.format(d=tmp_path) + CHIEF_WAITS.format(d=tmp_path)
    codes = run_step(tmp_path, PSS, body, "--max-restarts", "2", "--strategy", "pss",
                     extra={"TF_SLURM_STATUS_FILE": str(tmp_path / "status.json")})
    hub = err(tmp_path, 1)
    assert codes == [0, 0, 0, 0], hub + err(tmp_path, 3)
    assert "restarting worker 1 (rank 3, node4) in place in 1 s: exited with status 137 (signal 9); " \
           "attempt 1 of 2 (step: restart 1 of 2)" in hub, hub
    assert "worker 1 (rank 3, node4) is running again" in hub, hub
    assert "command started again (restart 1 of this task)" in err(tmp_path, 3)
    # the same TF_CONFIG (rank, address, port) the second time; pss tasks fail fast on gRPC errors
    assert (tmp_path / "first").read_text() == (tmp_path / "again").read_text()
    assert (tmp_path / "grpc").read_text().strip() == "use_caller"
    status = json.loads((tmp_path / "status.json").read_text())
    restarts = {row[0]: row[status["columns"].index("restarts")] for row in status["tasks"]}
    assert restarts == {0: 0, 1: 0, 2: 0, 3: 1}
    assert "restarts: 1" in hub
    # the timeline beside the status file: the step, every task's start, the worker's restart and second
    # start, each task's end, the step's end, in order (plan.step_timeline, for `tf-slurm report`)
    events = [parse_line(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    seen = [(e["event"], e["rank"]) for e in events]
    assert seen[0] == ("step_start", None) and seen[-1] == ("step_end", None), seen
    assert events[-1]["status"] == 0 and events[0]["detail"] == "pss"
    assert sorted(r for e, r in seen if e == "start") == [0, 1, 2, 3, 3], seen
    assert seen.index(("restart", 3)) < len(seen) - 1 - seen[::-1].index(("start", 3)), seen
    assert [r for e, r in seen if e == "restart"] == [3]
    assert sorted(r for e, r in seen if e in ("exit", "end")) == [0, 1, 2, 3], seen
    assert all(e["at"] >= events[0]["at"] - 1 for e in events)


@pytest.mark.timeout(90)
def test_a_worker_that_dies_every_time_is_a_crash_loop_that_ends_the_step(tmp_path):
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && kill -9 $$; '
            f'[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ until [ -f {tmp_path}/never ]; do sleep 0.05; done; }}; '
            'exec sleep 600')
    codes = run_step(tmp_path, PSS, body, extra={"TF_SLURM_MAX_RESTARTS": "5", "TF_SLURM_RESTART_BACKOFF": "0.2",
                                                 "TF_SLURM_CRASH_WINDOW": "60"})
    hub = err(tmp_path, 1)
    assert codes == [137, 137, 137, 137], hub
    assert hub.count("restarting worker 1 (rank 3, node4) in place") == 1, hub
    lines = [line for line in hub.splitlines() if "worker 1 (rank 3, node4) failed (exit 137, killed by SIGKILL); "
             "not restarted: it failed again" in line]
    assert lines and "after restart 1, within 60 s: a crash loop" in lines[0], hub


@pytest.mark.timeout(90)
def test_exit_1_is_not_retried_by_default_and_fails_the_step_as_before(tmp_path):
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && exit 1; '
            f'[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ until [ -f {tmp_path}/never ]; do sleep 0.05; done; }}; '
            'exec sleep 600')
    codes = run_step(tmp_path, PSS, body, "--max-restarts", "2")
    hub = err(tmp_path, 1)
    assert codes == [1, 1, 1, 1], hub
    assert "restarting" not in hub
    # the program's own verdict: said once, plainly; why it was not restarted is a line of the log
    assert "worker 1 (rank 3, node4) failed (exit 1): ending every task" in hub, hub
    assert "worker 1 (rank 3, node4) not restarted: exit 1 is the program's own error" in hub, hub


@pytest.mark.timeout(90)
def test_a_tf1_non_chief_worker_is_restarted_and_the_step_ends_0(tmp_path):
    # tf1: worker 0 (rank 1) is the chief and finishes once worker 1 runs again; worker 1 then finishes too
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && {{ '
            '[ -f {d}/ran ] && {{ touch {d}/again; exit 0; }}; touch {d}/ran; kill -9 $$; }}; '
            '[ "$TF_SLURM_JOB_TYPE" = worker ] && {{ until [ -f {d}/again ]; do sleep 0.05; done; exit 0; }}; '
            'exec sleep 600').format(d=tmp_path)
    codes = run_step(tmp_path, "ps,worker,worker", body)  # restarts are on by default
    hub = err(tmp_path, 1)
    assert codes == [0, 0, 0], hub
    assert "restarting worker 1 (rank 2, node3) in place" in hub and "(step: restart 1 of 3)" in hub, hub
    assert "GRPC_FAIL_FAST" not in hub


@pytest.mark.timeout(90)
def test_under_tf_slurm_local_the_wait_before_a_restart_keeps_heart_beating(tmp_path):
    # a 2 s back-off under a 1.25 s silence: a spoke quiet while it waits would be taken for a dead node
    body = ONCE.format(d=tmp_path) + CHIEF_WAITS.format(d=tmp_path)
    env = {**os.environ, "TF_SLURM_MAX_RESTARTS": "1", "TF_SLURM_RESTART_BACKOFF": "2", "TF_SLURM_HEARTBEAT": "0.25",
           "TF_SLURM_SILENCE": "1.25", "TF_SLURM_LOG_LEVEL": "INFO"}
    r = subprocess.run([PY, "-m", "tf_for_slurm", "local", "-n", "4", "--tasks", PSS, "--folder", str(tmp_path),
                        "--", "sh", "-c", body], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "restarting worker 1 (rank 3, node1) in place in 2 s" in r.stderr, r.stderr
    assert "no word from" not in r.stderr


@pytest.mark.timeout(90)
def test_a_task_waiting_to_restart_is_ended_with_the_step_and_not_started_again(tmp_path):
    # the coordinator finishes while worker 1 waits out a 30 s back-off: the step ends now, status 0
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && {{ touch {d}/ran; kill -9 $$; }}; '
            '[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ until [ -f {d}/ran ]; do sleep 0.05; done; sleep 0.5; exit 0; }}; '
            'exec sleep 600').format(d=tmp_path)
    t0 = time.monotonic()
    codes = run_step(tmp_path, PSS, body, "--max-restarts", "1", extra={"TF_SLURM_RESTART_BACKOFF": "30"})
    assert codes == [0, 0, 0, 0], err(tmp_path, 1)
    assert time.monotonic() - t0 < 25  # well before the back-off is over
    assert "started again" not in err(tmp_path, 3)


@pytest.mark.timeout(90)
def test_a_supervisor_stopped_while_it_waits_to_restart_does_not_restart(tmp_path):
    # scancel / srun's SIGTERM reaches worker 1's supervisor during a 30 s back-off: no restart, the step ends
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && {{ touch {d}/ran; kill -9 $$; }}; '
            '[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ until [ -f {d}/never ]; do sleep 0.05; done; }}; '
            'exec sleep 600').format(d=tmp_path)
    procs = start_step(tmp_path, PSS, body, "--max-restarts", "1", extra={"TF_SLURM_RESTART_BACKOFF": "30"})
    try:
        end = time.monotonic() + 60
        while "restarts this task's command in 30 s" not in err(tmp_path, 3):
            assert time.monotonic() < end and procs[3].poll() is None, err(tmp_path, 3)
            time.sleep(0.05)
        procs[3].send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        codes = wait_step(procs, 60, tmp_path)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [143, 143, 143, 143], err(tmp_path, 1)
    assert time.monotonic() - t0 < 25  # well before the back-off is over
    assert "worker 1 (rank 3, node4) failed (exit 143, ended by SIGTERM) before its command could run again " \
        "(restart 1)" in err(tmp_path, 1)
    assert "started again" not in err(tmp_path, 3)


# -- the settings and options that make the policy ------------------------------------------------
def test_the_policy_from_options_and_settings():
    from tf_for_slurm.errors import UsageError
    from tf_for_slurm.plan.restart_policy import RestartPolicy
    from tf_for_slurm.supervise.task_exec import restart_policy

    assert restart_policy({}) == RestartPolicy(max_restarts=3) and restart_policy({}).enabled  # on by default
    assert not restart_policy({"TF_SLURM_MAX_RESTARTS": "0"}).enabled
    env = {"TF_SLURM_MAX_RESTARTS": "4", "TF_SLURM_RESTART_ON": "any", "TF_SLURM_MAX_TASK_RESTARTS": "2",
           "TF_SLURM_CRASH_WINDOW": "5", "TF_SLURM_RESTART_BACKOFF": "0.5"}
    assert restart_policy(env) == RestartPolicy(4, 2, "any", 5.0, 0.5)
    assert restart_policy(env, max_restarts=1, restart_on="signal") == RestartPolicy(1, 2, "signal", 5.0, 0.5)
    with pytest.raises(UsageError, match="TF_SLURM_RESTART_ON='sometimes': expected signal or any"):
        restart_policy({"TF_SLURM_RESTART_ON": "sometimes"})
    with pytest.raises(UsageError, match="TF_SLURM_MAX_RESTARTS"):
        restart_policy({"TF_SLURM_MAX_RESTARTS": "-1"})


def test_pss_tasks_fail_fast_on_grpc_errors_unless_the_user_said_otherwise():
    from tf_for_slurm.supervise.task_exec import strategy_variables

    assert strategy_variables({}, "pss") == {"GRPC_FAIL_FAST": "use_caller"}
    assert strategy_variables({"GRPC_FAIL_FAST": "false"}, "pss") == {}
    assert strategy_variables({}, "tf1") == {} and strategy_variables({}, "mwms") == {}


def test_exec_rejects_a_bad_restart_option_in_one_line(tmp_path):
    r = subprocess.run([PY, "-m", "tf_for_slurm", "exec", "--restart-on", "sometimes", "--", "true"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--restart-on" in r.stderr


# -- group restarts: mwms; a pss ps or coordinator; (tf1: the chief alone) -------------------------
# Every task counts its starts in d/starts.RANK.  First run: wait until all N tasks run, then the
# victim SIGKILLs itself and the others wait to be ended.  Second run: training tasks (the chief,
# and under mwms the workers) exit 0 once all N run again; servers wait to be ended.
GROUP_BODY = ('s={d}/starts.$SLURM_PROCID; n=$(cat $s 2>/dev/null | wc -l); echo x >> $s; '
              'all() {{ [ $(cat {d}/starts.* | wc -l) -ge $1 ] && [ $(ls {d}/starts.* | wc -l) = {n} ]; }}; '
              'if [ $n = 0 ]; then until all {n}; do sleep 0.05; done; '
              '[ $SLURM_PROCID = {victim} ] && kill -9 $$; exec sleep 600; fi; '
              'case " {trainers} " in *" $SLURM_PROCID "*) until all {twice}; do sleep 0.05; done; exit 0;; esac; '
              'exec sleep 600')


def starts(tmp_path: Path, n: int) -> list:
    return [len((tmp_path / f"starts.{r}").read_text().split()) for r in range(n)]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("roles,victim,trainers,name,hub_rank", [
    ("chief,worker,worker", 2, "0 1 2", "worker 1 (rank 2, node3)", 0),  # mwms: a worker
    ("chief,worker,worker", 0, "0 1 2", "chief 0 (rank 0, node1)", 0),  # mwms: the chief (the hub's own command)
    ("ps,chief,worker,worker", 0, "1", "ps 0 (rank 0, node1)", 1),  # pss: a ps (the coordinator restores)
    ("ps,chief,worker,worker", 1, "1", "chief 0 (rank 1, node2)", 1),  # pss: the coordinator
])
def test_a_group_restart_ends_every_task_and_starts_it_again_in_place(tmp_path, roles, victim, trainers, name,
                                                                      hub_rank):
    n = len(roles.split(","))
    body = GROUP_BODY.format(d=tmp_path, n=n, twice=2 * n, victim=victim, trainers=trainers)
    codes = run_step(tmp_path, roles, body, "--max-restarts", "1",
                     extra={"TF_SLURM_STATUS_FILE": str(tmp_path / "status.json"), "TF_SLURM_RESTART_BACKOFF": "0.2"})
    hub = err(tmp_path, hub_rank)
    assert codes == [0] * n, hub
    assert starts(tmp_path, n) == [2] * n, hub
    assert f"restarting every task of the step in 0.2 s: {name} exited with status 137 (signal 9)" in hub, hub
    assert hub.count("restarting every task") == 1 and "restarts: " + str(n) in hub, hub
    others = [r for r in range(n) if r not in (victim, hub_rank)]
    for r in others:  # told to end for the group's restart, then started again
        assert "restarts every task: ending this task's command" in err(tmp_path, r), err(tmp_path, r)
        assert "command started again (restart 1 of this task)" in err(tmp_path, r), err(tmp_path, r)
    status = json.loads((tmp_path / "status.json").read_text())
    assert [row[status["columns"].index("restarts")] for row in status["tasks"]] == [1] * n
    seen = [(e["event"], e["rank"]) for e in map(parse_line, (tmp_path / "timeline.jsonl").read_text().splitlines())]
    assert sorted(r for e, r in seen if e == "restart") == list(range(n)), seen


@pytest.mark.timeout(90)
def test_a_tf1_chief_is_restarted_alone_while_the_workers_train_on(tmp_path):
    # ps,worker,worker: worker 0 (rank 1) is the chief and the hub; only its own command starts again,
    # worker 1 trains on until it does (4 starts in all), the ps serves
    body = ('s={d}/starts.$SLURM_PROCID; n=$(cat $s 2>/dev/null | wc -l); echo x >> $s; '
            'all() {{ [ $(cat {d}/starts.* | wc -l) -ge $1 ] && [ $(ls {d}/starts.* | wc -l) = 3 ]; }}; '
            '[ $SLURM_PROCID = 0 ] && exec sleep 600; until all 3; do sleep 0.05; done; '
            '[ $SLURM_PROCID = 1 ] && [ $n = 0 ] && kill -9 $$; until all 4; do sleep 0.05; done; exit 0'
            ).format(d=tmp_path)
    codes = run_step(tmp_path, "ps,worker,worker", body, "--max-restarts", "1",
                     extra={"TF_SLURM_RESTART_BACKOFF": "0.2"})
    hub = err(tmp_path, 1)
    assert codes == [0, 0, 0], hub
    assert starts(tmp_path, 3) == [1, 2, 1], hub
    assert "restarting worker 0 (rank 1, node2) in place in 0.2 s: exited with status 137" in hub, hub
    assert "the chief's command started again" in hub and "worker 0 (rank 1, node2) is running again" in hub, hub


@pytest.mark.timeout(90)
def test_a_task_that_fails_right_after_its_group_restart_is_a_crash_loop(tmp_path):
    # under mwms worker 1 dies at every start: one group restart, then the crash loop ends the step
    body = ('[ $SLURM_PROCID = 2 ] && {{ until [ -f {d}/up.0 ] && [ -f {d}/up.1 ]; do sleep 0.05; done; kill -9 $$; }}; '
            'touch {d}/up.$SLURM_PROCID; exec sleep 600').format(d=tmp_path)
    codes = run_step(tmp_path, "chief,worker,worker", body, "--max-restarts", "5",
                     extra={"TF_SLURM_CRASH_WINDOW": "60", "TF_SLURM_RESTART_BACKOFF": "0.2"})
    hub = err(tmp_path, 0)
    assert codes == [137, 137, 137], hub
    assert hub.count("restarting every task of the step") == 1, hub
    assert "worker 1 (rank 2, node3) failed (exit 137, killed by SIGKILL); not restarted: it failed again" in hub, hub


# -- hung tasks: a progress deadline -----------------------------------------------------------------
@pytest.mark.timeout(90)
def test_a_stopped_worker_is_killed_at_the_progress_deadline_and_restarted(tmp_path):
    # worker 1 stops itself (SIGSTOP) the first time: killed 1 s later, restarted; the chief then finishes
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker1 ] && {{ '
            '[ -f {d}/ran ] && {{ touch {d}/again; exec sleep 600; }}; touch {d}/ran; kill -STOP $$; }}; '
            '[ "$TF_SLURM_JOB_TYPE" = chief ] && {{ until [ -f {d}/again ]; do sleep 0.05; done; exit 0; }}; '
            'exec sleep 600').format(d=tmp_path)
    codes = run_step(tmp_path, PSS, body, "--max-restarts", "1", "--progress-deadline", "1",
                     extra={"TF_SLURM_RESTART_BACKOFF": "0.2"})
    assert codes == [0, 0, 0, 0], err(tmp_path, 1) + err(tmp_path, 3)
    assert re.search(r"the command has been stopped \(SIGSTOP\) for [0-9.]+ s, the progress deadline is 1 s: "
                     r"killing it", err(tmp_path, 3)), err(tmp_path, 3)
    assert "restarting worker 1 (rank 3, node4) in place in 0.2 s: exited with status 137" in err(tmp_path, 1)


@pytest.mark.timeout(90)
def test_a_task_silent_after_reporting_progress_is_hung_and_without_restarts_fails_the_step(tmp_path):
    # worker 0 reports progress once (touches its file), then hangs: killed at the 1 s deadline, the step
    # ends 137; the other tasks never report and are never judged for it
    body = ('[ "$TF_SLURM_JOB_TYPE$TF_SLURM_TASK_INDEX" = worker0 ] && {{ touch "$TF_SLURM_PROGRESS_FILE"; '
            'exec sleep 600; }}; [ -n "$TF_SLURM_PROGRESS_FILE" ] && touch {d}/has_file.$SLURM_PROCID; '
            'exec sleep 600').format(d=tmp_path)
    t0 = time.monotonic()
    (tmp_path / "tmp").mkdir()
    codes = run_step(tmp_path, PSS, body, extra={"TF_SLURM_PROGRESS_DEADLINE": "1", "TMPDIR": str(tmp_path / "tmp"),
                                                 "TF_SLURM_MAX_RESTARTS": "0"})
    assert codes == [137] * 4, err(tmp_path, 1)
    assert time.monotonic() - t0 < 30
    assert re.search(r"the command reported no progress for [0-9.]+ s, the progress deadline is 1 s: killing it",
                     err(tmp_path, 2)), err(tmp_path, 2)
    assert "worker 0 (rank 2, node3) failed (exit 137, killed by SIGKILL)" in err(tmp_path, 1), err(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.glob("has_file.*")) == ["has_file.0", "has_file.1", "has_file.3"]
    assert not list((tmp_path / "tmp").iterdir())  # each task removed its private folder (and progress file)
