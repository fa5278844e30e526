"""The goodput account (plan/goodput.py) from plain data: status.json, batch.json and timeline events
as built here, in the shapes the job folder holds; where every second went out."""

import math

import pytest

from tf_for_slurm.plan.goodput import CSV_FIELDS, PARTS, account, csv_row, status_line
from tf_for_slurm.plan.goodput_read import MAX_POINTS
from tf_for_slurm.plan.goodput_words import ADVICE_FAULTS, ADVICE_REDONE, ADVICE_SAVES, ADVICE_START_UP
from tf_for_slurm.plan.job_report import Event, Timeline, parse_timeline

T = 1_800_000_000.0


def ev(at, event, rank=None, node=None, status=None, role="worker", index=None, detail=None):
    task = rank is not None
    return Event(T + at, event, rank, role if task else None, (rank if index is None else index) if task else None,
                 node, status, detail)


def timeline(*events):
    return Timeline(tuple(sorted(events, key=lambda e: e.at)))


def ramp(t0, t1, step0, every=2.0, rate=1.0):
    """Points every `every` s from t0 to t1 (both kept), the step rising `rate` a second from step0."""
    n = int(round((t1 - t0) / every))
    return [(t0 + i * every, step0 + int(round(i * every * rate))) for i in range(n + 1)]


def track(points, offset=0.0, **more):
    return {"step": points[-1][1] if points else None, "history": [[T + t + offset, s] for t, s in points], **more}


def status(tracks, state="ended", started=0.0, updated=None, **more):
    last = max((p[0] for t in tracks.values() for p in t["history"]), default=T + started)
    return {"job": "9", "step": "0", "state": state, "started_at": T + started,
            "updated_at": T + updated if updated is not None else last, "progress": tracks, **more}


def run(number, start, end=None, state="ended", status=0, **more):
    out = {"run": number, "started_at": T + start, "state": state, "status": status, **more}
    if end is not None:
        out["ended_at"] = T + end
    for key in ("slurm_submit", "slurm_start"):
        if key in more:
            out[key] = T + more[key]
    return out


def batch(current, *history):
    return {"job": "9", **current, "history": list(history)}


def steps(nodes, at, end, status=0, ranks=(0, 1)):
    """A step's events: its start, each task's start on its node, their exits and its end."""
    out = [ev(at, "step_start")]
    out += [ev(at + 1, "start", r, nodes[i]) for i, r in enumerate(ranks)]
    out += [ev(end - 1, "exit", r, nodes[i], status=status) for i, r in enumerate(ranks)]
    return out + [ev(end, "step_end", status=status)]


def checked(acc):
    """The invariants every account keeps: its parts add up, none negative."""
    assert list(acc.parts) == list(PARTS) and list(acc.node_parts) == list(PARTS)
    assert abs(sum(acc.parts.values()) - acc.total_s) < 1e-6, acc.parts
    assert abs(sum(acc.node_parts.values()) - acc.node_s) < 1e-6, acc.node_parts
    assert all(v >= 0 for v in [*acc.parts.values(), *acc.node_parts.values()])
    assert acc.node_parts["queued"] == 0
    assert acc.goodput is None or 0 <= acc.goodput <= 1
    return acc


def parts(acc):
    return {k: round(v, 6) for k, v in acc.parts.items() if round(v, 6)}


def test_a_clean_run_is_training_between_its_start_up_and_its_end_wait():
    points = ramp(30, 380, 0)
    st = status({"0": track(points), "1": track(points, offset=0.5)})
    b = batch(run(1, 5, 400, slurm_submit=-60, slurm_start=0))
    acc = checked(account("9", st, b, timeline(*steps(["n1", "n2"], 6, 391)), T + 9999))
    assert parts(acc) == {"queued": 60, "start_up": 30, "training": 350, "end_wait": 20}
    assert (acc.total_s, acc.node_s, acc.goodput) == (460, 800, 700 / 800)
    assert acc.runs[0]._asdict() == {"run": 1, "start": T, "end": T + 400, "nodes": 2, "workers": 2, "step": 350,
                                      "resumed_from": 0}
    assert acc.redone_steps == 0 and acc.advice == () and any("saves: not recorded" in n for n in acc.notes)
    assert any("(every point of each task merged)" in n for n in acc.notes)  # 176 points a task: all merged


