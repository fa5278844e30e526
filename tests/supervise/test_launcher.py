"""tf-slurm local: layout, per-rank environment, rank prefixes, first-failure kill, Ctrl-C, bad input."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tf_for_slurm import launcher
from tf_for_slurm.cli import local
from tf_for_slurm.errors import UsageError

pytestmark = pytest.mark.procs  # real processes on real timers: left out of the fast subset (tests/conftest.py)

HERE = Path(__file__).resolve().parents[1]  # tests/
TASKS = HERE / "launcher_tasks"
ROOT = HERE.parent
PY = sys.executable


def run_local(*args: str, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    """`python -m tf_for_slurm.launcher ARGS` (the same code `tf-slurm local` runs)."""
    return subprocess.run([PY, "-m", "tf_for_slurm.launcher", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kw)


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- layout and environment (pure) -------------------------------------------------------------

@pytest.mark.parametrize("n,k,spec,expected", [
    (1, None, None, (1,)),
    (5, 2, None, (3, 2)),
    (7, 3, None, (3, 2, 2)),
    (6, 3, None, (2, 2, 2)),
    (7, None, "2(x3),1", (2, 2, 2, 1)),
    (7, 4, "2(x3),1", (2, 2, 2, 1)),
])
def test_layout_block(n, k, spec, expected):
    layout = launcher.make_layout(n, k, spec)
    assert layout.tasks_per_node == expected
    assert layout.nodes == tuple(f"node{i + 1}" for i in range(len(expected)))
    assert layout.nodelist == ("node1" if len(expected) == 1 else f"node[1-{len(expected)}]")


@pytest.mark.parametrize("n,k,spec,needle", [
    (0, None, None, "-n/--ntasks=0"),
    (-2, None, None, "-n/--ntasks=-2"),
    (3, 0, None, "--nodes=0"),
    (3, 4, None, "--nodes=4"),
    (3, None, "2,2", "--tasks-per-node='2,2'"),
    (4, 3, "2,2", "--tasks-per-node='2,2'"),
    (4, None, "2,x", "--tasks-per-node='2,x'"),
    (2, None, "2,0", "--tasks-per-node='2,0'"),
])
def test_layout_rejects_bad_arguments(n, k, spec, needle):
    with pytest.raises(UsageError) as err:
        launcher.make_layout(n, k, spec)
    assert needle in str(err.value) and "expected" in str(err.value)
    assert "\n" not in str(err.value)


def test_task_env_per_rank_matches_slurm_block_layout():
    layout = launcher.make_layout(5, None, "3,2")
    base = {"PATH": "/bin", "SLURM_CPUS_PER_TASK": "9", "SLURM_STEP_RESV_PORTS": "1-2",
            "TF_CONFIG": "{}", "TF_SLURM_BASE_PORT": "23000", "TF_SLURM_RANK": "7",
            "TF_SLURM_TF_CONFIG_FILE": "/tmp/old.json"}
    expect_node = [0, 0, 0, 1, 1]
    expect_local = [0, 1, 2, 0, 1]
    for rank in range(5):
        env = launcher.task_env(layout, rank, "4242", base, ps=2)
        assert env["SLURM_PROCID"] == str(rank)
        assert env["SLURM_NODEID"] == str(expect_node[rank])
        assert env["SLURM_LOCALID"] == str(expect_local[rank])
        assert env["SLURMD_NODENAME"] == f"node{expect_node[rank] + 1}"
        assert env["SLURM_CPUS_ON_NODE"] == ("3" if expect_node[rank] == 0 else "2")
        for name in ("SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST"):
            assert env[name] == "node[1-2]"
        for name in ("SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES"):
            assert env[name] == "2"
        for name in ("SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE"):
            assert env[name] == "3,2"
        for name in ("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS"):
            assert env[name] == "5"
        assert env["SLURM_JOB_ID"] == "4242" and env["SLURM_STEP_ID"] == "0"
        assert env["TF_SLURM_ADDRESS"] == "template:127.0.0.1"
        assert env["TF_SLURM_PORT_SCOPE"] == "step"
        assert env["TF_SLURM_PS"] == "2" and "TF_SLURM_TASKS" not in env
        # stale variables of some other step are gone; the user's own settings stay
        assert "SLURM_CPUS_PER_TASK" not in env and "SLURM_STEP_RESV_PORTS" not in env
        assert "TF_CONFIG" not in env and "TF_SLURM_RANK" not in env and "TF_SLURM_TF_CONFIG_FILE" not in env
        assert env["PATH"] == "/bin" and env["TF_SLURM_BASE_PORT"] == "23000"


def test_task_env_plans_with_the_library():
    """The emulated step is one the library's own planner accepts, with unique ports on one host."""
    from tf_for_slurm import plan_from_env

    layout = launcher.make_layout(4, 2)
    plans = [plan_from_env(launcher.task_env(layout, r, "777", {}, tasks="ps,worker,worker,chief"), check=False)
             for r in range(4)]
    assert [p.me.role for p in plans] == ["ps", "worker", "worker", "chief"]
    assert [p.me.rank for p in plans] == [0, 1, 2, 3]
    addresses = [t.address for t in plans[0].tasks]
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    ports = [t.port for t in plans[0].tasks] + [t.aux_port for t in plans[0].tasks]
    assert len(set(ports)) == 8  # unique across the step: all emulated nodes are this host


