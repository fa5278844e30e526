"""`tf-slurm report JOB`: the page of a recorded job folder (status.json, batch.json with a requeue
in its history, timeline.jsonl with every event kind, a cut line and garbage) as the CLI writes it:
private, self-contained, every task's lane, every kind's mark, every string escaped; a job folder
without a timeline still has a page; a job with no folder is one line and exit 2."""

from __future__ import annotations

import html as html_text
import os
import re
import stat
import time

import pytest
from envs import no_slurm_env
from report_shot import HOSTILE, T0, batch_json, recorded_job, status_json, timeline_lines

from tf_for_slurm.cli.report_page import COLOURS, GOODPUT_COLOURS, RUN_LINE, WIDTH
from tf_for_slurm.plan.goodput import PARTS, account, status_line
from tf_for_slurm.plan.job_report import parse_timeline


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


def test_no_step_line_crosses_the_gap_between_two_runs(tmp_path, env, cli_runs):
    """Run 1 was requeued at T0+300, run 2 began at T0+398: each worker's step line breaks there (a
    path with one subpath per run), with no line from before the requeue to after run 2's start."""
    folder = recorded_job(tmp_path / "jobs" / "4242")
    res = cli_runs.run(["report", "4242"], env)
    assert res.returncode == 0, res.stderr
    svg = re.search(r'<svg[^>]*aria-label="training step over time">.*?</svg>', (folder / "report.html").read_text(),
                    re.S).group(0)
    requeued = int(re.search(rf'<line x1="(\d+)"[^>]*stroke="{COLOURS["requeue"]}"', svg).group(1))
    started = int(re.search(rf'<line x1="(\d+)"[^>]*stroke="{RUN_LINE}"', svg).group(1))  # run 2's start
    assert requeued < started
    paths = re.findall(r'<path class="steps" d="([^"]+)"', svg)
    assert len(paths) == 2  # one per worker
    for d in paths:
        runs = [[float(x) for x in re.findall(r"(-?[\d.]+),-?[\d.]+", sub)] for sub in d.split("M")[1:]]
        assert len(runs) == 2, d  # run 1's segment, run 2's
        assert max(runs[0]) <= requeued and min(runs[1]) >= started, d
        for xs in runs:
            assert not [(a, b) for a, b in zip(xs, xs[1:]) if a <= requeued and b >= started], d


def test_the_goodput_bar_and_its_table(tmp_path, env, cli_runs):
    """Over the timeline: the account's status line, one bar (a rect per part with seconds, in its colour,
    as wide as its share of the wall time, the rects filling the width) and the table of each part's
    seconds, share and node-seconds; every string escaped (the notes' apostrophes too)."""
    folder = recorded_job(tmp_path / "jobs" / "4242")
    assert cli_runs.run(["report", "4242"], env).returncode == 0
    page = (folder / "report.html").read_text()
    acc = account("4242", status_json(), batch_json(), parse_timeline("\n".join(timeline_lines()), 20_000),
                  batch_json()["ended_at"])
    section = page[page.index("<h2>Where the time went</h2>"):page.index('<div class="legend">')]
    assert f'<p class="goodput">{html_text.escape(status_line(acc))}</p>' in section
    bar = re.findall(r'<rect class="part (\w+)" x="(\d+)" y="2" width="(\d+)" height="20" fill="(#[0-9a-f]{6})"',
                     section)
    assert [b[0] for b in bar] == [k for k in PARTS if acc.parts[k] > 0]
    assert all(fill == GOODPUT_COLOURS[k] for k, _, _, fill in bar)
    xs = [(int(x), int(w)) for _, x, w, _ in bar]
    assert xs[0][0] == 0 and all(a + w == b for (a, w), (b, _) in zip(xs, xs[1:])) and sum(w for _, w in xs) == WIDTH
    for (k, _, w, _) in bar:  # as wide as its share, give or take the pixel each small part is given
        assert abs(int(w) - acc.parts[k] / acc.total_s * WIDTH) <= 4, (k, w)
    table = re.search(r'<table class="goodput">.*?</table>', section, re.S).group(0)
    rows = {m.group(1): re.findall(r"<td>([^<]*)</td>", m.group(2))
            for m in re.finditer(r"<tr><th>([^<]+)</th>(.*?)</tr>", table)}
    assert rows["seconds"] == [f"{acc.parts[k]:,.0f}" if acc.parts[k] > 0 else "-" for k in PARTS] + \
        [f"{acc.total_s:,.0f}"]
    assert rows["% of wall"][PARTS.index("training")] == f"{acc.parts['training'] / acc.total_s:.1%}"
    assert rows["node-seconds"] == ["-" if acc.node_parts[k] <= 0 else f"{acc.node_parts[k]:,.0f}" for k in PARTS] \
        + [f"{acc.node_s:,.0f}"]
    for k in PARTS:
        assert f'<i style="background:{GOODPUT_COLOURS[k]}"></i>' in table, k
    assert "batch-step&#x27;s start where Slurm&#x27;s is unknown" in section  # a note, escaped
    assert "'" not in re.sub(r"<[^>]*>", "", section)  # no raw quote in the text


def test_the_summary_says_what_slurm_recorded_corrected_with_one_scontrol_call(tmp_path, cli_runs):
    """report passes Slurm's view to the model: a TIMEOUT Slurm recorded for a job whose last run had
    ended (status 0) before its time limit is said as COMPLETED, Slurm's word beside it; scontrol once."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0 + 398))
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\necho 'JobId=4242 JobState=TIMEOUT "
                                      f"Reason=TimeLimit Restarts=1 StartTime={start} TimeLimit=00:10:00 "
                                      "NodeList=node[1-3]'\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TF_SLURM_JOBS_ROOT": str(tmp_path / "jobs")}
    folder = recorded_job(tmp_path / "jobs" / "4242")
    res = cli_runs.run(["report", "4242"], env)
    assert res.returncode == 0, res.stderr
    summary = re.search(r'<p class="summary">([^<]*)</p>', (folder / "report.html").read_text()).group(1)
    clock = time.strftime("%H:%M:%S", time.localtime(T0 + 702))
    assert summary.startswith(f"job 4242 COMPLETED (Slurm: TIMEOUT; the step had ended 0 at {clock}, before the "
                              "time limit; Slurm&#x27;s controller was away when the job ended), step 0:"), summary
    assert calls.read_text().splitlines() == ["show job 4242"]


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
