import subprocess
import sys

import pytest

from cellica.cli import build_parser, main
from cellica.cli_params import parse_value
from cellica.errors import CellicaError

STAGES = ["simulate", "ingest", "inspect", "train-mae", "embed", "gather-embeddings", "import-features"]


def test_help_lists_every_stage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for stage in STAGES:
        assert stage in out


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_has_help(stage, capsys):
    with pytest.raises(SystemExit) as exc:
        main([stage, "--help"])
    assert exc.value.code == 0
    assert f"usage: cellica {stage}" in capsys.readouterr().out


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
    assert parse_value("none", "int", "s") is None
    with pytest.raises(CellicaError, match="key=value"):
        parse_value("oops", "dict", "m")


def test_parser_builds_without_heavy_imports():
    code = "import sys, cellica.cli as c; c.build_parser(); print(any(m in sys.modules for m in ('torch', 'scanpy', 'lightgbm')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_parser_is_reusable():
    assert build_parser().parse_args(["inspect", "x"]).store == "x"
