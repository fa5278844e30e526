"""batch-step's signal policy, decided from plain data: events in (signal, job times, srun started,
a moment due, the backstop), actions out (say, tell now or in T s, send, ask Slurm)."""

import pytest

from tf_for_slurm.plan.stop_relay import (AskTimes, Backstop, CheckLimit, Deadline, DecideNow, Rearm, Say, Send,
                                          StopAsWarned, StopRelay, Tell, clock_text)

PID = 4242


def feed(events, margin=30, grace=10.0):
    """The relay after `events`, and every action they gave, in order.

    ("signal", name, now[, sent_at]), ("times", start, end[, now]) answers the last AskTimes, ("started", now),
    ("due", name, now, ended), ("backstop", start, end, now), ("fired", end, ended), ("limit", end, now_end, now),
    ("deadline", now, ended).
    """
    relay, out, asked = StopRelay(margin, grace), [], None
    for kind, *args in events:
        if kind == "signal":
            got = relay.signal_came(*args)
        elif kind == "times":
            got = relay.warning_times(asked, *args)
        elif kind == "started":
            got = relay.started(args[0], PID)
        elif kind == "due":
            got = relay.due(*args)
        elif kind == "backstop":
            got = relay.backstop_times(*args)
        elif kind == "fired":
            got = relay.backstop_fired(*args)
        elif kind == "deadline":
            got = relay.deadline_came(*args)
        else:
            got = relay.limit_checked(*args)
        asked = next((a for a in got if isinstance(a, AskTimes)), asked)
        out += got
    return relay, out


TOLD = "passed SIG{} on to the step (srun pid %d)" % PID


