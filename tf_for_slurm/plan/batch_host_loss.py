"""A task that lost the step's supervisor on the job's batch host: was the node lost (then nothing
would ever end or requeue the job: requeue it, or end it), or only that process?

Why: Slurm keeps a `--no-kill` batch job whose batch host died RUNNING on its other nodes, with no
batch script, until its time limit (docs/SLURM_NODE_LOSS.md, "The batch host lost", measured on
22.05); batch-step died with that node, so no relaunch and no requeue comes.  Any process of the
job may requeue it, and that frees the other nodes at once.  Slurm's own verdict on the node is
the evidence: `NOT_RESPONDING` after its next ping (84-85 s measured, SlurmdTimeout/3), `DOWN`
after SlurmdTimeout.  A node whose slurmd still starts a step lost only the process: batch-step
lives there and decides, as for any lost task.

Pure (values in, actions out), carried out by supervise/batch_host.py.  Rules, in order:
1. probe the node with a step of `true` (`srun --overlap -w NODE`) every `probe_every` s: it ran,
   the node lives, nothing done (one line);
2. the evidence that the node is lost: Slurm reports it `NOT_RESPONDING` or `DOWN` (looked at
   every `every` s), or PROBES_LOST probes in a row failed to launch there (its slurmd does not
   answer: measured, "Communication connection failure" after 11 s).  Slurm alone may take up to
   its SlurmdTimeout: it marked the node NOT_RESPONDING after 36-85 s in three runs, and not within
   240 s in a fourth.  Neither within `wait` s: nothing done (one line);
3. a stopping signal (scancel, srun) before the requeue or cancel: nothing done;
4. with the evidence, this task waits its turn (`turn_gap` s per place in `checkers`' order, at
   most `MAX_TURN` s), then looks at the job: no longer RUNNING, or restarted since this run
   began: another task acted, nothing more;
5. requeues left (batch-step's budget: `--max-requeues` less the job's restarts): requeue;
   none left, Slurm refused the requeue (a job submitted with `--no-requeue`), or the step had
   ended with status 0 (`finished`: training is over): cancel it (it would hold its nodes to its
   time limit); each an action and one line.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = ["CHECKERS", "DEFAULT_EVERY", "MAX_TURN", "PROBE_EVERY", "PROBES_LOST", "Ask", "BatchHostLoss", "Done",
           "Sleep", "checker_turn", "gone", "launch_failed"]

CHECKERS = 3  # tasks that check (one a node, the first nodes other than the batch host): not a storm of sruns

DEFAULT_EVERY = 5.0  # seconds between two looks at the node's state
PROBE_EVERY = 15.0  # seconds between the starts of two probes
PROBES_LOST = 2  # probes in a row that failed to launch: the node's slurmd is gone
MAX_TURN = 20.0  # seconds the highest ranks wait for a lower one to act


class Ask(NamedTuple):
    """Ask Slurm `what`: 'probe' (a step on the node), 'node' (its state), 'job' (its state and
    restarts), 'requeue' or 'cancel'."""

    what: str


class Sleep(NamedTuple):
    """Nothing to do until `until` (monotonic seconds)."""

    until: float


class Done(NamedTuple):
    """The end of the check: `line` says what was found and done; `action`: what this task did to the
    job, "requeue" or "cancel", or "" (nothing)."""

    line: str
    action: str = ""

    @property
    def acted(self) -> bool:
        return bool(self.action)


Step = Union[Ask, Sleep, Done]


def gone(state: str) -> bool:
    """Slurm's node state says the node is lost: NOT_RESPONDING (`IDLE+NOT_RESPONDING`, `MIXED*`) or DOWN."""
    words = state.upper().replace("*", "+NOT_RESPONDING").split("+")
    return "NOT_RESPONDING" in words or "DOWN" in words


def launch_failed(text: str) -> bool:
    """srun's words when the step was made but its node's slurmd did not take it (22.05: "Application
    launch failed: Communication connection failure"; older: "Task launch for StepId=... failed on
    node ..."), as opposed to a step Slurm refused to make, or an srun that could not run."""
    low = text.lower()
    return "launch failed" in low or ("task launch" in low and "failed" in low) or "connection failure" in low


def checker_turn(tasks: Sequence[Tuple[int, str]], rank: int, node: str) -> Optional[int]:
    """This task's turn among the checkers, None when it is not one: the first task (by rank) of each
    node other than `node`, the first CHECKERS such nodes.  `tasks`: (rank, node) of every task."""
    firsts: Dict[str, int] = {}
    for task_rank, task_node in sorted(tasks):
        if task_node != node and task_node not in firsts:
            firsts[task_node] = task_rank
            if len(firsts) == CHECKERS:
                break
    order = sorted(firsts.values())
    return order.index(rank) if rank in order else None


