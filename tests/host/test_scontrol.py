"""host.scontrol: "Slurm does not know the job" and "Slurm's controller does not answer" are told apart
(a stand-in scontrol first on PATH prints what Slurm 22.05 prints)."""

from __future__ import annotations

import os

import pytest

from tf_for_slurm.host.scontrol import JobAnswer, ask_job

DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
FORGOT = "slurm_load_jobs error: Invalid job id specified"
JOB = ("JobId=12 JobName=train\n   UserId=me(1000) GroupId=me(1000)\n   JobState=RUNNING Reason=None "
       "Dependency=(null)\n   RunTime=00:01:02 TimeLimit=00:10:00\n   WorkDir=/home/me/run one\n")


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """Write the stand-in's body; it is first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def body(text: str) -> None:
        path = bin_dir / "scontrol"
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
    return body


def test_a_controller_that_does_not_answer_is_not_a_job_slurm_forgot(scontrol, tmp_path):
    scontrol(f"echo \"$@\" >> {tmp_path}/calls\necho '{DOWN}' >&2\nexit 1\n")
    said = []
    assert ask_job("12", say=said.append) == JobAnswer(info=None, away=DOWN)
    assert (tmp_path / "calls").read_text() == "show job 12\n"  # one try: a person is waiting
    assert said == [f"scontrol show job 12: Slurm's controller did not answer for 0 s (1 tries; last: {DOWN})"]
    scontrol(f"echo '{FORGOT}' >&2\nexit 1\n")
    assert ask_job("12") == JobAnswer(info=None, away=None)


def test_a_known_job_and_a_short_outage_waited_through(scontrol, tmp_path):
    # down for the first try, then the job: with patience, the answer (and one line each way)
    scontrol(f"if [ ! -e {tmp_path}/once ]; then : > {tmp_path}/once; echo '{DOWN}' >&2; exit 1; fi\n"
             f"cat <<'END'\n{JOB}END\n")
    said = []
    answer = ask_job("12", patience=5, say=said.append)
    assert answer.away is None and answer.info is not None
    assert (answer.info["JobState"], answer.info["WorkDir"]) == ("RUNNING", "/home/me/run one")
    assert len(said) == 2 and "does not answer" in said[0] and "answered again" in said[1], said


def test_an_scontrol_that_hangs_counts_as_no_answer(scontrol):
    scontrol("exec sleep 30\n")
    answer = ask_job("12", timeout=0.5)
    assert answer.info is None and answer.away == "scontrol: no answer within the command's timeout (0.5 s)"


def test_no_scontrol_at_all_is_no_job_not_an_outage(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert ask_job("12") == JobAnswer()
