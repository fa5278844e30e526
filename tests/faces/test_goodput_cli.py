"""`tf-slurm goodput JOB...`: a recorded job folder (written here as plain data: a job requeued at its time
limit, its MWMS group restarted back to an old checkpoint in run 1) through the real CLI: the table, --json
(one job, several), --csv, the account's end for a job that ended and one that waits requeued, and the
usage errors (one line, exit 2)."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest
from envs import no_slurm_env

from tf_for_slurm.cli.goodput import COLUMNS, FOOT
from tf_for_slurm.plan.goodput import account_end
from tf_for_slurm.plan.goodput import CSV_FIELDS, PARTS

T = 1_800_000_000.0  # the recorded job's first run starts here (epoch seconds)


def _event(t0, at, event, rank=None, node=None, status=None):
    task = rank is not None
    return {"at": t0 + at, "event": event, "job": "5151", "step": "0", "rank": rank, "role": "worker" if task else None,
            "index": rank, "node": node, "status": status, "detail": None}


def _history(t0, *ramps):
    """[[time, step], ...] every 5 s along each ramp (t from, t to, step at t from), one step a second."""
    return [[t0 + t, s0 + (t - a)] for a, b, s0 in ramps for t in range(a, b + 1, 5)]


def recorded(folder, t0=T, requeued_now=False):
    """Job 5151 on n1 and n2: run 1 (Slurm's submit t0-60, start t0) trains to step 300, its group restarts
    at t0+301 back to step 100 and trains to 350; requeued at t0+600 (status 42, checkpoint 340); run 2
    (Slurm's start t0+700) trains from 340 to the target 670 and ends at t0+1090.  `requeued_now`: the
    folder as it was while run 2 waited in the queue (batch.json's run 1 requeued, no run 2 yet)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    runs = [(30, 300, 0), (330, 580, 100)] + ([] if requeued_now else [(740, 1070, 340)])
    progress = {str(r): {"step": 350 if requeued_now else 670, "target": 670, "save_s": 12.0, "saves": 4,
                         "history": _history(t0, *runs)} for r in (0, 1)}
    end = 590 if requeued_now else 1080
    status = {"format": 1, "job": "5151", "step": "0", "strategy": "mwms", "state": "ended",
              "status": 42 if requeued_now else 0, "started_at": t0 + (5 if requeued_now else 705),
              "updated_at": t0 + end + 5, "decided_at": t0 + end + 1, "chief": 0,
              "columns": ["rank", "role", "index", "node", "state", "status", "restarts", "last_heard"],
              "tasks": [[r, "worker", r, f"n{r + 1}", "exited", 0, 0, t0 + end] for r in (0, 1)],
              "progress": progress}
    run1 = {"run": 1, "started_at": t0 + 2, "ended_at": t0 + 600, "state": "requeued", "status": 42, "step": 350,
            "slurm_submit": t0 - 60, "slurm_start": t0, "decision": "requeue: checkpoint at step 340 of target 670"}
    batch = {"job": "5151", "run": 2, "started_at": t0 + 702, "ended_at": t0 + 1090, "state": "ended", "status": 0,
             "slurm_submit": t0 - 60, "slurm_start": t0 + 700, "target": 670, "history": [run1],
             "decision": "end: the step finished (status 0)"}
    events = [_event(t0, 5, "step_start"), *(_event(t0, 6, "start", r, f"n{r + 1}") for r in (0, 1)),
              *(_event(t0, 301, "restart", r, f"n{r + 1}") for r in (0, 1)),
              *(_event(t0, 590, "exit", r, f"n{r + 1}", 42) for r in (0, 1)), _event(t0, 591, "step_end", status=42)]
    if not requeued_now:
        events += [_event(t0, 705, "step_start"), *(_event(t0, 706, "start", r, f"n{r + 1}") for r in (0, 1)),
                   *(_event(t0, 1080, "exit", r, f"n{r + 1}", 0) for r in (0, 1)),
                   _event(t0, 1081, "step_end", status=0)]
    (folder / "status.json").write_text(json.dumps(status))
    (folder / "batch.json").write_text(json.dumps({**run1, "job": "5151", "history": []} if requeued_now else batch))
    (folder / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


@pytest.fixture
def env(tmp_path):
    """An environment whose scontrol knows no job, and the jobs root under tmp_path."""
    return no_slurm_env(tmp_path)


def _json(cli_runs, env, *jobs):
    res = cli_runs.run(["goodput", *jobs, "--json"], env)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return json.loads(res.stdout)


def _adds_up(acc):
    """The parts, rounded to 0.1 s each, add up to the total (and the node-seconds to node_s)."""
    assert list(acc["parts"]) == list(PARTS)
    assert sum(acc["parts"].values()) == pytest.approx(acc["total_s"], abs=0.05 * len(PARTS))
    assert sum(acc["node_parts"].values()) == pytest.approx(acc["node_s"], abs=0.05 * len(PARTS))


def test_the_table_of_a_requeued_job_with_a_restart(tmp_path, env, cli_runs):
    recorded(tmp_path / "jobs" / "5151")
    acc = _json(cli_runs, env, "5151")
    res = cli_runs.run(["goodput", "5151"], env)
    assert res.returncode == 0 and not res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["job", "total", "node-hours", "goodput", "queued", "start-up", "training", "saves",
                                "redone", "faults", "end", "wait", "other"]
    # t0-60 (Slurm's submit) to t0+1090 (run 2's end): 1150 s; 2 nodes x (600 s + 390 s)
    assert (acc["total_s"], acc["node_s"]) == (1150.0, 1980.0)
    shares = [f"{v / acc['total_s']:.0%}" if v / acc["total_s"] >= 0.005 else "<1%" if v else "-"
              for v in acc["parts"].values()]
    assert lines[1].split() == ["5151", "19", "min", "0.55", f"{acc['goodput']:.0%}", *shares], res.stdout
    assert all(v > 0 for v in acc["parts"].values()), acc["parts"]  # every part of this job has seconds
    assert lines[2] == FOOT
    assert [line.split(": ", 1)[1] for line in lines[3:]] == acc["advice"] and acc["advice"], res.stdout
    assert any(a.startswith("redone steps ") for a in acc["advice"])  # back 200 steps: the costly cause
    assert not [line for line in lines if ": note: " in line]  # notes only with --verbose
    verbose = cli_runs.run(["goodput", "5151", "-v"], env)
    notes = [line.split(": note: ", 1)[1] for line in verbose.stdout.splitlines() if ": note: " in line]
    assert notes == acc["notes"] and notes, verbose.stdout
    assert verbose.stdout.startswith(res.stdout.rstrip("\n"))


def test_json_one_job_is_the_account_and_several_a_list(tmp_path, env, cli_runs):
    folder = recorded(tmp_path / "jobs" / "5151")
    other = recorded(tmp_path / "elsewhere" / "77", t0=T + 86400)
    one = _json(cli_runs, env, "5151")
    assert {"job", "total_s", "node_s", "goodput", "parts", "node_parts", "notes", "advice"} <= set(one)
    assert one["job"] == "5151" and one["node_parts"]["queued"] == 0
    _adds_up(one)
    several = _json(cli_runs, env, "5151", str(folder), str(other))
    assert [a["job"] for a in several] == ["5151", "5151", "77"]  # as status names it: a folder's name is its id
    assert several[0] == several[1] == one
    assert {k: several[2][k] for k in ("total_s", "node_s", "goodput")} == {k: one[k] for k in
                                                                             ("total_s", "node_s", "goodput")}
    for acc in several:
        _adds_up(acc)


def test_csv_is_a_header_and_a_row_per_job(tmp_path, env, cli_runs):
    recorded(tmp_path / "jobs" / "5151")
    recorded(tmp_path / "jobs" / "5252")
    res = cli_runs.run(["goodput", "5151", "5252", "--csv"], env)
    assert res.returncode == 0 and not res.stderr, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == list(CSV_FIELDS) and len(rows) == 3
    acc = _json(cli_runs, env, "5151")
    for job, row in zip(("5151", "5252"), rows[1:]):
        values = dict(zip(CSV_FIELDS, row))
        assert values["job"] == job
        assert float(values["total_s"]) == acc["total_s"] and float(values["goodput"]) == pytest.approx(acc["goodput"])
        assert [float(values[k]) for k in PARTS] == pytest.approx(list(acc["parts"].values()), abs=0.06)


def test_an_ended_job_is_accounted_to_its_end_and_a_requeued_one_to_now(tmp_path, env, cli_runs):
    """Asked today, the job that ended in 2027 still counts 1150 s; a job that waits requeued since 600 s
    after its start counts its queue up to now."""
    recorded(tmp_path / "jobs" / "5151")
    assert _json(cli_runs, env, "5151")["total_s"] == 1150.0
    start = time.time() - 1000
    recorded(tmp_path / "jobs" / "5353", t0=start, requeued_now=True)
    before = time.time()
    acc = _json(cli_runs, env, "5353")
    assert before - (start - 60) - 1 <= acc["total_s"] <= time.time() - (start - 60) + 1, acc["total_s"]
    assert acc["parts"]["queued"] >= 60 + (before - (start + 600)) - 1  # before run 1, and since its requeue
    assert any("since run 1 was requeued, up to now" in n for n in acc["notes"]), acc["notes"]
    _adds_up(acc)


@pytest.mark.parametrize("batch,status,end", [
    ({"state": "ended", "ended_at": T + 5}, {"state": "running", "updated_at": T + 9}, T + 5),
    ({"state": "ended"}, {"state": "ended", "updated_at": T + 9}, T + 9),  # no ended_at: status.json's
    ({"state": "requeued", "ended_at": T + 5}, {"state": "ended", "updated_at": T + 9}, None),  # it waits: now
    ({"state": "running"}, {"state": "ended", "updated_at": T + 9}, None),  # a new run, its step not started
    (None, {"state": "ended", "updated_at": T + 9}, T + 9),  # no batch-step: status.json decides
    (None, {"state": "COMPLETED", "updated_at": T + 9}, T + 9),
    (None, {"state": "running", "updated_at": T + 9}, None),
    ({"state": "ended", "ended_at": "soon"}, {"state": "ended", "updated_at": float("nan")}, None),
    (None, None, None),
])
def test_where_the_account_ends(batch, status, end):
    assert account_end(status, batch, 123.0) == (123.0 if end is None else end)


@pytest.mark.parametrize("args,words", [
    (["goodput", "999999"], "JOB=999999: no job folder"),
    (["goodput", "5151", "not/a/job"], "expected a job id or a job folder"),
    (["goodput", "5151", "--json", "--csv"], "argument --csv: not allowed with argument --json"),
    (["goodput", "6"], "nothing to account in"),
])
def test_usage_errors_are_one_line_exit_2(tmp_path, env, cli_runs, args, words):
    recorded(tmp_path / "jobs" / "5151")
    (tmp_path / "jobs" / "6").mkdir()  # an empty job folder: its step has not started
    res = cli_runs.run(args, env)
    assert res.returncode == 2 and not res.stdout, (res.stdout, res.stderr)
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("tf-slurm goodput: error: "), res.stderr


def test_the_columns_are_the_parts():
    assert COLUMNS[4:] == [p.replace("start_", "start-").replace("_", " ") for p in PARTS]