def test_a_pss_worker_restarted_in_place_costs_a_fault_span_and_nothing_redone():
    # rank 0 a parameter server (no progress); the worker restarts at 101 and goes on from the global step
    points = ramp(20, 100, 20) + ramp(130, 300, 101)
    st = status({"1": track(points)}, updated=310)
    tl = timeline(ev(0, "step_start"), ev(1, "start", 0, "n1", role="ps", index=0), ev(1, "start", 1, "n2", index=0),
                  ev(101, "restart", 1, "n2", index=0), ev(101, "start", 1, "n2", index=0),
                  ev(305, "exit", 1, "n2", status=0, index=0), ev(306, "step_end", status=0))
    acc = checked(account("9", st, None, tl, T + 9999))
    # the stall before the first point after the restart: 1 s before it (other), 28 s after (faults)
    assert parts(acc) == {"start_up": 20, "training": 80 + 1 + 170, "faults": 28, "end_wait": 10, "other": 1}
    assert acc.runs[0].nodes == 2 and acc.runs[0].workers == 1
    assert acc.parts["redone"] == 0


def test_an_mwms_group_restart_back_to_its_backup_redoes_the_climb_back():
    points = ramp(20, 200, 20) + ramp(230, 400, 150)
    st = status({"0": track(points), "1": track(points, offset=0.5)})
    tl = timeline(*steps(["n1", "n2"], 0, 410), ev(201, "restart", 0, "n1"), ev(201, "restart", 1, "n2"))
    acc = checked(account("9", st, batch(run(1, 0, 410)), tl, T + 9999))
    assert parts(acc) == {"start_up": 20, "training": 180 + 120, "redone": 50, "faults": 29, "other": 1,
                          "end_wait": 10}
    assert acc.node_parts["redone"] == 100 and acc.goodput == pytest.approx(600 / 820)


def test_a_hang_is_a_fault_from_the_leads_last_rise_before_it_to_training_again():
    points = ramp(20, 100, 20) + ramp(200, 300, 101)
    st = status({"0": track(points)})
    tl = timeline(*steps(["n1"], 0, 310, ranks=(0,)), ev(170, "hang", 0, "n1"), ev(171, "restart", 0, "n1"))
    acc = checked(account("9", st, batch(run(1, 0, 310)), tl, T + 9999))
    # 100 s without a step: the hub saw the hang at 170, after its bound; the whole silence is faults, 1 s its step
    assert parts(acc) == {"start_up": 20, "training": 80 + 1 + 100, "faults": 99, "end_wait": 10}
    assert acc.redone_steps == 0


@pytest.mark.parametrize("kind,faults,other", [
    ("restart", 29, 70),  # a crash, seen at once: faults from its event; the stall before it is other
    ("exit", 29, 70),  # a failed exit: the same
    ("hang", 99, 0),  # seen after a silence: faults from the lead's last rise (step 100 at 100 s)
    ("lost", 99, 0),
])
def test_where_a_fault_starts_by_its_kind(kind, faults, other):
    points = ramp(20, 100, 20) + ramp(200, 300, 101)
    fault = ev(170, kind, 0, "n1", status=1 if kind == "exit" else None)
    tl = timeline(ev(0, "step_start"), ev(1, "start", 0, "n1"), fault, ev(305, "exit", 0, "n1", status=0),
                  ev(310, "step_end", status=0))
    acc = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 310)), tl, T))
    assert parts(acc) == {"start_up": 20, "training": 181, "faults": faults, "end_wait": 10,
                          **({"other": other} if other else {})}


