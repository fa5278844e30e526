"""`tf-slurm report`'s page: plan.job_report's model drawn as one HTML string, inline CSS and SVG.

Why this shape: the page is opened from the job folder on any machine, maybe years later, maybe
offline: nothing is fetched (no script, font, image or URL; a Content-Security-Policy forbids it
too), and every string in it is escaped (a hang's detail may be a task log's words).  The colours
of the event kinds are fixed (COLOURS), so a person learns them once and the browser test
(tests/faces/test_report_browser.py) finds them in the rendered pixels.

Layout, 1160 px wide (readable at 1200): the summary, where the time went (plan.goodput's account: one
stacked bar of its parts, each in its fixed colour (GOODPUT_COLOURS), over a table of their seconds,
share of the wall time and node-seconds), the legend, the timeline (x: wall time on this
machine's clock, one row per task under the job's own row; bars where a task ran, marks for its
events, lines across for run starts, requeues and relaunches), then the training step over time
(one line per task, broken between runs: a requeued job trained nothing while it waited in the queue;
the same x axis, the events as ticks at its foot).
"""

from __future__ import annotations

import html
import math
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tf_for_slurm.plan.goodput import PARTS, Account, status_line
from tf_for_slurm.plan.job_report import JOB_LANE, KINDS, Mark, Report

# the documented colours (docs/REFERENCE.md, "A job's timeline"); the browser test checks them
RUNNING = "#43a047"  # a task's bar while it ran
COLOURS: Dict[str, str] = {
    "start": "#1e88e5", "restart": "#fb8c00", "hang": "#e53935", "lost": "#8e24aa",
    "relaunch": "#d81b60", "requeue": "#3949ab", "end": "#00897b",
}
RUN_LINE = "#9e9e9e"  # a run's start, dashed
STEP_COLOURS = ("#00acc1", "#6d4c41", "#c0ca33", "#5e35b1", "#f4511e", "#546e7a", "#ec407a", "#26a69a")
GOODPUT_COLOURS: Dict[str, str] = {  # plan.goodput's PARTS, in the bar's order; no grey (text's edges are grey)
    "queued": "#b0bec5", "start_up": "#ffca28", "training": "#2e7d32", "saves": "#0277bd",
    "redone": "#ff7043", "faults": "#c62828", "end_wait": "#7e57c2", "other": "#a1887f",
}
PART_WORDS: Dict[str, Tuple[str, str]] = {  # a part's name on the page, and what it means (its tooltip)
    "queued": ("queued", "in Slurm's queue: before run 1, between runs, since a requeue (no node-seconds)"),
    "start_up": ("start-up", "a run's start to its first training step"),
    "training": ("training", "steps reached for the first time"),
    "saves": ("saves", "checkpoint saves (the longest any task recorded)"),
    "redone": ("redone", "steps done again after going back to a checkpoint"),
    "faults": ("faults", "a restart, hang, lost task, failed exit or relaunch to training again"),
    "end_wait": ("end wait", "the last training step to the run's end"),
    "other": ("other", "stalls without a fault (evaluation, slow steps), checkpoint and requeue, rounding"),
}
WIDTH = 1160  # the SVGs' width in px
LEFT = 250  # where the time axis starts (the lane labels left of it)
RIGHT = 20
LANE = 24  # a lane's height
AXIS = 26  # the clock labels' band
STEP_HEIGHT = 240  # the step chart's plot height
TICK = 14  # an event's tick at the foot of the step chart
MARK_WIDTH, MARK_HEIGHT = 5, 20
SWATCH = 12  # a legend swatch is SWATCH x SWATCH px
ORDER = ("start", "end", "restart", "relaunch", "requeue", "lost", "hang")  # drawing order: the rarest on top
NICE = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
LABEL_CHARS = 38  # of a lane's label shown (the whole label is its tooltip)
BAR_HEIGHT = 20  # the goodput bar's
BAR_MIN = 3  # px of the bar a part with any seconds gets, however small (so each one drawn is seen)

