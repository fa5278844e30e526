"""The check before a step's command starts: who must reach whom, and the one line when one cannot.

Why: TensorFlow waits for an unreachable peer without a word (MultiWorkerMirroredStrategy's first
barrier has no timeout, a TF1 non-chief waits two hours), so a wrong address or a port another job
holds cost a job its whole time limit.  The supervisors check the plan's addresses first
(supervise/preflight.py carries it out); these are the rules, pure: the plan's tasks, what names
resolved to and how connections ended in; pairs, failures and one line out.

Who checks whom.  Up to FULL_MESH tasks: every task connects to every other one.  Beyond, a bounded
sample: each task connects to at most 1 + PS_SAMPLE + 4 = 9 others: the chief (every task: it
gives the verdict), PS_SAMPLE of the ps (all of them where there are no more), its ring neighbours
rank-1 and rank+1, and the task with its local id on the previous and the next node (so every node's
name is also tried from another node).  The chief's listener takes one connection per task; a ps
about PS_SAMPLE x tasks / ps more; any other task a few (4 where the nodes have as many tasks).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import os
import re
from typing import Any, Collection, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import PlanError
from tf_for_slurm.plan.restart_policy import RestartPolicy
from tf_for_slurm.plan.step_status import snapshot
from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.strategy import StepRoles

FULL_MESH = 32  # at most this many tasks: every ordered pair is checked
PS_SAMPLE = 4  # beyond: the ps each task checks
MAX_ADDRESSES = 4  # of a name, in a line and on the wire
MAX_TEXT = 400  # characters of the line (plan.failure_words keeps a fix line of this length whole)
SETTLE = 0.3  # seconds the chief waits after a first failure for a better-named one
STATUS = PlanError.exit_code  # what every task of a step that failed the check exits with (2)

# how a check failed, in the order the line prefers them (the cause before its echoes)
IN_USE = "in-use"  # the task could not listen on its planned port
LOOPBACK_OWN = "loopback-own"  # its name is a loopback address on its own node, other nodes must reach it
LOOPBACK_HERE = "loopback-here"  # another node's name is a loopback address here
UNRESOLVED = "unresolved"  # the name does not resolve here
OTHER_TASK = "other-task"  # another task of this step answered there
STRANGER = "stranger"  # something answered that is not this step's supervisor
NO_ANSWER = "no-answer"  # nobody answered the connection (SYN dropped)
UNREACHABLE = "unreachable"  # no route
REFUSED = "refused"  # refused until the deadline
SILENT = "silent"  # (the chief) a task's supervisor did not report
NO_VERDICT = "no-verdict"  # (a task) the chief's supervisor said nothing
KINDS = (IN_USE, LOOPBACK_OWN, LOOPBACK_HERE, UNRESOLVED, OTHER_TASK, STRANGER, NO_ANSWER, UNREACHABLE, REFUSED,
         SILENT, NO_VERDICT)
# why a stranger is one (a token on the wire, words in the line)
STRANGER_WHY = {"garbage": "it does not speak the check's protocol", "other-step": "it names another step",
                "bad-proof": "its proof is wrong", "silent": "it said nothing", "closed": "it closed the connection"}
_ADDRESS = re.compile(r"[0-9A-Za-z.:%_-]{1,64}")
_ERRNO = re.compile(r"E[A-Z0-9]{1,15}")
_MAC = re.compile(r"[0-9a-f]{64}")


class Failure(NamedTuple):
    """One failed check.  source: the task that found it (the connector; for IN_USE and LOOPBACK_OWN the
    listener itself); target: the task whose address it is."""

    kind: str
    source: int
    target: int
    seconds: float  # the check's timeout
    here: Tuple[str, ...] = ()  # what the target's name resolved to on the source's node
    there: Tuple[str, ...] = ()  # ... on the target's own node
    detail: str = ""  # an errno name (EHOSTUNREACH), or STRANGER_WHY's key
    answered: int = -1  # OTHER_TASK: the rank that answered
    more: int = 0  # SILENT: how many other tasks were silent too


class Report(NamedTuple):
    """What a task tells the chief: its own name's addresses, and its failure (None: every check passed)."""

    own: Tuple[str, ...]
    failure: Optional[Failure]