def test_a_hang_or_loss_before_its_steps_first_rise_starts_at_its_event():
    points = ramp(20, 100, 20) + ramp(200, 300, 101)  # run 2's step: a loss 50 s into its start-up
    b = batch(run(2, 150, 310), run(1, 0, 120, state="requeued", status=42))
    tl = timeline(ev(150, "step_start"), ev(151, "start", 0, "n1"), ev(170, "lost", 0, "n1"))
    acc = checked(account("9", status({"0": track(points)}), b, tl, T))
    assert acc.parts["start_up"] == 20 + 20 and acc.parts["faults"] == 30
    assert acc.parts["queued"] == 30 and acc.redone_steps == 0


def test_a_lost_task_the_step_goes_on_without_costs_nothing():
    points = ramp(20, 300, 20)  # the lead rises on through the loss at 171
    tl = timeline(*steps(["n1", "n2"], 0, 310), ev(171, "lost", 1, "n2", role="evaluator", index=0))
    acc = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 310)), tl, T))
    assert parts(acc) == {"start_up": 20, "training": 280, "end_wait": 10}


def test_a_relaunch_within_a_run_is_faults_from_the_loss_to_the_relaunched_steps_first_progress():
    points = ramp(20, 150, 20) + ramp(240, 470, 100)
    st = status({"0": track(points)})
    relaunch = {"at": T + 205, "lost": ["n2"], "nodes": ["n1", "n3"], "spares": ["n3"], "checkpoint": 100}
    tl = timeline(ev(2, "step_start"), ev(3, "start", 0, "n1"), ev(3, "start", 1, "n2"),
                  ev(190, "lost", 1, "n2"), ev(200, "step_end", status=69),
                  *steps(["n1", "n3"], 206, 481))
    acc = checked(account("9", st, batch(run(1, 0, 500, relaunches=[relaunch])), tl, T + 9999))
    # faults: 56 s from the last rise before the loss (150) to the relaunch's step, 34 s to its first progress
    assert parts(acc) == {"start_up": 20, "training": 130 + 180, "redone": 50, "faults": 90, "end_wait": 30}
    assert acc.parts["queued"] == 0 and acc.node_s == 1000 and acc.runs[0].nodes == 2
    assert acc.redone_steps == 150 - 100 and acc.runs[0].resumed_from == 20


def test_a_requeue_queues_between_runs_and_redoes_the_steps_after_the_checkpoint():
    points = ramp(30, 560, 0) + ramp(1040, 1460, 500)
    st = status({"0": track(points), "1": track(points, offset=0.3)})
    history = run(1, 3, 600, state="requeued", status=42, slurm_submit=-100, slurm_start=0, step=530)
    b = batch(run(2, 1005, 1500, slurm_start=1000), history)
    tl = timeline(*steps(["n1", "n2"], 5, 591, status=42), *steps(["n3", "n4"], 1010, 1481))
    acc = checked(account("9", st, b, tl, T + 99999))
    assert parts(acc) == {"queued": 100 + 400, "start_up": 30 + 40, "training": 530 + 390, "redone": 30,
                          "end_wait": 40, "other": 40}
    assert acc.total_s == 1600 and acc.node_s == 2200 and acc.queued_between_s == 400
    assert any("40 s checkpoint and requeue at the time limit" in n for n in acc.notes)
    assert [(r.run, r.start - T, r.end - T, r.nodes, r.step) for r in acc.runs] == [
        (1, 0, 600, 2, 530), (2, 1000, 1500, 2, 920)]