CSS = """
body { margin: 0; padding: 12px 16px; font: 13px/1.4 sans-serif; color: #212121; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 14px 0 4px; }
p { margin: 2px 0; max-width: 1160px; overflow-wrap: anywhere; }
.note { color: #8d6e00; }
.legend { margin: 6px 0; }
.key { display: inline-block; margin-right: 14px; white-space: nowrap; }
.key i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
svg { display: block; font: 11px sans-serif; }
.lane text, .axis text { fill: #424242; }
.foot { color: #757575; margin-top: 8px; }
table.goodput { border-collapse: collapse; margin: 4px 0 2px; }
table.goodput th, table.goodput td { padding: 0 14px 0 0; text-align: right; font-weight: normal; white-space: nowrap; }
table.goodput th:first-child { text-align: left; color: #757575; }
details { margin: 2px 0; color: #757575; }
"""


def esc(text: object) -> str:
    """Text or an attribute's value, escaped: nothing read from a file is ever markup here."""
    return html.escape(str(text), quote=True)


def clock(t: float, with_date: bool = False) -> str:
    """'12:03:10' (with the date for a range over a day) on this machine's clock."""
    return time.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S", time.localtime(t))


class Scale:
    """Wall time to x, the same for the timeline and the step chart."""

    def __init__(self, start: float, end: float):
        span = max(end - start, 60.0)  # a range under a minute is drawn as a minute
        pad = span * 0.02
        self.start, self.end = start - pad, start + span + pad
        self.days = self.end - self.start > 86400

    def x(self, t: float) -> float:
        return LEFT + (t - self.start) / (self.end - self.start) * (WIDTH - LEFT - RIGHT)

    def px(self, t: float) -> int:
        """x on a whole pixel (crisp marks and lines of exactly their colour)."""
        return int(round(self.x(t)))

    def ticks(self) -> List[Tuple[float, str]]:
        """About eight round clock times across the range, with their labels."""
        step = next((s for s in NICE if (self.end - self.start) / s <= 10), NICE[-1])
        offset = time.localtime(self.start).tm_gmtoff  # round in local time: 12:00, not 12:00 UTC
        first = math.ceil((self.start + offset) / step) * step - offset
        fmt = "%d %b %H:%M" if self.days else ("%H:%M:%S" if step < 60 else "%H:%M")
        count = int((self.end - first) // step) + 1
        return [(first + i * step, time.strftime(fmt, time.localtime(first + i * step))) for i in range(count)]


def _title(text: str) -> str:
    return f"<title>{esc(text)}</title>"


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "\u2026"


def _axis(scale: Scale, top: int, bottom: int) -> List[str]:
    """Clock labels above `top` and a light grid line down to `bottom` at each."""
    out = ['<g class="axis">']
    for t, label in scale.ticks():
        x = scale.px(t)
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#e0e0e0" shape-rendering="crispEdges"/>'
                   f'<text x="{x}" y="{top - 8}" text-anchor="middle">{esc(label)}</text>')
    out.append("</g>")
    return out


def _boundaries(report: Report, scale: Scale, top: int, bottom: int) -> List[str]:
    """Lines across the chart: run starts (grey, dashed), requeues and relaunches (their colours)."""
    out = []
    for b in report.boundaries:
        x = scale.px(b.at)
        if b.kind == "run":
            style = f'stroke="{RUN_LINE}" stroke-width="1" stroke-dasharray="4 3"'
        else:
            style = f'stroke="{COLOURS[b.kind]}" stroke-width="2"'
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" {style} shape-rendering="crispEdges">'
                   f"{_title(clock(b.at, scale.days) + ' ' + b.text)}</line>")
    return out


