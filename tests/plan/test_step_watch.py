"""The step's fate, decided from plain data: step_rules (who leads, trains, serves) and StepWatch."""

import logging
from collections import namedtuple

import pytest

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan.strategy import exec_device_filters as device_filters, infer_strategy, step_roles
from tf_for_slurm.plan.restart_policy import RestartPolicy
from tf_for_slurm.plan.step_watch import LOST_STATUS, End, Regroup, Restart, StepWatch

T = namedtuple("T", "rank role index")


def tasks(*roles):
    counters = {}
    out = []
    for rank, role in enumerate(roles):
        out.append(T(rank, role, counters.get(role, 0)))
        counters[role] = counters.get(role, 0) + 1
    return out


# -- rules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("roles,strategy", [
    (("ps", "worker", "worker"), "tf1"),
    (("ps", "ps", "worker"), "tf1"),
    (("chief", "ps", "worker", "worker"), "pss"),
    (("ps", "chief", "worker", "evaluator"), "pss"),
    (("worker", "worker"), "mwms"),
    (("chief", "worker", "evaluator"), "mwms"),
    (("chief", "evaluator"), "mwms"),
])
def test_strategy_is_inferred_from_roles_and_the_rule_is_said(roles, strategy):
    got, rule = infer_strategy(roles)
    assert got == strategy
    assert rule.startswith(f"strategy {strategy} (")


def test_explicit_strategy_wins_and_bad_one_is_one_line():
    assert infer_strategy(["ps", "chief", "worker"], "tf1")[0] == "tf1"
    assert infer_strategy(["ps", "worker"], "auto")[0] == "tf1"
    with pytest.raises(UsageError, match=r"--strategy='nope': expected one of auto, tf1, pss, mwms"):
        infer_strategy(["ps", "worker"], "nope")


def test_tf1_worker0_leads_workers_train_ps_serve():
    r = step_roles(tasks("ps", "worker", "worker", "worker"))
    assert (r.strategy, r.chief_rank, r.trainers, r.servers) == ("tf1", 1, (2, 3), (0,))


def test_pss_chief_leads_ps_and_workers_serve():
    r = step_roles(tasks("ps", "chief", "worker", "worker", "evaluator"))
    assert (r.strategy, r.chief_rank, r.trainers, r.servers) == ("pss", 1, (), (0, 2, 3, 4))


def test_mwms_with_chief_and_evaluator():
    r = step_roles(tasks("chief", "worker", "worker", "evaluator"))
    assert (r.strategy, r.chief_rank, r.trainers, r.servers) == ("mwms", 0, (1, 2), (3,))


def test_forced_tf1_with_a_chief_makes_workers_trainers():
    r = step_roles(tasks("chief", "ps", "worker"), "tf1")
    assert (r.chief_rank, r.trainers, r.servers) == (0, (2,), (1,))


def test_device_filters_only_for_tf1_training_tasks():
    assert device_filters("tf1", "worker", 3) == ["/job:ps", "/job:worker/task:3"]
    assert device_filters("tf1", "chief", 0) == ["/job:ps", "/job:chief/task:0"]
    assert device_filters("tf1", "ps", 1) == ["/job:ps/task:1"]
    assert device_filters("pss", "worker", 0) is None
    assert device_filters("mwms", "worker", 1) is None


# -- the state machine --------------------------------------------------------------------------
def watch(*roles, local=None, **kw):
    t = tasks(*roles)
    r = step_roles(t)
    names = {x.rank: f"{x.role} {x.index}" for x in t}
    w = StepWatch(r, [x.rank for x in t], names, local_rank=r.chief_rank if local is None else local, now=0.0,
                  **kw)
    for x in t:
        if x.rank != w.local_rank:
            assert w.join(x.rank, 0.0) == []
    return w


