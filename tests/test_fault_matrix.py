"""The fault matrix: every stage x every input it reads (the table in docs/contracts.md) x every
way that input can be wrong. Each cell runs the real command in-process and asserts a one-line
error with exit 2 that names the file, or the right result (docs/integrity.md#the-fault-matrix).

Two small runs (A and B, other seeds) are made once; each cell copies what its stage reads
from run A into a fresh folder, breaks one input, and runs the stage there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cellica.cli.app import main
from tests.conftest import REPO, TINY_SIM

FAULTS = ("missing", "empty", "truncated", "flipped", "swapped", "replaced", "output", "size-limit", "label", "twin")
SIM = [a for k, v in TINY_SIM.items() for a in (f"--{k.replace('_', '-')}", str(v))]
MAE = ["--depth", "1", "--epochs", "1", "--batch-size", "16", "--patch-size", "8", "--decoder-dim", "32",
       "--decoder-heads", "2"]
CHANNELS = ["DNA", "ER", "RNA"]


def matrix_rows() -> list[tuple[str, str, str]]:
    """(stage, input, kind) rows of the table in docs/contracts.md."""
    text = (REPO / "docs" / "contracts.md").read_text()
    block = text.split("<!-- fault-matrix:start -->")[1].split("<!-- fault-matrix:end -->")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    return [tuple(r) for r in rows]


def run(capsys, *args) -> tuple[int, str]:
    code = main(list(map(str, args)))
    return code, capsys.readouterr().err


# ---------------------------------------------------------------------- the two runs
def _make_run(root: Path, seed: int, capsys) -> Path:
    """Every file a stage can read, made by the stages themselves."""
    import tifffile

    root.mkdir()
    steps = [
        ["simulate", "--out", root / "tiles.zarr", *SIM, "--seed", seed],
        ["train-mae", "--store", root / "tiles.zarr", "--out", root / "model.safetensors", *MAE, "--seed", seed],
        ["embed", "--store", root / "tiles.zarr", "--checkpoint", root / "model.safetensors", "--out",
         root / "emb.h5ad"],
        *[["embed", "--store", root / "tiles.zarr", "--checkpoint", root / "model.safetensors", "--out",
           root / f"shard{i}.h5ad", "--shard", f"{i}/2"] for i in (0, 1)],
        ["transform", "--input", root / "emb.h5ad", "--out", root / "pca.h5ad", "--variant", "pca",
         "--n-components", "4", "--model-out", root / "pca.npz"],
        ["transform", "--input", root / "emb.h5ad", "--out", root / "base.h5ad", "--variant", "base"],
        ["export-truth", root / "tiles.zarr", "--out", root / "truth"],
        ["evaluate", "--features", root / "pca.h5ad", "--out", root / "pg.parquet", "--importances-out",
         root / "imp.parquet", "--truth", root / "truth"],
        ["batch-metrics", root / "pca.h5ad", "--out", root / "batch.parquet", "--activity-out", root / "act.parquet"],
        ["summarize", "--per-gene", root / "pg.parquet", "--batch", root / "batch.parquet", "--activity",
         root / "act.parquet", "--out", root / "summary.parquet"],
        ["gene-map", root / "pca.h5ad", "--out", root / "map.h5ad", "--consistency-out", root / "cons.parquet"],
        ["gene-map", root / "base.h5ad", "--out", root / "mapb.h5ad", "--consistency-out", root / "consb.parquet"],
    ]
    for step in steps:
        code, err = run(capsys, *step)
        assert code == 0, (step, err)
    (root / "pairs.csv").write_text("entity1,entity2\nGENE001,GENE002\nGENE003,GENE004\n")
    # a features table of one's own, and image files with their manifest
    rng = np.random.default_rng(seed)
    table = pd.DataFrame({"plate": "P1", "well": [f"A{i:02d}" for i in range(60)],
                          "batch": [f"b{i % 2}" for i in range(60)],
                          "perturbation": ["ctrl" if i % 3 == 0 else f"G{i % 4}" for i in range(60)],
                          "is_control": [i % 3 == 0 for i in range(60)]})
    for k in range(6):
        table[f"f{k}"] = rng.normal(size=60).round(6)
    table.to_csv(root / "table.csv", index=False)
    rows = []
    for well, gene in (("A01", "ctrl"), ("A02", "G1"), ("B01", "ctrl")):
        for c in CHANNELS:
            name = f"{well}_{c}.tif"
            tifffile.imwrite(root / name, rng.integers(0, 4000, (64, 64)).astype(np.uint16), compression="zlib")
            rows.append({"path": name, "plate": "P1", "well": well, "site": 1, "channel": c, "batch": well[0],
                         "perturbation": gene})
    pd.DataFrame(rows).to_csv(root / "manifest.csv", index=False)
    try:
        from tests.test_omezarr import well_manifest, write_plate

        write_plate(root / "plate.zarr", seed=seed)
        well_manifest(root, root / "plate.zarr").rename(root / "wells.csv")
    except pytest.skip.Exception:  # ome-zarr (a dev dependency) absent: those cells skip
        pass
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    capsys = _Quiet()
    base = tmp_path_factory.mktemp("runs")
    return _make_run(base / "A", 1, capsys), _make_run(base / "B", 2, capsys)


class _Quiet:
    """capsys for the module fixture: the steps' stderr is returned by main's callers anyway."""

    def readouterr(self):
        return type("R", (), {"err": ""})()


# ---------------------------------------------------------------------- the stages
def stage_case(stage: str, inp: str, w: Path) -> tuple[list, Path, Path, str]:
    """(argv, the input broken, its output, the input's option) of a stage run in folder ``w``."""
    ome = ["--format", "ome_zarr", "--channels", "ER,DNA", "--tile-size", "32", "--control-label", "ctrl",
           "--shard-tiles", "8"]
    files = ["--channels", ",".join(CHANNELS), "--tile-size", "32", "--control-label", "ctrl", "--shard-tiles", "8"]
    cases = {
        ("inspect", "store"): (["inspect", w / "tiles.zarr"], w / "tiles.zarr", None),
        ("train-mae", "--store"): (["train-mae", "--store", w / "tiles.zarr", "--out", "{out}", *MAE],
                                   w / "tiles.zarr", w / "m.safetensors"),
        ("embed", "--store"): (["embed", "--store", w / "tiles.zarr", "--checkpoint", w / "model.safetensors",
                                "--out", "{out}"], w / "tiles.zarr", w / "e.h5ad"),
        ("embed", "--checkpoint"): (["embed", "--store", w / "tiles.zarr", "--checkpoint", w / "model.safetensors",
                                     "--out", "{out}"], w / "model.safetensors", w / "e.h5ad"),
        ("profile-tiles", "--store"): (["profile-tiles", "--store", w / "tiles.zarr", "--out", "{out}",
                                        "--features", "intensity"], w / "tiles.zarr", w / "p.h5ad"),
        ("count-nuclei", "--store"): (["count-nuclei", "--store", w / "tiles.zarr", "--out", "{out}"],
                                       w / "tiles.zarr", w / "n.h5ad"),
        ("gather-embeddings", "shards"): (["gather-embeddings", w / "shard0.h5ad", w / "shard1.h5ad", "--out",
                                           "{out}"], w / "shard1.h5ad", w / "g.h5ad"),
        ("import-features", "table"): (["import-features", w / "table.csv", "--out", "{out}"], w / "table.csv",
                                       w / "f.h5ad"),
        ("transform", "--input"): (["transform", "--input", w / "emb.h5ad", "--out", "{out}", "--variant", "pca",
                                    "--n-components", "4"], w / "emb.h5ad", w / "t.h5ad"),
        ("transform --apply", "--apply"): (["transform", "--input", w / "emb.h5ad", "--out", "{out}", "--apply",
                                            w / "pca.npz"], w / "pca.npz", w / "t.h5ad"),
        ("baseline", "--input"): (["baseline", "--name", "untrained", "--input", w / "emb.h5ad", "--out", "{out}"],
                                  w / "emb.h5ad", w / "u.h5ad"),
        ("evaluate", "--features"): (["evaluate", "--features", w / "pca.h5ad", "--out", "{out}",
                                      "--importances-out", w / "i.parquet"], w / "pca.h5ad", w / "e.parquet"),
        ("gather-eval", "--per-gene"): (["gather-eval", "--per-gene", w / "pg.parquet", "--importances",
                                         w / "imp.parquet", "--out", "{out}", "--importances-out", w / "i.parquet"],
                                        w / "pg.parquet", w / "g.parquet"),
        ("gather-eval", "--importances"): (["gather-eval", "--per-gene", w / "pg.parquet", "--importances",
                                            w / "imp.parquet", "--out", w / "g.parquet", "--importances-out",
                                            "{out}"], w / "imp.parquet", w / "i.parquet"),
        ("batch-metrics", "features"): (["batch-metrics", w / "pca.h5ad", "--out", "{out}", "--activity-out",
                                         w / "a.parquet"], w / "pca.h5ad", w / "b.parquet"),
        **{("summarize", opt): (["summarize", "--per-gene", w / "pg.parquet", "--batch", w / "batch.parquet",
                                 "--activity", w / "act.parquet", "--out", "{out}"], w / name, w / "s.parquet")
           for opt, name in (("--per-gene", "pg.parquet"), ("--batch", "batch.parquet"),
                             ("--activity", "act.parquet"))},
        ("gene-map", "features"): (["gene-map", w / "pca.h5ad", "--out", "{out}", "--consistency-out",
                                    w / "c.parquet"], w / "pca.h5ad", w / "m.h5ad"),
        ("recall", "maps"): (["recall", w / "map.h5ad", w / "mapb.h5ad", "--out", "{out}", "--differences-out",
                              w / "d.parquet", "--annotation-file", w / "pairs.csv", "--min-genes", "4"],
                             w / "map.h5ad", w / "r.parquet"),
        ("export-efaar", "maps"): (["export-efaar", w / "map.h5ad", w / "mapb.h5ad", "--out", "{out}",
                                    "--annotation-file", w / "pairs.csv"], w / "map.h5ad", w / "efaar"),
        ("align", "a"): (["align", w / "pca.h5ad", w / "base.h5ad", "--out", "{out}", "--n-components", "4"],
                         w / "pca.h5ad", w / "al.parquet"),
        ("report", "--summary"): (["report", "--summary", w / "summary.parquet", "--per-gene", w / "pg.parquet",
                                   "--importances", w / "imp.parquet", "--index-only", "--out", "{out}"],
                                  w / "summary.parquet", w / "rep"),
        **{("qc", opt): (["qc", "--features", w / "base.h5ad", w / "pca.h5ad", "--store", w / "tiles.zarr", "--out",
                          "{out}"], target, w / "qc") for opt, target in (("--features", w / "pca.h5ad"),
                                                                          ("--store", w / "tiles.zarr"))},
        ("export-truth", "store"): (["export-truth", w / "tiles.zarr", "--out", "{out}"], w / "tiles.zarr",
                                    w / "truth2"),
        ("example-tiles", "store"): (["example-tiles", w / "tiles.zarr", "--out", "{out}"], w / "tiles.zarr",
                                     w / "ex.parquet"),
        ("truth-genes", "--per-gene"): (["truth-genes", "--per-gene", w / "pg.parquet", "--truth", w / "truth",
                                         "--out", "{out}"], w / "pg.parquet", w / "tg.parquet"),
        ("ingest", "--manifest"): (["ingest", "--manifest", w / "manifest.csv", "--out", "{out}", *files],
                                   w / "manifest.csv", w / "s.zarr"),
        ("ingest", "image files"): (["ingest", "--manifest", w / "manifest.csv", "--out", "{out}", *files],
                                    w / "A02_ER.tif", w / "s.zarr"),
        ("ingest (OME-Zarr)", "plate"): (["ingest", "--manifest", w / "wells.csv", "--out", "{out}", *ome],
                                         w / "plate.zarr", w / "s.zarr"),
    }
    argv, target, out = cases[(stage, inp)]
    return argv, target, out, inp


def fault_file(kind: str, target: Path) -> Path:
    """The file a fault hits: a shard for a tile store, a chunk for a plate, else the input."""
    if kind == "tile store":
        return target / "tiles" / "c" / "1" / "0" / "0" / "0"
    if kind == "ground truth (store)":  # a table inside the store, checked against its manifest
        return target / "ground_truth" / "latents.parquet"
    if kind == "OME-Zarr plate":
        return target / "A" / "1" / "0" / "s0" / "c" / "0" / "0" / "0"
    return target


# What each cell must end in: "error" (exit 2, one line naming the file) or a check of the result.
# A user's own file (a table, a manifest, an image) swapped for another valid one is that input:
# the run must take it and say so. Single files are never replaced under a reader (every write
# renames a finished file into place, so an open reader keeps the file it opened:
# test_a_file_replaced_under_a_reader_is_read_whole); plates are the user's and carry no generation.
NOT_APPLICABLE = {("replaced", k) for k in ("checkpoint", "features", "transform model", "parquet", "gene map",
                                            "table (CSV)", "manifest (CSV)", "image (TIFF)", "OME-Zarr plate",
                                            "ground truth (store)")}
TAKEN_AS_GIVEN = {("swapped", k) for k in ("table (CSV)", "manifest (CSV)", "image (TIFF)", "OME-Zarr plate",
                                           "transform model")}
# A user's text file with a flipped byte may still be a valid file: then the run records exactly
# what it read (its sha256), else it is an error naming it.
RECORDED = {("flipped", "table (CSV)"), ("flipped", "manifest (CSV)")}
# An OME-Zarr chunk compressed without a checksum codec decodes a flipped byte to other pixels:
# nothing recorded what was written (docs/integrity.md says so). Chunks whose codecs carry a
# crc32c are checked by zarr.
UNDETECTABLE = {("flipped", "OME-Zarr plate")}


# Formats with bytes no reader uses: a flipped byte there must leave what is read unchanged.
UNUSED_BYTES = ("parquet", "features", "gene map")


def _assert_read_unchanged(kind: str, victim: Path, original: Path) -> None:
    if kind == "parquet":
        from cellica.core.atomic import read_parquet

        got, want = read_parquet(victim), read_parquet(original)
        pd.testing.assert_frame_equal(got, want)
        assert got.attrs == want.attrs
        return
    from cellica.core.adata import read_sealed

    got, want = read_sealed(victim), read_sealed(original)
    np.testing.assert_array_equal(got.X, want.X)
    pd.testing.assert_frame_equal(got.obs, want.obs)
    assert list(got.var_names) == list(want.var_names)


# A label that means two things (the control label on a row not marked control) can be put into
# features and a features table; a manifest's controls are its control_label, a tile store's metadata
# is checked when it is written, and the other kinds carry no labels.
LABELLED = ("features", "table (CSV)")
# One sample counted twice (a row's features copied under another well): a table the user brings.
TWINNED = ("table (CSV)",)


def expected(stage: str, kind: str, fault: str) -> str:
    if (fault == "label" and kind not in LABELLED) or (fault == "twin" and kind not in TWINNED):
        return "n/a"
    if (fault, kind) in NOT_APPLICABLE:
        return "n/a"
    if (fault, kind) in UNDETECTABLE:
        return "undetectable"
    if (fault, kind) in RECORDED:
        return "recorded"
    if (fault, kind) in TAKEN_AS_GIVEN:
        return "taken"
    if fault == "swapped" and kind == "features" and stage not in ("gather-embeddings", "align"):
        return "taken"  # one input of one stage: another run's file is just another input
    return "error"


CELLS = [(s, i, k, f) for s, i, k in matrix_rows() for f in FAULTS]


def test_the_matrix_covers_every_stage_that_reads_a_file():
    from cellica.cli.parser import COMMANDS, INPUT_OPTIONS

    stages = {s.split()[0] for s, _, _ in matrix_rows()}
    readers = {name for name, _, _, args, params in COMMANDS
               if any(flag.lstrip("-").replace("-", "_") in INPUT_OPTIONS for flag, _ in args)}
    # The lock that `environment` compares with is the software's own file, not a run's data: its
    # faults (missing, empty, a line that is no pin, a package pinned twice) are tests/test_deploy.py's.
    assert readers - {"schema", "environment"} <= stages, readers - stages


@pytest.mark.parametrize("stage, inp, kind, fault", CELLS, ids=[f"{s}|{i}|{f}" for s, i, k, f in CELLS])
def test_fault(stage, inp, kind, fault, runs, tmp_path, capsys, monkeypatch):
    run_a, run_b = runs
    want = expected(stage, kind, fault)
    if want == "n/a":
        pytest.skip(f"{fault} does not apply to a {kind} (see NOT_APPLICABLE)")
    if stage == "profile-tiles":
        pytest.importorskip("cp_measure", reason="cp_measure (the profiles extra) is not installed")
    if "OME-Zarr" in stage and not (run_a / "plate.zarr").exists():
        pytest.skip("ome-zarr (the writer of the test plates) is not installed")
    w = tmp_path / "w"
    shutil.copytree(run_a, w)
    argv, target, out, _ = stage_case(stage, inp, w)
    victim = fault_file(kind, target)
    before = victim.read_bytes() if victim.is_file() else None
    other = run_b / victim.relative_to(w)
    if fault == "missing":
        shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
    elif fault == "empty":
        victim.write_bytes(b"")
    elif fault == "truncated":
        victim.write_bytes(before[: len(before) // 2])
    elif fault == "flipped":
        data = bytearray(before)
        # in the data: a parquet file's middle is mostly its footer (metadata copies the reader ignores)
        at = 40 if victim.suffix == ".parquet" else len(data) // 2
        data[at] = (data[at] + 1) % 256 if kind in ("table (CSV)", "manifest (CSV)") and chr(data[at]).isdigit() \
            else data[at] ^ 0x01
        victim.write_bytes(bytes(data))
    elif fault == "swapped":
        shutil.copyfile(other, victim)
    elif fault == "replaced":
        _replace_during_read(monkeypatch, target, run_b / target.relative_to(w))
    elif fault == "label":
        _relabel(kind, victim)
    elif fault == "twin":
        table = pd.read_csv(victim)
        copy = table.iloc[[-1]].copy()
        copy["well"] = "Z99"  # a well no plate has: only its features give it away
        pd.concat([table, copy]).to_csv(victim, index=False)
    if fault == "output":
        if out is None:
            pytest.skip(f"{stage} writes no output")
        out = target
    argv = [out if a == "{out}" else a for a in argv]
    if fault == "size-limit":
        _size_limited(stage, argv, out, w, capsys)
        return
    code, err = run(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("cellica ")]
    if want == "recorded" and code == 2:
        want = "error"  # the flipped byte broke the file's syntax: an error naming it is right too
    if want == "error" and fault == "flipped" and code == 0 and kind in UNUSED_BYTES:
        # the byte was one the reader never uses (a footer's spare copy of the metadata, statistics,
        # HDF5 free space): the run is right if what it read is exactly what was written
        _assert_read_unchanged(kind, victim, run_a / victim.relative_to(w))
        return
    if want == "error":
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err[-2000:])
        named = {victim.name, target.name, str(target)}
        assert any(n in lines[0] for n in named), lines[0]
        if fault == "replaced":
            assert "was replaced while it was being read" in lines[0], lines[0]
        if fault == "label":
            assert "a label means one thing" in lines[0], lines[0]
        if fault == "twin":
            assert "repeat another row's features exactly" in lines[0] and "Z99" in lines[0], lines[0]
        if fault == "output":  # and the input is untouched
            assert (victim.read_bytes() if victim.is_file() else None) == before
        if out is not None and fault != "output":
            assert not Path(out).exists(), f"partial output {out}"
        return
    assert code == 0, err[-2000:]
    if want != "undetectable":
        _check_result(stage, kind, victim, out, other)


def _relabel(kind: str, victim: Path) -> None:
    """The control label put on one row that is not marked control (the file otherwise valid and sealed)."""
    if kind == "table (CSV)":
        table = pd.read_csv(victim)
        label = table.loc[table["is_control"], "perturbation"].iloc[0]
        table.loc[table.index[~table["is_control"]][0], "perturbation"] = label
        table.to_csv(victim, index=False)
        return
    import anndata as ad

    from cellica.core.adata import seal

    a = ad.read_h5ad(victim)
    obs = a.obs.copy()
    obs["perturbation"] = obs["perturbation"].astype(str)
    label = obs.loc[obs["is_control"].astype(bool), "perturbation"].iloc[0]
    obs.loc[obs.index[~obs["is_control"].astype(bool)][0], "perturbation"] = label
    a.obs = obs
    victim.unlink()
    seal(a).write_h5ad(victim)


def _size_limited(stage: str, argv: list, out: Path | None, w: Path, capsys) -> None:
    """The output's file system refuses to grow a file past 2 KB (``ulimit -f``): h5py, pyarrow and
    torch each report it their own way (once a segfault); the run must end in one line naming the
    output, exit 2, and leave neither the output nor a temporary file behind."""
    import resource

    if out is None:
        pytest.skip(f"{stage} writes no output")
    before = {p for p in w.rglob("*")}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, hard))
    try:
        code, err = run(capsys, *argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    from cellica.cli.parser import build_parser, paths_by_role

    outputs = [Path(p) for _, p in paths_by_role(build_parser().parse_args(list(map(str, argv))))[1]]
    lines = [line for line in err.splitlines() if line.startswith("cellica ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err[-2000:])
    named = outputs + ([outputs[0].parent / "checkpoints"] if stage == "train-mae" else [])  # its resume state
    assert "File too large" in lines[0] and any(str(o) in lines[0] for o in named), lines[0]
    assert not any(o.exists() for o in outputs), f"partial output among {outputs}"
    left = sorted(str(p.relative_to(w)) for p in set(w.rglob("*")) - before if ".tmp-" in p.name or ".old-" in p.name)
    assert not left, left


def _replace_during_read(monkeypatch, store: Path, replacement: Path) -> None:
    """Replace the store (as ``simulate --overwrite`` does: rename aside, rename in) right after
    its first shard is read."""
    import os

    from cellica.store.tilestore import TileStore

    real = TileStore._shard_bytes
    done = []

    def reading(self, shard):
        data = real(self, shard)
        if not done:
            done.append(shard)
            aside = store.with_name(store.name + ".old")
            os.replace(store, aside)
            shutil.copytree(replacement, store)
        return data

    monkeypatch.setattr(TileStore, "_shard_bytes", reading)


def _in_value_order(x: np.ndarray) -> np.ndarray:
    """A table's rows as import-features stores them: in the order of their values, first column first."""
    return x[np.lexsort(x[:, ::-1].T)]


def _check_result(stage: str, kind: str, victim: Path, out: Path, other: Path) -> None:
    """The run took the input it was given, and says so."""
    import hashlib

    if stage.startswith("ingest"):
        from cellica.store.tilestore import TileStore

        store = TileStore.open(out)
        manifest = Path(store.attrs["provenance"]["manifest"])
        assert store.attrs["provenance"]["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
        if kind == "image (TIFF)":  # the swapped image is what was stored
            import tifffile

            img = tifffile.imread(victim)
            md = store.metadata
            first = int(np.flatnonzero((md["well"] == "A02").to_numpy())[0])
            np.testing.assert_array_equal(store.read([first])[0][CHANNELS.index("ER")], img[:32, :32])
        return
    if stage == "import-features":
        import anndata as ad

        a = ad.read_h5ad(out)
        assert a.uns["provenance"]["table_sha256"] == hashlib.sha256(victim.read_bytes()).hexdigest()
        table = pd.read_csv(victim)
        np.testing.assert_allclose(a.X, _in_value_order(table[[f"f{k}" for k in range(6)]].to_numpy(np.float32)))
        return
    # one input swapped for the same file of another run: the output is that run's, exactly
    from cellica.core.adata import read_h5ad
    from cellica.core.lineage import KEY, lineage_for, lineage_of

    if stage == "transform":  # B's embeddings transformed: the same as transforming them directly
        from cellica.transform.params import TransformParams
        from cellica.transform.variants import make_transform

        direct = make_transform("pca", TransformParams(n_components=4)).fit_transform(read_h5ad(other))
        np.testing.assert_array_equal(read_h5ad(out).X, direct.X)
    elif stage == "baseline":  # B's embeddings as the base variant makes them, named and sourced as the baseline
        from cellica.transform.params import TransformParams
        from cellica.transform.variants import make_transform

        direct = make_transform("base", TransformParams()).fit_transform(read_h5ad(other))
        made = read_h5ad(out)
        np.testing.assert_array_equal(made.X, direct.X)
        assert lineage_for(out, "untrained") == {"untrained": lineage_for(out, "x")["x"],
                                                "(source of untrained)": lineage_for(other, "x")["x"]}
    elif stage == "transform --apply":  # B's model applied to A's features, as the library applies it
        from cellica.transform.base import Transform

        direct = Transform.load(other).transform(read_h5ad(out.parent / "emb.h5ad"))
        np.testing.assert_array_equal(read_h5ad(out).X, direct.X)
    elif stage == "qc":  # B's features: B's wells placed, exactly as the library places them
        from cellica.qc.layout import well_layouts
        from cellica.qc.read import read_qc

        found = read_qc(sorted(Path(out).glob("*.parquet")))["well_layouts"]
        direct = well_layouts({"base": out.parent / "base.h5ad", "pca": victim})
        pd.testing.assert_frame_equal(found.reset_index(drop=True), direct.reset_index(drop=True), check_dtype=False)
    elif stage == "gene-map":
        import json

        import anndata as ad

        assert json.loads(ad.read_h5ad(out).uns[KEY]) == lineage_for(victim, "pca")
    else:  # tables say which features they were computed from: B's
        assert lineage_of(pd.read_parquet(out)) == lineage_for(victim, "pca"), stage
