"""The documented commands are run as documented: every line of every ``bash`` block in
README.md and docs/*.md, and every inline `snakemake ...` command, from the repository root
with the real ``snakemake`` and ``cellica``. A Snakemake run is made a ``--dry-run`` (the
whole DAG is the e2e tests' job); a ``cellica`` line runs fully. A line that cannot run here
is listed in ``NOT_RUN`` with the reason (here, not in the user's view of the doc); an entry
no doc holds any longer is an error. Inline `cellica <stage> ...` synopses
name a real stage and only its options; inline `python benchmarks/X.py --flag` names a real
script and only its flags.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cellica._launch import environment
from tests.conftest import REPO, TINY_SIM

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Documented lines that cannot run here, and why: (doc, the line as written) -> reason.
INSTALL = ('python3 -m venv .venv && . .venv/bin/activate && pip install -c requirements.lock -e ".[dev]" && pip '
           'install -c requirements.lock --no-deps efaar-benchmarking && ')
NOT_RUN = {
    (
        "README.md",
        INSTALL + "snakemake --cores 2",
    ): "CI installs with this line's first part (.ci/run); the demo's DAG is the e2e tests' tiny run",
    (
        "README.md",
        INSTALL + 'pytest -m "not e2e" -n 2 --dist loadfile && pytest -m "e2e and not hpc" -n 2 --dist '
        "loadfile && pytest -m hpc",
    ): "it is CI (.ci/run runs this line)",
    ("deploy.md", "pip install snakedeploy"): "the dev extra has it",
    (
        "deploy.md",
        "snakedeploy deploy-workflow https://github.com/cellica/cellica my-screen --tag v0.1.0 --name cellica",
    ): "a download (tests/test_deploy.py deploys this checkout)",
    ("deploy.md", "cd my-screen"): "the folder the line above makes",
    (
        "deploy.md",
        "snakemake --cores all --software-deployment-method apptainer",
    ): "needs Apptainer (every job in the container)",
    (
        "deploy.md",
        "docker build -f workflow/envs/Dockerfile -t ghcr.io/cellica/cellica:0.1.0 .",
    ): "needs a Docker daemon",
    ("deploy.md", "apptainer build cellica-0.1.0.sif workflow/envs/cellica.def"): "needs Apptainer",
    (
        "models.md",
        "huggingface-cli download recursionpharma/OpenPhenom --local-dir ~/models/openphenom",
    ): "a download (no network there)",
}
# Files a documented command names as the user's own, and what stands in for them here.
STAND_INS = {"my_screen.yaml": REPO / "tests" / "configs" / "tiny.yaml",
             "my.yaml": REPO / "tests" / "configs" / "tiny.yaml"}


def fenced_lines() -> list[tuple[str, int, str]]:
    """(doc, line number, command) of every line of every ```bash block."""
    out = []
    for doc in DOCS:
        inside = False
        for no, line in enumerate(doc.read_text().splitlines(), 1):
            if line.startswith("```"):
                inside = line.strip() in ("```bash", "```sh", "```shell") if not inside else False
                continue
            if inside and line.strip() and not line.lstrip().startswith("#"):
                out.append((doc.name, no, line.strip()))
    return out


def inline(pattern: str) -> list[tuple[str, str]]:
    """(doc, text) of every inline code span matching ``pattern``."""
    return [(doc.name, m) for doc in DOCS for m in re.findall(rf"`({pattern}[^`]*)`", doc.read_text())]


# Inline snakemake mentions that are not commands to run as written, and why.
INLINE_NOT_RUN = {
    "snakemake --report report.zip": "packs a finished run's outputs: test_workflow.py runs it on the tiny run",
}


def _environment() -> dict[str, str]:
    return environment({"TQDM_DISABLE": "1"})


