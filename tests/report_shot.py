"""`tf-slurm report`'s page in a real browser: a recorded job folder, headless Chromium, a PNG reader.

Used by tests/faces/test_report.py and test_report_browser.py, and as a script for the README's
picture from a real job's folder:

    .venv/bin/python tests/report_shot.py tf_slurm_jobs/123456 docs/report.png

writes the folder's report.html (as `tf-slurm report` does) and renders it with Chromium to the PNG
(1200 px wide; --height H for another height, default 900).

The PNG reader is pure Python (zlib): 8-bit RGB or RGBA, not interlaced, which is what Chromium
writes; no Pillow for one test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Dict, List, Tuple

T0 = 1_800_000_000.0  # the recorded job's first run starts here (epoch seconds)
HOSTILE = "<img src=x onerror=alert(1)>"
CHROMIUM_TIMEOUT = 60


def _event(at, event, rank=None, role=None, index=None, node=None, status=None, detail=None) -> str:
    return json.dumps({"at": T0 + at, "event": event, "job": "4242", "step": "0", "rank": rank, "role": role,
                       "index": index, "node": node, "status": status, "detail": detail})


TASKS = [(0, "ps", 0, "node1"), (1, "worker", 0, "node2"), (2, "worker", 1, "node3")]


def timeline_lines() -> List[str]:
    """Two runs: in run 1 worker 0 hangs and is restarted, worker 1's node is lost and the step is
    relaunched, then run 1 is requeued at its time limit; run 2 trains to the end."""
    lines = [_event(0, "step_start")]
    lines += [_event(2, "start", r, role, i, n) for r, role, i, n in TASKS]
    lines += [_event(100, "hang", 1, "worker", 0, "node2", detail=f"no step for 61 s at step 50 {HOSTILE}"),
              _event(101, "end", 1, "worker", 0, "node2", status=-3),
              _event(110, "restart", 1, "worker", 0, "node2"),
              '{"at": 1800000150.0, "event": "start", "rank": 2, "ro',  # a line cut as its node died
              "not json at all",
              _event(150, "exploded", 2, "worker", 1, "node3"),  # an event this version does not know
              _event(180, "lost", 2, "worker", 1, "node3", detail="worker 1 on node3: its supervisor vanished"),
              _event(190, "step_end", status=69),
              _event(205, "step_start")]
    lines += [_event(207, "start", r, role, i, n if n != "node3" else "node4") for r, role, i, n in TASKS]
    lines += [_event(295, "end", r, role, i, n if n != "node3" else "node4", status=42) for r, role, i, n in TASKS]
    lines += [_event(296, "step_end", status=42), _event(400, "step_start")]
    lines += [_event(402, "start", r, role, i, n) for r, role, i, n in TASKS]
    lines += [_event(700, "exit", 1, "worker", 0, "node2", status=0), _event(700, "exit", 2, "worker", 1, "node3", status=0),
              _event(701, "end", 0, "ps", 0, "node1", status=0), _event(702, "step_end", status=0)]
    return lines


def status_json() -> Dict:
    """The last run's status.json, with the step histories of both runs (the hub carries them)."""
    def history(rate):
        run1 = [[T0 + t, int((t - 10) * rate)] for t in range(10, 296, 5)]
        run2 = [[T0 + t, min(800, int(285 * rate + (t - 402) * rate))] for t in range(402, 701, 5)]
        return run1 + run2
    rows = [[0, "ps", 0, "node1", "ended", 0, 0, T0 + 701], [1, "worker", 0, "node2", "exited", 0, 0, T0 + 700],
            [2, "worker", 1, "node3", "exited", 0, 0, T0 + 700]]
    return {"format": 1, "job": "4242", "step": "0", "strategy": "tf1", "state": "ended", "status": 0,
            "started_at": T0 + 400, "updated_at": T0 + 705, "decided_at": T0 + 702, "chief": 1,
            "first_failure": None, "first_exit": None, "lost": [], "counts": {"ended": 1, "exited": 2},
            "columns": ["rank", "role", "index", "node", "state", "status", "restarts", "last_heard"], "tasks": rows,
            "progress": {"1": {"step": 800, "target": 800, "history": history(1.4)},
                         "2": {"step": 700, "target": 800, "history": history(1.2)}}}


