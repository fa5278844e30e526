"""`tf-slurm report`'s page in a real browser: headless Chromium (Debian's package) renders a recorded
job's page to a PNG, and its pixels must show what the page claims to draw.

Why pixels: an HTML string can hold every mark and still draw none (a broken attribute, a bar
outside the SVG, CSS that hides it).  Each kind's colour is drawn exactly (crisp edges) in three
places: its legend swatch (SWATCH x SWATCH px), its marks in the timeline and its ticks under the
step chart; so a colour seen on more pixels than its swatch is a mark the browser drew.  The same
for the goodput bar: each part's colour is in its table's swatch and in its stretch of the bar.
Skipped, with the reason, where Chromium is not installed.  About 1.5 s.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from report_shot import hex_rgb, read_png, recorded_job, shoot

from tf_for_slurm.cli.report import REPORT, page_of, read_folder
from tf_for_slurm.cli.report_page import (
    BAR_HEIGHT,
    BAR_MIN,
    COLOURS,
    GOODPUT_COLOURS,
    MARK_HEIGHT,
    MARK_WIDTH,
    RUNNING,
    STEP_COLOURS,
    SWATCH,
)
from tf_for_slurm.cli.status import job_account
from tf_for_slurm.host.job_folder import write_text
from tf_for_slurm.plan.goodput import PARTS

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None,
                                reason="chromium is not installed (Debian: apt-get install chromium)")
LEGEND = SWATCH * SWATCH
ONE_MARK = MARK_WIDTH * MARK_HEIGHT


def _render(tmp_path: Path, html: str) -> Counter:
    folder = tmp_path / "4242"
    path = folder / REPORT
    write_text(str(path), html)
    png = tmp_path / "shot.png"
    shoot(path, png, profile=tmp_path)
    width, height, pixels = read_png(png)
    assert (width, height) == (1200, 900)
    return Counter(pixels)


def _page(folder: Path) -> str:
    return page_of(str(folder), "4242")


def test_the_browser_draws_the_bars_the_marks_and_the_step_curves(tmp_path):
    counts = _render(tmp_path, _page(recorded_job(tmp_path / "4242")))
    white = counts[(255, 255, 255)]
    assert white < 0.97 * 1200 * 900, "the page is (nearly) blank"
    assert len(counts) > 50, "the page has almost no colours: nothing was drawn"
    assert counts[hex_rgb(RUNNING)] > 20 * LEGEND, "the running bars are missing"
    for kind in ("start", "restart", "hang", "lost", "relaunch", "requeue", "end"):
        seen = counts[hex_rgb(COLOURS[kind])]
        assert seen >= LEGEND + ONE_MARK, f"{kind} ({COLOURS[kind]}): {seen} px, only its legend's {LEGEND} or less"
    for colour in STEP_COLOURS[:2]:  # one curve per worker
        assert counts[hex_rgb(colour)] > LEGEND + 300, f"the step curve {colour} is missing"


def test_a_page_without_marks_fails_the_check(tmp_path):
    """The check above tells a page that draws marks from one that does not: the same page with
    every mark and tick taken out has only the legend's pixels of the mark colours."""
    html = _page(recorded_job(tmp_path / "4242"))
    stripped = re.sub(r'<rect class="(mark|tick) .*?</rect>', "", html, flags=re.S)
    assert stripped != html
    counts = _render(tmp_path, stripped)
    for kind in ("restart", "hang", "lost"):  # no line across the page has these colours
        assert counts[hex_rgb(COLOURS[kind])] <= LEGEND, kind


def test_the_browser_draws_each_part_of_the_goodput_bar(tmp_path):
    """Every part with seconds is drawn: its colour on its swatch and at least BAR_MIN - 1 px of the bar's
    height (BAR_MIN px, edges on whole pixels); a part with none (here: redone) only on its swatch.  The
    same page without the bar's rects has only the swatches: the check tells a drawn bar from none."""
    folder = recorded_job(tmp_path / "4242")
    status = json.loads((folder / "status.json").read_text())
    status["progress"]["1"]["save_s"] = 6.5  # saves recorded: a part with seconds the recorded job lacks
    (folder / "status.json").write_text(json.dumps(status))
    acc = job_account("4242", *read_folder(str(folder))[:3])
    drawn = [k for k in PARTS if acc.parts[k] > 0]
    assert "saves" in drawn and "redone" not in drawn, acc.parts
    html = _page(folder)
    counts = _render(tmp_path, html)
    for k in PARTS:
        seen = counts[hex_rgb(GOODPUT_COLOURS[k])]
        if k in drawn:
            least = LEGEND + (BAR_MIN - 1) * BAR_HEIGHT
            assert seen >= least, f"{k} ({GOODPUT_COLOURS[k]}): {seen} px, fewer than {least}: not drawn"
        else:
            assert seen <= LEGEND, f"{k} ({GOODPUT_COLOURS[k]}): {seen} px for a part with no seconds"
    assert counts[hex_rgb(GOODPUT_COLOURS["training"])] > LEGEND + 0.5 * 1160 * BAR_HEIGHT  # most of the bar
    stripped = re.sub(r'<rect class="part .*?</rect>', "", html, flags=re.S)
    assert stripped != html
    counts = _render(tmp_path, stripped)
    for k in drawn:
        assert counts[hex_rgb(GOODPUT_COLOURS[k])] <= LEGEND, k