def _grouped(marks: Iterable[Mark], scale: Scale) -> List[Tuple[str, int, str, List[Mark]]]:
    """Marks of one kind, lane and pixel drawn once (kind, x, lane, marks), rarest kinds last (on top)."""
    groups: Dict[Tuple[str, int, str], List[Mark]] = {}
    for m in marks:
        groups.setdefault((m.kind, scale.px(m.at), m.lane), []).append(m)
    rank = {k: i for i, k in enumerate(ORDER)}
    return [(k, x, lane, ms) for (k, x, lane), ms in sorted(groups.items(), key=lambda kv: (rank[kv[0][0]], kv[0][1]))]


def _mark_title(marks: Sequence[Mark], days: bool) -> str:
    shown = [f"{clock(m.at, days)} {m.text}" for m in marks[:5]]
    more = f"\n... and {len(marks) - 5} more" if len(marks) > 5 else ""
    return "\n".join(shown) + more


def timeline(report: Report, scale: Scale) -> str:
    """The timeline's SVG: one row per lane, bars where tasks ran, marks, lines across."""
    rows = {lane.key: i for i, lane in enumerate(report.lanes)}
    height = AXIS + LANE * len(rows) + 4
    out = [f'<svg width="{WIDTH}" height="{height}" role="img" '
           f'aria-label="timeline of every task">']
    for lane in report.lanes:
        y = AXIS + LANE * rows[lane.key]
        shade = "#f5f5f5" if rows[lane.key] % 2 else "#ffffff"
        out.append(f'<g class="lane"><rect x="0" y="{y}" width="{WIDTH}" height="{LANE}" fill="{shade}"/>'
                   f'<text x="{LEFT - 8}" y="{y + 16}" text-anchor="end">{_title(lane.label)}{esc(_short(lane.label))}'
                   "</text></g>")
    out += _axis(scale, AXIS, height - 4)
    for s in report.spans:
        if s.lane not in rows:
            continue
        x1, x2 = scale.px(s.start), scale.px(s.end)
        y = AXIS + LANE * rows[s.lane] + 6
        where = f" on {s.node}" if s.node else ""
        text = f"{s.lane}{where}, run {s.run}: {clock(s.start, scale.days)} to {clock(s.end, scale.days)} ({s.why_end})"
        out.append(f'<rect x="{x1}" y="{y}" width="{max(2, x2 - x1)}" height="{LANE - 12}" fill="{RUNNING}" '
                   f'shape-rendering="crispEdges">{_title(text)}</rect>')
    out += _boundaries(report, scale, AXIS, height - 4)
    for kind, x, where, marks in _grouped(report.marks, scale):
        if where not in rows:
            continue
        y = AXIS + LANE * rows[where] + (LANE - MARK_HEIGHT) // 2
        out.append(f'<rect class="mark {kind}" x="{x - MARK_WIDTH // 2}" y="{y}" width="{MARK_WIDTH}" '
                   f'height="{MARK_HEIGHT}" fill="{COLOURS[kind]}" shape-rendering="crispEdges">'
                   f"{_title(_mark_title(marks, scale.days))}</rect>")
    out.append("</svg>")
    return "\n".join(out)


def _step_ticks(report: Report, scale: Scale, bottom: int) -> List[str]:
    """The events at the step chart's foot: one tick per kind and pixel, the rarest on top (the
    tasks' own starts and ends left out: the job's are there)."""
    out, seen = [], set()
    rank = {k: i for i, k in enumerate(ORDER)}
    for m in sorted(report.marks, key=lambda m: rank[m.kind]):
        x = scale.px(m.at)
        if (m.kind in ("start", "end") and m.lane != JOB_LANE) or (m.kind, x) in seen:
            continue
        seen.add((m.kind, x))
        out.append(f'<rect class="tick {m.kind}" x="{x - 1}" y="{bottom - TICK}" width="2" height="{TICK}" '
                   f'fill="{COLOURS[m.kind]}" shape-rendering="crispEdges">'
                   f'{_title(clock(m.at, scale.days) + " " + m.text)}</rect>')
    return out


