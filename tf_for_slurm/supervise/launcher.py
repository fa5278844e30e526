"""`tf-slurm local`: run N tasks on this machine with the environment a Slurm step would give them.

Why: a laptop or a CI runner has no Slurm, but the library (and `tf-slurm exec`) plan from Slurm's
variables.  The launcher emulates a step `node[1-K]` in Slurm's block layout, so the very code that
runs under `srun` runs here unchanged.  All emulated nodes are this one host, so it asks the
planner for ports unique across the step (`TF_SLURM_PORT_SCOPE=step`) and loopback addresses.

It behaves like `srun -l --kill-on-bad-exit=1`: every output line is prefixed with the task's
rank, the first failing task ends the others (SIGTERM, then SIGKILL after a grace), Ctrl-C is
forwarded to every task, SIGUSR1/SIGUSR2 are passed to every task without ending the step, and
the exit status is the first failing task's (128+signo when a task
died of a signal).  Each task runs in its own process group, so its children die with it.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Mapping, Optional, Sequence

from tf_for_slurm.host import threads
from tf_for_slurm.errors import PlanError, SlurmEnvError, UsageError, bad_value

log = logging.getLogger(__name__)

NODE_PREFIX = "node"
DEFAULT_KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
POLL_INTERVAL = 0.05  # seconds between checks of the children
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PASSED_ON = (signal.SIGUSR1, signal.SIGUSR2)  # passed to every task, the step goes on (as srun does)

# Inherited variables that describe some other step or cluster: a fresh step must not see them.
_DROP_PREFIXES = ("SLURM_", "SLURMD_")
_DROP_NAMES = ("TF_CONFIG", "TF_SLURM_TASKS", "TF_SLURM_PS", "TF_SLURM_ADDRESS", "TF_SLURM_PORT_SCOPE",
               # what `tf-slurm exec` exports for one task of some other step
               "TF_SLURM_JOB_TYPE", "TF_SLURM_TASK_INDEX", "TF_SLURM_RANK", "TF_SLURM_NUM_PS",
               "TF_SLURM_NUM_WORKERS", "TF_SLURM_SELF_ADDRESS", "TF_SLURM_TF_CONFIG_FILE",
               "TF_SLURM_SUPERVISED", "TF_SLURM_LAUNCH_REPORT", "TF_SLURM_SESSION_FILTERS")


@dataclass(frozen=True)
class Layout:
    """Where the emulated step puts its tasks: node names and task counts, Slurm's block order."""

    nodes: tuple  # ('node1', 'node2', ...)
    tasks_per_node: tuple  # one count per node

    @property
    def ntasks(self) -> int:
        return sum(self.tasks_per_node)

    @property
    def nodelist(self) -> str:
        """Slurm's compressed form: 'node1' or 'node[1-K]'."""
        if len(self.nodes) == 1:
            return self.nodes[0]
        return f"{NODE_PREFIX}[1-{len(self.nodes)}]"

    def placement(self, rank: int) -> tuple:
        """rank -> (node index, local id): block distribution, node by node."""
        first = 0
        for node_index, count in enumerate(self.tasks_per_node):
            if rank < first + count:
                return node_index, rank - first
            first += count
        raise UsageError(bad_value("rank", rank, f"a task rank in 0-{self.ntasks - 1}"))


