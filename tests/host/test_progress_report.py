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


def test_a_shorter_report_overwrites_the_whole_longer_one_in_one_write(tmp_path, monkeypatch):
    """The file is rewritten in place (pwrite, then ftruncate): a shorter line is padded to the old
    line's length, so a reader between the two sees one whole report, never the old one's tail."""
    from tf_for_slurm.plan.train_progress import parse_report

    path = tmp_path / "progress"
    path.write_text("")
    writes = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: (writes.append(data), real(fd, data, at))[1])
    monkeypatch.setattr(progress_report, "_last", [0.0])
    assert report_progress({PROGRESS_FILE: str(path)}, step=123456, loss=0.123456, target=999999)
    long = path.read_text()
    monkeypatch.setattr(progress_report, "_last", [0.0])
    assert report_progress({PROGRESS_FILE: str(path)}, step=7)
    assert len(writes[-1]) == len(long.encode()) and writes[-1].endswith(b"\n")
    report = parse_report(writes[-1].decode())
    assert report is not None and report.step == 7 and report.loss is None
