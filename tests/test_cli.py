import re
import subprocess
import sys

import pytest

from cellica.cli.app import main
from cellica.cli.options import parse_value
from cellica.cli.parser import COMMANDS, build_parser
from cellica.core.errors import CellicaError
from tests.conftest import REPO

STAGES = [name for name, *_ in COMMANDS]  # the parser's own table: nothing to go stale


def test_every_command_the_rules_call_exists_and_every_command_is_documented():
    """The rules call only real commands; each command is named in the docs (a command added to the
    parser but not documented, or a rule calling a renamed one, fails here)."""
    called = set()
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        called |= set(re.findall(r"(?<!f)[\"']cellica ([a-z][a-z-]+)", smk.read_text()))
    assert called and called <= set(STAGES), sorted(called - set(STAGES))
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    undocumented = [s for s in STAGES if f"cellica {s}" not in docs]
    assert not undocumented, f"commands no doc names as `cellica <command>`: {undocumented}"


def test_help_lists_every_stage_once_in_the_table_s_order_with_its_line(capsys):
    """`cellica --help` lists exactly the commands of the parser's table, in its order, each with
    the start of its own help line (not merely the name somewhere on the page)."""
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    listed = re.findall(r"^    ([a-z][a-z-]+) +(\S.*)$|^    ([a-z][a-z-]+)$", capsys.readouterr().out, re.M)
    names = [a or c for a, _, c in listed]
    assert names == STAGES
    helps = {c[0]: c[1] for c in COMMANDS}
    for a, shown, _ in listed:
        if a:  # a name short enough to share its line with the help text
            assert helps[a].startswith(shown.split(" (")[0][:30]), (a, shown)


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_s_help_offers_every_option_it_accepts(stage, capsys):
    """A stage's --help shows each option the parser accepts for it (the table's and those
    generated from its parameter class), so no option is usable but undocumented."""
    parser = build_parser()._subparsers._group_actions[0].choices[stage]
    flags = {f for action in parser._actions for f in action.option_strings if f.startswith("--") and f != "--help"}
    with pytest.raises(SystemExit) as exc:
        main([stage, "--help"])
    assert exc.value.code == 0
    shown = set(re.findall(r"(--[a-z][a-z0-9-]*)", capsys.readouterr().out))
    assert flags and flags <= shown, sorted(flags - shown)