# -- who checks whom ------------------------------------------------------------------------------
class Pairs:
    """Which tasks each task connects to (see the module's docstring).  `tasks`: rank order, each with
    rank, node_index, local_id and role (plan.cluster.Task)."""

    def __init__(self, tasks: Sequence, chief: int):
        self.tasks, self.chief, self.size = tasks, chief, len(tasks)
        self.full = self.size <= FULL_MESH
        self.ps: List[int] = [] if self.full else [t.rank for t in tasks if t.role == "ps"]
        by_node: Dict[int, List[int]] = {}
        if not self.full:
            for t in tasks:
                by_node.setdefault(t.node_index, []).append(t.rank)
        self.nodes = [by_node[n] for n in sorted(by_node)]
        self.node_pos = {n: i for i, n in enumerate(sorted(by_node))}

    def targets(self, rank: int) -> Tuple[int, ...]:
        """The ranks task `rank` connects to, each once, never itself."""
        n = self.size
        if self.full:
            return tuple(r for r in range(n) if r != rank)
        out = [self.chief]
        ps = self.ps
        out += ps if len(ps) <= PS_SAMPLE else [ps[(rank + i) % len(ps)] for i in range(PS_SAMPLE)]
        out += [(rank + 1) % n, (rank - 1) % n]
        t = self.tasks[rank]
        if len(self.nodes) > 1:
            pos = self.node_pos[t.node_index]
            for step in (1, -1):
                node = self.nodes[(pos + step) % len(self.nodes)]
                out.append(node[t.local_id % len(node)])
        return tuple(r for r in dict.fromkeys(out) if r != rank)


# -- the loopback rule ----------------------------------------------------------------------------
def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, and IPv4-mapped loopback (::ffff:127.0.1.1)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def emulated(details: Sequence[Tuple[str, str]]) -> bool:
    """The plan's nodes are emulated on one host (port scope step: `tf-slurm local`, the local Slurm
    harness): every name is this machine's loopback on every side, and that is right."""
    return dict(details).get("port_scope") == "step"


def spans_nodes(tasks: Sequence) -> bool:
    return any(t.node != tasks[0].node for t in tasks)


def own_loopback(task, own: Sequence[str], multi_node: bool, is_emulated: bool,
                 seconds: float) -> Optional[Failure]:
    """A task whose name is a loopback address on its own node (Debian's `127.0.1.1 <hostname>` line),
    when tasks on other nodes must reach it."""
    if is_emulated or not multi_node or not own or not is_loopback(own[0]):
        return None
    return Failure(LOOPBACK_OWN, task.rank, task.rank, seconds, there=tuple(own))


def here_loopback(source, target, here: Sequence[str], is_emulated: bool, seconds: float) -> Optional[Failure]:
    """Another node's name resolving to a loopback address here: a connection would reach this node."""
    if is_emulated or source.node == target.node or not here or not is_loopback(here[0]):
        return None
    return Failure(LOOPBACK_HERE, source.rank, target.rank, seconds, here=tuple(here))


def name_failures(me, tasks: Sequence, own: Sequence[str], here: Mapping[int, Sequence[str]],
                  unanswered: Collection[int], is_emulated: bool, seconds: float) -> List[Failure]:
    """What the names alone say, before any connection: our own name a loopback address, a target's name
    that does not resolve here (`unanswered`: the name service did not answer in time) or is a loopback
    address here.  here: what each target's name resolved to on this node."""
    found = [own_loopback(me, own, spans_nodes(tasks), is_emulated, seconds)]
    for rank, addresses in here.items():
        found.append(here_loopback(me, tasks[rank], addresses, is_emulated, seconds) if addresses else
                     Failure(UNRESOLVED, me.rank, rank, seconds, detail="silent" if rank in unanswered else ""))
    return [f for f in found if f is not None]