def test_redone_steps_of_a_requeue_are_the_runs_step_less_the_checkpoint_it_requeued_at():
    # what a real-Slurm job shows: run 1 reached S = 530, checkpointed at C = 500, run 2 resumed at C
    points = ramp(30, 560, 0) + ramp(1040, 1460, 500)
    history = run(1, 0, 600, state="requeued", status=42, step=530, checkpoint=500)
    b = batch(run(2, 1000, 1500, checkpoint_at_start=500), history)
    acc = checked(account("9", status({"0": track(points)}), b, None, T))
    assert acc.redone_steps == b["history"][0]["step"] - b["history"][0]["checkpoint"] == 30
    assert [(r.step, r.resumed_from) for r in acc.runs] == [(530, 0), (920, 500)]



def test_a_run_resumed_from_its_checkpoint_though_its_first_report_came_steps_later():
    # run 2 resumed at C = 500 (batch.json's checkpoint_at_start); its first report said 512
    points = ramp(30, 560, 0) + ramp(1040, 1460, 512)
    history = run(1, 0, 600, state="requeued", status=42, step=530, checkpoint=500)
    b = batch(run(2, 1000, 1500, checkpoint_at_start=500), history)
    acc = checked(account("9", status({"0": track(points)}), b, None, T))
    assert acc.redone_steps == 30 and [r.resumed_from for r in acc.runs] == [0, 500]
    # a report below the checkpoint as the run starts (TF1's chief said step 0 before its restore): not a going back
    early = points[:266] + [(1035, 0)] + points[266:]
    assert checked(account("9", status({"0": track(early)}), b, None, T)).redone_steps == 30
    bogus = batch(run(2, 1000, 1500, checkpoint_at_start=5000), history)  # above every step it reported: not taken
    assert checked(account("9", status({"0": track(points)}), bogus, None, T)).redone_steps == 18


def test_a_report_below_the_checkpoint_after_another_tasks_restored_one_is_not_a_going_back():
    # TF1, run 2 resumed at C = 500: worker 1 reported 500 first, then the chief its step 0 from before its
    # restore (its step "went back" from run 1's 530), then both went on from 500 (a real-Slurm job: 357 redone)
    history = run(1, 0, 600, state="requeued", status=42, step=530, checkpoint=500)
    b = batch(run(2, 1000, 1500, checkpoint_at_start=500), history)
    chief = ramp(30, 560, 0) + [(1040.2, 0)] + ramp(1042, 1460, 502)
    worker = ramp(31, 561, 0) + ramp(1040, 1460, 500)
    acc = checked(account("9", status({"1": track(chief), "2": track(worker)}), b, None, T))
    assert acc.redone_steps == 30 and [r.resumed_from for r in acc.runs] == [0, 500]


def test_a_runs_furthest_step_is_batch_jsons_when_its_thinned_history_lost_the_last_point():
    # run 1 reached S = 530 (batch.json's step) but its history kept 520 as its last point
    points = ramp(30, 550, 0) + ramp(1040, 1460, 500)
    history = run(1, 0, 600, state="requeued", status=42, step=530, checkpoint=500)
    b = batch(run(2, 1000, 1500, checkpoint_at_start=500), history)
    acc = checked(account("9", status({"0": track(points)}), b, None, T))
    assert acc.redone_steps == 30

