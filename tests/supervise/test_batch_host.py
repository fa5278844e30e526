"""supervise.batch_host: a task's check after the batch host's supervisor was lost, with Slurm stood in."""

import json

import pytest

from tf_for_slurm.errors import UsageError

from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.supervise import batch_host, batch_record
from tf_for_slurm.supervise.slurm_job import RequeueFailed

TASKS = tuple(Task(r, f"node{r + 1}", r, 0, "worker", r, f"node{r + 1}", 5000 + r) for r in range(4))
ENV = {"TF_SLURM_BATCH_HOST": "node1", "TF_SLURM_REQUEUES_LEFT": "2", "TF_SLURM_BATCH_HOST_WAIT": "60"}


class Slurm:
    """Slurm's answers, and what was asked of it."""

    def __init__(self, monkeypatch, tmp_path, probe="Communication connection failure",
                 states=("MIXED", "MIXED+NOT_RESPONDING"), job=("RUNNING", "0"), refused=None):
        self.asked, self.states, self.now = [], list(states), 0.0
        self.log = tmp_path / "job.out"
        self.log.write_text("run 1\n")
        monkeypatch.setattr(batch_host, "probe", lambda j, n, env: self._say("probe", probe))
        monkeypatch.setattr(batch_host, "node_state", lambda n: self._say("node", self.states.pop(0)
                                                                          if len(self.states) > 1 else self.states[0]))
        info = {"JobState": job[0], "Restarts": job[1], "StdOut": str(self.log)}
        monkeypatch.setattr(batch_host, "job_state", lambda j: self._say("job", info))
        monkeypatch.setattr(batch_host, "requeue_job", lambda j, p, say: self._say(
            "requeue", None if refused is None else RequeueFailed(refused, False)))
        monkeypatch.setattr(batch_host, "cancel_job", lambda j: self._say("cancel", None))

    def _say(self, what, answer):
        self.asked.append(what)
        return answer

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def check(slurm, rank, env=ENV, lost="node1", **kw):
    plan = ClusterPlan(TASKS, my_rank=rank, job_id="7")
    return batch_host.check(plan, lost, batch_host.config(env), env, clock=slurm.clock, sleep=slurm.sleep, **kw)


def test_a_surviving_task_requeues_once_slurm_reports_the_node_lost(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path)
    done = check(slurm, 1)
    assert slurm.asked == ["job", "probe", "node", "node", "job", "requeue"]  # the first: its batch log
    assert done.acted and done.line.startswith("requeued job 7: its batch host node1 lost (Slurm says "
                                               "MIXED+NOT_RESPONDING)")
    lines = slurm.log.read_text().splitlines()
    assert lines[1:] == ["tf-slurm exec (task 1 on node2): the step's supervisor was on the job's batch host node1: "
                         "checking whether that node was lost (for at most 60 s)",
                         f"tf-slurm exec (task 1 on node2): {done.line}"]


def test_a_node_that_still_starts_a_step_is_left_to_batch_step(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path, probe=None)
    done = check(slurm, 1)
    assert slurm.asked == ["job", "probe"] and not done.acted
    assert slurm.log.read_text().splitlines()[-1].endswith("left to its batch script")


def test_no_evidence_within_the_wait_leaves_the_job(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path, probe="srun: error: Unable to create step", states=("MIXED",))
    done = check(slurm, 1)
    assert not done.acted and "within 60 s" in done.line and slurm.now == pytest.approx(60.0)
    assert slurm.asked.count("probe") == 4 and slurm.asked.count("node") == 12  # every 15 s and every 5 s


def test_two_failed_launches_are_the_evidence_when_slurm_is_slow_to_say(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path, probe="srun: error: Application launch failed: Communication connection "
                                               "failure", states=("MIXED",))
    done = check(slurm, 1)
    assert done.acted and slurm.asked == ["job", "probe", "node", "node", "node", "probe", "job", "requeue"]
    assert "(2 steps in a row could not start there: srun: error: Application launch failed" in done.line


def test_a_refused_requeue_cancels(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path, refused="Requested operation is presently disabled")
    done = check(slurm, 2)
    assert slurm.asked[-2:] == ["requeue", "cancel"] and done.acted and "cancelled job 7" in done.line
    assert slurm.now >= 2.0  # rank 2 is the second checker: its turn, 2 s after the evidence


def test_the_hub_cancels_a_finished_step_at_once(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path)
    done = check(slurm, 3, hub=True, finished=True)
    assert slurm.asked[-1] == "cancel" and "the step had ended with status 0" in done.line


