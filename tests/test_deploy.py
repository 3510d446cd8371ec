"""Deployment as the Snakemake workflow catalog describes it, the lock, the container's
definition and the run's software record (docs/deploy.md)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from cellica._launch import environment as process_env
from cellica.core import environment as env
from cellica.core.compute import DEFAULT_CONTAINER, ComputeKeys
from cellica.core.errors import CellicaError
from tests.conftest import REPO

LOCK = REPO / "requirements.lock"
TINY = REPO / "tests" / "configs" / "tiny.yaml"


def _run(*cmd: str, cwd: Path = REPO, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, env=process_env(), timeout=timeout)


# ------------------------------------------------------------------ the catalog's layout
def test_the_catalog_finds_its_files():
    usage = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["mandatory-flags"]["desc"].strip() and usage["mandatory-flags"]["flags"].strip()
    deployment = usage["software-stack-deployment"]
    assert set(deployment) == {"conda", "singularity", "singularity+conda"}
    assert all(isinstance(v, bool) for v in deployment.values()) and deployment["singularity"]
    assert usage["report"] is True
    assert (REPO / "workflow" / "Snakefile").is_file()
    # The top-level Snakefile only includes the catalog's main file.
    assert 'include: "workflow/Snakefile"' in (REPO / "Snakefile").read_text()
    assert (REPO / ".test" / "config" / "config.yaml").resolve() == TINY.resolve()


def test_config_readme_describes_every_config_file_and_section():
    from cellica.config import config_schema

    text = (REPO / "config" / "README.md").read_text()
    files = [p.relative_to(REPO).as_posix() for p in (REPO / "config").rglob("*.yaml")]
    assert files and [f for f in files if f"`{f}`" not in text] == []
    sections = config_schema()["properties"]
    assert [s for s in sections if f"`{s}`" not in text] == []


def test_the_test_config_lints_and_dry_runs_as_the_catalog_s_ci_does():
    lint = _run("snakemake", "--lint", "--directory", ".test")
    assert lint.returncode == 0 and "good condition" in lint.stdout + lint.stderr, lint.stderr[-2000:]
    dry = _run("snakemake", "--dry-run", "--cores", "2", "--directory", ".test")
    assert dry.returncode == 0, dry.stderr[-2000:]
    stats = (dry.stdout + dry.stderr).split("Job stats:")[-1]
    assert re.search(r"^total\s+(\d+)", stats, re.M) and int(re.search(r"^total\s+(\d+)", stats, re.M).group(1)) > 50
    assert re.search(r"^environment\s+1$", stats, re.M)


# ------------------------------------------------------------------ the lock
def test_a_digest_is_the_sha256_of_the_sorted_pins():
    assert env.digest({"b": "2", "A_x": "1"}) == hashlib.sha256(b"a-x==1\nb==2\n").hexdigest()
    assert env.digest({"numpy": "2.0"}) != env.digest({"numpy": "2.1"})


def test_a_lock_reader_names_the_bad_line(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\n\nNumPy==2.0  # pinned\nscikit_learn==1.5\n")
    assert env.read_lock(lock) == {"numpy": "2.0", "scikit-learn": "1.5"}
    lock.write_text("numpy==2.0\ntorch>=2\n")
    with pytest.raises(CellicaError, match=r"line 2: 'torch>=2' is not an exact pin"):
        env.read_lock(lock)
    lock.write_text("numpy==2.0\nnumpy==2.1\n")
    with pytest.raises(CellicaError, match="line 2: numpy is pinned twice"):
        env.read_lock(lock)
    lock.write_text("# only a header\n")
    with pytest.raises(CellicaError, match="pins no package"):
        env.read_lock(lock)
    with pytest.raises(CellicaError, match="does not exist"):
        env.read_lock(tmp_path / "absent.lock")


def test_a_subset_of_the_lock_at_its_versions_matches_it():
    lock = {"numpy": "2.0", "torch": "2.14.1", "pytest": "8.0"}
    assert env.compare({"numpy": "2.0", "torch": "2.14.1"}, lock) == []
    assert env.compare({"numpy": "2.1", "rich": "13"}, lock) == ["numpy 2.1 (the lock has 2.0)",
                                                                "rich 13 is not in the lock"]


def test_the_record_says_where_the_environment_departs_from_a_lock(tmp_path):
    lock = tmp_path / "requirements.lock"
    pins = dict(env.installed())
    name = next(iter(pins))
    pins[name] = "0.0.0"
    lock.write_text(env.lock_text(pins))
    record = env.environment(lock)
    assert record["matches_lock"] is False and record["differences"] == [
        f"{name} {env.installed()[name]} (the lock has 0.0.0)"]
    assert record["lock_digest"] == env.digest(pins) != record["software_digest"] == env.digest(env.installed())
    assert "1 package(s) differ from the lock" in env.summary_lines(record)[1]


def test_the_tests_run_in_the_lock_s_environment():
    """CI installs with the README's command (pip install -c requirements.lock): so the lock is
    exactly what CI passed with. A dependency bumped without re-locking fails here."""
    run = _run("cellica", "environment", "--check")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every package at the version of the lock" in run.stdout


def test_pyproject_s_ranges_admit_every_pin():
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = env.read_lock(LOCK)
    refused = [f"{r} vs {pins[env.normalise(r.name)]}" for r in reqs
               if env.normalise(r.name) in pins and not r.specifier.contains(pins[env.normalise(r.name)], True)]
    assert refused == []
    assert [r.name for r in reqs if env.normalise(r.name) not in pins] == []


# ------------------------------------------------------------------ the container
def _copied(dockerfile: str) -> list[str]:
    sources = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            sources += line.split()[1:-1]
    return sources


def test_the_container_definitions_build_from_the_lock_with_one_install_step():
    docker = (REPO / "workflow" / "envs" / "Dockerfile").read_text()
    apptainer = (REPO / "workflow" / "envs" / "cellica.def").read_text()
    install = REPO / "workflow" / "envs" / "install.sh"
    assert subprocess.run(["bash", "-n", str(install)]).returncode == 0
    assert (
        '--constraint "$lock" "$root"' in install.read_text() and "cellica environment --check" in install.read_text()
    )
    # Every file either definition copies exists (paths from the repository root).
    files_section = apptainer.split("%files")[1].split("%")[0]
    sources = _copied(docker) + [line.split()[0] for line in files_section.splitlines() if line.strip()]
    assert sources and [s for s in sources if not (REPO / s).exists()] == []
    # Both run the one install step and point CELLICA_LOCK at the lock they copy.
    assert "RUN ./install.sh /opt/cellica" in docker and "/opt/cellica/install.sh /opt/cellica" in apptainer
    assert "CELLICA_LOCK=/opt/cellica/requirements.lock" in docker
    assert "requirements.lock /opt/cellica/requirements.lock" in apptainer
    assert "CELLICA_LOCK=/opt/cellica/requirements.lock" in apptainer
    # The image's Python is the one the lock was made with.
    python = re.search(r"Python (\d+\.\d+)", LOCK.read_text().splitlines()[0]).group(1)
    assert f"FROM python:{python}-slim" in docker and f"From: python:{python}-slim" in apptainer
    # The tag the Dockerfile's build command gives is compute.container's default.
    assert DEFAULT_CONTAINER.removeprefix("docker://") in docker


@pytest.mark.parametrize("value", ["docker://img; rm -rf /", "docker://x y", "'a.sif'", "image:latest", "$(id).sif"])
def test_a_container_that_is_no_image_stops_the_run_in_one_line(value):
    with pytest.raises(CellicaError, match=r"^compute.container: .* is not an image URI"):
        ComputeKeys(container=value)


def test_the_workflow_runs_every_job_in_compute_container():
    from cellica.plan import RunPlan

    assert ComputeKeys().container == DEFAULT_CONTAINER
    assert RunPlan({"compute": {"container": "images/cellica-0.1.0.sif"}}).container == "images/cellica-0.1.0.sif"
    assert "container: PLAN.container" in (REPO / "workflow" / "rules" / "common.smk").read_text()


@pytest.mark.e2e
def test_pip_resolves_the_container_s_install_against_the_lock(tmp_path):
    """The install step of the image (every runtime package, fresh, at the lock's versions),
    resolved by pip against the package index without installing: what can be run of the
    container's build on a machine without Docker or Apptainer."""
    report = tmp_path / "report.json"
    run = _run(sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--constraint", str(LOCK), "--report", str(report), str(REPO), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    resolved = {env.normalise(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    pins = env.read_lock(LOCK)
    resolved.pop("cellica")
    assert {"torch", "snakemake", "lightgbm", "scikit-learn", "anndata"} <= set(resolved)
    assert [f"{n} {v} (lock {pins.get(n)})" for n, v in resolved.items() if pins.get(n) != v] == []


# ------------------------------------------------------------------ deployed as a module
@pytest.mark.e2e
def test_a_fresh_folder_deploys_the_workflow_as_a_module_and_runs_the_tiny_config(tmp_path):
    from cellica.registry import BASELINE_NAMES
    from tests.golden import compare, digests, versions
    from tests.report_checks import check_index_numbers
    from tests.test_workflow import ADDITIONS

    dest = tmp_path / "my-screen"
    # What the user runs from a local clone (docs/deploy.md): the module path must exist as written.
    deploy = _run("cellica", "deploy", "--out", str(dest))
    assert deploy.returncode == 0, deploy.stderr[-2000:]
    assert (dest / "config" / "config.yaml").is_file() and (dest / "config" / "README.md").is_file()
    text = (dest / "workflow" / "Snakefile").read_text()
    assert "module cellica:" in text and "use rule * from cellica as cellica_*" in text
    assert f"'{REPO / 'workflow' / 'Snakefile'}'" in text
    # The tiny config without its two optional parts, the stability runs and the baselines (three
    # more MAEs' embeddings): tests/test_workflow.py runs them; here the deployment is under test.
    config = yaml.safe_load(TINY.read_text())
    config["stability"], config["baselines"] = {"enabled": False}, {"names": []}
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config))

    run = _run("snakemake", "--cores", "2", cwd=dest)
    assert run.returncode == 0, run.stderr[-4000:]
    log = run.stdout + run.stderr
    stats = log.split("Job stats:")[1].split("\n\n")[0]
    rules = [line.split()[0] for line in stats.splitlines()[3:] if line.strip() and line.split()[0] != "total"]
    assert rules and [r for r in rules if not r.startswith("cellica_")] == []
    results = dest / "results"
    golden = json.loads((REPO / "tests" / "golden" / "tiny_run.json").read_text())
    if versions() == golden["versions"]:  # every file it shares with the tiny run, bit for bit
        left_out = ("stability/", "mae/seed1", "mae/seed2", "embeddings/seed1", "embeddings/seed2", "mae/untrained",
                    *[f"{d}/{b}" for d in ("embeddings", "features", "eval") for b in BASELINE_NAMES + ("cp_measure",)],
                    "eval/summary.parquet")  # the summary's rows of the baselines
        recorded = {f: d for f, d in golden["digests"].items() if not f.startswith(left_out)}
        found = digests(results)
        assert "eval/summary.parquet" in found and "features/pca_ica.h5ad" in recorded
        assert compare({f: d for f, d in found.items() if f != "eval/summary.parquet"}, recorded, ADDITIONS) == []
    check_index_numbers(results, dest / "reports")
    record = json.loads((results / "environment.json").read_text())
    assert record["software_digest"] == env.digest(env.installed())


