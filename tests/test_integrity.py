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


# ---------------------------------------------------------------------- issue 29's invariants
# YAML aliases nested nine deep: 10^9 values once expanded, a few hundred bytes as text.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))

def test_config_values_a_job_would_refuse_are_refused_before_any_job(tmp_path):
    """Every section built as its command builds it, input files read by their own readers, and
    a YAML alias bomb counted without expanding it: all at config time (cellica.config)."""
    import time

    import yaml

    from cellica.config import MAX_CONFIG_VALUES, check_config_size, config_rules, defaults

    def problems(**sections):
        cfg = defaults()
        for name, values in sections.items():
            cfg[name] = {**cfg[name], **values}
        return config_rules(cfg) or ""

    assert "transform.n_components must be a whole count" in problems(transform={"n_components": 8.7})
    assert "transform.n_components: must be a finite number" in problems(transform={"n_components": float("inf")})
    (tmp_path / "pairs.csv").write_text("entity1,entity2\n")
    assert "has a header but no rows" in problems(maps={"annotation_file": str(tmp_path / "pairs.csv")})
    assert "does not exist" in problems(transform={"position_table": str(tmp_path / "nope.csv")})
    assert problems() == ""
    t0 = time.perf_counter()
    with pytest.raises(CellicaError, match=f"expands to more than {MAX_CONFIG_VALUES:,} values"):
        check_config_size(yaml.safe_load(ALIAS_BOMB))  # 10^9 values if expanded
    assert time.perf_counter() - t0 < 5


def test_the_documented_override_of_a_bad_value_fails_in_the_dry_run(tmp_path):
    from tests.test_workflow import snakemake

    run = snakemake(tmp_path, "--dry-run", "--config", "transform={n_components: 8.7}")
    assert run.returncode != 0 and "transform.n_components must be a whole count" in run.stdout + run.stderr
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    run = snakemake(tmp_path, "--dry-run", configfile=bomb)
    assert run.returncode != 0 and "expands to more than" in run.stdout + run.stderr


def test_gene_names_equal_up_to_case_stop_the_first_stage(tmp_path, capsys):
    t = pd.DataFrame({"plate": "P", "well": [f"A{i}" for i in range(6)], "batch": "B",
                      "perturbation": ["c", "c", "TP53", "tp53", "G1", "G1"],
                      "is_control": [True, True, False, False, False, False], "f0": np.arange(6.0)})
    t.to_csv(tmp_path / "t.csv", index=False)
    code, err = cli(capsys, "import-features", str(tmp_path / "t.csv"), "--out", str(tmp_path / "f.h5ad"))
    assert code == 2 and "perturbation names 'TP53' and 'tp53' differ only by case" in one_line(err)


def test_id_like_columns_are_refused_unless_named(tmp_path, capsys):
    t = pd.DataFrame({"plate": "P", "well": [f"A{i}" for i in range(6)], "batch": "B",
                      "perturbation": ["c", "c", "G1", "G1", "G2", "G2"],
                      "is_control": [True, True, False, False, False, False], "TableNumber": range(6),
                      "f0": np.linspace(0, 1, 6), "f1": np.linspace(1, 0, 6)})
    t.to_csv(tmp_path / "t.csv")  # pandas' saved index becomes "Unnamed: 0"
    out = tmp_path / "f.h5ad"
    code, err = cli(capsys, "import-features", str(tmp_path / "t.csv"), "--out", str(out))
    assert code == 2 and "['Unnamed: 0', 'TableNumber'] look like identifiers" in one_line(err)
    assert not out.exists()
    code, err = cli(capsys, "import-features", str(tmp_path / "t.csv"), "--out", str(out), "--columns", "f*")
    assert code == 0
    import anndata as ad

    assert ad.read_h5ad(out).var_names.tolist() == ["f0", "f1"]


@pytest.mark.parametrize("args, why", [
    (["train-mae", "--store", "{store}", "--out", "{store}"], "--out {store} is also an input (--store)"),
    (["train-mae", "--store", "{store}", "--out", "{store}/m.safetensors"], "lies inside the input {store}"),
    (["embed", "--store", "{store}", "--checkpoint", "{model}", "--out", "{model}"], "is also an input (--checkpoint)"),
    (["train-mae", "--store", "{store}", "--out", "{root}"], "contains the input {store}"),
])
def test_no_output_over_in_or_around_an_input(args, why, store_copy, tiny_model, tmp_path, capsys):
    model = tmp_path / "model.safetensors"
    shutil.copyfile(tiny_model, model)
    shutil.copyfile(tiny_model.with_suffix(".json"), model.with_suffix(".json"))
    fill = {"store": str(store_copy), "model": str(model), "root": str(tmp_path)}
    before = {p: p.read_bytes() for p in store_copy.rglob("*") if p.is_file()}
    code, err = cli(capsys, *[a.format(**fill) for a in args])
    assert code == 2 and why.format(**fill) in one_line(err)
    assert {p: p.read_bytes() for p in store_copy.rglob("*") if p.is_file()} == before
    assert model.read_bytes() == tiny_model.read_bytes()