@pytest.mark.parametrize("events,actions", [
    # SIGTERM: at once, no requeue (plan.requeue decides that from the signal)
    ([("started", 0.0), ("signal", "TERM", 100.0), ("due", "TERM", 100.0, False)],
     [Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow"), Tell("TERM", 0.0),
      Say(TOLD.format("TERM")), Send("TERM")]),
    # SIGUSR2: a stop asked for now, but not during the tasks' start-up (grace 10 s)
    ([("started", 0.0), ("signal", "USR2", 100.0)],
     [Say("SIGUSR2 (a stop asked for now, e.g. scancel --batch --signal=USR2): passing it on to the step"),
      Tell("USR2", 0.0)]),
    ([("started", 0.0), ("signal", "USR2", 2.0)],
     [Say("SIGUSR2 (a stop asked for now, e.g. scancel --batch --signal=USR2): passing it on to the step in 8 s, "
          "once its tasks have started"), Tell("USR2", 8.0)]),
    # SIGUSR1: the job's times first, then held until the margin before EndTime
    ([("started", 0.0), ("signal", "USR1", 100.0), ("times", 0.0, 190.0)],
     [AskTimes("USR1", 100.0), Say("SIGUSR1 (90 s before the time limit): telling the step's tasks to stop at their "
                                   "next step in 60 s (30 s before the limit: WARN_MARGIN=30)"), Tell("USR1", 60.0)]),
    ([("started", 0.0), ("signal", "USR1", 100.0), ("times", None, None)],
     [AskTimes("USR1", 100.0), Say("SIGUSR1 (time limit unknown): telling the step's tasks to stop at their next step "
                                   "in 0 s (30 s before the limit: WARN_MARGIN=30)"), Tell("USR1", 0.0)]),
    # a 1-minute job warned as it starts: a quarter of the limit, not 60 s
    ([("started", 900.0), ("signal", "USR1", 1000.0), ("times", 1000.0, 1060.0)],
     [AskTimes("USR1", 1000.0), Say("SIGUSR1 (60 s before the time limit): telling the step's tasks to stop at their "
                                    "next step in 45 s (15 s before the limit: WARN_MARGIN=30, a quarter of the "
                                    "job's 60 s limit)"), Tell("USR1", 45.0)]),
    # duplicates: only said; a SIGTERM after a warning still counts
    ([("signal", "USR1", 1.0), ("signal", "USR1", 2.0), ("signal", "USR2", 3.0)],
     [AskTimes("USR1", 1.0), Say("SIGUSR1 again: already handling SIGUSR1"),
      Say("SIGUSR2 again: already handling SIGUSR1")]),
    ([("signal", "TERM", 1.0), ("signal", "USR1", 2.0), ("signal", "TERM", 3.0)],
     [Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow"), Tell("TERM", 0.0),
      Say("SIGUSR1 again: already handling SIGTERM"), Say("SIGTERM again: already handling SIGTERM")]),
    # a warning whose times come after a SIGTERM: the answer still speaks of the warning
    ([("started", 0.0), ("signal", "USR1", 100.0), ("signal", "TERM", 101.0), ("times", 0.0, 1000.0)],
     [AskTimes("USR1", 100.0),
      Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow"), Tell("TERM", 0.0),
      Say("SIGUSR1 (900 s before the time limit): telling the step's tasks to stop at their next step in 870 s "
          "(30 s before the limit: WARN_MARGIN=30)"), Tell("USR1", 870.0)]),
    # due before srun started: kept, passed on `grace` s after the start
    ([("signal", "TERM", 1.0), ("due", "TERM", 1.0, False), ("started", 2.0)],
     [Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow"), Tell("TERM", 0.0),
      Say("the step just started: telling its tasks to stop in 10 s, once they can take it"), Tell("TERM", 10.0)]),
    # due after srun ended: nothing to tell
    ([("started", 0.0), ("signal", "TERM", 5.0), ("due", "TERM", 5.0, True)],
     [Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will follow"),
      Tell("TERM", 0.0)]),
    # the backstop: armed once srun runs and EndTime is known
    ([("backstop", 0.0, 1000.0, 0.0)], []),
    ([("started", 0.0), ("backstop", 0.0, None, 0.0)], []),
    ([("started", 0.0), ("backstop", 0.0, 1000.0, 0.0)], [Backstop(970.0, 1000.0)]),
    ([("started", 0.0), ("backstop", 0.0, 100.0, 0.0)], [Backstop(75.0, 100.0)]),  # a quarter of a short limit
    ([("started", 0.0), ("fired", 1000.0, False)], [CheckLimit(1000.0)]),
    ([("started", 0.0), ("fired", 1000.0, True)], []),  # srun ended
    ([("started", 0.0), ("signal", "USR2", 50.0), ("fired", 1000.0, False)],
     [Say("SIGUSR2 (a stop asked for now, e.g. scancel --batch --signal=USR2): passing it on to the step"),
      Tell("USR2", 0.0)]),  # a signal came: the backstop has nothing to do
    ([("limit", 1000.0, 2000.0, 970.0)], [Rearm()]),  # the limit was raised: wait for the new one
    ([("limit", 1000.0, 1000.5, 970.0)],
     [Say("no time-limit warning came by 30 s before the limit (Slurm's is lost when sent before the batch shell "
          "runs): stopping the step as the warning would"), StopAsWarned()]),
    ([("limit", 1000.0, None, 1010.0)],
     [Say("no time-limit warning came by 0 s before the limit (Slurm's is lost when sent before the batch shell "
          "runs): stopping the step as the warning would"), StopAsWarned()]),
])
def test_events_in_actions_out(events, actions):
    assert feed(events)[1] == actions


LATE = Say("the step has not ended 12 s after its tasks were told to stop, 3 s before the time limit: deciding now, "
           "from the last checkpoint (at the limit Slurm ends the job TIMEOUT, never requeued)")
WARNED = [("started", 0.0), ("signal", "USR1", 100.0), ("times", 0.0, 190.0)]


