"""Issue 8 under real Slurm (the harness's local 3-node cluster): a tf4slurm-era task in its original
call forms under srun, and the MNIST template's IB=auto default with and without resolvable
InfiniBand names (the harness puts nodeK-ib in /etc/hosts; '{host}-nosuchib' never resolves).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from data_paths import mnist_dir
from task_times import assert_ps_left_with_the_workers, task_times

pytestmark = [pytest.mark.slurm, pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tests" / "tf4slurm_tasks"
TEMPLATE = REPO / "scripts" / "BASH_Distributed_MNIST.sh"
MNIST = Path(mnist_dir())
HAVE_MNIST = any((MNIST / f"t10k-images-idx3-ubyte{e}").exists() for e in ("", ".gz"))


def _python() -> str:
    from slurm_harness import PYTHON

    return PYTHON


# Variables the test process may carry that would change the tasks' choices: cleared explicitly.
CLEAR = {"TF_SLURM_ADDRESS": "", "TF_SLURM_IB_TEMPLATE": "", "TF_SLURM_TASKS": "", "TF_SLURM_PS": "",
         "TF_CONFIG": ""}


@pytest.mark.timeout(300)
def test_original_task_under_srun(slurm_cluster, tmp_path):
    """srun -N3 -n3 of the seed-form launcher (InfinyBand=FLAGS.NoIB, i.e. IB names, as the seed ran it
    without --NoIB): every task exits 0, the ps ended by its own dequeue loop (how soon after the
    last worker: printed here, measured by bench/bench_shutdown.py)."""
    t0 = time.monotonic()
    r = slurm_cluster.srun(
        ["-N3", "-n3", "--mpi=none", "--kill-on-bad-exit=1", "-l", "bash", str(TASKS / "timed.sh"), _python(),
         str(TASKS / "LaunchTFServerWithHooks.py"), "-ps", "1", "-workers", "2", "-Iterations", "40",
         "-batch_size", "16", "--train_module", "SmallModel_DistributedTRAIN", "--model_dir", str(tmp_path / "m")],
        timeout=240, cwd=str(tmp_path),
        env={**CLEAR, "TASK_TIMES": str(tmp_path / "times"), "TF_CPP_MIN_LOG_LEVEL": "2",
             "GRPC_POLL_STRATEGY": "poll"})
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    gap = assert_ps_left_with_the_workers(task_times(tmp_path / "times"), out)
    assert "0: ps 0 received done 1" in out
    assert re.search(r"Cluster Dictionary: \{'ps': \['node1-ib:\d+'\], 'worker': \['node2-ib:\d+', 'node3-ib:\d+'\]\}",
                     out), out[-3000:]
    print(f"original task under srun: {took:.1f} s, ps exit - last worker exit = {gap:+.3f} s")


@pytest.fixture(scope="module")
def ib_jobs(slurm_cluster, tmp_path_factory) -> dict:
    """Both IB=auto template jobs, submitted together (the cluster holds both): name -> (info, log)."""
    if not HAVE_MNIST:
        pytest.skip(f"real MNIST digits not found in {MNIST}")
    submitted = {}
    for name, extra in (("resolves", {}), ("falls_back", {"TF_SLURM_IB_TEMPLATE": "{host}-nosuchib"})):
        tmp = tmp_path_factory.mktemp(name)
        # TF_SLURM_KILL_GRACE: the step's supervisor ends the ps once both workers are done (SIGTERM,
        # then SIGKILL after this grace, 3 s by default); the example's ps keeps serving on SIGTERM until
        # both reports came, prints the line checked below and exits by itself, however slow the node
        env = {**CLEAR, "PYTHON": _python(), "DATA_DIR": str(MNIST), "MODEL_DIR": str(tmp / "model"),
               "ITERATIONS": "40", "TF_SLURM_KILL_GRACE": "300", **extra}
        res = slurm_cluster.run(["sbatch", "--parsable", "-o", str(tmp / "job-%j.out"), str(TEMPLATE)], timeout=60,
                                env=env, cwd=str(tmp))
        assert res.returncode == 0, res.stderr
        submitted[name] = (res.stdout.strip().split(";")[0], tmp)
    out = {}
    for name, (job, tmp) in submitted.items():
        info = slurm_cluster.wait_job(job, 400)
        out[name] = (info, (tmp / f"job-{job}.out").read_text())
    return out


@pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")
@pytest.mark.timeout(500)
def test_template_default_ib_auto_uses_resolvable_infiniband_names(ib_jobs):
    info, log = ib_jobs["resolves"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", log[-4000:]
    assert "IB=auto" in log
    chosen = re.findall(r"^(\d): .*address policy template:\{host\}-ib \(auto: the InfiniBand names of all 3 "
                        r"node\(s\) resolve: node1-ib, node2-ib, node3-ib", log, re.M)
    # the same decision in every task (logged by its exec supervisor's plan and by the example's)
    assert sorted(set(chosen)) == ["0", "1", "2"], log[-4000:]
    assert re.search(r"cluster \{'ps': \['node1-ib:\d+'\], 'worker': \['node2-ib:\d+', 'node3-ib:\d+'\]", log)
    assert "all 2 workers reported done; exiting cleanly (status 0)" in log


@pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST digits not found in {MNIST}")
@pytest.mark.timeout(500)
def test_template_default_ib_auto_falls_back_to_host_names(ib_jobs):
    info, log = ib_jobs["falls_back"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", log[-4000:]
    chosen = re.findall(r"^(\d): .*address policy hostname \(auto: InfiniBand name 'node1-nosuchib' of node node1 "
                        r"does not resolve, so host names for all 3 node\(s\)", log, re.M)
    assert sorted(set(chosen)) == ["0", "1", "2"], log[-4000:]
    assert re.search(r"cluster \{'ps': \['node1:\d+'\], 'worker': \['node2:\d+', 'node3:\d+'\]", log)
    assert "all 2 workers reported done; exiting cleanly (status 0)" in log


@pytest.mark.timeout(300)
def test_generic_template_default_ib_auto(slurm_cluster, tmp_path):
    """tf_slurm_job.sh with no IB setting: tasks under `tf-slurm exec` decide auto the same way."""
    job, info = slurm_cluster.sbatch_poll(
        ["-N3", "-n3", "-o", str(tmp_path / "job-%j.out"), str(REPO / "scripts" / "tf_slurm_job.sh"),
         str(REPO / "tests" / "slurm_tasks" / "tf_config_train.py"), "100", str(tmp_path)],
        timeout=240, env={**CLEAR, "PYTHON": _python(), "TF_SLURM_REPO": str(REPO), "MODEL_DIR": str(tmp_path / "m")},
        cwd=str(tmp_path))
    log = (tmp_path / f"job-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    assert "IB=auto" in log
    chosen = re.findall(r"^(\d): .*address policy template:\{host\}-ib \(auto: the InfiniBand names of all 3 "
                        r"node\(s\) resolve", log, re.M)
    assert sorted(set(chosen)) == ["0", "1", "2"], log[-4000:]