def test_a_local_deploy_writes_a_module_path_that_exists_and_refuses_what_it_cannot_do(tmp_path):
    """snakedeploy writes a local source's module as "workflow/Snakefile", which Snakemake reads
    relative to the deploying folder's workflow/ (absent there); `cellica deploy` writes the
    checkout's own path. A non-empty folder, a folder inside the checkout, a name that is no
    identifier and a source without a workflow are each one line."""
    from cellica.core.errors import CellicaError
    from cellica.deploy import deploy_workflow

    snakefile = deploy_workflow(tmp_path / "screen")
    declared = re.search(r"snakefile:\s*\n\s*'([^']+)'", snakefile.read_text()).group(1)
    assert Path(declared).is_file() and Path(declared) == REPO / "workflow" / "Snakefile"
    assert not (snakefile.parent / "workflow" / "Snakefile").exists()  # where snakedeploy's path would point
    assert sorted(p.name for p in (tmp_path / "screen" / "config").iterdir()) == sorted(
        p.name for p in (REPO / "config").iterdir())
    with pytest.raises(CellicaError, match="exists and is not an empty folder"):
        deploy_workflow(tmp_path / "screen")
    with pytest.raises(CellicaError, match="lies inside the checkout"):
        deploy_workflow(REPO / "results" / "deployed-here")
    with pytest.raises(CellicaError, match="is not a Python identifier"):
        deploy_workflow(tmp_path / "other", name="my-screen")
    with pytest.raises(CellicaError, match="does not exist: deploy from a source checkout"):
        deploy_workflow(tmp_path / "other", source=tmp_path)
    assert not (tmp_path / "other").exists() and not (REPO / "results" / "deployed-here").exists()