def _absent_shared_data(command: str) -> str | None:
    """The first ../shared/data path a command's --configfile names that is not here, or None:
    the shipped examples read the real data sets, which only developer machines have."""
    import yaml

    words = shlex.split(command, comments=True)
    configs = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--configfile"]

    def paths(node):
        if isinstance(node, dict):
            for v in node.values():
                yield from paths(v)
        elif isinstance(node, str) and "shared/data" in node:
            yield node

    for config in configs:
        if (REPO / config).is_file():
            for path in paths(yaml.safe_load((REPO / config).read_text())):
                if not (REPO / path).exists():
                    return path
    return None


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    for name, stand_in in STAND_INS.items():
        command = re.sub(rf"(?<![\w/.]){re.escape(name)}", shlex.quote(str(stand_in)), command)
    words = shlex.split(command, comments=True)
    if words[0] == "snakemake" and not {"--dry-run", "-n", "--lint"} & set(words):
        words.append("--dry-run")
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, env=_environment(), timeout=600)


@pytest.fixture(scope="module")
def results_here(tmp_path_factory):
    """A folder with a small results/tiles.zarr, for documented commands that read a run's
    outputs (`cellica inspect results/tiles.zarr`)."""
    from cellica.store.params import SimulationParams
    from cellica.store.simulate import simulate_screen

    root = tmp_path_factory.mktemp("docrun")
    simulate_screen(root / "results" / "tiles.zarr", SimulationParams(**TINY_SIM, seed=1))
    return root


@pytest.mark.parametrize("doc, no, command", fenced_lines(), ids=[f"{d}:{n}" for d, n, _ in fenced_lines()])
def test_a_documented_command_runs_as_written(doc, no, command, results_here):
    assert "# not in CI" not in command, f"{doc}:{no}: list it in NOT_RUN, out of the user's view"
    if (doc, command.split("  #")[0].strip()) in NOT_RUN:
        pytest.skip(f"{doc}:{no}: {NOT_RUN[doc, command.split('  #')[0].strip()]}")
    first = shlex.split(command, comments=True)[0]
    assert first in ("snakemake", "cellica"), f"{doc}:{no}: an unknown command {first!r}; list it in NOT_RUN with why"
    if (absent := _absent_shared_data(command)) is not None:
        pytest.skip(f"{doc}:{no}: the example reads real data {absent}, absent here (only on developer machines)")
    run = _run(command, REPO if first == "snakemake" else results_here)
    assert run.returncode == 0, f"{doc}:{no}: {command}\n{(run.stdout + run.stderr)[-3000:]}"
    if first == "snakemake" and "--lint" not in command:  # planned (or, after a finished demo, nothing to do)
        assert re.search(r"This was a dry-run|Nothing to be done", run.stdout + run.stderr), run.stdout[-2000:]


@pytest.mark.parametrize("doc, command", inline("snakemake "), ids=[c for _, c in inline("snakemake ")])
def test_an_inline_snakemake_command_runs_as_written(doc, command):
    if command in INLINE_NOT_RUN:
        pytest.skip(f"{doc}: {INLINE_NOT_RUN[command]}")
    if (absent := _absent_shared_data(command)) is not None:
        pytest.skip(f"{doc}: the example reads real data {absent}, absent here (only on developer machines)")
    run = _run(command, REPO)
    assert run.returncode == 0, f"{doc}: {command}\n{(run.stdout + run.stderr)[-3000:]}"


def test_inline_cellica_synopses_name_real_stages_and_options():
    from cellica.cli.parser import build_parser

    parser = build_parser()
    stages = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them there
    checked = 0
    for doc, text in inline("cellica "):
        words = text.split()
        stage = words[1] if len(words) > 1 else ""
        if stage.startswith(("-", "<")) or not re.fullmatch(r"[a-z-]+", stage):
            continue  # `cellica --help`, `cellica <stage> --help`
        assert stage in stages, f"{doc}: `{text}` names no stage of cellica"
        known = {s for a in stages[stage]._actions for s in a.option_strings}  # noqa: SLF001
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text):
            assert flag in known, f"{doc}: `{text}`: {stage} has no option {flag}"
        checked += 1
    assert checked > 20