def test_tf1_chief_done_first_ps_keeps_serving_until_the_last_worker_then_ends_at_once():
    w = watch("ps", "worker", "worker", "worker")
    assert w.exit(1, 0, 5.0) == []  # the ps still serves workers 1 and 2
    assert not w.decided and not w.told
    assert w.exit(2, 0, 6.0) == []
    assert w.exit(3, 0, 7.0) == [End((0,), 0)]  # the last trainer: the ps is ended now
    assert w.decided and w.status == 0
    assert not w.finished(7.1)
    w.bye(0)
    assert w.finished(7.1)


def test_tf1_workers_done_before_the_chief_end_the_ps_when_the_chief_is_done():
    w = watch("ps", "worker", "worker")
    assert w.exit(2, 0, 1.0) == []  # a non-chief worker first: nothing ends
    assert not w.told
    assert w.exit(1, 0, 2.0) == [End((0,), 0)]
    assert w.decided


def test_drain_period_ends_a_late_worker_with_a_warning_and_status_zero():
    w = watch("ps", "worker", "worker", drain=30.0)
    w.exit(1, 0, 10.0)
    w.take_notes()
    for rank in (0, 2):
        w.hear(rank, 38.0)
    assert w.tick(39.0) == []
    assert w.tick(40.0) == [End((0, 2), 0)]
    notes = w.take_notes()
    assert any(level == logging.WARNING and "worker 1 still running 30 s after the chief finished" in m
               for level, m in notes)
    assert w.decided and w.status == 0
    assert not w.finished(41.0)
    w.bye(2)
    w.bye(0)
    assert w.finished(41.0)


def test_pss_chief_done_ends_every_server_at_once():
    w = watch("ps", "chief", "worker", "worker")
    assert w.exit(1, 0, 3.0) == [End((0, 2, 3), 0)]
    assert w.decided and w.status == 0


def test_first_failure_ends_everyone_with_its_status_later_failures_do_not_change_it():
    w = watch("ps", "worker", "worker", "worker")
    assert w.exit(3, 7, 1.0) == [End((0, 1, 2), 7)]
    assert w.failure.rank == 3 and w.status == 7
    assert w.exit(2, 143, 1.1) == []  # it was told to end: its status is not news
    assert w.closed(0, 1.2) == []
    assert w.status == 7


def test_a_closed_connection_without_exit_status_is_a_lost_task():
    w = watch("ps", "worker", "worker")
    assert w.closed(2, 4.0) == [End((0, 1), LOST_STATUS)]
    assert w.failure.reason == "was lost (its supervisor went away without an exit status: killed, or its node failed)"


def test_a_closed_connection_after_an_exit_report_is_normal():
    w = watch("ps", "worker", "worker")
    w.exit(2, 0, 1.0)
    assert w.closed(2, 1.1) == []
    assert not w.decided


def test_silence_beyond_the_timeout_is_a_dead_node():
    w = watch("ps", "worker", "worker", silence=10.0)
    w.hear(0, 5.0)
    w.hear(2, 5.0)
    assert w.tick(10.0) == []
    # both 0 and 2 are silent: the first is named; the silent ones are told too (a hung one may wake)
    assert w.tick(15.5) == [End((0, 1, 2), LOST_STATUS)]
    assert w.failure.rank == 0 and "was lost (no word from its supervisor for 10.5 s" in w.failure.reason
    assert w.failure_line().startswith("ps 0 was lost (no word")  # the task named once, by the hub's names


def test_a_task_that_never_connects_fails_the_step_after_the_grace():
    t = tasks("ps", "worker", "worker")
    w = StepWatch(step_roles(t), [0, 1, 2], {}, local_rank=1, now=0.0, connect_grace=60.0)
    w.join(0, 1.0)
    w.hear(0, 55.0)
    assert w.tick(59.0) == []
    w.hear(0, 59.0)
    assert w.tick(61.0) == [End((0, 1, 2), LOST_STATUS)]
    assert (w.failure.rank, w.failure.reason) == (2, "never connected within 60 s")
    assert w.failure_line() == "rank 2 never connected within 60 s"