@pytest.mark.parametrize("events,actions", [
    # (each row: what its last event gives) a warning passed on: the step must have ended
    # DECIDE_BEFORE_END (3 s) before the end
    (WARNED + [("due", "USR1", 175.0, False)], [Say(TOLD.format("USR1")), Send("USR1"), Deadline(12.0)]),
    (WARNED + [("due", "USR1", 175.0, False), ("deadline", 187.0, False)], [LATE, DecideNow()]),
    (WARNED + [("due", "USR1", 175.0, False), ("deadline", 187.0, True)], []),  # it ended: nothing to decide now
    (WARNED + [("due", "USR1", 188.0, False)], [Say(TOLD.format("USR1")), Send("USR1"), Deadline(0.0)]),  # late
    # a SIGTERM after the warning: never requeued, nothing to decide early
    (WARNED + [("due", "USR1", 175.0, False), ("signal", "TERM", 180.0), ("due", "TERM", 180.0, False),
               ("deadline", 187.0, False)], []),
    # the job's end known from the backstop: a USR2 passed on gets a deadline too
    ([("started", 0.0), ("backstop", 0.0, 1000.0, 0.0), ("signal", "USR2", 500.0), ("due", "USR2", 500.0, False)],
     [Say(TOLD.format("USR2")), Send("USR2"), Deadline(497.0)]),
    # no end known (squeue said nothing): no deadline; SIGTERM: none either
    ([("started", 0.0), ("signal", "USR2", 50.0), ("due", "USR2", 50.0, False)],
     [Say(TOLD.format("USR2")), Send("USR2")]),
    ([("started", 0.0), ("signal", "USR2", 50.0), ("due", "USR2", 50.0, False), ("deadline", 60.0, False)], []),
])
def test_a_step_told_to_stop_that_has_not_ended_near_the_limit_is_decided_without_it(events, actions):
    """`actions`: what the last event gave."""
    before = len(feed(events[:-1])[1])
    assert feed(events)[1][before:] == actions


def test_the_delay_counts_from_when_slurm_answered_not_from_the_warning():
    """Reading the warning file and asking Slurm took 3 s: the stop is still due 30 s before the end."""
    _, out = feed([("started", 0.0), ("signal", "USR1", 100.0), ("times", 0.0, 190.0, 103.0)])
    assert out[-1] == Tell("USR1", 57.0), out


def test_a_warning_the_shell_wrote_down_counts_from_when_it_was_written():
    relay, out = feed([("started", 0.0), ("signal", "USR1", 150.0, 100.0), ("times", 0.0, 190.0)])
    assert out[0] == Say(f"SIGUSR1 reached the batch shell at {clock_text(100.0)}")
    assert out[1:] == [AskTimes("USR1", 100.0), Say("SIGUSR1 (90 s before the time limit): telling the step's tasks "
                                                    "to stop at their next step in 60 s (30 s before the limit: "
                                                    "WARN_MARGIN=30)"), Tell("USR1", 60.0)]
    assert (relay.signal, relay.signal_time, relay.told_time) == ("USR1", 100.0, None)


def test_told_time_is_when_a_signal_was_passed_on():
    relay, _ = feed([("started", 0.0), ("signal", "USR1", 100.0), ("times", 0.0, 190.0), ("due", "USR1", 160.0, False)])
    assert (relay.signal, relay.signal_time, relay.told_time) == ("USR1", 100.0, 160.0)
    relay, _ = feed([("started", 0.0), ("signal", "USR1", 100.0), ("times", 0.0, 190.0), ("due", "USR1", 160.0, True)])
    assert relay.told_time is None  # the step ended first: plan.requeue.decide(delivered=False)


def test_nothing_happens_without_events():
    relay = StopRelay(30)
    assert relay.started(0.0, PID) == [] and relay.signal == "" and relay.signal_time is None


def test_a_warning_due_before_srun_started_is_passed_on_a_start_grace_after_it():
    """The warning came (99 s left, margin 1000: due at once) before srun was known to run: told
    `grace` s after srun started, not held until the last chance before the end."""
    relay, out = feed([("signal", "USR1", 100.0), ("times", 0.0, 199.0), ("due", "USR1", 100.0, False),
                       ("started", 100.5)], margin=1000, grace=10.0)
    assert out[-1] == Tell("USR1", 10.0), out
    assert out[-2] == Say("the step just started: telling its tasks to stop in 10 s, once they can take it")