def test_overwrite_replaces_only_its_own_kind(tmp_path, capsys, store_copy):
    mine = tmp_path / "mydata"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    sim = [a for k, v in TINY_SIM.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    code, err = cli(capsys, "simulate", "--out", str(mine), "--overwrite", *sim)
    assert code == 2 and "exists and is not a tile store" in one_line(err)
    assert (mine / "notes.txt").read_text() == "precious"
    (store_copy / "my_notes.txt").write_text("kept")  # a stranger's file inside a store
    code, err = cli(capsys, "simulate", "--out", str(store_copy), "--overwrite", *sim)
    assert code == 2 and "holding other files too (my_notes.txt)" in one_line(err)
    # nothing is ever written inside a store (it is replaced whole when written again)
    code, err = cli(capsys, "import-features", str(tmp_path / "x.csv"), "--out", str(store_copy / "f.h5ad"))
    assert code == 2 and "never written inside a tile store" in one_line(err)
    (tmp_path / "notes.h5ad").write_text("not an h5ad")
    from cellica.core.paths import check_output

    with pytest.raises(CellicaError, match=r"notes.h5ad exists and is not an HDF5 \(.h5ad\) file"):
        check_output(tmp_path / "notes.h5ad")


def test_a_file_replaced_under_a_reader_is_read_whole(tmp_path, monkeypatch):
    """Every write renames a finished file into place, so a reader that has opened a file keeps
    reading that file: replacing it meanwhile cannot mix two versions."""
    import h5py

    from cellica.core.adata import make_adata, read_h5ad, write_h5ad

    def features(value):
        obs = pd.DataFrame({"plate": "P", "well": list("abcd"), "batch": "B", "perturbation": ["c", "c", "g", "g"],
                            "is_control": [True, True, False, False]}, index=list("abcd"))
        return make_adata(np.full((4, 3), value, np.float32), obs, None, {}, "test")

    import anndata._io.h5ad as reader

    path = tmp_path / "f.h5ad"
    write_h5ad(features(1.0), path)
    done = []

    class Opening:  # anndata's h5py, whose File replaces the file on disk once it is open
        def __getattr__(self, name):
            return getattr(h5py, name)

        @staticmethod
        def File(*args, **kwargs):  # noqa: N802 - h5py's name
            handle = h5py.File(*args, **kwargs)
            if not done:
                done.append(True)
                write_h5ad(features(2.0), path)  # the atomic writer: a new file renamed in
            return handle

    monkeypatch.setattr(reader, "h5py", Opening())
    first = read_h5ad(path)
    monkeypatch.undo()
    assert done and (first.X == 1.0).all()  # the version it opened, whole
    assert (read_h5ad(path).X == 2.0).all()


def test_a_reader_that_loses_stderr_mid_work_never_reports_success(tiny_store, tiny_model, tmp_path):
    out = tmp_path / "e.h5ad"
    cmd = (f"{sys.executable} -m cellica.cli embed --store '{tiny_store.path}' --checkpoint '{tiny_model}' "
           f"--out '{out}' 2>&1 >/dev/null | head -c 0; exit ${{PIPESTATUS[0]}}")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}  # its progress bar meets the closed pipe
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 141 and not out.exists()


def test_mae_weights_depend_on_mae_threads_not_on_the_machine(tiny_store, tmp_path):
    """The torch thread count is a parameter (mae.threads, default 2), never the job's cores: the
    same value gives the same bytes whatever torch was set to before."""
    import torch

    from cellica.embed.params import TrainParams
    from cellica.embed.train import train_mae

    saved = torch.get_num_threads()
    try:
        outs = []
        for before in (1, 2):
            torch.set_num_threads(before)
            out = tmp_path / f"cores{before}" / "model.safetensors"
            train_mae(tiny_store.path, out, TrainParams(**{**TINY_MAE, "threads": 2, "epochs": 2}))
            outs.append(out.read_bytes())
    finally:
        torch.set_num_threads(saved)
    assert outs[0] == outs[1]