def test_a_late_joiner_after_the_decision_is_told_at_once():
    t = tasks("ps", "chief", "worker")
    w = StepWatch(step_roles(t), [0, 1, 2], {}, local_rank=1, now=0.0)
    w.join(0, 0.5)
    assert w.exit(1, 0, 1.0) == [End((0, 2), 0)]  # worker 2 (a server) has not joined yet...
    assert w.join(2, 2.0) == [End((2,), 0)]  # ... so it is told when it does
    w2 = StepWatch(step_roles(t), [0, 1, 2], {}, local_rank=1, now=0.0)
    w2.join(0, 0.5)
    assert w2.exit(0, 5, 1.0) == [End((1, 2), 5)]
    assert w2.join(2, 2.0) == [End((2,), 5)]  # told before it had joined: told again now


def test_local_chief_failure_ends_everyone():
    w = watch("ps", "chief", "worker")
    assert w.exit(1, 3, 1.0) == [End((0, 2), 3)]


def test_a_server_exiting_zero_by_itself_is_fine():
    w = watch("ps", "worker", "worker")
    assert w.exit(0, 0, 1.0) == []  # e.g. a done-queue ps that ended on its own
    assert not w.decided
    w.exit(2, 0, 2.0)
    assert w.exit(1, 0, 3.0) == []
    assert w.decided and w.status == 0


def test_finished_waits_for_every_task_but_not_beyond_the_end_grace():
    w = watch("ps", "chief", "worker", end_grace=5.0)
    w.exit(1, 0, 1.0)
    assert not w.finished(2.0)
    w.bye(0)
    assert not w.finished(2.0)
    assert w.finished(6.0)
    assert w.unsettled() == [2]


# -- restarts in place (plan.restart_policy) ------------------------------------------------------

def rwatch(*roles, strategy=None, **policy):
    t = tasks(*roles)
    r = step_roles(t, strategy)
    names = {x.rank: f"{x.role} {x.index}" for x in t}
    w = StepWatch(r, [x.rank for x in t], names, local_rank=r.chief_rank, now=0.0,
                  policy=RestartPolicy(**{"max_restarts": 2, **policy}), role_of={x.rank: x.role for x in t})
    for x in t:
        if x.rank != w.local_rank:
            w.join(x.rank, 0.0)
    return w


PSS = ("ps", "chief", "worker", "worker", "evaluator")


def test_a_pss_worker_killed_is_restarted_in_place_and_runs_again():
    w = rwatch(*PSS)
    actions = w.exit(2, 137, 5.0)
    assert actions == [Restart(2, 1, 1.0, actions[0].reason)]
    assert "restarting worker 0 in place in 1 s: exited with status 137 (signal 9); attempt 1 of 2" in actions[0].reason
    assert not w.decided and 2 not in w.settled and 2 not in w.exited
    assert w.restarts == {2: 1} and 2 in w.restarting
    assert any("restarting worker 0" in m for _level, m in w.take_notes())
    w.started(2, 6.5)
    assert 2 not in w.restarting
    assert any("worker 0 is running again, 1.5 s after its failure (restart 1)" in m for _level, m in w.take_notes())
    assert w.exit(1, 0, 30.0) == [End((0, 2, 3, 4), 0)]  # the coordinator finishes: step status 0
    assert w.status == 0


def test_an_evaluator_is_restarted_too():
    w = rwatch(*PSS)
    assert [type(a) for a in w.exit(4, 143, 5.0)] == [Restart]


def test_the_steps_budget_spent_fails_the_step_with_one_line():
    w = rwatch(*PSS, max_restarts=1)
    assert isinstance(w.exit(2, 137, 5.0)[0], Restart)
    w.started(2, 6.0)
    assert w.exit(3, 137, 30.0) == [End((0, 1, 2, 4), 137)]
    assert w.failure == (3, 137, "failed (exit 137, killed by SIGKILL)",
                         "not restarted: the step's 1 restarts are spent (max restarts 1)")
    assert w.failure_line() == ("worker 1 failed (exit 137, killed by SIGKILL); not restarted: the step's 1 restarts "
                                "are spent (max restarts 1)")