def test_console_script_exit_codes(tmp_path):
    exe = [sys.executable, "-m", "cellica.cli"]
    ok = subprocess.run([*exe, "simulate", "--out", str(tmp_path / "s.zarr"), "--n-genes", "2",
                         "--n-experiments", "2", "--tiles-per-well", "1", "--tile-size", "16",
                         "--control-wells-per-plate", "2", "--plates-per-experiment", "1"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    again = subprocess.run([*exe, "simulate", "--out", str(tmp_path / "s.zarr")], capture_output=True, text=True)
    assert again.returncode == 2
    assert "already exists; pass --overwrite" in again.stderr
    shown = subprocess.run([*exe, "inspect", str(tmp_path / "s.zarr")], capture_output=True, text=True)
    assert shown.returncode == 0 and "tiles per perturbation" in shown.stdout and "non-targeting" in shown.stdout


def test_bad_option_value_names_the_option(tmp_path, capsys):
    assert main(["simulate", "--out", str(tmp_path / "x.zarr"), "--n-genes", "many"]) == 2
    assert "--n-genes: cannot parse 'many'" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()


def test_parse_value_kinds():
    assert parse_value("a=b,c=d", "dict", "m") == {"a": "b", "c": "d"}
    assert parse_value("1,2,3", "list", "c") == ["1", "2", "3"]
    assert parse_value("0.5,1", "tuple", "t") == (0.5, 1.0)
    assert parse_value("null", "int", "s") is None
    with pytest.raises(CellicaError, match="key=value"):
        parse_value("oops", "dict", "m")


def test_parser_builds_without_heavy_imports():
    code = ("import sys, cellica.cli.parser as c; c.build_parser(); "
            "print(any(m in sys.modules for m in ('torch', 'scanpy', 'lightgbm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_parser_is_reusable():
    assert build_parser().parse_args(["inspect", "x"]).store == "x"


def test_transform_cli_fit_apply_and_bad_inputs(tmp_path, capsys):
    import anndata as ad
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    obs = pd.DataFrame({"plate": "P", "well": "W", "batch": ["B1", "B2"] * 20, "perturbation": ["c"] * 30 + ["g"] * 10,
                        "is_control": [True] * 30 + [False] * 10}, index=[f"s{i}" for i in range(40)])
    ad.AnnData(rng.normal(size=(40, 3)).astype(np.float32), obs=obs).write_h5ad(tmp_path / "e.h5ad")
    assert (
        main(
            [
                "transform",
                "--variant",
                "pca_ica",
                "--input",
                str(tmp_path / "e.h5ad"),
                "--out",
                str(tmp_path / "f.h5ad"),
                "--model-out",
                str(tmp_path / "m.npz"),
            ]
        )
        == 0
    )
    assert main(["transform", "--apply", str(tmp_path / "m.npz"), "--input", str(tmp_path / "e.h5ad"),
                 "--out", str(tmp_path / "g.h5ad")]) == 0
    assert (
        main(["transform", "--variant", "ica", "--input", str(tmp_path / "e.h5ad"), "--out", str(tmp_path / "x.h5ad")])
        == 2
    )
    assert "unknown transform variant 'ica'" in capsys.readouterr().err
    bad = ad.read_h5ad(tmp_path / "e.h5ad")
    bad.X[3, 1] = np.nan
    bad.write_h5ad(tmp_path / "nan.h5ad")
    assert (
        main(
            ["transform", "--variant", "pca", "--input", str(tmp_path / "nan.h5ad"), "--out", str(tmp_path / "x.h5ad")]
        )
        == 2
    )
    assert "NaN/Inf features, e.g. ['s3']" in capsys.readouterr().err
    assert not (tmp_path / "x.h5ad").exists()
    assert main(["evaluate", "--features", str(tmp_path / "missing.h5ad"), "--out", str(tmp_path / "p.parquet"),
                 "--importances-out", str(tmp_path / "i.parquet")]) == 2
    assert "missing.h5ad does not exist" in capsys.readouterr().err
    assert main(["report", "--summary", str(tmp_path / "none.parquet"), "--per-gene", "x", "--importances", "y",
                 "--out", str(tmp_path / "r")]) == 2


def test_every_path_option_has_a_role():
    """Each option naming a file is an input or an output (cellica.cli.parser), so the CLI's
    check that no output equals, lies inside or contains an input covers every command."""
    import dataclasses

    from cellica.cli.parser import COMMANDS, INPUT_OPTIONS, OUTPUT_OPTIONS, _params

    # the commands' own options that are not files
    not_files = {"overwrite", "stat_tiles", "max_rows", "verify", "variant", "shard", "chunk", "threads", "check",
                 "config_hash", "gene", "part", "index_only", "entity", "seed", "untrained", "name", "column",
                 "embed_rate", "job_hours"}
    seen = set()
    for name, _, _, args, params in COMMANDS:
        for flag, _ in args:
            dest = flag.lstrip("-").replace("-", "_")
            seen.add(dest)
            assert dest in INPUT_OPTIONS | OUTPUT_OPTIONS | not_files | {"docs"}, f"{name} {flag}: no role"
        for f in dataclasses.fields(_params(*params)) if params else ():
            seen.add(f.name)
            if "CSV" in f.metadata.get("help", "") and f.type in ("str | None", "str"):  # names a file
                assert f.name in INPUT_OPTIONS, f"{name} --{f.name}: names a file but has no role"
    assert (INPUT_OPTIONS | OUTPUT_OPTIONS) <= seen, (INPUT_OPTIONS | OUTPUT_OPTIONS) - seen
    assert not INPUT_OPTIONS & OUTPUT_OPTIONS