@pytest.mark.parametrize("kw,needle", [
    (dict(ps=1, tasks="ps,worker"), "only one of them"),
    (dict(ps=2), "--ps=2"),
    (dict(tasks="ps,worker,worker"), "--tasks"),
    (dict(tasks="ps,painter"), "--tasks[1]='painter'"),
    (dict(job_id="abc"), "--job-id='abc'"),
])
def test_launch_rejects_bad_roles_and_job_id(kw, needle):
    with pytest.raises(UsageError) as err:
        launcher.launch(["true"], launcher.make_layout(2), **kw)
    assert needle in str(err.value)


def test_main_rejects_empty_command():
    parser = argparse.ArgumentParser()
    local.add_arguments(parser)
    for argv in (["-n", "2"], ["-n", "2", "--"]):
        with pytest.raises(UsageError) as err:
            local.main(parser.parse_args(argv))
        assert "command" in str(err.value)


def test_arguments_parse_command_after_double_dash():
    parser = argparse.ArgumentParser()
    local.add_arguments(parser)
    args = parser.parse_args(["-n", "3", "--nodes", "2", "--ps", "1", "--", "python", "-c", "x", "--ps", "9"])
    assert (args.ntasks, args.nodes, args.ps) == (3, 2, 1)
    assert [a for a in args.command if a != "--"] == ["python", "-c", "x", "--ps", "9"]


# -- real launches ---------------------------------------------------------------------------------

def parse_prefixed(text: str) -> dict:
    """'R: line' -> {R: [line, ...]}; fails on any line without a rank prefix."""
    out: dict = {}
    for line in text.splitlines():
        rank, sep, rest = line.partition(": ")
        assert sep and rank.strip().isdigit(), f"line without a rank prefix: {line!r}"
        out.setdefault(int(rank), []).append(rest)
    return out


@pytest.mark.timeout(60)
def test_launch_prefixes_ranks_and_sets_env_per_rank(tmp_path):
    # the ps is ended once the workers are done: the workers wait until it has printed (print_env.py)
    res = run_local("-n", "4", "--tasks-per-node", "3,1", "--tasks", "ps,worker,worker,worker",
                    "--job-id", "31337", "--", PY, str(TASKS / "print_env.py"), "--ps-printed",
                    str(tmp_path / "ps-printed"))
    assert res.returncode == 0, res.stderr
    out = parse_prefixed(res.stdout)
    assert sorted(out) == [0, 1, 2, 3]
    for rank, lines in out.items():
        env = dict(line.split("=", 1) for line in lines)
        assert env["SLURM_PROCID"] == str(rank)
        assert env["SLURM_NODEID"] == ("0" if rank < 3 else "1")
        assert env["SLURM_LOCALID"] == str(rank if rank < 3 else 0)
        assert env["SLURM_STEP_NODELIST"] == "node[1-2]"
        assert env["SLURM_STEP_TASKS_PER_NODE"] == "3,1"
        assert env["SLURM_JOB_ID"] == "31337"
        assert env["TF_SLURM_TASKS"] == "ps,worker,worker,worker"
    err = parse_prefixed("\n".join(l for l in res.stderr.splitlines() if not l.startswith("tf-slurm")))
    own = {r: [line for line in v if not line.startswith("tf-slurm: ")] for r, v in err.items()}
    assert own == {r: [f"stderr-of-{r}"] for r in range(4)}
    # the chief's supervisor (worker 0, rank 1) ends the step with its summary, at the default log level
    assert any(line.startswith("tf-slurm: INFO: step 31337.0 (tf1, 4 tasks) ended with status 0") for line in err[1])


@pytest.mark.timeout(60)
def test_launch_job_ids_are_fresh_unless_given():
    code = "import os; print(os.environ['SLURM_JOB_ID'])"
    ids = set()
    for _ in range(2):
        # Slurm variables only: under exec the ps (a server) may be ended before it prints
        res = run_local("-n", "2", "--slurm-env-only", "--", PY, "-c", code)
        assert res.returncode == 0, res.stderr
        per_rank = parse_prefixed(res.stdout)
        assert per_rank[0] == per_rank[1] and per_rank[0][0].isdigit()
        ids.add(per_rank[0][0])
    assert len(ids) == 2


@pytest.mark.timeout(60)
def test_lines_never_interleave():
    # each task writes long lines in many small writes; every line must come out whole
    code = ("import os,sys\nr=os.environ['SLURM_PROCID']\n"
            "for i in range(300):\n"
            "    for j in range(20): sys.stdout.write(r*50); sys.stdout.flush()\n"
            "    sys.stdout.write('\\n'); sys.stdout.flush()\n")
    # Slurm variables only: under exec rank 0 is a ps, ended once the workers are done
    res = run_local("-n", "3", "--slurm-env-only", "--", PY, "-c", code)
    assert res.returncode == 0, res.stderr
    out = parse_prefixed(res.stdout)
    for rank in range(3):
        assert out[rank] == [str(rank) * 1000] * 300