def test_the_tasks_budget():
    w = rwatch(*PSS, max_restarts=5, max_per_task=1)
    assert isinstance(w.exit(2, 137, 5.0)[0], Restart)
    w.started(2, 6.0)
    assert w.exit(2, 137, 60.0) == [End((0, 1, 3, 4), 137)]
    assert w.failure.note == "not restarted: it was restarted 1 times already (at most 1 per task)"


def test_a_crash_loop_ends_the_step_at_once_naming_the_task():
    w = rwatch(*PSS, max_restarts=5, crash_window=10.0)
    assert isinstance(w.exit(2, 137, 5.0)[0], Restart)
    w.started(2, 6.0)
    assert w.exit(2, 137, 6.8) == [End((0, 1, 3, 4), 137)]
    assert w.failure.reason == "failed (exit 137, killed by SIGKILL)"
    assert w.failure.note == "not restarted: it failed again 0.8 s after restart 1, within 10 s: a crash loop"
    assert w.failure.rank == 2 and w.status == 137


def test_failing_before_running_again_ends_the_step():
    w = rwatch(*PSS, max_restarts=5, retry_on="any")
    w.exit(2, 137, 5.0)
    assert w.exit(2, 127, 6.0) == [End((0, 1, 3, 4), 127)]  # it could not start again (or was stopped)
    assert w.failure.reason == "failed (exit 127, command not run) before its command could run again (restart 1)"


def test_status_1_is_not_retried_under_signal_but_is_under_any():
    w = rwatch(*PSS)
    assert w.exit(2, 1, 5.0) == [End((0, 1, 3, 4), 1)]
    # the program's own verdict: the failure says what happened, the log why it was not restarted
    assert (w.failure.reason, w.failure.note) == ("failed (exit 1)", "")
    assert (logging.INFO, "worker 0 not restarted: exit 1 is the program's own error, and only a task killed by a "
                          "signal (exit 128-255) is restarted") in w.take_notes()
    w = rwatch(*PSS, retry_on="any")
    assert [type(a) for a in w.exit(2, 1, 5.0)] == [Restart]


@pytest.mark.parametrize("roles,rank,others", [
    (PSS, 0, (1, 2, 3, 4)),  # a pss ps: the coordinator must restart and restore (the chief, rank 1, too)
    (PSS, 1, (0, 2, 3, 4)),  # the pss chief (the coordinator): its own command and everyone else's
    (("chief", "worker", "worker"), 1, (0, 2)),  # mwms: every worker takes part in every step
    (("chief", "worker", "worker"), 0, (1, 2)),  # mwms: the chief too
    (("ps", "worker", "worker"), 0, (1, 2)),  # tf1 ps: its variables are lost
])
def test_a_group_restart_restarts_every_running_task(roles, rank, others):
    w = rwatch(*roles)
    actions = w.exit(rank, 137, 5.0)
    assert [type(a) for a in actions] == [Restart, Regroup]
    assert actions[0].rank == rank and actions[1].ranks == others and actions[1].delay == 1.0
    assert not w.decided and set(w.restarting) == {rank, *others}


def test_mwms_group_restart_the_others_exits_are_expected_then_everyone_runs_again():
    w = rwatch("chief", "worker", "worker")  # the hub is the chief's (rank 0)
    assert [type(a) for a in w.exit(2, 137, 5.0)] == [Restart, Regroup]
    assert w.exit(1, 1, 5.3) == [Restart(1, 1, 1.0, "its group restarts")]  # a collective error: expected
    assert not w.decided and w.failure is None
    for r in (0, 1, 2):
        w.started(r, 7.0)
    assert not w.restarting and w.restarts == {0: 1, 1: 1, 2: 1} and w.step_restarts == 1
    assert 0 not in w.heard  # the hub's own task is never taken for silent
    assert w.exit(1, 0, 30.0) == [] and w.exit(2, 0, 30.0) == []
    assert w.exit(0, 0, 30.1) == [] and w.decided and w.status == 0


