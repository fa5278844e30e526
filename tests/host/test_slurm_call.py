"""host.slurm_call.call: a Slurm command run through an outage (stand-in runs, a fake clock)."""

import subprocess

from tf_for_slurm.host.slurm_call import call

DOWN = "scontrol: error: Unable to contact slurm controller (connect failure)"


class Script:
    """A stand-in for subprocess.run answering from a list, and a clock that sleep() moves."""

    def __init__(self, answers):
        self.answers, self.calls, self.now, self.said = list(answers), 0, 0.0, []

    def run(self, argv, **_kw):
        self.calls += 1
        rc, err = self.answers.pop(0)
        if rc == "timeout":
            raise subprocess.TimeoutExpired(argv, 30)
        return subprocess.CompletedProcess(argv, rc, "out" if rc == 0 else "", err)

    def sleep(self, s):
        self.now += s

    def go(self, **kw):
        return call(["scontrol", "requeue", "12"], what="scontrol requeue 12", run=self.run, sleep=self.sleep,
                    clock=lambda: self.now, say=self.said.append, **kw)


def test_an_outage_is_waited_through_with_two_lines():
    s = Script([(1, DOWN), (1, DOWN), ("timeout", ""), (0, "")])
    ans = s.go(patience=60)
    assert ans.ok and not ans.away and s.calls == 4
    assert len(s.said) == 2 and "does not answer" in s.said[0] and "answered again after 7 s" in s.said[1]


def test_a_refusal_returns_at_once():
    s = Script([(1, "scontrol: error: Requested operation is presently disabled for job 12")])
    ans = s.go(patience=60)
    assert ans.returncode == 1 and not ans.away and s.calls == 1 and s.said == []


def test_gives_up_after_the_patience_with_one_line():
    s = Script([(1, DOWN)] * 20)
    ans = s.go(patience=20)
    assert ans.away and "did not answer for 20 s" in ans.line
    assert s.now == 20 and len(s.said) == 2


def test_a_command_that_must_not_run_twice_retries_only_a_request_that_never_left():
    s = Script([(1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")])
    assert s.go(patience=60, not_sent_only=True).returncode == 1 and s.calls == 1
    s = Script([(1, DOWN), (0, "")])
    assert s.go(patience=60, not_sent_only=True).ok and s.calls == 2


def test_a_missing_command_is_one_answer_not_a_traceback():
    ans = call(["/nonexistent/scontrol"], what="scontrol", patience=5)
    assert ans.returncode == 127 and "scontrol" in ans.stderr