# each run: (start, end, [(t0, t1, first step) of its points' ramps]); runs before the last requeued
@pytest.mark.parametrize("runs,redone,resumed", [
    pytest.param([(0, 420, [(10, 410, 0)])], 0, [0], id="a clean run"),
    pytest.param([(0, 420, [(10, 200, 0), (230, 410, 150)])], 40, [0], id="a group restart 190 -> 150"),
    pytest.param([(0, 420, [(10, 210, 0), (220, 240, 150), (250, 410, 150)])], 50 + 50, [0],
                 id="two restarts before the climb back: each against the furthest step, 200"),
    pytest.param([(0, 220, [(10, 210, 0)]), (300, 520, [(310, 510, 120)])], 80, [0, 120],
                 id="a requeue 200 -> 120"),
    pytest.param([(0, 220, [(10, 210, 0)]), (300, 520, [(310, 510, 250)])], 0, [0, 250],
                 id="resumed above the furthest step (a sparse history)"),
    pytest.param([(0, 220, [(10, 210, 0)]), (300, 320, []), (400, 620, [(410, 610, 150)])], 50, [0, None, 150],
                 id="a run without points in between"),
    pytest.param([(0, 220, [(10, 210, 0)]), (300, 520, [(310, 340, 150), (350, 510, 160)])], 50 + 40, [0, 150],
                 id="a requeue, then a restart back before the climb back"),
])
def test_redone_steps_and_where_each_run_resumed(runs, redone, resumed):
    points = [p for _, _, ramps in runs for t0, t1, step0 in ramps for p in ramp(t0, t1, step0)]
    records = [run(i + 1, start, end, state="requeued" if i < len(runs) - 1 else "ended", status=42)
               for i, (start, end, _) in enumerate(runs)]
    acc = checked(account("9", status({"0": track(points)}), batch(records[-1], *records[:-1]), None, T))
    assert acc.redone_steps == redone and acc.to_json()["redone_steps"] == redone
    assert [r.resumed_from for r in acc.runs] == [x["resumed_from"] for x in acc.to_json()["runs"]] == resumed


def test_a_finished_job_ends_at_its_last_runs_end_whatever_now_says():
    points = ramp(30, 560, 0) + ramp(1040, 1460, 500)
    b = batch(run(2, 1000, 1500, slurm_start=1000), run(1, 0, 600, state="requeued", status=42))
    at_end, later = (checked(account("9", status({"0": track(points)}), b, None, T + now)) for now in (1500, 99999))
    assert at_end == later and later.total_s == 1500 and later.queued_between_s == 400
    # the current run's record cut (no run number): the job still ends at its ended_at, the requeued run 1
    # before it queued up to there, not up to now
    cut = {"job": "9", "state": "ended", "ended_at": T + 1500, "history": [run(1, 0, 600, state="requeued")]}
    acc = checked(account("9", status({"0": track(ramp(30, 560, 0))}), cut, None, T + 99999))
    assert acc.total_s == 1500 and acc.parts["queued"] == acc.queued_between_s == 900
    still = checked(account("9", status({"0": track(ramp(30, 560, 0))}), {**cut, "state": "requeued"}, None,
                            T + 99999))
    assert still.total_s == 99999


def test_queue_without_slurm_times_is_from_batch_steps_own_starts_and_said_so():
    points = ramp(30, 560, 0) + ramp(1040, 1460, 500)
    b = batch(run(2, 1000, 1500), run(1, 0, 600, state="requeued", status=42))
    acc = checked(account("9", status({"0": track(points)}), b, None, T + 99999))
    assert acc.parts["queued"] == 400 and acc.total_s == 1500
    assert any("wait before run 1 is unknown" in n for n in acc.notes)
    assert any("batch-step's start" in n for n in acc.notes)
    assert any("nodes: of status.json's tasks" in n for n in acc.notes)


def test_a_requeued_run_waiting_now_is_queued_and_a_running_one_counts_to_now():
    points = ramp(30, 560, 0)
    waiting = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 600, state="requeued", status=42)),
                              None, T + 900))
    assert waiting.parts["queued"] == 300 and waiting.queued_between_s == 300
    assert waiting.advice == () and "queue between runs 5 min" in status_line(waiting)
    running = checked(account("9", status({"0": track(points)}, state="running"),
                              batch(run(1, 0, state="running", status=None)), None, T + 570))
    assert parts(running) == {"start_up": 30, "training": 530, "other": 10}


def test_the_end_after_the_target_is_end_wait():
    points = ramp(10, 110, 0)
    st = status({"0": track(points, target=100)}, updated=170)
    acc = checked(account("9", st, None, timeline(*steps(["n1"], 0, 165, ranks=(0,))), T + 9999))
    assert parts(acc) == {"start_up": 10, "training": 100, "end_wait": 60}