def test_a_task_that_joins_during_its_groups_restart_is_told_then():
    t = tasks("chief", "worker", "worker")
    w = StepWatch(step_roles(t), [0, 1, 2], {0: "chief 0", 1: "worker 0", 2: "worker 1"}, local_rank=0, now=0.0,
                  policy=RestartPolicy(max_restarts=2), role_of={x.rank: x.role for x in t})
    w.join(2, 0.0)
    assert [type(a) for a in w.exit(2, 137, 5.0)] == [Restart, Regroup]
    assert w.join(1, 5.5) == [Regroup((1,), 1.0, "its group restarts")]


def test_a_task_failing_soon_after_its_group_restart_is_a_crash_loop():
    w = rwatch("chief", "worker", "worker", max_restarts=5)
    w.exit(2, 137, 5.0)
    w.exit(1, 143, 5.2)
    for r in (0, 1, 2):
        w.started(r, 7.0)
    assert w.exit(1, 137, 8.0) == [End((0, 2), 137)]
    assert w.failure.note.startswith("not restarted: it failed again 1.0 s after restart 1")


def test_a_tf1_chief_is_restarted_alone():
    w = rwatch("ps", "worker", "worker")
    actions = w.exit(1, 137, 5.0)
    assert actions == [Restart(1, 1, 1.0, actions[0].reason)]  # no Regroup: the workers train on
    assert actions[0].reason.startswith("restarting worker 0 in place in 1 s")


def test_once_the_step_is_being_stopped_nothing_restarts_and_a_pending_restart_fails():
    w = rwatch(*PSS)
    assert [type(a) for a in w.exit(2, 137, 5.0)] == [Restart]
    w.stop_restarts("SIGTERM reached the chief's supervisor")
    assert (logging.WARNING, "the step is being stopped: SIGTERM reached the chief's supervisor; no task is "
                             "restarted from now on") in w.take_notes()
    assert w.exit(2, 143, 5.5) == [End((0, 1, 3, 4), 143)]
    assert w.failure.reason == "failed (exit 143, ended by SIGTERM) before its command could run again (restart 1)"
    w = rwatch("chief", "worker", "worker")
    w.exit(2, 137, 5.0)  # the group restarts: worker 0 is being ended for it
    w.stop_restarts("signal 15")
    assert w.exit(1, 143, 5.5) == [End((0, 2), 143)]  # its exit is no longer its group's restart


def test_a_tf1_non_chief_worker_is_restarted_and_the_step_ends_normally():
    w = rwatch("ps", "worker", "worker")
    assert [type(a) for a in w.exit(2, 137, 5.0)] == [Restart]
    w.started(2, 6.0)
    assert w.exit(1, 0, 20.0) == []  # the chief is done: the restarted worker still trains
    assert w.exit(2, 0, 25.0) == [End((0,), 0)]


def test_a_restarting_task_is_told_to_end_with_the_step_and_its_bye_settles_it():
    w = rwatch(*PSS)
    w.exit(2, 137, 5.0)
    assert w.exit(1, 0, 5.5) == [End((0, 2, 3, 4), 0)]  # the coordinator finished meanwhile
    for r in (0, 2, 3, 4):
        w.bye(r)
    assert w.finished(6.0)


def test_restarts_off_says_what_happened_only():
    w = rwatch(*PSS, max_restarts=0)
    assert w.exit(2, 137, 5.0) == [End((0, 1, 3, 4), 137)]
    assert w.failure == (2, 137, "failed (exit 137, killed by SIGKILL)", "")


def test_a_stop_after_the_steps_end_was_decided_says_nothing():
    # a failure ended the step, then srun's SIGTERM reaches the hub: "no more restarts" would be noise
    w = rwatch(*PSS)
    w.exit(2, 1, 5.0)
    w.take_notes()
    w.stop_restarts("SIGTERM reached the chief's supervisor")
    assert w.take_notes() == []


