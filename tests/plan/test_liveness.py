"""When a peer counts as lost (plan/liveness.py), as tables: the rule, then a peer fed probe results."""

import math

import pytest

from tf_for_slurm.plan.liveness import DOWN, LOST, NEVER, NO_ANSWER, REFUSED, UNSEEN, UP, Peer, Rule

PS_WAIT = Rule(lost_after=2.5, never_after=120.0)  # a TF1 ps: liveness_timeout 5 s / 2, startup_grace
WATCHDOG = Rule(lost_after=2.5, refused_limit=2)  # a TF1 worker watching its ps


@pytest.mark.parametrize("rule,now,seen,down_since,refused,verdict", [
    (PS_WAIT, 10.0, True, None, 0, UP),
    (PS_WAIT, 10.0, True, 8.0, 0, DOWN),  # down 2 s: one slow accept does not end a healthy job
    (PS_WAIT, 10.0, True, 7.5, 0, LOST),  # down exactly lost_after: lost
    (PS_WAIT, 10.0, True, 9.9, 5, DOWN),  # refusals count only with a limit
    (PS_WAIT, 119.9, False, None, 0, UNSEEN),  # never seen, within the grace: maybe still importing TensorFlow
    (PS_WAIT, 120.0, False, None, 0, NEVER),
    (PS_WAIT, 500.0, False, None, 9, NEVER),
    (WATCHDOG, 10.0, True, 9.9, 1, DOWN),
    (WATCHDOG, 10.0, True, 9.9, 2, LOST),  # refused twice in a row: its host says nothing listens
    (WATCHDOG, 10.0, True, 7.5, 0, LOST),  # no answer at all for lost_after
    (WATCHDOG, 1e9, False, None, 0, UNSEEN),  # no never_after: waits forever
    (Rule(lost_after=3.0, never_after=600.0), 603.0, True, None, 0, UP),  # seen: the start grace no longer applies
])
def test_rule(rule, now, seen, down_since, refused, verdict):
    assert rule.verdict(now=now, started=0.0, seen=seen, down_since=down_since, refused=refused) == verdict


@pytest.mark.parametrize("rule,seen,probes,verdicts", [
    # a TF1 ps's worker: up, then no answer from t=1 on; lost 2.5 s after the first miss
    (PS_WAIT, False, [(0.0, UP), (1.0, NO_ANSWER), (3.0, NO_ANSWER), (3.5, NO_ANSWER)], [UP, DOWN, DOWN, LOST]),
    # an answer in between clears the down time
    (PS_WAIT, False, [(0.0, UP), (1.0, NO_ANSWER), (3.0, UP), (5.0, NO_ANSWER), (7.0, NO_ANSWER)],
     [UP, DOWN, UP, DOWN, DOWN]),
    # never up: judged by never_after only, whatever the probes say
    (PS_WAIT, False, [(1.0, REFUSED), (60.0, NO_ANSWER), (120.0, REFUSED)], [UNSEEN, UNSEEN, NEVER]),
    # the watchdog: every ps was seen up first; two refusals in a row are enough
    (WATCHDOG, True, [(0.5, REFUSED), (1.0, REFUSED)], [DOWN, LOST]),
    # a missing answer between refusals restarts their count, not the down time
    (WATCHDOG, True, [(0.5, REFUSED), (1.0, NO_ANSWER), (1.5, REFUSED), (3.0, NO_ANSWER)], [DOWN, DOWN, DOWN, LOST]),
    (WATCHDOG, True, [(0.5, REFUSED), (1.0, UP), (1.5, REFUSED)], [DOWN, UP, DOWN]),
])
def test_peer(rule, seen, probes, verdicts):
    peer = Peer(rule, started=0.0, seen=seen)
    assert [peer.observe(state, now) for now, state in probes] == verdicts


def test_peer_down_since_is_the_first_miss_after_being_seen():
    peer = Peer(PS_WAIT, started=0.0)
    peer.observe(NO_ANSWER, 1.0)
    assert peer.down_since is None  # not seen yet: not "down"
    peer.observe(UP, 2.0)
    peer.observe(NO_ANSWER, 3.0)
    peer.observe(NO_ANSWER, 4.0)
    assert peer.down_since == 3.0 and peer.verdict(5.4) == DOWN and peer.verdict(5.5) == LOST
    assert Rule(lost_after=1.0).never_after == math.inf
