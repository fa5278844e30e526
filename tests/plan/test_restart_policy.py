"""The restart policy as a table: who is restarted in place, for which statuses, within which bounds."""

import pytest

from tf_for_slurm.plan.restart_policy import (GROUP, MAX_BACKOFF, TASK, RestartPolicy, backoff_delay, could_restart,
                                              decide, restart_scope, retryable)

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


@pytest.mark.parametrize("strategy,role,chief,scope", [
    ("pss", "worker", False, TASK),  # the coordinator re-sends its functions
    ("pss", "evaluator", False, TASK),
    ("pss", "ps", False, GROUP),  # TensorFlow: the coordinator restarts and restores
    ("pss", "chief", True, GROUP),
    ("tf1", "worker", False, TASK),
    ("tf1", "worker", True, TASK),  # worker 0, the implicit chief: restores from its checkpoint dir
    ("tf1", "ps", False, GROUP),  # its variables are lost
    ("tf1", "evaluator", False, None),
    ("mwms", "worker", False, GROUP),  # every worker takes part in every step
    ("mwms", "worker", True, GROUP),
    ("mwms", "evaluator", False, TASK),
])
def test_what_restarts_when_a_task_fails(strategy, role, chief, scope):
    assert restart_scope(strategy, role, chief)[0] == scope
    d = ask(strategy=strategy, role=role, chief=chief)
    assert d.restart is (scope is not None) and d.group is (scope == GROUP)


def test_a_group_restart_names_the_failed_task_and_why_the_group():
    d = ask(strategy="mwms")
    assert d.reason == ("restarting every task of the step in 1 s: worker 1 exited with status 137 (signal 9) "
                        "(under mwms every worker takes part in every step: the group resumes from its "
                        "checkpoint); attempt 1 of 3 (step: restart 1 of 5)")


@pytest.mark.parametrize("status,on,ok", [
    (137, "signal", True), (143, "signal", True), (139, "signal", True), (128, "signal", True),
    (255, "signal", True), (1, "signal", False), (127, "signal", False), (42, "signal", False),
    (1, "any", True), (127, "any", True), (137, "any", True), (0, "any", False),
])
def test_retryable_statuses(status, on, ok):
    assert retryable(status, on) is ok


def test_status_1_not_retried_under_signal_but_under_any():
    d = ask(status=1)
    assert not d.restart and d.reason == ("exit 1 is the program's own error, and only a task killed by a signal "
                                          "(exit 128-255) is restarted")
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
    assert not d.restart and d.reason == "it was restarted 3 times already (at most 3 per task)"


def test_a_crash_loop_is_named_and_beats_the_budgets():
    d = ask(step=1, task=1, since=0.8)
    assert not d.restart and d.crash_loop
    assert d.reason == "it failed again 0.8 s after restart 1, within 10 s: a crash loop"
    assert ask(step=1, task=1, since=10.5).restart  # outside the window: a new failure


def test_could_restart_is_what_a_spoke_may_assume_before_the_hub_answers():
    assert could_restart(ON, "pss", "worker", False, 137)
    assert not could_restart(ON, "pss", "worker", False, 1)
    assert not could_restart(RestartPolicy(), "pss", "worker", False, 137)
    assert could_restart(ON, "mwms", "worker", False, 137)  # with its group
    assert not could_restart(ON, "tf1", "evaluator", False, 137)