# -- a planned stop: PreemptionCheckpointHandler's exit 42 ------------------------------------------
def test_a_checkpointed_exit_is_a_planned_stop_the_others_stop_by_themselves():
    w = watch("worker", "worker", "worker", drain=30.0)
    assert w.exit(1, 42, 1.0) == []  # no one is ended: the others save the same step and exit too
    assert not w.decided and "planned stop" in " ".join(m for _, m in w.take_notes())
    assert w.exit(2, 42, 1.5) == []
    actions = w.exit(0, 42, 2.0)  # the last trainer: the step ends with 42 (batch-step requeues)
    assert w.decided and w.status == 42 and w.failure.rank == 1
    assert actions == []  # nothing left to end


def test_a_planned_stop_ends_the_trainers_left_after_the_drain_and_servers_at_once():
    w = watch("chief", "worker", "evaluator", drain=5.0)
    assert w.exit(1, 42, 1.0) == []
    assert w.tick(3.0) == []
    actions = w.tick(6.5)
    assert actions == [End((0, 2), 42)] and w.status == 42
    assert any("still running 5 s after worker 0 checkpointed" in m for _, m in w.take_notes())


def test_a_failure_during_a_planned_stop_is_still_a_failure():
    w = watch("worker", "worker", "worker")
    assert w.exit(1, 42, 1.0) == []
    actions = w.exit(2, 137, 1.5)
    assert w.status == 137 and actions == [End((0,), 137)]


def test_a_task_finishing_0_during_a_planned_stop_keeps_the_checkpointed_status():
    w = watch("worker", "worker")
    assert w.exit(1, 42, 1.0) == []
    w.exit(0, 0, 1.2)
    assert w.decided and w.status == 42


# -- who records the first failure for a launcher (one rule: StepWatch.failure_to_record) ------------
@pytest.mark.parametrize("event,restarts,recorded", [
    ("own exits 1", False, (1, 1)),  # the hub's own command: nobody else can say it first
    ("own exits 1", True, (1, 1)),
    ("spoke exits 3", False, None),  # the spoke recorded it itself before it told the hub
    ("spoke exits 3", True, None),  # restarts on, but 3 is not retried: the spoke recorded it (not twice)
    ("spoke exits 137", True, (2, 137)),  # one a restart could undo: the spoke left it to the hub (budget spent)
    ("ps lost", False, (0, LOST_STATUS)),  # its connection closed without a status: it cannot say
])
def test_failure_to_record_names_the_first_failure_once(event, restarts, recorded):
    w = watch("ps", "worker", "worker", local=1, policy=RestartPolicy(max_restarts=3 if restarts else 0),
              role_of={0: "ps", 1: "worker", 2: "worker"})
    for rank in (0, 1, 2):
        w.join(rank, 1.0)
    assert w.failure_to_record() is None  # nothing failed yet; asking does not use the answer up
    if event == "own exits 1":
        w.exit(1, 1, 2.0)
    elif event == "spoke exits 3":
        w.exit(2, 3, 2.0)
    elif event == "spoke exits 137":
        w.step_restarts = w.policy.max_restarts  # the step's budget is spent: no restart
        w.exit(2, 137, 2.0)
    else:
        w.closed(0, 2.0)
    failure = w.failure_to_record()
    assert (None if failure is None else (failure.rank, failure.status)) == recorded
    w.exit(0, 5, 3.0)
    assert w.failure_to_record() is None  # once


# -- a lost task the step can do without (plan.lost_task) -----------------------------------------
def watch_roles(*roles, **kw):
    """watch() with the roles known to the watch, as the hub gives them (the lost-task rule reads them)."""
    return watch(*roles, role_of={x.rank: x.role for x in tasks(*roles)}, **kw)


