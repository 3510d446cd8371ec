"""Fault injection: a rerun gives the right answer, stored data is verified, no write can lose
data, no file name runs a command, and every failure a user can meet is one line, exit 2."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cellica.cli.app import main
from cellica.core import atomic
from cellica.core.atomic import atomic_output, atomic_outputs, read_parquet
from cellica.core.errors import CellicaError
from tests.conftest import REPO, TINY_MAE, TINY_SIM


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in-process; (exit status, stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("cellica ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------------- stale state
def test_changed_store_contents_never_resume_an_old_model(tmp_path, caplog):
    """Same path, same tile count, other contents: training starts afresh and equals a fresh run."""
    from cellica.embed.params import TrainParams
    from cellica.embed.train import train_mae
    from cellica.store.params import SimulationParams
    from cellica.store.simulate import simulate_screen

    store = tmp_path / "tiles.zarr"
    simulate_screen(store, SimulationParams(**TINY_SIM, seed=0))
    params = TrainParams(**{**TINY_MAE, "epochs": 2})
    train_mae(store, tmp_path / "a" / "model.safetensors", params)
    assert (tmp_path / "a" / "checkpoints" / "last.pt").is_file()
    simulate_screen(store, SimulationParams(**TINY_SIM, seed=5), overwrite=True)  # new data, same shape
    caplog.clear()
    rerun = train_mae(store, tmp_path / "a" / "model.safetensors", params)
    assert "starting afresh" in caplog.text and "tile store's contents changed" in caplog.text
    fresh = train_mae(store, tmp_path / "fresh" / "model.safetensors", params)
    assert [h["loss"] for h in rerun["history"]] == [h["loss"] for h in fresh["history"]]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "fresh" / "model.safetensors").read_bytes()


def test_a_pickled_or_damaged_checkpoint_is_one_line(tmp_path, tiny_store, capsys):
    import torch

    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    torch.save({"model": object()}, ckpt / "last.pt")  # a pickled object: refused by weights_only
    code, err = cli(capsys, "train-mae", "--store", str(tiny_store.path), "--out", str(tmp_path / "m.safetensors"),
                    "--depth", "1", "--epochs", "1", "--batch-size", "16", "--patch-size", "8", "--decoder-dim", "32",
                    "--decoder-heads", "2")
    assert code == 2 and "last.pt: not a loadable cellica checkpoint" in one_line(err)
    assert "weights_only=False" not in err
    assert not (tmp_path / "m.safetensors").exists()


# ---------------------------------------------------------------------- verified store
@pytest.fixture()
def store_copy(tiny_store, tmp_path):
    path = tmp_path / "copy.zarr"
    shutil.copytree(tiny_store.path, path)
    return path


def test_a_missing_shard_is_an_error_never_zeros(store_copy, capsys):
    from cellica.store.tilestore import TileStore

    store = TileStore.open(store_copy)
    store.shard_file(1).unlink()
    with pytest.raises(CellicaError, match=r"shard file .*/tiles/c/1/0/0/0 \(tiles 16-31\) is missing"):
        store.read_range(0, 40)
    with pytest.raises(CellicaError, match="is missing"):
        store.read([3, 20])
    code, err = cli(capsys, "inspect", str(store_copy), "--verify")
    assert code == 2 and "tiles 16-31" in one_line(err)


def test_flipped_bytes_fail_the_checksum(store_copy, capsys, tiny_model, tmp_path):
    from cellica.store.tilestore import TileStore

    shard = TileStore.open(store_copy).shard_file(2)
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, err = cli(capsys, "inspect", str(store_copy), "--verify")
    assert code == 2 and "(tiles 32-47) is damaged" in one_line(err)
    # embed verifies what it reads: nothing written.
    out = tmp_path / "emb.h5ad"
    code, err = cli(capsys, "embed", "--store", str(store_copy), "--checkpoint", str(tiny_model), "--out", str(out))
    assert code == 2 and "is damaged" in one_line(err) and not out.exists()


def test_verify_passes_on_a_good_store_and_catches_changed_metadata(store_copy, capsys):
    code, _ = cli(capsys, "inspect", str(store_copy), "--verify")
    assert code == 0
    meta = pd.read_parquet(store_copy / "metadata.parquet")
    meta.loc[0, "perturbation"] = "EDITED"
    meta.to_parquet(store_copy / "metadata.parquet", index=False)
    code, err = cli(capsys, "inspect", str(store_copy), "--verify")
    assert code == 2 and "metadata.parquet is not the one written with this store" in one_line(err)


# ---------------------------------------------------------------------- safe replace
def test_kill_at_the_commit_moment_loses_nothing(tmp_path, monkeypatch, caplog):
    target = tmp_path / "out.txt"
    with atomic_output(target, overwrite=True) as tmp:
        tmp.write_text("old")
    real = os.replace
    calls = []

    def killed(src, dst):  # the old output was moved aside; die before the new one goes in
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt), atomic_output(target, overwrite=True) as tmp:
        tmp.write_text("new")
    monkeypatch.setattr(atomic.os, "replace", real)
    assert not target.exists() and len(list(tmp_path.glob(".out.txt.old-*"))) == 1  # the old one is aside
    # The next write first restores it (logged), so the old output is never lost.
    caplog.clear()
    with pytest.raises(CellicaError, match="already exists"), atomic_output(target, overwrite=False):
        pass
    assert target.read_text() == "old" and "restoring" in caplog.text


def test_stale_temporary_outputs_are_removed_at_the_next_write(tmp_path, caplog):
    target = tmp_path / "features.h5ad"
    stale = tmp_path / ".features.h5ad.tmp-deadbeef"
    stale.write_bytes(b"x" * 1000)
    with atomic_output(target, overwrite=True) as tmp:
        tmp.write_text("new")
    assert not stale.exists() and "interrupted write" in caplog.text and target.read_text() == "new"


def test_one_writer_per_output(tmp_path):
    target = tmp_path / "store.zarr"
    with atomic_output(target) as tmp:
        tmp.mkdir()
        with pytest.raises(CellicaError, match="being written by another process"), atomic_output(target):
            pass
    assert target.is_dir()


def test_check_then_act_race_never_replaces_silently(tmp_path):
    target = tmp_path / "s.txt"
    with pytest.raises(CellicaError, match="appeared while this run was writing it"):
        with atomic_output(target, overwrite=False) as tmp:
            tmp.write_text("mine")
            target.write_text("theirs")  # another process finished first (e.g. without the lock)
    assert target.read_text() == "theirs"


def test_two_simulate_runs_to_one_path(tmp_path):
    """A second writer of the same store fails at once, naming the path; the first completes."""
    code = (
        "import sys, time; from cellica.core.atomic import atomic_output\n"
        "with atomic_output(sys.argv[1]) as tmp:\n    tmp.mkdir(); time.sleep(3)\n"
    )
    target = tmp_path / "tiles.zarr"
    first = subprocess.Popen([sys.executable, "-c", code, str(target)])
    for _ in range(100):
        if (tmp_path / ".tiles.zarr.lock").exists():
            break
        __import__("time").sleep(0.05)
    second = subprocess.run([sys.executable, "-m", "cellica.cli", "simulate", "--out", str(target)],
                            capture_output=True, text=True, timeout=120)
    assert first.wait(timeout=60) == 0
    assert second.returncode == 2 and "being written by another process" in second.stderr
    assert target.is_dir()


def test_paired_outputs_are_committed_together(tmp_path, monkeypatch, caplog):
    a, b = tmp_path / "features.txt", tmp_path / "features.dat"  # any kind: this is the commit mechanism
    with atomic_outputs([a, b], overwrite=True) as (ta, tb):
        ta.write_text("a1")
        tb.write_text("b1")
    real = atomic.commit
    calls = []

    def killed(tmp, path, overwrite=True):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the two renames")
        return real(tmp, path, overwrite)

    monkeypatch.setattr(atomic, "commit", killed)
    with pytest.raises(KeyboardInterrupt), atomic_outputs([a, b], overwrite=True) as (ta, tb):
        ta.write_text("a2")
        tb.write_text("b2")
    monkeypatch.setattr(atomic, "commit", real)
    assert (a.read_text(), b.read_text()) == ("a2", "b1")  # a half-done pair, for now
    with atomic_output(b.with_name("other"), overwrite=True) as tmp:  # an unrelated write changes nothing
        tmp.write_text("x")
    with atomic_output(b, overwrite=True) as tmp:  # the next write of the pair completes it first
        assert b.read_text() == "b2" and "completed an interrupted commit" in caplog.text
        tmp.write_text("b3")


def test_files_are_written_with_the_usual_permissions(tiny_model):
    mode = stat.S_IMODE(tiny_model.stat().st_mode)
    assert mode == 0o666 & ~atomic._UMASK


# ---------------------------------------------------------------------- hostile paths
def test_paths_with_spaces_and_shell_syntax_run_nothing(tmp_path):
    """A features file and a results folder whose names hold spaces, $(...) and backticks."""
    import yaml

    from tests.test_workflow import snakemake

    rng = np.random.default_rng(0)
    rows = []
    for b in range(2):
        for w in range(6):
            gene = "ctrl" if w < 3 else f"G{w}"
            for _k in range(10):
                rows.append({"plate": f"P{b}", "well": f"W{w}", "batch": f"B{b}", "gene": gene, "ctrl": gene == "ctrl",
                             **{f"e{i}": rng.normal() + (1.0 if gene != "ctrl" and i == 0 else 0) for i in range(6)}})
    evil = tmp_path / "in put $(touch PWNED1) `touch PWNED2`.csv"
    pd.DataFrame(rows).to_csv(evil, index=False)
    cfg = {"results_dir": "my results $(touch PWNED3)", "reports_dir": "my reports", "source": "features",
           "features": {"path": str(evil), "column_map": {"plate": "plate", "well": "well", "batch": "batch",
                                                         "perturbation": "gene", "is_control": "ctrl"}},
           "transform": {"n_components": 4, "variants": ["base", "pca"]},
           "evaluate": {"n_trees": 5, "min_data_in_leaf": 3, "map_null_size": 100, "n_boot": 100}, "maps": {"min_genes": 3, "consistency_permutations": 100, "null_pairs": 100, "n_boot": 100}}
    config = tmp_path / "evil.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, configfile=config)
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list(tmp_path.rglob("PWNED*")) and not list(REPO.glob("PWNED*"))
    assert (tmp_path / "my results $(touch PWNED3)" / "eval" / "summary.parquet").is_file()
    assert (tmp_path / "my reports" / "index.html").is_file()


# ---------------------------------------------------------------------- inputs as declared
def test_inputs_are_read_as_declared(tmp_path, caplog):
    import logging

    from cellica.embed.features import import_features
    from cellica.embed.params import FeatureTableParams
    from cellica.transform.params import TransformParams

    t = pd.DataFrame({"plate": ["P1"] * 4, "well": ["A1", "A2", "A3", "A3"], "batch": "B", "pert": ["c", "g", "c", "c"],
                      "ctrl": [True, False, True, True], "site": [1, 2, 3, 3], "f0": [0.1, 0.2, 0.3, 0.3]})
    t.to_csv(tmp_path / "t.csv", index=False)
    params = FeatureTableParams(column_map={"plate": "plate", "well": "well", "batch": "batch", "perturbation": "pert",
                                            "is_control": "ctrl"})
    with pytest.raises(CellicaError, match=r"1 row\(s\) repeat another row exactly .* first at row 5"):
        import_features(tmp_path / "t.csv", params=params)
    t.iloc[:3].to_csv(tmp_path / "t.csv", index=False)
    caplog.set_level(logging.INFO, logger="cellica")
    adata = import_features(tmp_path / "t.csv", params=params)
    assert adata.var_names.tolist() == ["f0"] and "site" in adata.obs  # a numeric site stays metadata
    assert "look like plate-layout metadata" in caplog.text and "1 feature column(s), f0; 6 metadata column(s): plate, well, batch, pert, ctrl, site" in caplog.text
    with pytest.raises(CellicaError, match="whole count"):
        TransformParams(n_components=8.7).validate()


def test_mixed_bit_depths_and_culprit_files_are_named(tmp_path):
    import tifffile

    from cellica.store.ingest import ingest
    from cellica.store.params import IngestParams

    rows = []
    for w, dtype in (("A01", np.uint16), ("A02", np.uint8)):
        for ch in ("DNA", "ER"):
            f = tmp_path / f"{w}_{ch}.tif"
            tifffile.imwrite(f, (np.arange(64 * 64).reshape(64, 64) % 250).astype(dtype if ch == "DNA" else np.uint16))
            rows.append({"path": f.name, "plate": "P1", "well": w, "site": 1, "channel": ch, "batch": "B1",
                         "perturbation": "ctrl" if w == "A01" else "g"})
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    p = IngestParams(channels=["DNA", "ER"], tile_size=32, control_label="ctrl")
    with pytest.raises(CellicaError, match=r"A02_DNA.tif: uint8 pixels, but channel 'DNA' was uint16 in .*A01_DNA.tif"):
        ingest(tmp_path / "m.csv", tmp_path / "s.zarr", p)
    assert not (tmp_path / "s.zarr").exists()
    tifffile.imwrite(tmp_path / "A02_DNA.tif", np.ones((64, 64), np.float32))
    with pytest.raises(CellicaError, match=r"image file .*A02_DNA.tif: float pixels"):
        ingest(tmp_path / "m.csv", tmp_path / "s.zarr", p)


def test_closed_pipe_ends_quietly(tiny_store):
    cmd = f"{sys.executable} -m cellica.cli inspect '{tiny_store.path}' --max-rows 200 | head -1"
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("store") and "Traceback" not in run.stderr
    assert "BrokenPipe" not in run.stderr


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_integrity(tiny_model, tmp_path, capsys, tiny_store):
    from cellica.embed.checkpoints import load_encoder

    bad = tmp_path / "m.safetensors"
    data = bytearray(tiny_model.read_bytes())
    data[-5] ^= 0x01  # one flipped bit in the weights
    bad.write_bytes(bytes(data))
    shutil.copy(tiny_model.with_suffix(".json"), bad.with_suffix(".json"))
    with pytest.raises(CellicaError, match=r"m.safetensors: its sha256 .* differs from weights_sha256"):
        load_encoder(bad, 4, 32)
    bad.write_bytes(tiny_model.read_bytes())
    bad.with_suffix(".json").write_text("{not json")
    code, err = cli(capsys, "embed", "--store", str(tiny_store.path), "--checkpoint", str(bad), "--out",
                    str(tmp_path / "e.h5ad"))
    assert code == 2 and "m.json is not valid JSON" in one_line(err)
    meta = json.loads(tiny_model.with_suffix(".json").read_text())
    del meta["normalization"]
    bad.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(CellicaError, match=r"missing or malformed field\(s\) normalization"):
        load_encoder(bad, 4, 32)


# ---------------------------------------------------------------------- one-line errors
def test_disk_full_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    import anndata as ad

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0] if args else "out.h5ad"))

    x = ad.AnnData(np.ones((4, 2), np.float32), obs=pd.DataFrame(
        {"plate": "p", "well": list("abcd"), "batch": "b", "perturbation": ["c", "c", "g", "g"],
         "is_control": [True, True, False, False]}, index=list("abcd")))
    x.write_h5ad(tmp_path / "in.h5ad")
    monkeypatch.setattr(ad.AnnData, "write_h5ad", full)
    out = tmp_path / "out.h5ad"
    code, err = cli(capsys, "transform", "--variant", "base", "--input", str(tmp_path / "in.h5ad"), "--out", str(out))
    line = one_line(err)
    # the output being written is named, not the hidden temporary file
    assert code == 2 and "No space left on device" in line and "the disk is full" in line
    assert f"writing {out} failed" in line and ".tmp-" not in line
    assert not out.exists() and not list(tmp_path.glob(".out.h5ad*"))

    def full_no_name(self, *args, **kwargs):  # h5py's and pyarrow's kind: no errno, no file name
        raise OSError("Can't write data (file write failed: time = Fri Dec  4, filename = '/x/.tmp', errno = 28, "
                      "error message = 'No space left on device', buf = 0x1, total write size = 8)")

    monkeypatch.setattr(ad.AnnData, "write_h5ad", full_no_name)
    code, err = cli(capsys, "transform", "--variant", "base", "--input", str(tmp_path / "in.h5ad"), "--out", str(out))
    line = one_line(err)
    assert code == 2 and f"writing {out} failed: No space left on device (the disk is full" in line


def test_damaged_tables_and_models_are_one_line(tmp_path, capsys):
    garbage = tmp_path / "pg.parquet"
    garbage.write_bytes(b"PAR1 not really parquet")
    code, err = cli(capsys, "gather-eval", "--per-gene", str(garbage), "--importances", str(garbage),
                    "--out", str(tmp_path / "o.parquet"), "--importances-out", str(tmp_path / "i.parquet"))
    assert code == 2 and "per-gene table" in one_line(err) and "pg.parquet is unreadable" in err
    with pytest.raises(CellicaError, match="does not exist"):
        read_parquet(tmp_path / "none.parquet")
    for content in (b"", b"garbage"):
        npz = tmp_path / "model.npz"
        npz.write_bytes(content)
        code, err = cli(capsys, "transform", "--apply", str(npz), "--input", str(tmp_path / "x.h5ad"), "--out",
                        str(tmp_path / "y.h5ad"))
        assert code == 2 and len(one_line(err)) < 400


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CELLICA_DEBUG", "1")
    with pytest.raises(CellicaError):
        main(["inspect", str(tmp_path / "none.zarr")])


def test_more_chunks_than_genes(tmp_path):
    from cellica.evaluate.genes import evaluate_genes
    from cellica.evaluate.params import EvalParams
    from tests.test_evaluate import screen

    pg, imps = evaluate_genes(screen(n=20), EvalParams(n_trees=5), chunk="7/8")
    assert pg.empty and "gene" in pg.columns and imps.empty


def test_copairs_cache_stays_out_of_home(tmp_path, monkeypatch):
    from cellica.evaluate.batch import phenotypic_activity
    from cellica.evaluate.params import EvalParams
    from tests.test_evaluate import screen

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    phenotypic_activity(screen(), "v", EvalParams(map_null_size=100))
    assert not (tmp_path / ".copairs").exists()


def test_disk_full_while_checkpointing_is_one_line(tmp_path, tiny_store, capsys, monkeypatch):
    import torch

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 3001600 vs 3001488")

    monkeypatch.setattr(torch, "save", full)
    code, err = cli(capsys, "train-mae", "--store", str(tiny_store.path), "--out", str(tmp_path / "m.safetensors"),
                    "--depth", "1", "--epochs", "1", "--batch-size", "16", "--patch-size", "8", "--decoder-dim", "32",
                    "--decoder-heads", "2")
    line = one_line(err)
    assert code == 2 and "last.pt: could not write the checkpoint" in line and "MB free on its disk" in line
    assert not list((tmp_path / "checkpoints").glob(".last.pt*"))


@pytest.mark.shared_data
def test_parallel_classifiers_do_not_crash_lightgbm(tmp_path):
    """Threads creating Datasets while others freed Boosters crashed LightGBM (segmentation fault)
    on the real BBBC021 profiles with three seeds, 6 runs of 6 before creation and freeing took a
    lock; 8 of 8 ran after."""
    from cellica.embed.features import import_features
    from cellica.embed.params import FeatureTableParams
    from tests.conftest import shared

    table = shared("bbbc021_profiles_weeks1-5") / "bbbc021_weeks1-5_well_profiles.csv.gz"
    cols = {"plate": "Metadata_Plate", "well": "Metadata_Well", "batch": "Metadata_Batch",
            "perturbation": "Metadata_Perturbation", "is_control": "Metadata_is_control"}
    from cellica.transform.variants import make_transform

    profiles = import_features(table, params=FeatureTableParams(column_map=cols, extra_metadata=["n_images"]))
    make_transform("base").fit_transform(profiles).write_h5ad(tmp_path / "f.h5ad")  # 297 wells held back
    cmd = [sys.executable, "-m", "cellica.cli", "--log-level", "WARNING", "evaluate", "--features",
           str(tmp_path / "f.h5ad"), "--out", str(tmp_path / "o.parquet"), "--importances-out",
           str(tmp_path / "i.parquet"), "--threads", "2", "--min-samples", "3", "--min-data-in-leaf", "3",
           "--seeds", "0,1,2"]
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}  # as in a DAG job
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
