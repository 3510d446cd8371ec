"""The DAG on a live SLURM cluster: a single node on localhost (tests/hpc/cluster.sh).

Submits the tiny demo DAG through Snakemake's SLURM executor with the repository's
slurm profile (account, partition and sizes adapted to this node), cancels it mid-run,
resumes it, and checks the results equal the tiny run's recorded numbers bit for bit. Also: a rule asking for more
memory than the node has, and the profile's unset account/partition. Skips with the
reason where a cluster can't be started (not root, packages absent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cellica._launch import run_snakemake
from cellica.registry import PAPER_VARIANTS
from tests.conftest import REPO

pytestmark = [pytest.mark.hpc, pytest.mark.e2e]
CLUSTER = REPO / "tests" / "hpc" / "cluster.sh"
PROFILE = REPO / "workflow" / "profiles" / "slurm" / "config.yaml"
VARIANTS = list(PAPER_VARIANTS[:3])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("a local SLURM cluster needs root on Linux (slurmd)")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "squeue") if not shutil.which(b)]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} absent): apt-get install slurm-wlm munge")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[hpc]')")
    state = tmp_path_factory.mktemp("slurm")
    # Four CPUs on a two-core node: the tiny jobs are mostly start-up, so they may overlap.
    start = subprocess.run(["bash", str(CLUSTER), "start", str(state)], capture_output=True, text=True,
                           env={**os.environ, "CLUSTER_CPUS": str(max(4, os.cpu_count() or 1))}, timeout=120)
    if start.returncode != 0:
        pytest.skip(f"the local SLURM cluster did not start: {start.stderr.strip()[-500:]}")
    yield start.stdout.strip()  # the partition
    subprocess.run(["scancel", "--user", "root"], capture_output=True)
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    cfg = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    cfg["transform"]["variants"] = VARIANTS
    cfg["stability"] = {"enabled": False}
    cfg["baselines"] = {"names": []}  # the tiny run evaluates them; here the scheduler is under test
    path = tmp_path_factory.mktemp("cfg") / "tiny_hpc.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def node_profile(tmp: Path, partition: str, account: str | None = "cellica") -> Path:
    """The repository's slurm profile, sized for this node and a scheduler without accounting."""
    prof = yaml.safe_load(PROFILE.read_text())
    assert prof["executor"] == "slurm" and prof["default-resources"]["slurm_account"] == "SET_ME"
    if account:
        prof["default-resources"].update(slurm_account=account, slurm_partition=partition)
    prof["default-resources"].update(mem_mb=1000, runtime=10)
    for resources in prof["set-resources"].values():
        resources["mem_mb"] = 1500
    prof.pop("set-threads")  # same threads as the local run, so the same numbers
    prof.update({"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": 1, "retries": 0,
                 "latency-wait": 5})
    folder = tmp / "profile"
    folder.mkdir(exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(prof))
    return folder


def snakemake(workdir: Path, config: Path, *args: str, profile: Path | None = None, popen: bool = False):
    return run_snakemake(*args, directory=workdir, configfile=config, profile=profile, cores=None if profile else 2,
                         popen=popen, timeout=None if popen else 900)


def assert_the_recorded_numbers(res: Path, config: Path, tmp_path: Path) -> None:
    """Each variant's features and per-gene tables equal, bit for bit, those the tiny run recorded
    (tests/golden/tiny_run.json: the same config, whose other variants, stability runs and
    baselines change none of these files); with other library versions than the record's, a
    local run of the same config is the reference instead."""
    import json

    from tests.golden import compare, digest, versions

    files = ["embeddings/seed0/embeddings.h5ad", *[f"features/{v}.h5ad" for v in VARIANTS],
             *[f"eval/{v}/{t}.parquet" for v in VARIANTS for t in ("per_gene", "importances")]]
    golden = json.loads((REPO / "tests" / "golden" / "tiny_run.json").read_text())
    if versions() == golden["versions"]:
        recorded = {f: golden["digests"][f] for f in files}
    else:
        local = snakemake(tmp_path / "local", config)
        assert local.returncode == 0, local.stderr[-3000:]
        recorded = {f: digest(tmp_path / "local" / "results" / f) for f in files}
    assert compare({f: digest(res / f) for f in files}, recorded, {}) == []


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, f"snakemake ended before {path} appeared:\n{proc.stdout.read()[-3000:]}"
        assert time.monotonic() - t0 < timeout, f"{path} did not appear within {timeout} s"
        time.sleep(1)


def test_cancelled_run_resumes_and_equals_the_recorded_tiny_run(cluster, config, tmp_path):
    profile = node_profile(tmp_path, cluster)
    workdir = tmp_path / "wf"
    first = snakemake(workdir, config, profile=profile, popen=True)
    res = workdir / "results"
    # Cancel every job once the embeddings are gathered: the transforms are queued or running.
    _wait_for(res / "embeddings" / "seed0" / "embeddings.h5ad", first, timeout=400)
    t0 = time.monotonic()
    # The plugin puts the rule name in each job's comment (%k).
    while "transform" not in subprocess.run(["squeue", "-h", "-o", "%k"], capture_output=True, text=True).stdout:
        assert first.poll() is None and time.monotonic() - t0 < 120, "no transform job was queued"
        time.sleep(0.5)
    subprocess.run(["scancel", "--user", "root"], check=True)
    out, _ = first.communicate(timeout=300)
    assert first.returncode != 0, f"snakemake did not notice the cancelled jobs:\n{out[-3000:]}"
    finished = {p: p.stat().st_mtime_ns for p in (res / "mae" / "seed0" / "model.safetensors",
                                                    res / "embeddings" / "seed0" / "embeddings.h5ad",
                                                    res / "tiles.zarr" / "metadata.parquet")}
    assert not (res / "eval" / "summary.parquet").exists()

    second = snakemake(workdir, config, profile=profile)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    log = second.stdout + second.stderr
    for rule in ("simulate", "train_mae", "embed", "gather_embeddings"):
        assert f"rule {rule}:" not in log and f"localrule {rule}:" not in log, f"resume redid {rule}"
    assert "SLURM jobid" in log  # the remaining work really went through the scheduler
    assert {p: p.stat().st_mtime_ns for p in finished} == finished

    assert_the_recorded_numbers(res, config, tmp_path)
    assert (workdir / "reports" / "index.html").is_file()


def test_memory_beyond_the_node_reaches_the_user(cluster, config, tmp_path):
    profile = node_profile(tmp_path, cluster)
    run = snakemake(tmp_path / "wf", config, "--set-resources", "simulate:mem_mb=100000000", "--",
                    "results/tiles.zarr", profile=profile)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    assert (
        "Memory specification can not be satisfied" in text or "Requested node configuration is not available" in text
    )


def test_unset_account_and_partition_stop_before_submission(cluster, config, tmp_path):
    profile = node_profile(tmp_path, cluster, account=None)
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    run = snakemake(tmp_path / "wf", config, profile=profile)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    assert "SLURM run stopped before submitting anything" in text
    assert "slurm_account (now SET_ME)" in text and "slurm_partition (now SET_ME)" in text
    assert "SLURM jobid" not in text
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == before
