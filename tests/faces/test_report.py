"""`tf-slurm report JOB`: the page of a recorded job folder (status.json, batch.json with a requeue
in its history, timeline.jsonl with every event kind, a cut line and garbage) as the CLI writes it:
private, self-contained, every task's lane, every kind's mark, every string escaped; a job folder
without a timeline still has a page; a job with no folder is one line and exit 2."""

from __future__ import annotations

import os
import re
import stat

import pytest
from envs import no_slurm_env
from report_shot import HOSTILE, recorded_job

from tf_for_slurm.cli.report_page import COLOURS


@pytest.fixture
def env(tmp_path):
    """An environment whose scontrol knows no job, and the jobs root under tmp_path."""
    return no_slurm_env(tmp_path)


def test_the_page_of_a_requeued_relaunched_job(tmp_path, env, cli_runs):
    folder = recorded_job(tmp_path / "jobs" / "4242")
    res = cli_runs.run(["report", "4242"], env)
    assert res.returncode == 0, res.stderr
    path = folder / "report.html"
    assert res.stdout == f"{path}\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not [p for p in os.listdir(folder) if p.endswith(".tmp")]
    html = path.read_text()
    for kind in COLOURS:  # start, restart, hang, lost, relaunch, requeue, end
        assert f'class="mark {kind}"' in html, kind
    for lane in ("ps 0 (rank 0, node1)", "worker 0 (rank 1, node2)", "worker 1 (rank 2, node3)"):
        assert f">{lane}</text>" in html, lane
    assert html.count('class="steps"') == 2  # one step curve per worker
    for outside in ("http://", "https://", "<script", "url(", "@import"):
        assert outside not in html.lower(), outside
    assert not re.search(r"<[^>]*\s(src|href)\s*=", html), "an attribute that fetches"
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "3 line(s) of timeline.jsonl were not events" in html
    assert "2 run(s), 1 requeue(s), 1 relaunch(es), 1 restart(s), 1 hang(s), 1 lost, 3 tasks" in html


def test_output_elsewhere_and_a_folder_path(tmp_path, env, cli_runs):
    folder = recorded_job(tmp_path / "somewhere" / "77")
    out = tmp_path / "page.html"
    res = cli_runs.run(["report", str(folder), "--output", str(out)], env)
    assert (res.returncode, res.stdout) == (0, f"{out}\n"), res.stderr
    assert out.read_text().startswith("<!doctype html>") and not (folder / "report.html").exists()


def test_without_a_timeline_the_page_is_built_from_status_and_batch(tmp_path, env, cli_runs):
    folder = recorded_job(tmp_path / "jobs" / "4242", timeline=False)
    res = cli_runs.run(["report", "4242"], env)
    assert res.returncode == 0, res.stderr
    html = (folder / "report.html").read_text()
    assert "no timeline.jsonl" in html
    for kind in ("start", "relaunch", "requeue", "end"):
        assert f'class="mark {kind}"' in html, kind
    assert len(re.findall(r'<rect x="\d+" y="\d+" width="\d+" height="12" fill="#43a047"', html)) == 3  # a bar per task


def test_a_hostile_timeline_is_escaped_and_bounded(tmp_path, env, cli_runs):
    folder = tmp_path / "jobs" / "5"
    folder.mkdir(parents=True)
    lines = [f'{{"at": {1.8e9 + i}, "event": "hang", "rank": 0, "role": "w</text><script>", "index": 0, '
             f'"node": "{HOSTILE}", "detail": "{"x" * 1500}"}}' for i in range(30)]
    (folder / "timeline.jsonl").write_text("\n".join(lines) + "\n" + "\x00\xff garbage\n")
    res = cli_runs.run(["report", "5"], env)
    assert res.returncode == 0, res.stderr
    html = (folder / "report.html").read_text()
    assert "<script" not in html and "<img" not in html and "x" * 301 not in html
    assert "&lt;/text&gt;&lt;script&gt;" in html


@pytest.mark.parametrize("args,words", [
    (["report", "999999"], "JOB=999999: no job folder"),
    (["report", "not/a/job"], "expected a job id or a job folder"),
])
def test_an_unknown_job_is_one_line_exit_2(tmp_path, env, cli_runs, args, words):
    res = cli_runs.run(args, env)
    assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_an_empty_job_folder_is_one_line_exit_2(tmp_path, env, cli_runs):
    (tmp_path / "jobs" / "6").mkdir(parents=True)
    res = cli_runs.run(["report", "6"], env)
    assert res.returncode == 2 and "nothing to report" in res.stderr and len(res.stderr.strip().splitlines()) == 1