@pytest.mark.timeout(60)
def test_first_failure_ends_the_others_and_sets_status(tmp_path):
    # rank 1 fails; rank 0 ignores SIGTERM (needs SIGKILL) and has a grandchild; rank 2 just blocks
    script = (
        'd=%s; r=$SLURM_PROCID\n'
        'if [ "$r" = 1 ]; then while [ ! -f $d/pid0 ] || [ ! -f $d/pid2 ] || [ ! -f $d/gc0 ]; do sleep 0.05; done;'
        ' echo failing; date +%%s.%%N > $d/failed_at; exit 3; fi\n'
        'if [ "$r" = 0 ]; then exec %s %s --ignore-term --pidfile $d/pid0 --grandchild-pidfile $d/gc0; fi\n'
        'exec %s %s --pidfile $d/pid2\n'
    ) % (tmp_path, PY, TASKS / "fake_server.py", PY, TASKS / "fake_server.py")
    res = run_local("-n", "3", "--kill-grace", "0.2", "--", "sh", "-c", script)  # rank 0 needs the SIGKILL
    # from the failure, not from the launch: how fast the processes start is not what is timed
    took = time.time() - float((tmp_path / "failed_at").read_text())
    assert res.returncode == 3, res.stderr
    assert "1: failing" in res.stdout
    assert "task 1 exited with status 3" in res.stderr
    assert took < 15
    for name in ("pid0", "pid2", "gc0"):
        pid = int((tmp_path / name).read_text())
        wait_for(lambda: not pid_alive(pid), 5, f"{name} ({pid}) to be gone")


@pytest.mark.timeout(60)
def test_status_of_a_task_killed_by_a_signal_is_128_plus_signo():
    res = run_local("-n", "2", "--", "sh", "-c", 'if [ "$SLURM_PROCID" = 1 ]; then kill -9 $$; fi; sleep 30')
    assert res.returncode == 128 + 9, res.stderr


@pytest.mark.timeout(60)
def test_all_succeed_is_zero_and_leftover_background_children_are_ended(tmp_path):
    # a task that exits 0 but leaves a background child: the launcher must not leave it behind.
    # --ps 0: both tasks are trainers, whose end the step waits for (a ps is ended once the
    # trainers are done, possibly before its shell wrote its bg file)
    script = f'sleep 1000 & echo $! > {tmp_path}/bg$SLURM_PROCID; exit 0'
    res = run_local("-n", "2", "--ps", "0", "--kill-grace", "0.5", "--", "sh", "-c", script)
    assert res.returncode == 0, res.stderr
    for rank in range(2):
        pid = int((tmp_path / f"bg{rank}").read_text())
        wait_for(lambda: not pid_alive(pid), 5, f"background child {pid} to be gone")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_launcher_is_forwarded_to_every_task(tmp_path, signo):
    # each task traps the signal, says so, and exits 0; the launcher then exits 128+signo.
    # --ps 0: every task is a trainer, whose end the step waits for (a ps would be ended once the
    # trainers are done, possibly before its trap had printed)
    name = signal.Signals(signo).name[3:]
    script = (f"trap 'echo got-{name}; exit 0' {name}; touch {tmp_path}/ready$SLURM_PROCID; "
              "while true; do sleep 0.05; done")
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm.launcher", "-n", "3", "--ps", "0", "--", "sh", "-c", script],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all((tmp_path / f"ready{r}").exists() for r in range(3)), 20, "tasks to start")
        proc.send_signal(signo)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signo, err
    assert sorted(parse_prefixed(out).items()) == [(r, [f"got-{name}"]) for r in range(3)]


@pytest.mark.timeout(60)
def test_ctrl_c_with_tasks_that_die_of_it(tmp_path):
    # a Python task that does not handle Ctrl-C dies of SIGINT: status 130 is the first failure
    code = (f"import os,time; open('{tmp_path}/r'+os.environ['SLURM_PROCID'],'w').close()\n"
            "while True: time.sleep(0.05)\n")
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm.launcher", "-n", "2", "--", PY, "-c", code],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all((tmp_path / f"r{r}").exists() for r in range(2)), 20, "tasks to start")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err


@pytest.mark.timeout(30)
def test_missing_program_fails_with_127():
    res = run_local("-n", "2", "--", "/nonexistent/program")
    assert res.returncode == 127
    assert "/nonexistent/program" in res.stderr


@pytest.mark.timeout(30)
def test_bad_arguments_exit_2_with_one_line():
    for args in (["-n", "0", "--", "true"], ["-n", "2", "--nodes", "3", "--", "true"],
                 ["-n", "3", "--tasks-per-node", "1,1", "--", "true"], ["-n", "2"]):
        res = run_local(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "expected" in res.stderr, res.stderr