# -- timing ---------------------------------------------------------------------------------------
def grace(timeout: float) -> float:
    """How long past its deadline the chief waits for reports (a task waits twice this for the verdict):
    tasks start a little apart, each counts its deadline from its own start."""
    return max(1.0, min(5.0, timeout / 4))


def next_delay(delay: float, size: int) -> float:
    """The wait before the next try after a refused connection: doubled, at most 0.25 s (0.5 s past 256
    tasks, so thousands of tasks do not storm a chief that starts late).  A peer that connects to us is
    tried again at once (supervise.preflight): most pairs are checked both ways."""
    return min(delay * 2, 0.25 if size <= 256 else 0.5)


def worst(failures: Sequence[Failure]) -> Optional[Failure]:
    """The failure the line names: the first kind of KINDS, then the lowest ranks."""
    if not failures:
        return None
    return min(failures, key=lambda f: (KINDS.index(f.kind), f.source, f.target))


def with_view(failure: Failure, own: Mapping[int, Sequence[str]]) -> Failure:
    """`failure` with its target's own view of its name, when the target reported it and it lacks one."""
    if failure.there or failure.target not in own:
        return failure
    return failure._replace(there=tuple(own[failure.target])[:MAX_ADDRESSES])


# -- the chief's verdict ---------------------------------------------------------------------------
GO, STOP = "go", "stop"


def verdict(known: bool, all_in: bool, now: float, first_bad: Optional[float], last_call: float,
            listening: bool) -> Optional[str]:
    """The chief's decision: GO once every report is in and good; STOP once a failure is known (SETTLE s
    after the first, for a better-named one; at once when every report is in or nobody can reach the
    chief's port) or at `last_call` (its deadline + grace: a report is missing); None: wait."""
    if known:
        return STOP if all_in or not listening or (first_bad is not None and now >= first_bad + SETTLE) else None
    if all_in:
        return GO
    return STOP if now >= last_call else None


def silent(size: int, chief: int, reported: Collection[int], seconds: float) -> Failure:
    """The failure of the tasks that did not report by the chief's last call: the first, and how many more."""
    missing = [r for r in range(size) if r != chief and r not in reported]
    return Failure(SILENT, missing[0] if missing else chief, chief, seconds, more=max(0, len(missing) - 1))


def failed_status(tasks: Sequence, roles: StepRoles, rank: int, line: str, *, job: str, step: str, me: int,
                  mono: float, wall: float) -> Dict[str, Any]:
    """status.json as the hub would leave it had task `rank` failed with the line (plan.step_status):
    `tf-slurm status` names the check's failure as the step's first."""
    watch = StepWatch(roles, [t.rank for t in tasks], {t.rank: name(t) for t in tasks}, local_rank=me, now=mono,
                      policy=RestartPolicy(max_restarts=0), role_of={t.rank: t.role for t in tasks})
    watch.exit(rank, STATUS, mono)
    for other in watch.ranks:
        watch.bye(other)
    return snapshot(tasks, watch, roles, job=job, step=step, mono=mono, wall=wall, over=True, detail=line)


# -- on the wire ----------------------------------------------------------------------------------
def mac(key: bytes, side: str, tag: str, src: int, dst: int, first: str, second: str) -> str:
    """`side`'s proof on one connection of the check ("connector" or "listener": HMAC-SHA256 under the
    step's key over the side, the step, its own rank src, the other's dst and both nonces)."""
    return hmac.new(key, f"tf_slurm preflight {side} {tag} {src} {dst} {first} {second}".encode(),
                    hashlib.sha256).hexdigest()


def mac_ok(key: bytes, given: str, side: str, tag: str, src: int, dst: int, first: str, second: str) -> bool:
    """True when `given` is that proof (constant-time comparison)."""
    return bool(_MAC.fullmatch(given)) and hmac.compare_digest(given, mac(key, side, tag, src, dst, first, second))


