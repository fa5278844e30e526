"""report_progress(): touches the file exec's supervisor watches; a no-op without one."""

import os

from tf_for_slurm import report_progress
from tf_for_slurm.host import progress_report
from tf_for_slurm.host.settings import PROGRESS_FILE


def test_without_a_supervisor_watching_it_does_nothing():
    assert report_progress({}) is False


def test_it_touches_the_watched_file_at_most_twice_a_second(tmp_path, monkeypatch):
    path = tmp_path / "progress"
    path.write_text("")
    os.utime(path, ns=(0, 0))
    monkeypatch.setattr(progress_report, "_last", [0.0])
    assert report_progress({PROGRESS_FILE: str(path)}) is True
    assert path.stat().st_mtime_ns > 0
    os.utime(path, ns=(0, 0))
    assert report_progress({PROGRESS_FILE: str(path)}) is True  # within 0.5 s: not touched again
    assert path.stat().st_mtime_ns == 0


def test_a_missing_file_is_created(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_report, "_last", [0.0])
    assert report_progress({PROGRESS_FILE: str(tmp_path / "new")}) is True and (tmp_path / "new").exists()