def steps(report: Report, scale: Scale) -> str:
    """The step chart's SVG: each task's step over time, the same x axis, the events as ticks."""
    top, bottom = AXIS, AXIS + STEP_HEIGHT
    highest = max([p[1] for s in report.series for p in s.points] + [1])
    if report.target is not None and highest < report.target <= 2 * highest:
        highest = report.target

    def y_of(step: float) -> float:
        return bottom - step / highest * (STEP_HEIGHT - 10)

    out = [f'<svg width="{WIDTH}" height="{bottom + 22}" role="img" aria-label="training step over time">']
    out += _axis(scale, top, bottom)
    for i in range(5):
        step = round(highest * i / 4)
        y = int(round(y_of(step)))
        out.append(f'<g class="axis"><line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#e0e0e0" '
                   f'shape-rendering="crispEdges"/><text x="{LEFT - 8}" y="{y + 4}" text-anchor="end">{step}</text>'
                   "</g>")
    if report.target is not None and report.target <= highest:
        y = int(round(y_of(report.target)))
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#757575" '
                   f'stroke-dasharray="6 4"><title>target step {report.target}</title></line>')
    out += _boundaries(report, scale, top, bottom)
    for i, s in enumerate(report.series):  # one path per task, a subpath (M) per run: no line across a gap
        colour = STEP_COLOURS[i % len(STEP_COLOURS)]
        path = " ".join("M" + " L".join(f"{scale.x(t):.1f},{y_of(step):.1f}" for t, step in segment)
                        + (" l0,0" if len(segment) == 1 else "") for segment in s.segments)  # a lone point: a dot
        last_t, last_step = s.points[-1]
        out.append(f'<path class="steps" d="{path}" fill="none" stroke="{colour}" stroke-width="3" '
                   f'stroke-linejoin="round" stroke-linecap="round">'
                   f'{_title(f"{s.label}: step {last_step} at {clock(last_t, scale.days)}")}</path>')
    out += _step_ticks(report, scale, bottom)
    out.append(f'<text x="{LEFT}" y="{bottom + 16}" fill="#757575">training step (ticks: the events above)</text>')
    out.append("</svg>")
    return "\n".join(out)


def _bar_edges(acc: Account) -> List[Tuple[str, int, int]]:
    """(part, x, width) of each part with seconds, by its share of the wall time: at least BAR_MIN px
    (taken off the widest), edges on whole pixels (each colour exactly its own)."""
    shown = [(k, v) for k, v in acc.parts.items() if v > 0]
    widths = [max(BAR_MIN, v / acc.total_s * WIDTH) for _, v in shown]
    widest = widths.index(max(widths))
    widths[widest] -= sum(widths) - WIDTH
    edges = [0.0]
    for w in widths:
        edges.append(edges[-1] + w)
    xs = [int(round(e)) for e in edges]
    return [(k, xs[i], xs[i + 1] - xs[i]) for i, (k, _) in enumerate(shown)]


