"""The restart policy as a table: who is restarted in place, for which statuses, within which bounds."""

import pytest

from tf_for_slurm.plan.restart_policy import (MAX_BACKOFF, RestartPolicy, backoff_delay, could_restart, decide,
                                              not_in_place, retryable)

ON = RestartPolicy(max_restarts=5, max_per_task=3, retry_on="signal", crash_window=10.0, backoff=1.0)


def ask(policy=ON, *, strategy="pss", role="worker", chief=False, status=137, step=0, task=0, since=None):
    return decide(policy, name="worker 1", strategy=strategy, role=role, is_chief=chief, status=status,
                  step_restarts=step, task_restarts=task, since_restart=since)


def test_defaults_are_off_and_documented_values():
    p = RestartPolicy()
    assert (p.max_restarts, p.max_per_task, p.retry_on, p.crash_window, p.backoff) == (0, 3, "signal", 10.0, 1.0)
    assert not p.enabled
    d = ask(p)
    assert not d.restart and "off" in d.reason


@pytest.mark.parametrize("strategy,role,chief,ok", [
    ("pss", "worker", False, True),
    ("pss", "evaluator", False, True),
    ("pss", "ps", False, False),
    ("pss", "chief", True, False),
    ("tf1", "worker", False, True),
    ("tf1", "worker", True, False),  # worker 0, the implicit chief
    ("tf1", "ps", False, False),
    ("tf1", "evaluator", False, False),
    ("mwms", "worker", False, False),
    ("mwms", "evaluator", False, False),
])
def test_who_is_restarted_in_place(strategy, role, chief, ok):
    assert (not_in_place(strategy, role, chief) is None) is ok
    assert ask(strategy=strategy, role=role, chief=chief).restart is ok


def test_mwms_says_group_restart_is_a_later_step():
    assert "whole group" in ask(strategy="mwms").reason


@pytest.mark.parametrize("status,on,ok", [
    (137, "signal", True), (143, "signal", True), (139, "signal", True), (128, "signal", True),
    (255, "signal", True), (1, "signal", False), (127, "signal", False), (42, "signal", False),
    (1, "any", True), (127, "any", True), (137, "any", True), (0, "any", False),
])
def test_retryable_statuses(status, on, ok):
    assert retryable(status, on) is ok


def test_status_1_not_retried_under_signal_but_under_any():
    d = ask(status=1)
    assert not d.restart and "status 1 is not retried" in d.reason
    assert ask(RestartPolicy(max_restarts=5, retry_on="any"), status=1).restart


def test_a_restart_says_task_cause_and_attempt_k_of_n_with_backoff():
    d = ask(step=1, task=1, since=60.0)
    assert d.restart and d.attempt == 2 and d.delay == 2.0
    assert d.reason == ("restarting worker 1 in place in 2 s: exited with status 137 (signal 9); attempt 2 of 3 "
                        "(step: restart 2 of 5)")


@pytest.mark.parametrize("attempt,delay", [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, MAX_BACKOFF), (20, 30.0)])
def test_backoff_doubles_up_to_the_cap(attempt, delay):
    assert backoff_delay(ON, attempt) == delay


def test_the_steps_budget_and_the_tasks_budget():
    d = ask(step=5, task=0)
    assert not d.restart and d.reason == "the step's 5 restarts are spent (max restarts 5)"
    d = ask(step=3, task=3, since=60.0)
    assert not d.restart and d.reason == "worker 1 was restarted 3 times already (at most 3 per task)"


def test_a_crash_loop_is_named_and_beats_the_budgets():
    d = ask(step=1, task=1, since=0.8)
    assert not d.restart and d.crash_loop
    assert d.reason.startswith("crash loop: worker 1 failed again 0.8 s after restart 1 (status 137")
    assert ask(step=1, task=1, since=10.5).restart  # outside the window: a new failure


def test_could_restart_is_what_a_spoke_may_assume_before_the_hub_answers():
    assert could_restart(ON, "pss", "worker", False, 137)
    assert not could_restart(ON, "pss", "worker", False, 1)
    assert not could_restart(RestartPolicy(), "pss", "worker", False, 137)
    assert not could_restart(ON, "mwms", "worker", False, 137)
