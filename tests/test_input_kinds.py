"""Inputs of the wrong kind (cellica.core.kinds, the kinds declared in cellica.cli.parser.INPUT_KINDS).

The fault matrix's rows for this class are generated from the command registry: every
command x every input option, given a FIFO, a device and (where the option declares its
kinds) an object of another kind. Each must end in one line naming the option, the path and
the kind found, exit 2, before anything is read (a FIFO would block the reader for ever).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cellica.cli.app import main
from cellica.cli.parser import COMMANDS, INPUT_OPTIONS
from cellica.core.errors import CellicaError
from tests.cli_rows import command_line, subparsers


def input_rows() -> list[tuple[str, str, str]]:
    """(command, the option as given, its dest) for every input option of every command."""
    rows = []
    subs = subparsers()
    for name, *_ in COMMANDS:
        for action in subs[name]._actions:
            if action.dest in INPUT_OPTIONS and not isinstance(action, argparse._HelpAction):
                given = action.option_strings[0] if action.option_strings else action.dest
                rows.append((name, given, action.dest))
    return rows


ROWS = input_rows()


def _samples(root: Path, tiny_store) -> dict[str, Path]:
    """One object of each kind."""
    from cellica.core import kinds
    from cellica.core.adata import make_adata, write_h5ad
    from cellica.core.atomic import write_parquet

    obs = pd.DataFrame({"plate": "P", "well": list("ab"), "batch": "B", "perturbation": ["c", "g"],
                        "is_control": [True, False]}, index=list("ab"))
    features = make_adata(np.ones((2, 3), np.float32), obs, None, {}, "test")
    write_h5ad(features, root / "features.h5ad")
    gene_map = make_adata(np.ones((2, 3), np.float32), obs, None, {}, "test")
    gene_map.uns["provenance"] = {"map": {"level": "gene"}}
    write_h5ad(gene_map, root / "map.h5ad")
    write_parquet(pd.DataFrame({"a": [1]}), root / "table.parquet")
    (root / "folder").mkdir()
    (root / "notes.txt").write_text("notes\n")
    found = {kinds.TILE_STORE: Path(tiny_store.path), kinds.FEATURES: root / "features.h5ad",
             kinds.GENE_MAP: root / "map.h5ad", kinds.PARQUET: root / "table.parquet", kinds.FOLDER: root / "folder",
             kinds.OTHER: root / "notes.txt"}
    assert {k: kinds.kind_of(p) for k, p in found.items()} == {k: k for k in found}
    return found


def _run(command: str, given: str, value: Path, w: Path, capsys) -> tuple[int, list[str], str]:
    argv = command_line(command, given if given.startswith("-") else "\0", value, w)
    if not given.startswith("-"):  # a positional: the first one given is this input
        argv[argv.index(str(w / f"in_{given}.h5ad"))] = str(value)
    code = main(argv)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("cellica ")], err


@pytest.mark.parametrize("command, given, dest", ROWS, ids=[f"{c}|{g}" for c, g, _ in ROWS])
@pytest.mark.parametrize("special", ["fifo", "device"])
def test_a_fifo_or_a_device_is_refused_as_any_input(command, given, dest, special, tmp_path, capsys):
    w = tmp_path / "w"
    w.mkdir()
    if special == "fifo":
        value = tmp_path / "pipe"
        os.mkfifo(value)
    else:
        value = Path("/dev/null")
    code, lines, err = _run(command, given, value, w, capsys)
    what = "a FIFO (named pipe)" if special == "fifo" else "a character device"
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert f"{value} is {what}, not a file" in lines[0], lines[0]
    assert not any(w.iterdir())


def _declared() -> dict:
    from cellica.cli import parser

    return getattr(parser, "INPUT_KINDS", {})  # the kinds each input takes (absent before they were declared)


KIND_ROWS = [(c, g, d) for c, g, d in ROWS if d in _declared()]


@pytest.mark.parametrize("command, given, dest", KIND_ROWS, ids=[f"{c}|{g}" for c, g, _ in KIND_ROWS])
def test_an_input_of_another_kind_is_refused_naming_both_kinds(command, given, dest, tmp_path, capsys, tiny_store):
    from cellica.cli.parser import INPUT_KINDS

    samples = _samples(tmp_path, tiny_store)
    accepted = INPUT_KINDS[dest]
    wrong = next(k for k in samples if k not in accepted)
    w = tmp_path / "w"
    w.mkdir()
    code, lines, err = _run(command, given, samples[wrong], w, capsys)
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert f"{samples[wrong]} is {wrong}, where {' or '.join(accepted)} is needed" in lines[0], lines[0]
    assert not any(w.iterdir())


def test_the_examples_of_the_issue_name_the_kind_expected(tmp_path, capsys, tiny_store):
    samples = _samples(tmp_path, tiny_store)
    from cellica.core import kinds

    code = main(["export-efaar", str(samples[kinds.FEATURES]), "--out", str(tmp_path / "efaar")])
    assert (
        code == 2
        and "where a gene map (an .h5ad with a row per gene) or an .h5ad file without is_control is needed"
        in capsys.readouterr().err
    )
    code = main(["baseline", "--name", "untrained", "--input", str(tiny_store.path), "--out", str(tmp_path / "b.h5ad")])
    assert code == 2 and f"--input {tiny_store.path} is a tile store, where features" in capsys.readouterr().err
    code = main(["embed", "--store", str(samples[kinds.FEATURES]), "--checkpoint", str(samples[kinds.OTHER]),
                 "--out", str(tmp_path / "e.h5ad")])
    assert (
        code == 2
        and "is features (an .h5ad with a row per tile, well or sample, marked is_control or not), where a "
        "tile store is needed" in capsys.readouterr().err
    )


def test_uns_text_reads_a_string_a_group_of_them_or_nothing_without_loading_the_file(tmp_path):
    import anndata as ad

    from cellica.core.adata import uns_text

    path = tmp_path / "m.h5ad"
    ad.AnnData(np.zeros((2, 1), np.float32), uns={"not_computed": "batch B2 has no control wells",
                                                  "provenance": {"map": {"controls_of_batch": {"P3": "B1"}}}}
               ).write_h5ad(path)
    assert uns_text(path, "not_computed") == "batch B2 has no control wells"
    assert uns_text(path, "provenance/map/controls_of_batch") == {"P3": "B1"}
    assert uns_text(path, "transform/variant") is None
    with pytest.raises(CellicaError, match="does not exist"):
        uns_text(tmp_path / "absent.h5ad", "not_computed")