def test_saves_come_out_of_the_stalls_first_then_out_of_training():
    points = ramp(20, 100, 0) + [(131, 81)] + ramp(133, 303, 83)  # a 30 s stall after step 80 (a save)
    st = status({"0": track(points, save_s=35.0, saves=7)})
    acc = checked(account("9", st, batch(run(1, 0, 303)), timeline(*steps(["n1"], 0, 303, ranks=(0,))), T))
    assert parts(acc) == {"start_up": 20, "training": 253 - 5, "saves": 35}
    assert not any("saves" in n for n in acc.notes)


def test_saves_never_take_more_than_the_training_and_the_stalls():
    st = status({"0": track(ramp(20, 100, 0), save_s=1e6, saves=3)})
    acc = checked(account("9", st, batch(run(1, 0, 110)), None, T))
    assert parts(acc) == {"start_up": 20, "saves": 80, "end_wait": 10} and acc.goodput is None
    assert any("1000000.0 s recorded, 80.0 s in" in n for n in acc.notes)


def test_a_run_that_never_progressed_is_start_up_or_faults_when_a_fault_ended_it():
    idle = checked(account("9", status({}), batch(run(1, 0, 100)), timeline(*steps(["n1"], 0, 99, ranks=(0,))),
                           T))
    assert parts(idle) == {"start_up": 100} and idle.goodput is None
    assert any("never progressed" in n for n in idle.notes)
    tl = timeline(*steps(["n1"], 0, 99, status=1, ranks=(0,)))  # a task's exit 1 at 98: the step failed
    failed = checked(account("9", status({}), batch(run(1, 0, 100, status=1)), tl, T))
    assert parts(failed) == {"start_up": 98, "faults": 2}


def test_nothing_to_account():
    acc = checked(account("9", None, None, None, T))
    assert (acc.total_s, acc.node_s, acc.goodput, acc.runs) == (0, 0, None, ())
    assert status_line(acc) == "goodput unknown of 0 node-minutes"


@pytest.mark.parametrize("value", ["soon", None, float("nan"), float("inf"), True, [1], {"a": 1}, -5, 10 ** 400])
def test_hostile_values_are_skipped_never_raised(value):
    points = ramp(30, 380, 0)
    hist = [[T + t, s] for t, s in points]
    hist[5] = [value, 7]
    hist[6] = [T + 42, value]
    hist[7] = value
    tracks = {"0": {"history": hist, "save_s": value, "saves": value}, "1": value, "2": {"history": value},
              "x": {"history": [[T + 1, 1]] * 3 + [value]}}
    st = {"state": value, "started_at": value, "updated_at": value, "progress": tracks, "tasks": value,
          "columns": value}
    b = {"run": 1, "started_at": T, "ended_at": T + 400, "state": value, "status": value, "slurm_start": value,
         "slurm_submit": value, "relaunches": [value, {"at": value, "nodes": value}],
         "history": [value, {"run": value}, {"run": 0, "started_at": T - 10}]}
    acc = checked(account("9", st, b, timeline(ev(5, "step_start"), ev(6, "start", 0, "n1")), value))
    assert acc.total_s == 400 and acc.parts["training"] > 300
    assert any(n.startswith("skipped: ") for n in acc.notes)
    assert checked(account("9", {"progress": value}, {"history": value}, value, T)).total_s == 0


