"""bench/bench_hostile.py runs end to end at a tiny size (so it cannot rot): no TensorFlow.

Its figures are not checked (they depend on the machine): only that every part ran and printed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.hostile  # left out of the fast subset (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_hostile.py"


@pytest.mark.timeout(120)
def test_bench_hostile_tiny(tmp_path):
    figures = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--handshakes", "10", "--idle", "10", "--junk-rate", "20000",
                           "--sleep", "0.5", "--json", str(figures)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for label in ("connect + hello -> answer, no HMAC", "connect + handshake -> `ok`", "added by authentication",
                  "proof(): CPU per call", "proof_ok(): CPU per call", "step wall time / status, no attack",
                  "step wall time / status, under attack", "hub CPU, % of one core, under attack",
                  "attack: connects/s", "attack: junk sent"):
        assert label in out, (label, out)
    assert "bench_liveness.py --sizes 4000" in BENCH.read_text()  # (c): where the 4k-task figure comes from
    assert "import tensorflow" not in BENCH.read_text()

    data = json.loads(figures.read_text())
    assert len(data["handshake"]["auth"]) == len(data["handshake"]["plain"]) == 10
    for run in ("calm", "hostile"):
        assert data[run]["status"] == 0, data[run]["log"]  # the step ended by itself, attacked or not
    assert data["hostile"]["attack"]["established"] > 0  # the attacker did reach the hub