def test_inline_benchmark_commands_name_real_scripts_and_flags():
    checked = 0
    for doc, text in inline(r"python benchmarks/"):
        script = REPO / text.split()[1]
        assert script.is_file(), f"{doc}: `{text}`: no such script"
        source = script.read_text()
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text):
            assert f'"{flag}"' in source, f"{doc}: `{text}`: {script.name} has no option {flag}"
        checked += 1
    assert checked > 5


def test_every_line_not_run_is_still_documented():
    """NOT_RUN names only lines the docs hold: a line rewritten in its doc runs again (or is listed again)."""
    held = {(doc, command.split("  #")[0].strip()) for doc, _, command in fenced_lines()}
    assert set(NOT_RUN) <= held, set(NOT_RUN) - held


def test_the_ci_script_runs_the_readme_install_and_test_line():
    """CI installs and tests exactly as the README says (the README's test line is CI)."""
    readme = (REPO / "README.md").read_text()
    install = re.search(r"python3 -m venv \.venv && [^\n#]*&& pytest[^\n#]*", readme).group(0).strip()
    assert 'pytest -m "not e2e"' in install and 'pytest -m "e2e and not hpc"' in install  # the tiers
    assert install in (REPO / ".ci" / "run").read_text().replace('-q ', '')
    assert shutil.which("snakemake", path=_environment()["PATH"])


def test_a_failed_job_s_own_error_reaches_the_console(tmp_path):
    """A misspelled column in features.column_map: the run ends with the job's own line (the
    columns there are, the nearest match) and its log path, not only CalledProcessError."""
    import pandas as pd
    import yaml

    table = pd.DataFrame({"Metadata_Plate": "P", "Metadata_Well": [f"A{i}" for i in range(8)],
                          "Metadata_Batch": "B", "Metadata_Perturbation": ["c", "g"] * 4,
                          "Metadata_is_control": [True, False] * 4, "f0": range(8)})
    table.to_csv(tmp_path / "t.csv", index=False)
    cfg = {"source": "features", "features": {"path": str(tmp_path / "t.csv"), "column_map": {
        "plate": "Metadata_Plate", "well": "Metadata_Well", "batch": "Metadata_batch",
        "perturbation": "Metadata_Perturbation", "is_control": "Metadata_is_control"}},
        "results_dir": str(tmp_path / "results"), "reports_dir": str(tmp_path / "reports")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run = subprocess.run(["snakemake", "--cores", "1", "--configfile", str(tmp_path / "c.yaml")], cwd=REPO,
                         capture_output=True, text=True, env=_environment(), timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    line = next(x for x in out.splitlines() if x.startswith("import_features failed:"))
    assert "features.column_map names missing column(s) ['Metadata_batch']" in line
    assert "did you mean 'Metadata_Batch'?" in line and "Metadata_Plate" in line
    assert f"(whole log: {tmp_path}/results/logs/import_features.log)" in out


def test_the_readme_s_times_are_the_measured_ones():
    """The README states the first hour's times as `benchmarks/first_hour.py` measured them from a
    clean clone (its record, benchmarks/first_hour.json), with the machine: no time typed by hand."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("first_hour", REPO / "benchmarks" / "first_hour.py")
    first_hour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first_hour)
    record = json.loads((REPO / "benchmarks" / "first_hour.json").read_text())
    assert {"demo", "python"} <= {k for k, v in record["steps"].items() if v["exit"] == 0}, record["steps"]
    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- first-hour:start -->\n")[1].split("\n<!-- first-hour:end -->")[0]
    assert block == first_hour.readme_text(record)
    assert not re.search(r"about \d+ (minutes|min|seconds|s)\b", readme)  # a time not from the record
