"""The end of a task's log, read from the job folder (host/job_folder.py): bounded, no symlink
followed, nothing but a regular file; what the first failing task said."""

import os

from tf_for_slurm.host.job_folder import TAIL_BYTES, failure_detail, read_tail

FIX = "MultiWorkerMirroredStrategy cannot run with ps tasks (this step has 1 ps, the default); fix: run with --ps 0"


def test_the_tail_is_bounded_and_starts_at_a_whole_line(tmp_path):
    log = tmp_path / "task-1.out"
    log.write_text("".join(f"line {i:06d}\n" for i in range(20000)))  # 240 kB
    text = read_tail(str(log))
    assert text is not None and len(text.encode()) <= TAIL_BYTES
    assert text.startswith("line ") and text.endswith("line 019999\n")
    assert read_tail(str(log), limit=30) == "line 019998\nline 019999\n"


def test_a_small_file_is_read_whole_and_undecodable_bytes_are_replaced(tmp_path):
    log = tmp_path / "task-0.out"
    log.write_bytes(b"first\n\xff\xfe second\n")
    assert read_tail(str(log)) == "first\n\ufffd\ufffd second\n"


def test_no_symlink_no_fifo_no_folder_no_file(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text(f"tf-slurm: {FIX}\n")
    (tmp_path / "task-2.out").symlink_to(target)
    assert read_tail(str(tmp_path / "task-2.out")) is None
    os.mkfifo(tmp_path / "task-3.out")
    assert read_tail(str(tmp_path / "task-3.out")) is None  # at once: a FIFO never blocks the reader
    (tmp_path / "task-4.out").mkdir()
    assert read_tail(str(tmp_path / "task-4.out")) is None
    assert read_tail(str(tmp_path / "task-5.out")) is None


def test_failure_detail_reads_the_ranks_log(tmp_path):
    (tmp_path / "task-1.out").write_text(f"starting\ntf-slurm: {FIX}\n")
    (tmp_path / "task-2.out").write_text("nothing to say\n")
    assert failure_detail(str(tmp_path), 1) == FIX
    assert failure_detail(str(tmp_path), 2) is None
    assert failure_detail(str(tmp_path), 9) is None
