"""pytest helpers for tests that run under a real Slurm 22.05 cluster on this machine.

`slurm_cluster` (session fixture) starts `scripts/local_slurm.sh up` (3 emulated nodes x 4 CPUs)
unless it is already up, and skips the test with the reason when Slurm cannot be installed or
started. A cluster started by a test session is stopped by the last session that uses it
(sessions register their pid under <dir>/users/); one started by hand is left running. Set
TF_SLURM_KEEP_CLUSTER=1 to leave it running for a faster next session.

Every srun/sbatch goes through a timeout: a job that asks for more than exists pends forever.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
from netns import host_network

from tf_for_slurm.plan.scontrol_text import parse_job  # noqa: F401  (the tests and benches take it from here)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "local_slurm.sh"
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else "python3"
NODES = 3
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


@dataclass
class SlurmCluster:
    """A running local cluster: environment for its tools plus helpers that never hang."""

    dir: Path
    nodes: int
    env: Dict[str, str] = field(default_factory=dict)

    def run(self, argv: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None,
            **kw) -> subprocess.CompletedProcess:
        """Run a Slurm client command (srun, scontrol...) with the cluster's environment."""
        return subprocess.run(list(argv), env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def srun(self, args: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None,
             **kw) -> subprocess.CompletedProcess:
        """srun ARGS with a hard timeout; srun's own exit status is returned, output captured."""
        return self.run(["srun", *args], timeout=timeout, env=env, **kw)

    def sbatch_poll(self, args: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None,
                    cwd: Optional[str] = None) -> tuple:
        """`sbatch --parsable ARGS`, then poll until the job ends -> (job_id, final job record).

        Not `sbatch --wait`: it checks the job only every 10 s once it ran a while (a 13 s job took
        42 s to be seen ended)."""
        res = self.run(["sbatch", "--parsable", *args], timeout=60, env=env, cwd=cwd)
        assert res.returncode == 0, f"sbatch failed (rc={res.returncode}): {res.stderr[-2000:]}"
        job = res.stdout.strip().split(";")[0]
        return job, self.wait_job(job, timeout)

    def show_job(self, job_id: str) -> Dict[str, str]:
        res = self.run(["scontrol", "show", "job", str(job_id)], timeout=30)
        assert res.returncode == 0, res.stderr
        return parse_job(res.stdout)

    def wait_job(self, job_id: str, timeout: float) -> Dict[str, str]:
        """Poll `scontrol show job` until the job is in a terminal state (deadline: timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.show_job(job_id)
            if info.get("JobState") in TERMINAL:
                return info
            if time.monotonic() > deadline:
                self.run(["scancel", str(job_id)], timeout=30)
                raise AssertionError(f"job {job_id} still {info.get('JobState')} after {timeout} s")
            time.sleep(0.2)

    def config(self) -> str:
        return self.run(["scontrol", "show", "config"], timeout=30).stdout


def lose_node(cluster: SlurmCluster, node: str, job: str) -> List[int]:
    """Emulate the crash of `node` while `job` runs there: SIGKILL its slurmd, the job's processes on it
    (every process whose environment has that job and node) and their slurmstepd, all at once.  Slurm
    notices only after SlurmdTimeout (300 s here), as on a real cluster.  The killed pids."""
    targets = {}  # pid -> its start time (clock ticks since boot)
    want = {f"SLURM_JOB_ID={job}".encode(), f"SLURMD_NODENAME={node}".encode()}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = set(Path(f"/proc/{name}/environ").read_bytes().split(b"\0"))
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if want <= env:
            fields = stat.rsplit(")", 1)[1].split()
            targets[int(name)] = int(fields[19])
            parent = int(fields[1])
            try:
                if Path(f"/proc/{parent}/comm").read_text().strip() == "slurmstepd":
                    targets[parent] = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19])
            except (OSError, IndexError, ValueError):
                pass
    slurmd = int((cluster.dir / "run" / f"slurmd-{node}.pid").read_text().split()[0])
    # killed in the order they started (a supervisor before its command), not in pid order: pids wrap
    # around, and a hub that saw its command die first told its peers `end` before it died itself, which
    # a crashed node never does (CI run C).  Not SIGSTOP first: stopped members of a process group that
    # its killed slurmstepd orphans get SIGHUP and SIGCONT, and a task that exits on SIGHUP says so.
    order = [slurmd, *sorted(targets, key=lambda pid: (targets[pid], pid))]
    for pid in order:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return order


# batch-step's words in a job's log: a run's end (waiting for anything else of that run is over); and a run
# that lost a node ending without a relaunch (not ENDED, which it prints before every relaunch too: a poll
# between the two lines failed CI)
ENDED = r"srun exit status"
NOT_RELAUNCHED = r"not relaunched|requeued job|not requeued|training ended"


def wait_for_log(log: Path, pattern: str, timeout: float, unless: Optional[str] = None) -> str:
    """A job's log once it matches `pattern`; AssertionError once it matches `unless` first (the run
    ended another way), or after `timeout` s."""
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        text = log.read_text(errors="replace") if log.exists() else ""
        if re.search(pattern, text):
            return text
        assert unless is None or not re.search(unless, text), f"{unless!r} before {pattern!r}: {text[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout} s: {text[-3000:]}")


def wait_for_joined(folder: Path, tasks: int, timeout: float) -> None:
    """Wait until the step's supervisor (its `status.json` in the job's `folder`) counts `tasks` tasks
    running: each task's supervisor has joined it.  A task's first line in the job's log says only that
    its command started; a supervisor that has not joined yet when its hub's node is lost keeps trying
    to connect for TF_SLURM_CONNECT_GRACE (CI: the batch-host test lost node1 before node2 joined)."""
    end = time.monotonic() + timeout
    counts = None
    while time.monotonic() < end:
        try:
            counts = json.loads((folder / "status.json").read_text()).get("counts")
        except (OSError, ValueError):
            counts = None
        if isinstance(counts, dict) and counts.get("running") == tasks:
            return
        time.sleep(0.2)
    raise AssertionError(f"not {tasks} tasks running in {folder / 'status.json'} within {timeout} s: {counts}")


def restore_nodes(cluster: SlurmCluster) -> None:
    """Start again every slurmd that is not running (after lose_node)."""
    res = _script("up", "--nodes", str(cluster.nodes), timeout=300, env={"TF_SLURM_LOCAL_DIR": str(cluster.dir)})
    assert res.returncode == 0, res.stderr[-2000:]


def _script(action: str, *extra: str, timeout: float,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), action, *extra], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _live_users(users: Path) -> List[int]:
    alive = []
    for f in users.glob("*"):
        try:
            pid = int(f.name)
            os.kill(pid, 0)
            alive.append(pid)
        except (ValueError, ProcessLookupError):
            f.unlink(missing_ok=True)
        except PermissionError:
            alive.append(int(f.name))
    return alive


def start_cluster(nodes: int = NODES, env: Optional[Dict[str, str]] = None) -> tuple:
    """(SlurmCluster, started_here) or pytest.skip with the reason.

    `env` (TF_SLURM_LOCAL_DIR, TF_SLURM_LOCAL_PORT, TF_SLURM_LOCAL_RESV_PORTS...) selects another
    cluster configuration; a second cluster needs its own directory and port."""
    if shutil.which("bash") is None or not SCRIPT.exists():
        pytest.skip(f"cannot run {SCRIPT}")
    if os.geteuid() != 0 and shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed and installing it needs root")
    try:
        already = _script("status", timeout=60, env=env).returncode == 0
    except subprocess.TimeoutExpired:
        already = False
    try:
        res = _script("up", "--nodes", str(nodes), timeout=900, env=env)
    except subprocess.TimeoutExpired:
        pytest.skip("local Slurm cluster did not come up within 900 s")
    if res.returncode != 0:
        tail = " | ".join(res.stderr.strip().splitlines()[-3:])
        pytest.skip(f"local Slurm cluster could not be started ({SCRIPT.name} up: rc={res.returncode}: {tail})")
    exports = _script("env", timeout=30, env=env).stdout
    cenv = {**os.environ, **(env or {})}
    for m in re.finditer(r"^export (\w+)=(.*)$", exports, re.M):
        cenv[m.group(1)] = m.group(2).strip("'\"")
    return SlurmCluster(dir=Path(cenv["TF_SLURM_LOCAL_DIR"]), nodes=nodes, env=cenv), not already


def stop_cluster(cluster: SlurmCluster) -> None:
    _script("down", timeout=120, env={"TF_SLURM_LOCAL_DIR": str(cluster.dir)})


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running local Slurm cluster (3 nodes x 4 CPUs); skips when Slurm cannot be started."""
    # Register as a user BEFORE looking at the cluster, so a session that is ending never stops
    # a cluster this one is about to use.
    users = Path(os.environ.get("TF_SLURM_LOCAL_DIR", "/tmp/tf_for_slurm-slurm")) / "users"
    users.mkdir(parents=True, exist_ok=True)
    me = users / str(os.getpid())
    me.touch()
    try:
        cluster, started_here = start_cluster()
    except BaseException:
        me.unlink(missing_ok=True)
        raise
    # A cluster some test session started is stopped by the last session using it; one that a
    # person started by hand (already up before any session) is left running.
    marker = cluster.dir / "run" / "started-by-tests"
    if started_here:
        marker.touch()
    try:
        yield cluster
    finally:
        me.unlink(missing_ok=True)
        keep = os.environ.get("TF_SLURM_KEEP_CLUSTER", "") in ("1", "yes", "true")
        if marker.exists() and not keep and not _live_users(users):
            marker.unlink(missing_ok=True)
            with host_network():  # the session's teardown may run in a later test's (tests/netns.py)
                _script("down", timeout=120)