def test_a_huge_history_times_going_backwards_and_events_out_of_order_are_bounded_and_counted():
    huge = [[T + i * 0.001, i] for i in range(10 ** 6)]
    backwards = [[T + 500 - t, s] for t, s in ramp(0, 200, 0)]  # a clock going back: sorted, counted
    events = (ev(1, "step_start"), ev(900, "lost", 0, "n1"), ev(2, "start", 0, "n1"))  # not sorted
    b = batch(run(2, 100, 1100), run(1, 0, 300, state="requeued", status=None), run(1, 0, 300))
    b["history"].append(run(3, 50, 60))  # a run starting before the one before it ended
    acc = checked(account("9", status({"0": {"history": huge}, "1": {"history": backwards}}), b,
                          Timeline(events), T + 2000))
    said = " ".join(acc.notes)
    for what in (f"history points over {MAX_POINTS} a task", "out of time order", "events out of order",
                 "times going backwards"):
        assert what in said
    assert parts(checked(account("9", status({"0": track(ramp(0, 10, 0))}), batch(run(1, 0, 20)),
                                 parse_timeline("garbage\n"), T)))["training"] == 10


def test_many_tasks_are_merged_within_the_bound_and_keep_the_figures():
    points = ramp(30, 510, 0)
    st = status({str(r): track(points, offset=r * 0.01) for r in range(128)})
    acc = checked(account("9", st, batch(run(1, 0, 520)), None, T))
    assert acc.parts["training"] == pytest.approx(480, abs=3) and acc.parts["start_up"] == pytest.approx(30, abs=1)
    assert acc.parts["faults"] == acc.parts["redone"] == 0
    assert any("thinned history" in n and "every 16th point of each task merged" in n for n in acc.notes)


def one_run(train=1000.0, start_up=20.0, save_s=None, saves=None, run_end=None):
    points = ramp(start_up, start_up + train, 0)
    more = {} if save_s is None else {"save_s": save_s, "saves": saves}
    end = run_end if run_end is not None else start_up + train
    return account("9", status({"0": track(points, **more)}), batch(run(1, 0, end)), None, T)


@pytest.mark.parametrize("share,said", [(ADVICE_SAVES + 0.01, True), (ADVICE_SAVES - 0.01, False)])
def test_the_saves_advice_above_its_share_of_training(share, said):
    save_s = 1000 * share / (1 + share)  # taken out of the 1000 s of training
    acc = checked(one_run(save_s=save_s, saves=50))
    lines = [a for a in acc.advice if a.startswith("saves took")]
    assert bool(lines) == said
    if said:
        assert lines == [f"saves took 11% of training: a checkpoint every 20 s at {save_s / 50:.1f} s a save"]


@pytest.mark.parametrize("start_up,said", [(ADVICE_START_UP + 0.01, True), (ADVICE_START_UP - 0.01, False)])
def test_the_start_up_advice_above_its_share_of_a_run(start_up, said):
    acc = checked(one_run(train=900 * (1 - start_up), start_up=900 * start_up))
    assert any(a.startswith("start-up took") for a in acc.advice) == said
    if said:
        assert acc.advice == ("start-up took 26% of a 15-minute run: longer runs would pay",)


@pytest.mark.parametrize("back,said", [(110, True), (90, False)])
def test_the_redone_advice_above_its_share_of_node_seconds(back, said):
    # a requeue with no queue and no start-up: run 2 climbs `back` steps (seconds) back to run 1's step 500
    points = ramp(0, 500, 0) + ramp(500.5, 1000, 500 - back)
    b = batch(run(2, 500, 1000), run(1, 0, 500, state="requeued", status=42))
    acc = checked(account("9", status({"0": track(points)}), b, None, T))
    assert acc.node_parts["redone"] == pytest.approx(back, abs=1)
    assert any(a.startswith("redone steps") for a in acc.advice) == said == (back / 1000 > ADVICE_REDONE)


@pytest.mark.parametrize("gap,said", [(112, True), (92, False)])
def test_the_faults_advice_above_its_share_of_node_seconds(gap, said):
    points = ramp(0, 400, 0) + ramp(400 + gap, 1000, 401)  # restarted at 400, its first step `gap` s later
    tl = timeline(ev(0, "step_start"), ev(0, "start", 0, "n1"), ev(400, "restart", 0, "n1"))
    acc = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 1000)), tl, T))
    assert acc.node_parts["faults"] == gap - 1 and acc.node_s == 1000
    assert any(a.startswith("faults took") for a in acc.advice) == said == ((gap - 1) / 1000 > ADVICE_FAULTS)