# -- reports ----------------------------------------------------------------------------------
def addresses_token(addresses: Sequence[str]) -> str:
    return ",".join(addresses[:MAX_ADDRESSES]) or "-"


def parse_addresses(token: str) -> Optional[Tuple[str, ...]]:
    if token == "-":
        return ()
    parts = token.split(",")
    if len(parts) > MAX_ADDRESSES or not all(_ADDRESS.fullmatch(p) for p in parts):
        return None
    return tuple(parts)


def failure_tokens(f: Failure) -> List[str]:
    return [f.kind, str(f.source), str(f.target), f"{f.seconds:g}", addresses_token(f.here),
            addresses_token(f.there), f.detail or "-", str(f.answered), str(f.more)]


def _rank(text: str, size: int, allow_none: bool = False) -> Optional[int]:
    if allow_none and text == "-1":
        return -1
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) >= size:
        return None
    return int(text)


def parse_failure(tokens: Sequence[str], size: int) -> Optional[Failure]:
    """A failure as failure_tokens wrote it, every token checked; None when it is not one."""
    if len(tokens) != 9 or tokens[0] not in KINDS:
        return None
    source, target, answered = _rank(tokens[1], size), _rank(tokens[2], size), _rank(tokens[7], size, True)
    here, there = parse_addresses(tokens[4]), parse_addresses(tokens[5])
    detail = "" if tokens[6] == "-" else tokens[6]
    more = _rank(tokens[8], size)
    try:
        seconds = float(tokens[3]) if re.fullmatch(r"[0-9]{1,7}(\.[0-9]{1,6})?", tokens[3]) else None
    except ValueError:
        seconds = None
    if None in (source, target, answered, here, there, more, seconds) or \
            not (detail == "" or detail in STRANGER_WHY or _ERRNO.fullmatch(detail)):
        return None
    return Failure(tokens[0], source, target, seconds, here, there, detail, answered, more)  # type: ignore[arg-type]


def report_tokens(report: Report) -> List[str]:
    head = ["report", "ok" if report.failure is None else "fail", addresses_token(report.own)]
    return head + ([] if report.failure is None else failure_tokens(report.failure))


def parse_report(parts: Sequence[str], size: int) -> Optional[Report]:
    """`report ok <addresses>` or `report fail <addresses> <failure>`; None when it is neither."""
    if len(parts) < 3 or parts[0] != "report" or parts[1] not in ("ok", "fail"):
        return None
    own = parse_addresses(parts[2])
    if own is None:
        return None
    if parts[1] == "ok":
        return Report(own, None) if len(parts) == 3 else None
    failure = parse_failure(parts[3:], size)
    return None if failure is None else Report(own, failure)


def clean_line(text: str) -> Optional[str]:
    """A verdict's line as a task may log it: printable ASCII, at most MAX_TEXT characters; else None."""
    text = text.strip()
    return text if text and len(text) <= MAX_TEXT and text.isascii() and text.isprintable() else None


# -- the one line ---------------------------------------------------------------------------------
def name(task) -> str:
    """'worker 1 (rank 2, node3)'."""
    return f"{task.role} {task.index} (rank {task.rank}, {task.node})"


def _errno_words(detail: str) -> str:
    code = getattr(errno, detail, None)
    return os.strerror(code) if isinstance(code, int) else detail


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _views(f: Failure, source, target) -> str:
    """' (node1 is 10.0.0.1 on node2, 127.0.1.1 on node1)': what the name is on both sides."""
    if _is_ip(target.host):
        return ""
    def say(addrs: Sequence[str]) -> str:
        return "/".join(addrs[:2]) if addrs else "not known"
    sides = [f"{say(f.here)} on {source.node}"] if f.kind not in (LOOPBACK_OWN, IN_USE) else []
    if target.node != source.node or f.kind in (LOOPBACK_OWN, IN_USE) or not f.here:
        sides.append(f"{say(f.there)} on {target.node}")
    return f" ({target.host} is {', '.join(sides)})"


