"""Why Slurm holds a job, in words (plan/slurm_reasons.py): a table of Reason codes.  Plain data only."""

import pytest

from tf_for_slurm.plan.slurm_reasons import NEVER, REASONS, reason_text, reason_words


@pytest.mark.parametrize("code,words", [
    ("Priority", "waiting for its turn: jobs of higher priority go first"),
    ("Resources", "waiting for nodes (CPUs, memory, GPUs) to become free"),
    ("PartitionNodeLimit", f"it asks for more nodes than its partition allows: {NEVER} (fewer nodes, or another "
                           "--partition)"),
    ("PartitionTimeLimit", f"its time limit is over its partition's: {NEVER} (a shorter --time)"),
    ("ReqNodeNotAvail", "waiting: a node it needs is down, drained or reserved"),
    ("ReqNodeNotAvail,_UnavailableNodes:node3", "waiting: a node it needs is down, drained or reserved"),
    ("Dependency", "waiting for the jobs it depends on"),
    ("BeginTime", "waiting for its start time (--begin)"),
    ("QOSMaxNodePerJobLimit", f"it asks for more nodes than its QOS allows one job: {NEVER}"),
    ("AssocGrpCpuLimit", "waiting: your account has as many CPUs in use as it may"),
    ("JobHeldUser", "held by its owner: `scontrol release 42` lets it start"),
    ("JobHeldAdmin", "held by an administrator"),
    # codes of the same family the table does not name, by their first words
    ("QOSMaxGRESPerJob", f"it asks for more than its QOS allows one job: {NEVER}"),
    ("AssocMaxCpuPerJobLimit", f"it asks for more than your account allows one job: {NEVER}"),
    ("AssocGrpCPUMinutesLimit", "waiting: a limit of your account is reached (other jobs must end first)"),
    ("QOSGrpGRES", "waiting: a limit of its QOS is reached (other jobs must end first)"),
    # no reason, or one nobody wrote words for
    ("None", None),
    ("", None),
    (None, None),
    ("SomethingNew", None),
])
def test_reason_words(code, words):
    assert reason_words(code, "42") == words


@pytest.mark.parametrize("code,text", [
    ("PartitionNodeLimit", f"it asks for more nodes than its partition allows: {NEVER} (fewer nodes, or another "
                           "--partition) (PartitionNodeLimit)"),
    ("SomethingNew", "(SomethingNew)"),  # the code alone, as Slurm says it
    ("None", ""),
])
def test_reason_text_keeps_the_code(code, text):
    assert reason_text(code, "42") == text


def test_every_phrase_is_one_short_line():
    for code, words in REASONS.items():
        assert "\n" not in words and len(words) <= 120, code