def test_the_redone_faults_and_queue_advice_lines():
    points = ramp(20, 200, 0) + ramp(330, 400, 50)  # back to step 50 after a restart at 201: 70 s redone, 129 s faults
    tl = timeline(*steps(["n1"], 0, 410, ranks=(0,)), ev(201, "restart", 0, "n1"))
    acc = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 400)), tl, T))
    assert acc.node_parts["redone"] / acc.node_s > ADVICE_REDONE
    assert acc.node_parts["faults"] / acc.node_s > ADVICE_FAULTS
    assert "redone steps 18%: the checkpoint interval is longer than the time between faults (or requeues)" \
        in acc.advice
    assert "faults took 32%: 1 restart (tf-slurm report shows when)" in acc.advice
    points = ramp(0, 100, 0) + ramp(5000, 5100, 100)
    b = batch(run(2, 4900, 5100), run(1, 0, 100, state="requeued", status=42))
    queued = checked(account("9", status({"0": track(points)}), b, None, T))
    assert any(a.startswith("queue between runs 1.3 h: more than the training time (3 min)") for a in queued.advice)
    quiet = checked(one_run())
    assert quiet.advice == ()


def test_the_status_line_json_and_csv_row():
    points = ramp(30, 560, 0) + ramp(1040, 1460, 500)
    history = run(1, 3, 600, state="requeued", status=42, slurm_submit=-100, slurm_start=0)
    b = batch(run(2, 1005, 1500, slurm_start=1000), history)
    acc = checked(account("9", status({"0": track(points, save_s=20.0, saves=4)}), b, None, T))
    assert status_line(acc) == ("goodput 82% of 18 node-minutes (start-up 6%, saves 2%, redone 3%, end wait 4%, "
                                "other 4%, queue between runs 7 min)")
    data = acc.to_json()
    assert list(data) == ["job", "total_s", "node_s", "goodput", "parts", "node_parts", "queued_between_s",
                          "redone_steps", "runs", "notes", "advice"]
    assert data["redone_steps"] == 530 - 500
    assert data["goodput"] == round(acc.goodput, 4) and data["parts"]["queued"] == 500.0
    assert data["runs"][1] == {"run": 2, "start": round(T + 1000, 1), "end": round(T + 1500, 1), "nodes": 1,
                               "workers": 1, "step": 920, "resumed_from": 500}
    row = csv_row(acc)
    assert len(row) == len(CSV_FIELDS) and CSV_FIELDS[:4] == ("job", "total_s", "node_s", "goodput")
    assert row[:3] == ["9", "1600.0", "1100.0"] and math.isclose(float(row[3]), acc.goodput, abs_tol=1e-4)
    assert sum(float(x) for x in row[4:]) == pytest.approx(1600, abs=0.5)


@pytest.mark.parametrize("detail,start_up,faults", [
    ("start-up: no training step: worker 0 has waited 5 min for its peers", 320, 0),  # named only: start-up still
    ("start-up fault: no training step: worker 0 has waited 30 min for its peers", 170, 150),  # a fault: from it
])
def test_a_slow_start_named_is_start_up_and_a_start_up_fault_is_a_fault(detail, start_up, faults):
    points = ramp(320, 400, 1)
    tl = timeline(ev(0, "step_start"), ev(1, "start", 0, "n1"), ev(170, "hang", 0, "n1", detail=detail),
                  ev(405, "exit", 0, "n1", status=0), ev(410, "step_end", status=0))
    acc = checked(account("9", status({"0": track(points)}), batch(run(1, 0, 410)), tl, T))
    assert acc.parts["start_up"] == start_up and acc.parts.get("faults", 0) == faults, parts(acc)