@pytest.mark.parametrize("rank, env, lost", [
    (1, {}, "node1"),  # not under batch-step
    (1, {**ENV, "TF_SLURM_REQUEUES_LEFT": ""}, "node1"),
    (1, {**ENV, "TF_SLURM_BATCH_HOST_WAIT": "0"}, "node1"),  # turned off
    (1, ENV, "node3"),  # the lost supervisor was not on the batch host
    (0, ENV, "node1"),  # this task is on the batch host: it lives
])
def test_who_does_not_check(monkeypatch, tmp_path, rank, env, lost):
    slurm = Slurm(monkeypatch, tmp_path)
    assert check(slurm, rank, env, lost) is None and slurm.asked == []


def test_the_batch_log_is_written_only_when_it_is_a_file_of_this_user(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "link"
    link.symlink_to(target)
    batch_host.tell_batch_log(str(link), "x")
    batch_host.tell_batch_log(str(tmp_path / "missing"), "x")  # never created
    assert target.read_text() == "" and not (tmp_path / "missing").exists()
    log = tmp_path / "job.out"
    log.write_text("a\n")
    batch_host.tell_batch_log(str(log), "b\nc")
    assert log.read_text() == "a\nb c\n"


@pytest.mark.parametrize("name, value", [("TF_SLURM_BATCH_HOST_WAIT", "soon"), ("TF_SLURM_REQUEUES_LEFT", "-1")])
def test_a_bad_setting_is_one_usage_error_naming_it(name, value):
    with pytest.raises(UsageError, match=name):
        batch_host.config({**ENV, name: value})


def test_the_config_batch_step_gave():
    cfg = batch_host.config({**ENV, "SLURM_RESTART_COUNT": "3"})
    assert cfg == batch_host.Config("node1", 2, 3, 60.0)
    assert batch_host.config({**ENV, "TF_SLURM_BATCH_HOST_WAIT": ""}).wait == 150.0  # the default


def test_a_stop_signal_ends_the_check(monkeypatch, tmp_path):
    slurm = Slurm(monkeypatch, tmp_path, states=("MIXED",), probe="srun: error: Unable to create step")
    assert check(slurm, 1, stopped=lambda: True) is None and slurm.asked == []  # before: no check at all
    looks = iter([False, False, True])
    done = check(slurm, 1, stopped=lambda: next(looks, True))
    assert not done.acted and done.line.startswith("a stop signal came") and "requeue" not in slurm.asked


def _batch_json(tmp_path, **fields):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"job": "7", "run": 1, "state": "running", "decision": None, **fields}))
    return path


@pytest.mark.parametrize("refused, state, words", [
    (None, "requeued", "task 1 on node2: requeued job 7: its batch host node1 lost"),
    ("Requested operation is presently disabled", "ended", "task 1 on node2: cancelled job 7: its batch host node1"),
])
def test_the_run_batch_step_left_running_says_what_the_task_did(monkeypatch, tmp_path, refused, state, words):
    """batch.json's run, left 'running' by the batch-step that died with its node, gets the acting task's
    line (`tf-slurm status`, the report)."""
    path = _batch_json(tmp_path, target=100)
    slurm = Slurm(monkeypatch, tmp_path, refused=refused)
    done = check(slurm, 1, env={**ENV, "TF_SLURM_JOB_DIR": str(tmp_path)})
    record = json.loads(path.read_text())
    assert (record["state"], record["target"]) == (state, 100) and record["decision"].startswith(words), record
    assert record["decision"].endswith(done.line) and isinstance(record["ended_at"], float)


@pytest.mark.parametrize("fields", [{"run": 2}, {"job": "8"}, {"state": "requeued", "decision": "batch-step's"}])
def test_another_run_or_a_run_already_ended_is_left_as_it_is(monkeypatch, tmp_path, fields):
    path = _batch_json(tmp_path, **fields)
    before = path.read_text()
    check(Slurm(monkeypatch, tmp_path), 1, env={**ENV, "TF_SLURM_JOB_DIR": str(tmp_path)})
    assert path.read_text() == before


def test_a_run_left_running_is_carried_into_history_as_ended_without_a_word(monkeypatch, tmp_path):
    """The next run of the job (batch-step's record) when no task wrote the run's end either."""
    monkeypatch.setenv("TF_SLURM_JOB_DIR", str(tmp_path))
    _batch_json(tmp_path, step=120)
    record = batch_record.BatchRecord("7", 1, 10, None, None, None, say=lambda line: None)
    assert record.data["history"] == [{"run": 1, "state": "ended", "decision": batch_record.UNSAID, "step": 120}]