class BatchHostLoss:
    """One task's check after it lost the step's supervisor on batch host `node` (see the module rules):
    `next` says what to do; the answers come back through `probe_said`, `node_said`, `job_said`, `requeue_said` and
    `cancel_said`."""

    def __init__(self, *, job: str, node: str, turn: int, restarts: int, requeues_left: int, start: float,
                 wait: float, every: float = DEFAULT_EVERY, turn_gap: float = 2.0, finished: bool = False,
                 probe_every: float = PROBE_EVERY):
        self.job, self.node, self.restarts, self.requeues_left = job, node, restarts, requeues_left
        self.start, self.wait, self.every, self.probe_every = start, wait, every, probe_every
        self.finished = finished  # the step ended with status 0: training is over, the job is only ended
        self.turn = min(max(turn, 0) * turn_gap, MAX_TURN)
        self.next_look = self.next_probe = start
        self.state = ""  # the node's last state Slurm gave
        self.failed = 0  # probes in a row that failed to launch there
        self.probe_why = ""  # the last probe's failure
        self.evidence: Optional[float] = None  # when the node was found lost
        self.evidence_line = ""  # how
        self.phase = "look"  # look -> job -> requeue -> cancel, or done
        self.refused = ""  # why Slurm refused the requeue
        self.done: Optional[Done] = None

    def next(self, now: float) -> Step:
        """What to do now."""
        if self.done is not None:
            return self.done
        if self.phase == "look":
            if now - self.start >= self.wait:
                said = f"Slurm says {self.state or 'nothing'}"
                said += f"; a step there did not start: {self.probe_why}" if self.probe_why else ""
                return self._end(f"nothing showed its node {self.node} lost within {self.wait:g} s ({said}): the "
                                 "job is left to its batch script")
            if now >= self.next_probe:
                self.next_probe = now + self.probe_every
                return Ask("probe")
            if now >= self.next_look:
                self.next_look = now + self.every
                return Ask("node")
            return Sleep(min(self.next_look, self.next_probe, self.start + self.wait))
        if self.phase == "job" and self.evidence is not None and now < self.evidence + self.turn:
            return Sleep(self.evidence + self.turn)
        return Ask(self.phase)

    def _end(self, line: str, action: str = "") -> Done:
        self.done, self.phase = Done(line, action), "done"
        return self.done

    def _lost(self) -> str:
        return f"its batch host {self.node} lost ({self.evidence_line})"

    def _found(self, how: str, now: float) -> None:
        self.evidence, self.evidence_line, self.phase = now, how, "job"

    def stop_came(self) -> None:
        """A stopping signal reached this task (scancel, srun): no requeue or cancel is started any more."""
        if self.phase in ("look", "job"):
            self._end(f"a stop signal came while checking whether its batch host {self.node} was lost: nothing done")

    def probe_said(self, ran: bool, why: str, now: float) -> None:
        """The probe's outcome: `ran` (the node's slurmd started it), else `why` not (srun's words)."""
        if self.phase != "look":
            return
        if ran:
            self._end(f"its node {self.node} still starts a step: only the process was lost, the job is left to "
                      "its batch script")
            return
        self.probe_why = why
        self.failed = self.failed + 1 if launch_failed(why) else 0
        if self.failed >= PROBES_LOST:
            self._found(f"{self.failed} steps in a row could not start there: {why}", now)

    def node_said(self, state: Optional[str], now: float) -> None:
        """The node's state (None: Slurm did not answer; looked at again `every` s later)."""
        if self.phase == "look" and state:
            self.state = state
            if gone(state):
                self._found(f"Slurm says {state}", now)

    def job_said(self, state: Optional[str], restarts: Optional[int]) -> None:
        """The job's state and restart count (None: not known)."""
        if self.phase != "job":
            return
        if state is None:
            self._end(f"{self._lost()}; Slurm did not say the job's state: nothing done")
        elif state != "RUNNING" or (restarts is not None and restarts > self.restarts):
            self._end(f"{self._lost()}; the job is {state} (restarts {restarts}): another task acted")
        else:
            self.phase = "requeue" if self.requeues_left > 0 and not self.finished else "cancel"

    def requeue_said(self, refused: Optional[str]) -> None:
        """The requeue's outcome (`refused`: Slurm's reason; None: taken); refused: cancel."""
        if self.phase != "requeue":
            return
        if refused is None:
            self._end(f"requeued job {self.job}: {self._lost()}, so no batch script would end or requeue it "
                      f"({self.requeues_left} requeue(s) were left)", action="requeue")
        else:
            self.refused, self.phase = refused, "cancel"

    def cancel_said(self, failed: Optional[str]) -> None:
        """The cancel's outcome (`failed`: why it failed; None: done)."""
        if self.phase != "cancel":
            return
        why = (f"Slurm refused the requeue ({self.refused})" if self.refused else "the step had ended with status 0"
               if self.finished else "no requeue left (--max-requeues)")
        if failed is None:
            self._end(f"cancelled job {self.job}: {self._lost()} and {why}; it would have held its nodes to its "
                      "time limit", action="cancel")
        else:
            self._end(f"could not cancel job {self.job} ({failed}): {self._lost()} and {why}")