def make_layout(ntasks: int, nodes: Optional[int] = None, tasks_per_node: Optional[str] = None) -> Layout:
    """Validate -n/--nodes/--tasks-per-node and lay the tasks out like Slurm's block layout.

    Without a spec each node gets ntasks // nodes tasks and the first ntasks % nodes one more.
    """
    from tf_for_slurm.plan.step import format_tasks_per_node, parse_tasks_per_node

    if not isinstance(ntasks, int) or isinstance(ntasks, bool) or ntasks < 1:
        raise UsageError(bad_value("-n/--ntasks", ntasks, "a number of tasks >= 1"))
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1):
        raise UsageError(bad_value("--nodes", nodes, "a number of nodes >= 1"))
    if tasks_per_node is not None:
        try:
            counts = parse_tasks_per_node(tasks_per_node, "--tasks-per-node")
        except SlurmEnvError as exc:
            raise UsageError(str(exc)) from None
        if nodes is not None and len(counts) != nodes:
            raise UsageError(bad_value("--tasks-per-node", tasks_per_node,
                                       f"one count per node ({nodes} nodes from --nodes), got {len(counts)}"))
        if sum(counts) != ntasks:
            raise UsageError(bad_value("--tasks-per-node", tasks_per_node,
                                       f"counts summing to -n {ntasks}, got {sum(counts)} "
                                       f"({format_tasks_per_node(counts)})"))
    else:
        k = 1 if nodes is None else nodes
        if k > ntasks:
            raise UsageError(bad_value("--nodes", k, f"at most -n {ntasks} (every node runs a task)"))
        base, extra = divmod(ntasks, k)
        counts = tuple(base + (1 if i < extra else 0) for i in range(k))
    names = tuple(f"{NODE_PREFIX}{i + 1}" for i in range(len(counts)))
    return Layout(nodes=names, tasks_per_node=tuple(counts))


def check_roles(ntasks: int, ps: Optional[int] = None, tasks: Optional[str] = None) -> None:
    """Reject --ps/--tasks that no plan could use, before any process starts."""
    from tf_for_slurm.plan import roles as roles_mod

    if ps is not None and tasks is not None:
        raise UsageError(f"--ps={ps!r} and --tasks={tasks!r}: expected only one of them")
    try:
        if tasks is not None:
            roles_mod.roles_from_list(tasks, ntasks, "--tasks")
        if ps is not None:
            roles_mod.first_ps(ntasks, ps)
    except PlanError as exc:
        raise UsageError(str(exc).replace("ps=", "--ps=", 1) if tasks is None else str(exc)) from None


def task_env(layout: Layout, rank: int, job_id: str, base: Mapping[str, str],
             ps: Optional[int] = None, tasks: Optional[str] = None) -> dict:
    """The environment of task `rank`: `base` without stale Slurm/TF variables, plus the step's."""
    from tf_for_slurm.plan.step import format_tasks_per_node

    node_index, local_id = layout.placement(rank)
    env = {k: v for k, v in base.items()
           if not k.startswith(_DROP_PREFIXES) and k not in _DROP_NAMES}
    tpn = format_tasks_per_node(layout.tasks_per_node)
    nnodes, ntasks = str(len(layout.nodes)), str(layout.ntasks)
    env.update({
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_JOB_NODELIST": layout.nodelist,
        "SLURM_STEP_NODELIST": layout.nodelist,
        "SLURM_NODELIST": layout.nodelist,
        "SLURM_JOB_NUM_NODES": nnodes,
        "SLURM_STEP_NUM_NODES": nnodes,
        "SLURM_NNODES": nnodes,
        "SLURM_TASKS_PER_NODE": tpn,
        "SLURM_STEP_TASKS_PER_NODE": tpn,
        "SLURM_NTASKS": ntasks,
        "SLURM_STEP_NUM_TASKS": ntasks,
        "SLURM_NPROCS": ntasks,
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(local_id),
        "SLURM_NODEID": str(node_index),
        "SLURMD_NODENAME": layout.nodes[node_index],
        "SLURM_CPUS_ON_NODE": str(layout.tasks_per_node[node_index]),
        "TF_SLURM_ADDRESS": "template:127.0.0.1",
        "TF_SLURM_PORT_SCOPE": "step",
    })
    if tasks is not None:
        env["TF_SLURM_TASKS"] = ",".join(r.strip() for r in tasks.split(","))
    if ps is not None:
        env["TF_SLURM_PS"] = str(ps)
    return env


