"""The ps wait: what a parameter server does instead of `server.join()`.

It reads its done queue every 0.05 s (the queue's size, then a dequeue only when a report is
there: a dequeue with a deadline would make TensorFlow log three C++ lines per try); between reads
it probes the ports of the tasks that have not reported.  Outcomes (exit statuses for `sys.exit`):

- EXIT_OK (0): every chief/worker reported success; or every one that came up did, and the
  others never came up within `late_start_grace` after that (a warning names them).
- EXIT_WORKER_LOST (69, plan.requeue.LOST_STATUS, the one status of "a peer was lost"): a task
  that was up stopped accepting TCP connections without reporting, or a task never came up within
  `startup_grace`.  Its node failed or hung: batch-step requeues it once the checkpoint advanced.
- EXIT_WORKER_FAILED (1): a task reported that its training raised (at once with fail_fast, else
  once every task reported): the program's own verdict, which another run would repeat.
- EXIT_TIMEOUT (3): the overall `timeout` passed first.  Distinct from the lost status because it
  is the caller's own limit, not a failed node: another run would time out the same way, so, as
  a status in 1-127, plan.requeue does not requeue it.
The ERROR log line names the tasks and their addresses.

A task counts as down only when its port has refused connections for `liveness_timeout / 2`
seconds in a row, so one slow accept does not end a healthy job (the rule: plan.liveness).  The ports are first probed
as soon as the wait starts (and every 50 ms until each task has been seen up), because a
task never seen up is judged by the much longer `startup_grace`; a final drain of the queue
before declaring anyone dead catches a report enqueued just before the task exited.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.network import port_accepts
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.plan.liveness import LOST, NEVER, NO_ANSWER, UP, Peer, Rule
from tf_for_slurm.plan.requeue import LOST_STATUS
from tf_for_slurm.plan.strategy import reporter_tasks
from tf_for_slurm.runtime.done_queue import create_done_queue, decode_done
from tf_for_slurm.runtime.server import device_filters

log = logging.getLogger(__name__)

EXIT_OK = 0
#: a chief/worker vanished or never came up: the lost status batch-step understands (was 1 before 69)
EXIT_WORKER_LOST = LOST_STATUS
#: a chief/worker reported that its training raised (the status EXIT_WORKER_LOST had for every failure)
EXIT_WORKER_FAILED = 1
#: the caller's `timeout` passed (see the module's docstring for why it is not the lost status)
EXIT_TIMEOUT = 3


def _seconds(name: str, value: Any, allow_none: bool = False) -> Optional[float]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(bad_value(name, value, "a number of seconds > 0" + (" or None" if allow_none else "")))
    return float(value)


def _required_seconds(name: str, value: Any) -> float:
    seconds = _seconds(name, value)
    assert seconds is not None  # None only with allow_none
    return seconds


def _describe(tasks: list) -> str:
    return ", ".join(f"{t.role}:{t.index} at {t.address}" for t in tasks)


def wait_for_workers(server: Any, plan: ClusterPlan, liveness_timeout: float = 5.0,
                     startup_grace: float = 120.0, timeout: Optional[float] = None, *,
                     fail_fast: bool = True, late_start_grace: float = 30.0,
                     probe: Callable[[str, int, float], bool] = port_accepts) -> int:
    """Block until every chief/worker reported done (0) or one is lost/failed (non-zero).

    late_start_grace: once every task that came up has reported success, how long to wait for
    tasks never seen up before exiting 0 (a task that ended before starting its server, e.g.
    exited 0 at once, cannot report; one that failed fails the step through Slurm on its own).
    """
    liveness_timeout = _required_seconds("liveness_timeout", liveness_timeout)
    startup_grace = _required_seconds("startup_grace", startup_grace)
    late_start_grace = _required_seconds("late_start_grace", late_start_grace)
    timeout = _seconds("timeout", timeout, allow_none=True)
    me = plan.me
    if me.role != "ps":
        raise UsageError(bad_value("plan.me.role", me.role, "'ps' (only a ps waits for workers)"))
    reporters = reporter_tasks(plan)
    if not reporters:
        log.warning("ps:%d has no chief/worker to wait for; exiting", me.index)
        return EXIT_OK

    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        queue = create_done_queue(me.index, len(reporters))
        size, dequeue = queue.size(), queue.dequeue()
    config = tf.compat.v1.ConfigProto(device_filters=device_filters(plan))  # a ps: only itself
    wait = _PsWait(me.index, reporters, liveness_timeout, startup_grace, late_start_grace, fail_fast, probe)
    # Look at the workers NOW, before the session setup: our server is already up, so workers that
    # were waiting for it train within a fraction of a second, and a worker that died before a first
    # look was never "seen up", so its death would go unnoticed for startup_grace.
    wait.check_pending()
    with wait.pool, tf.compat.v1.Session(server.target, graph=graph, config=config) as sess:

        def try_dequeue() -> Optional[int]:
            # Ask for the queue's size, and dequeue only what is there: a dequeue with a deadline
            # makes TensorFlow log ~3 C++ lines per timeout (a cancelled RunStep), forever.
            if int(sess.run(size)) == 0:
                return None
            return int(sess.run(dequeue))

        return wait.run(try_dequeue, timeout)


class _PsWait:
    """What one ps knows while it waits: the reports so far and each reporter's liveness
    (plan.liveness: down for liveness_timeout / 2 after being seen up, or never up in startup_grace)."""

    def __init__(self, ps_index: int, reporters: list, liveness_timeout: float, startup_grace: float,
                 late_start_grace: float, fail_fast: bool, probe: Callable[[str, int, float], bool]):
        self.ps_index, self.reporters, self.probe = ps_index, reporters, probe
        self.startup_grace, self.late_start_grace, self.fail_fast = startup_grace, late_start_grace, fail_fast
        self.period = min(0.5, max(0.05, liveness_timeout / 10))  # probe period once every task was seen up
        self.probe_timeout = self.period
        self.start = time.monotonic()
        rule = Rule(lost_after=liveness_timeout / 2, never_after=startup_grace)
        self.peers = [Peer(rule, self.start) for _ in reporters]
        self.done: Dict[int, bool] = {}  # reporter index -> failed?
        self.all_seen_reported_at: Optional[float] = None  # every task seen up had reported success
        self.pool = ThreadPoolExecutor(max_workers=min(16, len(reporters)))

    def run(self, try_dequeue: Callable[[], Optional[int]], timeout: Optional[float]) -> int:
        """Read the queue every 0.05 s (a report ends the wait at once); between reads, probe the
        tasks that have not reported: every 0.05 s until each was seen up, then every `period`."""
        next_probe = time.monotonic()
        while True:
            value = try_dequeue()
            if value is not None:
                status = self.take(value)
                if status is not None:
                    return status
                continue
            now = time.monotonic()
            if timeout is not None and now - self.start > timeout:
                missing = [t for i, t in enumerate(self.reporters) if i not in self.done]
                log.error("ps:%d timeout=%.1fs passed; still waiting for: %s", self.ps_index, timeout,
                          _describe(missing))
                return EXIT_TIMEOUT
            if now < next_probe:
                time.sleep(0.05)
                continue
            lost, never = self.check_pending()
            everyone_seen = all(p.seen or i in self.done for i, p in enumerate(self.peers))
            next_probe = time.monotonic() + (self.period if everyone_seen else 0.05)
            if self.late_starters_given_up():
                return EXIT_OK
            if lost or never:
                status = self.last_chance(try_dequeue, lost, never)
                if status is not None:
                    return status

    def take(self, value: int) -> Optional[int]:
        """Count one done report; the exit status once it decides the wait, else None."""
        idx, failed = decode_done(value)
        reporters, me = self.reporters, self.ps_index
        if not 0 <= idx < len(reporters):
            log.warning("ps:%d ignores done report %d: expected a reporter index 0..%d", me, value, len(reporters) - 1)
            return None
        if idx in self.done:
            log.debug("ps:%d duplicate report from %s", me, _describe([reporters[idx]]))
        self.done[idx] = self.done.get(idx, False) or failed
        log.info("ps:%d %s reported done%s (%d/%d)", me, _describe([reporters[idx]]),
                 " after its training FAILED" if failed else "", len(self.done), len(reporters))
        if failed and self.fail_fast:
            log.error("ps:%d exiting: %s reported that its training failed", me, _describe([reporters[idx]]))
            return EXIT_WORKER_FAILED
        if len(self.done) == len(reporters):
            failed_tasks = [reporters[i] for i, f in sorted(self.done.items()) if f]
            if failed_tasks:
                log.error("ps:%d all tasks reported, but training failed on: %s", me, _describe(failed_tasks))
                return EXIT_WORKER_FAILED
            log.info("ps:%d every chief/worker reported done; exiting", me)
            return EXIT_OK
        return None

    def check_pending(self) -> Tuple[List[int], List[int]]:
        """Probe the tasks that have not reported; return (lost, never) reporter indices."""
        pending = [i for i in range(len(self.reporters)) if i not in self.done]
        tasks = [self.reporters[i] for i in pending]
        ups = list(self.pool.map(lambda t: self.probe(t.host, t.port, self.probe_timeout), tasks))
        now = time.monotonic()
        verdicts = [(i, self.peers[i].observe(UP if up else NO_ANSWER, now)) for i, up in zip(pending, ups)]
        return [i for i, v in verdicts if v == LOST], [i for i, v in verdicts if v == NEVER]

    def late_starters_given_up(self) -> bool:
        """Every task that came up reported success; the others were never seen: after
        late_start_grace, training is over without them (a warning, exit 0)."""
        pending = [i for i in range(len(self.reporters)) if i not in self.done]
        if not self.done or any(self.done.values()) or any(self.peers[i].seen for i in pending):
            self.all_seen_reported_at = None
            return False
        now = time.monotonic()
        if self.all_seen_reported_at is None:
            self.all_seen_reported_at = now
        since = self.all_seen_reported_at
        if now - since < min(self.late_start_grace, max(0.0, self.startup_grace - (since - self.start))):
            return False
        log.warning("ps:%d every task that came up reported done; %s never came up (ended before starting "
                    "its server?) within %.1fs after that: exiting 0 without it", self.ps_index,
                    _describe([self.reporters[i] for i in pending]), now - since)
        return True

    def last_chance(self, try_dequeue: Callable[[], Optional[int]], lost: List[int],
                    never: List[int]) -> Optional[int]:
        """Before declaring anyone dead, read a report enqueued just before its task exited."""
        while (value := try_dequeue()) is not None:
            status = self.take(value)
            if status is not None:
                return status
        lost = [i for i in lost if i not in self.done]
        never = [i for i in never if i not in self.done]
        if not (lost or never):
            return None
        if lost:
            down = min(d for d in (self.peers[i].down_since for i in lost) if d is not None)
            log.error("ps:%d lost %s: port closed for %.1fs without a done report (worker died?)",
                      self.ps_index, _describe([self.reporters[i] for i in lost]), time.monotonic() - down)
        if never:
            log.error("ps:%d %s never came up within startup_grace=%.1fs", self.ps_index,
                      _describe([self.reporters[i] for i in never]), self.startup_grace)
        return EXIT_WORKER_LOST