def goodput_section(acc: Account) -> str:
    """Where the time went: the status line, one stacked bar of the parts (by wall time) and a table of
    each part's seconds, share of the wall time and node-seconds, the advice, the notes folded."""
    def cell(k: str, v: float) -> str:
        return f"{v:,.0f}" if v > 0 or k == "total" else "-"

    out = ['<h2>Where the time went</h2>', f'<p class="goodput">{esc(status_line(acc))}</p>',
           f'<svg width="{WIDTH}" height="{BAR_HEIGHT + 4}" role="img" aria-label="goodput bar">']
    for k, x, w in _bar_edges(acc):
        v = acc.parts[k]
        text = f"{PART_WORDS[k][0]}: {v:,.0f} s, {v / acc.total_s:.1%} of the wall time ({PART_WORDS[k][1]})"
        out.append(f'<rect class="part {k}" x="{x}" y="2" width="{w}" height="{BAR_HEIGHT}" '
                   f'fill="{GOODPUT_COLOURS[k]}" shape-rendering="crispEdges">{_title(text)}</rect>')
    out.append("</svg>")
    head = "".join(f'<th title="{esc(PART_WORDS[k][1])}"><span class="key"><i style="background:'
                   f'{GOODPUT_COLOURS[k]}"></i>{esc(PART_WORDS[k][0])}</span></th>' for k in PARTS)
    walls = {**acc.parts, "total": acc.total_s}
    nodes = {**acc.node_parts, "total": acc.node_s}
    share = {k: f"{v / acc.total_s:.1%}" if v > 0 or k == "total" else "-" for k, v in walls.items()}
    rows = [("seconds", {k: cell(k, v) for k, v in walls.items()}), ("% of wall", share),
            ("node-seconds", {k: cell(k, v) for k, v in nodes.items()})]
    out.append(f'<table class="goodput"><tr><th>part</th>{head}<th>total</th></tr>')
    out += [f"<tr><th>{name}</th>" + "".join(f"<td>{esc(cells[k])}</td>" for k in (*PARTS, "total")) + "</tr>"
            for name, cells in rows]
    out.append("</table>")
    out += [f'<p class="note">{esc(a)}</p>' for a in acc.advice]
    if acc.notes:
        out.append("<details><summary>how these were measured</summary>"
                   + "".join(f"<p>{esc(n)}</p>" for n in acc.notes) + "</details>")
    return "\n".join(out)


def legend(report: Report) -> str:
    """What each colour means: the bars, the marks, the run lines, and each task's step line."""
    keys = [(RUNNING, "running")] + [(COLOURS[k], k) for k in KINDS]
    out = ['<div class="legend">']
    out += [f'<span class="key"><i style="background:{c}"></i>{esc(name)}</span>' for c, name in keys]
    out.append(f'<span class="key"><i style="background:{RUN_LINE}; width:2px"></i>a run starts</span></div>')
    return "\n".join(out)


def series_legend(report: Report) -> str:
    keys = [f'<span class="key"><i style="background:{STEP_COLOURS[i % len(STEP_COLOURS)]}"></i>{esc(s.label)}</span>'
            for i, s in enumerate(report.series)]
    return '<div class="legend">' + "\n".join(keys) + "</div>"


def page(report: Report, now: Optional[float] = None, goodput: Optional[Account] = None) -> str:
    """The whole page, one self-contained HTML string (`goodput`: the job's account, drawn over the
    timeline when it has any time)."""
    now = time.time() if now is None else now
    head = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
            f'<meta name="viewport" content="width=1200"><title>tf-slurm report: job {esc(report.job)}</title>\n'
            f"<style>{CSS}</style></head>\n<body>\n<h1>Job {esc(report.job)}</h1>\n")
    body = [f'<p class="summary">{esc(report.summary)}</p>']
    body += [f'<p class="note">{esc(n)}</p>' for n in report.notes]
    if goodput is not None and goodput.total_s > 0:
        body.append(goodput_section(goodput))
    if report.start is None or report.end is None:
        body.append('<p class="note">nothing with a time was recorded yet: no timeline, no step start</p>')
    else:
        scale = Scale(report.start, report.end)
        body += [legend(report), timeline(report, scale), "<h2>Training step over time</h2>"]
        if report.series:
            body += [series_legend(report), steps(report, scale)]
        else:
            body.append('<p class="note">no training progress was reported (status.json has no step history)</p>')
        body.append(f'<p class="foot">{esc(clock(report.start, True))} to {esc(clock(report.end, True))}, this '
                    f"machine's clock ({esc(time.strftime('%Z', time.localtime(now)))}); written by tf-slurm report at "
                    f"{esc(clock(now, True))}. Hover a bar, mark or line for its details.</p>")
    return head + "\n".join(body) + "\n</body></html>\n"
