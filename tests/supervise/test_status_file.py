"""The hub's status file: written on change at most once a second, refreshed while idle, atomic,
and a folder that cannot be written costs one warning, never the step."""

import json
import logging
import os

from tf_for_slurm.host.job_folder import batch_path, read_json, status_path, write_json
from tf_for_slurm.supervise.status_file import StatusFile


def test_written_first_then_on_change_at_most_once_a_second_and_refreshed_when_idle(tmp_path):
    path = str(tmp_path / "status.json")
    f = StatusFile(path, min_interval=1.0, refresh=5.0)
    n = {"builds": 0}

    def build():
        n["builds"] += 1
        return {"n": n["builds"]}

    f.update(0.0, changes=0, build=build)
    assert read_json(path) == {"n": 1}
    f.update(0.5, changes=3, build=build)  # changed, but within the second: not yet
    assert n["builds"] == 1
    f.update(1.0, changes=3, build=build)
    assert read_json(path) == {"n": 2}
    f.update(4.9, changes=3, build=build)  # nothing changed, before the refresh: nothing built
    assert n["builds"] == 2
    f.update(6.0, changes=3, build=build)  # the refresh (last-heard times move on)
    f.update(6.1, changes=4, build=build, force=True)  # the final state, whatever the time
    assert read_json(path) == {"n": 4} and f.writes == 4
    assert sorted(os.listdir(tmp_path)) == ["status.json", "timeline.jsonl"]  # no temporary file left behind


def test_an_unwritable_folder_is_one_warning_and_then_silence(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    f = StatusFile(str(blocker / "sub" / "status.json"))
    with caplog.at_level(logging.WARNING):
        for t in range(5):
            f.update(float(t * 10), changes=t, build=lambda: {}, force=t == 4)
    warnings = [r for r in caplog.records if "cannot write the step's status" in r.getMessage()]
    assert len(warnings) == 1 and f.broken and f.writes == 0


def test_paths_come_from_the_job_folder_or_the_status_file_setting(tmp_path):
    assert status_path({}) is None and batch_path({}) is None
    env = {"TF_SLURM_JOB_DIR": str(tmp_path)}
    assert status_path(env) == str(tmp_path / "status.json")
    assert batch_path(env) == str(tmp_path / "batch.json")
    assert status_path({**env, "TF_SLURM_STATUS_FILE": "/x/s.json"}) == "/x/s.json"


def test_write_json_replaces_whole_files(tmp_path):
    path = str(tmp_path / "deep" / "b.json")
    write_json(path, {"a": 1})
    write_json(path, {"a": [2] * 1000})
    assert json.loads(open(path).read()) == {"a": [2] * 1000}
    (tmp_path / "bad.json").write_text("{half")
    assert read_json(str(tmp_path / "bad.json")) is None and read_json(str(tmp_path / "none.json")) is None
