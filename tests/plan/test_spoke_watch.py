"""A spoke's decisions, from plain data (plan.spoke_watch): events in, actions out."""

import pytest

from tf_for_slurm.plan.requeue import LOST_STATUS
from tf_for_slurm.plan.spoke_watch import END_COMMAND, START_AGAIN, Finish, Link, NoteFailure, Send, SpokeWatch

JOINED = Link(connected=True, joined=True, given_up=False)
NO_HUB = Link(connected=False, joined=False, given_up=False)
GONE = Link(connected=False, joined=True, given_up=True)


def watch(retried=lambda status: status >= 128):
    return SpokeWatch(start=0.0, report_wait=5.0, connect_grace=300.0, retried=retried)


def test_a_command_that_exits_is_reported_then_acknowledged():
    w = watch()
    assert w.turn(1.0, None, None, JOINED) == []  # running
    assert w.turn(2.0, 3, None, JOINED) == [NoteFailure(3), Send("exit 3", 3)]
    assert w.sent_result(True, 2.0, 3) == []
    assert w.turn(2.1, 3, None, JOINED) == []  # waiting for the answer
    w.ack()
    assert w.turn(2.2, 3, None, JOINED) == [Finish(3)]


@pytest.mark.parametrize("status,noted", [(0, False), (1, True), (137, False)])
def test_the_launcher_hears_of_a_failure_here_only_when_the_hub_cannot_restart_it(status, noted):
    actions = watch().turn(1.0, status, None, JOINED)
    assert (NoteFailure(status) in actions) == noted


@pytest.mark.parametrize("now,link,want", [
    (4.0, JOINED, []),  # the answer may still come
    (7.1, JOINED, [Finish(3)]),  # report_wait over: the status stands
    (4.0, GONE, [Finish(3)]),  # the connection went: nobody will answer
])
def test_an_unanswered_report_ends_after_report_wait_or_with_the_connection(now, link, want):
    w = watch()
    w.turn(2.0, 3, None, JOINED)
    w.sent_result(True, 2.0, 3)
    assert w.turn(now, 3, None, link) == want


def test_a_report_that_cannot_be_sent_ends_with_the_commands_status():
    w = watch()
    w.turn(2.0, 3, None, JOINED)
    assert w.sent_result(False, 2.0, 3) == [Finish(3)]


@pytest.mark.parametrize("now,link,want", [
    (10.0, NO_HUB, []),  # the hub may still come
    (301.0, NO_HUB, [Finish(0)]),  # never reached within connect_grace
    (10.0, Link(connected=False, joined=False, given_up=True), [Finish(0)]),
])
def test_a_status_the_hub_never_heard(now, link, want):
    assert watch().turn(now, 0, None, link) == want


def test_restart_answer_starts_the_command_again_after_the_delay():
    w = watch()
    w.turn(2.0, 137, None, JOINED)
    w.sent_result(True, 2.0, 137)
    w.restart(1.5, 2.1)
    assert w.waiting() and not w.sent
    assert w.turn(3.0, 137, None, JOINED) == []  # not yet
    assert w.turn(3.7, 137, None, JOINED) == [START_AGAIN]
    w.started_again(True, 3.7)
    assert w.restart_at is None and w.restarts == 1
    assert w.turn(3.8, None, None, JOINED) == []  # running again; its next exit is reported anew
    assert w.turn(9.0, 1, None, JOINED) == [NoteFailure(1), Send("exit 1", 1)]


def test_restart_is_ignored_unless_an_exit_awaits_its_answer():
    w = watch()
    w.restart(1.0, 2.0)
    assert w.restart_at is None


def test_end_ends_the_command_then_bye_and_the_told_status():
    w = watch()
    assert w.end(0, "training is over") == [END_COMMAND]
    assert w.end(1, "again") == []  # told once
    assert w.turn(1.0, 143, None, JOINED) == [Send("bye 143", 143)]
    assert w.sent_result(True, 1.0, 143) == []
    w.ack()
    assert w.turn(1.1, 143, None, JOINED) == [Finish(0)]


def test_end_while_waiting_to_restart_reports_the_old_status():
    w = watch()
    w.turn(2.0, 137, None, JOINED)
    w.sent_result(True, 2.0, 137)
    w.restart(5.0, 2.0)
    assert w.end(137, "the step failed") == [END_COMMAND]
    assert w.restart_at is None
    assert w.turn(3.0, 137, None, JOINED) == [Send("bye 137", 137)]


def test_a_lost_hub_ends_the_command_and_the_task_exits_lost():
    w = watch()
    assert w.lose("it closed the connection") == [END_COMMAND]
    assert w.lose("again") == []
    assert w.turn(1.0, 143, None, GONE) == [Finish(LOST_STATUS)]


def test_a_hub_never_reached_is_lost_after_connect_grace():
    w = watch()
    assert w.turn(100.0, None, None, NO_HUB) == []
    assert w.turn(301.0, None, None, NO_HUB) == [END_COMMAND]
    assert w.lost


def test_regroup_ends_the_command_and_starts_it_again_after_it_ended():
    w = watch()
    assert w.regroup_now(2.0, running=True) == [END_COMMAND]
    assert w.turn(1.0, None, None, JOINED) == []  # still ending
    assert w.turn(1.5, 143, None, JOINED) == []  # ended: not a failure, nothing reported
    assert w.restart_at == 3.5
    assert w.turn(3.5, 143, None, JOINED) == [START_AGAIN]


@pytest.mark.parametrize("sent,told,lost", [(True, None, False), (False, 0, False), (False, None, True)])
def test_regroup_is_ignored_when_an_exit_is_reported_or_the_end_decided(sent, told, lost):
    w = watch()
    w.sent, w.told_status, w.lost = sent, told, lost
    assert w.regroup_now(1.0, running=True) == [] and w.regroup is None


def test_a_stop_while_waiting_to_restart_cancels_the_restart():
    w = watch()
    w.turn(2.0, 137, None, JOINED)
    w.sent_result(True, 2.0, 137)
    w.restart(5.0, 2.0)
    assert w.turn(3.0, 137, 15, JOINED) == [Send("exit 143", 143)]  # 128 + SIGTERM, never restarted
    assert not w.waiting()


@pytest.mark.parametrize("sent,told,joined,want", [
    (False, None, False, "retry"),  # refused before joining: the hub may still be starting
    (True, None, True, "done"),  # it knows what it needs
    (False, 0, True, "done"),
    (False, None, True, "lost"),
])
def test_what_a_closed_connection_means(sent, told, joined, want):
    w = watch()
    w.sent, w.told_status = sent, told
    assert w.hub_closed(joined) == want