def _fix(kind: str, names: Mapping[str, str]) -> str:
    address, template = names.get("address", "the address policy"), names.get("ib_template", "an IB template")
    base, timeout = names.get("base_port", "a base port"), names.get("timeout", "the check's timeout")
    reach = f"{address}=auto, or an InfiniBand template ({template})"
    ports = f"a port range free on every node ({base}) or srun --resv-ports"
    return {IN_USE: ports, STRANGER: ports,
            NO_ANSWER: f"{reach}, or a port range the firewall lets through ({base})",
            UNREACHABLE: f"{reach}, or a port range the firewall lets through ({base})",
            REFUSED: f"{reach}; tasks that start late: a longer {timeout}",
            SILENT: f"its log says why; tasks that start late: a longer {timeout}",
            NO_VERDICT: f"the chief's log says why; tasks that start late: a longer {timeout}",
            }.get(kind, reach)


def failure_line(f: Failure, tasks: Sequence, names: Mapping[str, str]) -> str:
    """The one line: which task cannot reach which address, what the name is on both sides, how it failed,
    and the fix.  names: the settings' names for the fix ('address', 'ib_template', 'base_port', 'timeout').
    A line too long loses the views first, then the end of its text; never its fix."""
    fix = _fix(f.kind, names)
    for views in (_views(f, tasks[f.source], tasks[f.target]), ""):
        line = f"preflight: {_what(f, tasks, views)}; fix: {fix}"
        if len(line) <= MAX_TEXT:
            return line
    return f"preflight: {_what(f, tasks, '')[:max(0, MAX_TEXT - len(fix) - 21)]}...; fix: {fix}"


def _what(f: Failure, tasks: Sequence, views: str) -> str:
    src, tgt = tasks[f.source], tasks[f.target]
    who, addr, secs = name(src), tgt.address, f"{f.seconds:g}"
    reach = f"{who} cannot reach {name(tgt)} at {addr}"
    loop = "a loopback address"
    return {
        IN_USE: f"{name(tgt)} cannot listen on its planned address {addr}: " + (
            f"port {tgt.port} on {tgt.node} is held by a process that is not this step's supervisor (another job?)"
            if f.detail in ("", "EADDRINUSE") else _errno_words(f.detail)),
        LOOPBACK_OWN: f"{name(tgt)} cannot be reached at {addr} from other nodes: {tgt.host} is "
                      f"{'/'.join(f.there[:2])} on {tgt.node}, {loop} (an /etc/hosts line like '127.0.1.1 "
                      f"{tgt.host}')",
        LOOPBACK_HERE: f"{reach}: {tgt.host} is {'/'.join(f.here[:2])} on {src.node}, {loop}: that node itself",
        UNRESOLVED: f"{reach}: {tgt.host} does not resolve on {src.node}"
                    + (" (the name service did not answer)" if f.detail == "silent" else ""),
        OTHER_TASK: f"{reach}: {name(tasks[f.answered]) if 0 <= f.answered < len(tasks) else 'another task'} "
                    f"of this step answered there{views}",
        STRANGER: f"{reach}: answered but is not this step's supervisor "
                  f"({STRANGER_WHY.get(f.detail, 'it did not prove it')}): a port in use by another job{views}",
        NO_ANSWER: f"{reach}: no answer in {secs} s{views}",
        UNREACHABLE: f"{reach}: {_errno_words(f.detail or 'EHOSTUNREACH')} for {secs} s{views}",
        REFUSED: f"{reach}: connection refused for {secs} s{views}",
        SILENT: f"{who}{f' and {f.more} other tasks' if f.more else ''}: no report to the chief's supervisor at "
                f"{addr} within {secs} s (it cannot reach that address, or started late)",
        NO_VERDICT: f"{who}: no verdict from the chief's supervisor at {addr} within {secs} s after its check",
    }[f.kind]