@pytest.mark.parametrize("roles,rank,goes_on", [
    (("ps", "chief", "worker", "worker"), 2, True),  # pss: a worker, another left
    (("ps", "chief", "worker"), 2, False),  # pss: the last worker
    (("ps", "chief", "worker", "worker"), 0, False),  # pss: a ps holds variables
    (("ps", "chief", "worker", "evaluator"), 3, True),  # an evaluator only reads checkpoints
    (("ps", "worker", "worker"), 2, True),  # tf1: a non-chief worker (asynchronous)
    (("ps", "worker", "worker"), 0, False),  # tf1: a ps
    (("worker", "worker", "worker"), 2, False),  # mwms: every worker takes part in every step
    (("chief", "worker", "evaluator"), 2, True),  # mwms: an evaluator
])
def test_which_lost_tasks_the_step_goes_on_without(roles, rank, goes_on):
    w = watch_roles(*roles)
    actions = w.closed(rank, 4.0)
    assert (actions == [] and not w.decided) == goes_on, actions
    assert (rank in w.lost) == goes_on
    if not goes_on:
        assert w.status == LOST_STATUS and w.failure.rank == rank


def test_a_lost_pss_worker_is_named_and_the_step_ends_0_when_the_coordinator_finishes():
    w = watch_roles("ps", "chief", "worker", "worker", "worker")
    assert w.closed(3, 4.0) == []
    notes = w.take_notes()
    assert any(level == logging.WARNING and m.startswith("worker 1 was lost (its supervisor went away")
               and "going on without it (the coordinator sends its functions to the other workers; 2 of 3 "
               "workers left" in m for level, m in notes), notes
    assert w.lost[3][1] == 4.0 and 3 in w.settled and 3 not in w.told
    assert w.exit(1, 0, 9.0) == [End((0, 2, 4), 0)]  # the lost one is not told: nobody is there to hear
    assert w.status == 0 and w.failure is None
    assert w.closed(2, 5.0) == []  # after the decision: told, so its close is its end


def test_a_silent_pss_worker_is_lost_and_a_second_loss_of_the_last_one_ends_the_step():
    w = watch_roles("ps", "chief", "worker", "worker", silence=10.0)
    for rank in (0, 3):
        w.hear(rank, 8.0)
    assert w.tick(15.0) == [End((2,), 0)]  # worker 0 silent since 0.0: lost (told to leave, should it hear)
    assert 2 in w.lost and not w.decided
    assert w.closed(3, 16.0) == [End((0, 1), LOST_STATUS)]  # the last worker: nothing left to train on
    assert w.failure.rank == 3 and "was lost" in w.failure.reason
    assert w.lost_ranks() == [2, 3]  # the one gone on without, and the one whose loss ended the step


def test_lost_ranks_leave_out_tasks_that_failed_with_a_status():
    w = watch("ps", "worker", "worker")
    assert w.lost_ranks() == []
    w.exit(2, 1, 1.0)  # a failure with its own status: not lost
    assert w.failure.rank == 2 and w.lost_ranks() == []


def test_a_lost_tf1_worker_while_the_chief_drains_ends_the_step_at_once():
    w = watch_roles("ps", "worker", "worker", "worker")
    assert w.exit(1, 0, 5.0) == []  # the chief is done; workers 1 and 2 still train
    assert w.exit(2, 0, 6.0) == []
    assert w.closed(3, 7.0) == [End((0,), 0)]  # the last trainer was lost: nothing left to wait for
    assert w.status == 0 and w.lost.keys() == {3}


def test_require_all_makes_a_lost_worker_end_the_step_and_a_lost_chief_always_does():
    w = watch_roles("ps", "chief", "worker", "worker", require_all=True)
    assert w.closed(2, 4.0) == [End((0, 1, 3), LOST_STATUS)]
    w = watch_roles("ps", "worker", "worker", local=0)  # tf1: worker 0 is the chief
    assert w.closed(1, 4.0) == [End((0, 2), LOST_STATUS)]