def output_path(pattern: str, job_id: str, rank: int, node_index: int, node: str) -> str:
    """srun's --output patterns: %j job id, %t task rank, %n node index, %N node name, %% a '%'."""
    fields = {"j": job_id, "t": str(rank), "n": str(node_index), "N": node, "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        key = pattern[i + 1:i + 2]
        if key not in fields:
            raise UsageError(bad_value("--output", pattern, "a file name pattern with %j, %t, %n, %N or %% only"))
        out.append(fields[key])
        i += 2
    return "".join(out)


def new_job_id() -> str:
    """A fresh numeric job id, so concurrent launches get different port windows."""
    return str(random.SystemRandom().randint(1_000_000, 9_999_999))


def exit_status(returncode: int) -> int:
    """Popen's returncode -> a shell's exit status (a signal s becomes 128+s)."""
    return 128 - returncode if returncode < 0 else returncode


def _parent_death_signal() -> Optional[object]:
    """A preexec function that kills the child if the launcher itself is SIGKILLed (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return preexec


class _Prefixer:
    """Copies one child's stream to ours line by line, each line prefixed with the rank."""

    def __init__(self, stream: BinaryIO, out: BinaryIO, prefix: bytes, lock: threading.Lock):
        self.thread = threading.Thread(target=self._run, args=(stream, out, prefix, lock), daemon=True)
        threads.start(self.thread)

    @staticmethod
    def _run(stream: BinaryIO, out: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
        try:
            for line in iter(stream.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                with lock:  # one whole line at a time: no interleaving within a line
                    try:
                        out.write(prefix + line)
                        out.flush()
                    except (OSError, ValueError):
                        pass
        finally:
            stream.close()


class _Step:
    """The running tasks of one launch."""

    def __init__(self, procs: list, kill_grace: float):
        self.procs = procs
        self.kill_grace = kill_grace
        self.status: dict = {}  # rank -> exit status, in the order seen
        self.first_failure: Optional[tuple] = None  # (rank, status)
        self.signal_received: Optional[int] = None
        self.kill_deadline: Optional[float] = None  # when SIGKILL follows the SIGTERM
        self.report: Optional[str] = None  # file where supervisors name the task that failed first

    def signal_all(self, signo: int) -> None:
        for rank, proc in enumerate(self.procs):
            if rank not in self.status or signo == signal.SIGKILL:
                _killpg(proc.pid, signo)

    def poll(self) -> None:
        for rank, proc in enumerate(self.procs):
            if rank in self.status:
                continue
            code = proc.poll()
            if code is None:
                continue
            status = exit_status(code)
            self.status[rank] = status
            log.debug("task %d exited with status %d", rank, status)
            if status != 0 and self.first_failure is None:
                self.first_failure = self.origin(rank, status)
                if self.signal_received is None:
                    first, first_status = self.first_failure
                    log.error("task %d exited with status %d%s: ending the other tasks", first, first_status,
                              "" if first == rank else f" (task {rank} passed it on)")
                self.terminate()

    def origin(self, rank: int, status: int) -> tuple:
        """(rank, status) of the task that failed first: the supervisors' report when there is one
        (written before any other task hears of the failure), else the first task seen failing."""
        if self.report:
            try:
                with open(self.report, encoding="ascii") as fh:
                    first = fh.readline().split()
                if len(first) == 2 and first[0].isdigit() and first[1].isdigit():
                    return int(first[0]), int(first[1])
            except OSError:
                pass
        return rank, status

    def terminate(self, signo: int = signal.SIGTERM) -> None:
        """Send `signo` to every running task; SIGKILL follows after the grace."""
        self.signal_all(signo)
        if self.kill_deadline is None:
            self.kill_deadline = time.monotonic() + self.kill_grace


def _killpg(pgid: int, signo: int) -> None:
    try:
        os.killpg(pgid, signo)
    except (ProcessLookupError, PermissionError):
        pass


def launch(command: Sequence[str], layout: Layout, *, job_id: Optional[str] = None,
           ps: Optional[int] = None, tasks: Optional[str] = None,
           base_env: Optional[Mapping[str, str]] = None, kill_grace: float = DEFAULT_KILL_GRACE,
           stdout: Optional[BinaryIO] = None, stderr: Optional[BinaryIO] = None,
           under_exec: bool = True, output: Optional[str] = None) -> int:
    """Run `command` as every task of the emulated step; return the first failing status (or 0).

    under_exec: run each task as `tf-slurm exec -- command` (TF_CONFIG, the supervisor), as
    `srun tf-slurm exec` would; False gives the command the Slurm variables only.
    output: a per-task log file pattern in srun's form (%j job, %t rank, %n node index, %N node name)
    instead of rank-prefixed lines on our own stdout/stderr.
    Signal forwarding is installed only when called from the main thread.
    """
    if not command:
        raise UsageError(bad_value("command", list(command), "a command after '--', e.g. -- python train.py"))
    if job_id is None:
        job_id = new_job_id()
    elif not str(job_id).isdigit():
        raise UsageError(bad_value("--job-id", job_id, "a numeric Slurm job id like 12345"))
    check_roles(layout.ntasks, ps, tasks)
    if output is not None:
        output_path(output, "0", 0, 0, layout.nodes[0])  # a bad pattern fails before anything starts
    if kill_grace < 0:
        raise UsageError(bad_value("--kill-grace", kill_grace, "seconds >= 0"))
    base_env = os.environ if base_env is None else base_env
    stdout = stdout if stdout is not None else sys.stdout.buffer
    stderr = stderr if stderr is not None else sys.stderr.buffer
    width = len(str(layout.ntasks - 1))
    lock = threading.Lock()

    step = _Step([], kill_grace)
    report_dir = tempfile.mkdtemp(prefix="tf_slurm_local.")
    step.report = os.path.join(report_dir, "first_failure")
    argv = [sys.executable, "-m", "tf_for_slurm", "exec", "--", *command] if under_exec else list(command)
    in_main = threading.current_thread() is threading.main_thread()
    previous: dict = {}

    def pass_on(signo: int, _frame: object) -> None:
        log.info("launcher got %s: passing it to %d tasks", signal.Signals(signo).name, len(step.procs))
        for rank, proc in enumerate(step.procs):
            if rank not in step.status:
                _killpg(proc.pid, signo)

    def on_signal(signo: int, _frame: object) -> None:
        if step.signal_received is None:
            step.signal_received = signo
            log.warning("launcher got %s: forwarding it to %d tasks",
                        signal.Signals(signo).name, len(step.procs))
            step.terminate(signo)
        else:  # a second Ctrl-C: do not wait for the grace
            step.signal_all(signal.SIGKILL)

    if in_main:
        for signo in _FORWARDED:
            previous[signo] = signal.signal(signo, on_signal)
        for signo in _PASSED_ON:
            previous[signo] = signal.signal(signo, pass_on)
    log.info("job %s: %d tasks on %s (%s tasks per node)", job_id, layout.ntasks, layout.nodelist,
             ",".join(map(str, layout.tasks_per_node)))
    prefixers: list = []
    try:
        preexec = _parent_death_signal()
        for rank in range(layout.ntasks):
            if step.signal_received is not None:
                break
            env = task_env(layout, rank, str(job_id), base_env, ps, tasks)
            env["TF_SLURM_LAUNCH_REPORT"] = step.report
            log_file = None
            try:
                if output is not None:
                    node_index = layout.placement(rank)[0]
                    path = output_path(output, str(job_id), rank, node_index, layout.nodes[node_index])
                    log_file = open(path, "wb")
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                        stdout=log_file or subprocess.PIPE,
                                        stderr=subprocess.STDOUT if log_file else subprocess.PIPE,
                                        start_new_session=True, preexec_fn=preexec)
            except OSError as exc:
                step.first_failure = (rank, 127)
                log.error("task %d: cannot run %r: %s: ending the other tasks", rank, command[0], exc.strerror)
                step.terminate()
                break
            finally:
                if log_file is not None:
                    log_file.close()  # the task holds its own copy
            step.procs.append(proc)
            if log_file is None:
                prefix = f"{rank:>{width}}: ".encode()
                prefixers.append(_Prefixer(proc.stdout, stdout, prefix, lock))
                prefixers.append(_Prefixer(proc.stderr, stderr, prefix, lock))
        if step.signal_received is not None:  # a signal raced with the start of a task
            step.signal_all(step.signal_received)
        started = len(step.procs)
        while True:
            step.poll()
            if all(r in step.status for r in range(started)):
                break
            if step.kill_deadline is not None and time.monotonic() >= step.kill_deadline:
                log.warning("tasks still running %.1f s after SIGTERM: sending SIGKILL", kill_grace)
                step.signal_all(signal.SIGKILL)
                step.kill_deadline = float("inf")
            time.sleep(POLL_INTERVAL)
    finally:
        _reap_leftovers(step.procs, kill_grace)
        shutil.rmtree(report_dir, ignore_errors=True)
        for p in prefixers:
            p.thread.join(timeout=2.0)
        if in_main:
            for signo, handler in previous.items():
                signal.signal(signo, handler)
    if step.first_failure is not None:
        return step.first_failure[1]
    if step.signal_received is not None:
        return 128 + step.signal_received
    return 0


def _reap_leftovers(procs: Sequence[subprocess.Popen], grace: float) -> None:
    """End whatever the tasks left behind: every process of their sessions (each task is a session
    leader; its command and the command's children stay in that session even in process groups of
    their own), as Slurm ends every process of a step."""
    for proc in procs:
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    sessions = {p.pid for p in procs}
    alive = _session_members(sessions)
    if not alive:
        return
    log.info("ending %d leftover processes of the tasks", len(alive))
    for pid in alive:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _session_members(sessions):
        time.sleep(POLL_INTERVAL)
    for pid in _session_members(sessions):
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, signo: int) -> None:
    try:
        os.kill(pid, signo)
    except (ProcessLookupError, PermissionError):
        pass


def _session_members(sessions: set) -> list:
    """Live (not zombie) processes whose session id is one of `sessions` (Linux /proc)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z" and int(fields[3]) in sessions:  # state, ppid, pgrp, session
            found.append(int(name))
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm local` (the lead's CLI wires them in)."""
    parser.add_argument("-n", "--ntasks", type=int, required=True, metavar="N",
                        help="number of tasks to start (like srun -n)")
    parser.add_argument("-N", "--nodes", type=int, default=None, metavar="K",
                        help="number of emulated nodes node[1-K] (default 1, or as many as --tasks-per-node lists)")
    parser.add_argument("--tasks-per-node", default=None, metavar="SPEC",
                        help="tasks on each emulated node in Slurm's form, e.g. '2(x3),1' "
                             "(default: block layout, n//K each, the first n%%K nodes one more)")
    roles = parser.add_mutually_exclusive_group()
    roles.add_argument("--ps", type=int, default=None, metavar="P",
                       help="number of parameter servers (exported as TF_SLURM_PS)")
    roles.add_argument("--tasks", default=None, metavar="ROLES",
                       help="comma-separated role per task, e.g. ps,worker,worker (exported as TF_SLURM_TASKS)")
    parser.add_argument("--job-id", default=None, metavar="ID",
                        help="numeric SLURM_JOB_ID to use (default: a fresh random one per launch)")
    parser.add_argument("--kill-grace", type=float, default=DEFAULT_KILL_GRACE, metavar="SECONDS",
                        help="seconds between SIGTERM and SIGKILL when ending tasks (default %(default)s)")
    parser.add_argument("--output", "-o", default=None, metavar="PATTERN",
                        help="write each task's output to its own file, e.g. 'train-%%j-%%t.log' (srun's %%j job, "
                             "%%t rank, %%n node index, %%N node name)")
    parser.add_argument("--slurm-env-only", action="store_true",
                        help="give the tasks the Slurm variables only (default: each task runs under "
                             "`tf-slurm exec`, with TF_CONFIG and the supervisor)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                        help="the command every task runs")


def main(args: argparse.Namespace) -> int:
    """Run `tf-slurm local`; TfSlurmError (exit 2) for bad arguments, else the step's status."""
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(bad_value("command", command, "a command after '--', e.g. -- python train.py"))
    layout = make_layout(args.ntasks, args.nodes, args.tasks_per_node)
    return launch(command, layout, job_id=args.job_id, ps=args.ps, tasks=args.tasks,
                  kill_grace=args.kill_grace, under_exec=not args.slurm_env_only, output=args.output)


def _standalone(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m tf_for_slurm.launcher ...`: the same command without the CLI (tests, debugging)."""
    from tf_for_slurm.errors import TfSlurmError

    parser = argparse.ArgumentParser(prog="tf-slurm local", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TF_SLURM_LOG_LEVEL", "WARNING").upper(),
                        format="tf-slurm local: %(levelname)s: %(message)s")
    try:
        return main(args)
    except TfSlurmError as exc:
        print(f"tf-slurm local: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(_standalone())