def batch_json() -> Dict:
    relaunch = {"at": T0 + 200, "lost": ["node3"], "nodes": ["node1", "node2", "node4"], "spares": ["node4"],
                "checkpoint": 200}
    run1 = {"run": 1, "started_at": T0 - 1, "ended_at": T0 + 300, "state": "requeued", "status": 42,
            "decision": "requeue: checkpoint at step 400 of target 800", "relaunches": [relaunch]}
    return {"job": "4242", "run": 2, "started_at": T0 + 398, "ended_at": T0 + 705, "state": "ended", "status": 0,
            "decision": "end: the step finished (status 0)", "target": 800, "relaunches": [], "history": [run1]}


def recorded_job(folder: Path, timeline: bool = True) -> Path:
    """A job folder as a requeued, relaunched job leaves it (status.json, batch.json, timeline.jsonl)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / "status.json").write_text(json.dumps(status_json()))
    (folder / "batch.json").write_text(json.dumps(batch_json()))
    if timeline:
        (folder / "timeline.jsonl").write_text("\n".join(timeline_lines()) + "\n")
    return folder


def shoot(page: Path, png: Path, height: int = 900, profile: Path = None) -> None:
    """Render `page` with headless Chromium into `png`, 1200 px wide (a private profile folder)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(dir=profile) as user_dir:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={user_dir}", f"--screenshot={png}", f"--window-size=1200,{height}",
               "--force-device-scale-factor=1", page.resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT)
    if done.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")


def _add_bytes(x: bytes, y: bytes) -> bytes:
    """x + y byte by byte, mod 256, as one big-integer sum (no carry crosses a byte)."""
    n = len(x)
    low, high = int.from_bytes(b"\x7f" * n, "big"), int.from_bytes(b"\x80" * n, "big")
    a, b = int.from_bytes(x, "big"), int.from_bytes(y, "big")
    return (((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(n, "big")


def _paeth_row(row: bytearray, prev: bytes, bpp: int) -> None:
    for i in range(len(row)):
        b = prev[i]
        if i < bpp:
            row[i] = (row[i] + b) & 0xFF
            continue
        a, c = row[i - bpp], prev[i - bpp]
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> bytes:
    """PNG's five row filters undone (the rows as one bytes object)."""
    stride = width * bpp
    rows: List[bytes] = []
    prev = bytes(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 0xFF
        elif kind == 2:
            row = bytearray(_add_bytes(bytes(row), prev))
        elif kind == 3:
            for i in range(stride):
                row[i] = (row[i] + ((row[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 0xFF
        elif kind == 4:
            _paeth_row(row, prev, bpp)
        prev = bytes(row)
        rows.append(prev)
    return b"".join(rows)


def read_png(path: Path) -> Tuple[int, int, List[Tuple[int, int, int]]]:
    """(width, height, pixels as RGB tuples, row by row) of an 8-bit RGB/RGBA non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    assert header is not None, "no IHDR"
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG: {header}"
    bpp = 3 if colour == 2 else 4
    flat = _unfilter(zlib.decompress(idat), width, height, bpp)
    pixels = [tuple(flat[i:i + 3]) for i in range(0, len(flat), bpp)]
    return width, height, pixels


def hex_rgb(colour: str) -> Tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="write a job folder's report.html and render it to a PNG")
    parser.add_argument("folder", help="the job folder (tf_slurm_jobs/JOB)")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args(argv)
    done = subprocess.run([sys.executable, "-m", "tf_for_slurm", "report", args.folder], capture_output=True,
                          text=True, timeout=60, env={**os.environ})
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        return done.returncode
    page = Path(done.stdout.strip())
    shoot(page, Path(args.png), args.height)
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
