"""Why Slurm holds a job, in plain words: the Reason codes of `scontrol show job` as one short phrase.

Why: a pending job's only explanation is a code ("PartitionNodeLimit"); a newcomer cannot tell a
job that waits its turn from one that will never start.  `tf-slurm status` shows the phrase and
keeps the code in parentheses.  Pure: a code in, a phrase (or None: shown as the code alone) out.

NEVER marks a job that will not start as it is: it must be cancelled and submitted again.
"""

from __future__ import annotations

from typing import Optional, Tuple

NEVER = "it will never start as it is"

REASONS = {
    # waiting: it starts once something frees up or comes
    "Priority": "waiting for its turn: jobs of higher priority go first",
    "Resources": "waiting for nodes (CPUs, memory, GPUs) to become free",
    "Dependency": "waiting for the jobs it depends on",
    "BeginTime": "waiting for its start time (--begin)",
    "Reservation": "waiting for its reservation to start",
    "Licenses": "waiting for licenses",
    "ReqNodeNotAvail": "waiting: a node it needs is down, drained or reserved",
    "NodeDown": "waiting: a node it needs is down",
    "PartitionDown": "waiting: its partition is down",
    "PartitionInactive": "waiting: its partition is inactive",
    "Cleaning": "waiting: its nodes are cleaning up after its previous run",
    "AssocGrpCpuLimit": "waiting: your account has as many CPUs in use as it may",
    "AssocGrpNodeLimit": "waiting: your account has as many nodes in use as it may",
    "AssocGrpMemLimit": "waiting: your account has as much memory in use as it may",
    "AssocGrpGRES": "waiting: your account has as many GPUs (or other generic resources) in use as it may",
    "AssocGrpJobsLimit": "waiting: your account has as many jobs running as it may",
    "AssocMaxJobsLimit": "waiting: your account has as many jobs running as it may",
    "QOSMaxJobsPerUserLimit": "waiting: you have as many jobs running as your QOS allows",
    "QOSGrpCpuLimit": "waiting: the QOS has as many CPUs in use as it may",
    "QOSGrpNodeLimit": "waiting: the QOS has as many nodes in use as it may",
    # held: it starts once someone releases it
    "JobHeldUser": "held by its owner: `scontrol release {job}` lets it start",
    "JobHeldAdmin": "held by an administrator",
    "JobHoldMaxRequeue": "held after too many requeues: `scontrol release {job}` lets it start again",
    "launch failed requeued held": "its launch failed; Slurm requeued and held it: `scontrol release {job}`",
    # never: what it asks for cannot be had
    "PartitionNodeLimit": f"it asks for more nodes than its partition allows: {NEVER} (fewer nodes, or another "
                          "--partition)",
    "PartitionTimeLimit": f"its time limit is over its partition's: {NEVER} (a shorter --time)",
    "PartitionConfig": f"it asks for more than its partition allows (CPUs, memory, GPUs or its account): {NEVER}",
    "BadConstraints": f"no node has what it asks for (--constraint, CPUs, memory or GPUs): {NEVER}",
    "DependencyNeverSatisfied": f"a job it depends on ended the wrong way: {NEVER}",
    "QOSMaxNodePerJobLimit": f"it asks for more nodes than its QOS allows one job: {NEVER}",
    "QOSMaxWallDurationPerJobLimit": f"its time limit is over what its QOS allows one job: {NEVER} (a shorter --time)",
    "InvalidAccount": f"its account is not valid: {NEVER} (another --account)",
    "InvalidQOS": f"its QOS is not valid: {NEVER} (another --qos)",
    # after the end
    "NonZeroExitCode": "a task exited non-zero",
    "TimeLimit": "it reached its time limit",
}

# the other limit codes, by their first words (Slurm has dozens: AssocGrpCPUMinutesLimit, QOSMaxGRESPerJob ...)
PREFIXES: Tuple[Tuple[str, str, str], ...] = (
    ("QOSMax", "PerJob", f"it asks for more than its QOS allows one job: {NEVER}"),
    ("AssocMax", "PerJob", f"it asks for more than your account allows one job: {NEVER}"),
    ("QOS", "", "waiting: a limit of its QOS is reached (other jobs must end first)"),
    ("Assoc", "", "waiting: a limit of your account is reached (other jobs must end first)"),
)


def reason_words(reason: Optional[str], job: str = "JOB") -> Optional[str]:
    """The phrase for a Reason code ('ReqNodeNotAvail,_UnavailableNodes:n3' reads as its first part);
    None for no reason ('None', '') or a code this table does not know."""
    code = (reason or "").strip()
    if code in ("", "None", "(null)"):
        return None
    phrase = REASONS.get(code) or REASONS.get(code.split(",", 1)[0])
    if phrase is None:
        phrase = next((words for start, within, words in PREFIXES
                       if code.startswith(start) and within in code), None)
    return None if phrase is None else phrase.replace("{job}", job)


def reason_text(reason: Optional[str], job: str = "JOB") -> str:
    """'waiting for its turn: jobs of higher priority go first (Priority)'; '(SomeNewCode)' for a code
    without a phrase; '' for no reason."""
    code = (reason or "").strip()
    if code in ("", "None", "(null)"):
        return ""
    words = reason_words(code, job)
    return f"{words} ({code})" if words else f"({code})"
