"""The README's ways in, each run through the default DAG to the report: image files through a
manifest, OME-Zarr HCS plates, a trained checkpoint, cp_measure profiles (imported tile-level
embeddings of pooled screens are tests/test_imported_features.py's). Apart from
tests/test_workflow.py so that the e2e tier runs the files side by side (pytest -n 2 --dist
loadfile)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from cellica.registry import PAPER_VARIANTS
from cellica.store.tilestore import TileStore
from tests.test_workflow import TINY, snakemake

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny screen's tile store and its trained MAE (the tiny config, as far as training)."""
    workdir = tmp_path_factory.mktemp("trained")
    run = snakemake(workdir, "results/mae/seed0/model.safetensors")
    assert run.returncode == 0, run.stderr[-4000:]
    return workdir


def _tiny_config(tmp_path: Path, **changes) -> Path:
    """The tiny config without the stability runs and the baselines, with the paper's four
    variants and one seed (the whole DAG still runs; the tiny run tests every variant, seed and baseline)."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["stability"] = {"enabled": False}
    cfg["baselines"] = {"names": []}
    cfg["transform"]["variants"] = list(PAPER_VARIANTS)
    cfg["evaluate"]["seeds"] = [0]
    for key, value in changes.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _omezarr_plates(store: TileStore, root: Path) -> Path:
    """Every tile of ``store`` as a field of an OME-Zarr HCS plate (one plate per store plate,
    sites in order), written with ome-zarr's own writer; returns the one-row-per-well manifest."""
    import zarr
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    md = store.metadata
    tiles = store.read(np.arange(store.n_tiles))
    rows = []
    for plate, t in md.groupby("plate", sort=True):
        path = root / f"{plate}.zarr"
        group = zarr.open_group(str(path), mode="w")
        wells = sorted(t["well"].unique())
        names = [f"{w[0]}/{int(w[1:])}" for w in wells]
        write_plate_metadata(group, sorted({n.split("/")[0] for n in names}),
                             sorted({n.split("/")[1] for n in names}, key=int), names, name=plate)
        for well, name in zip(wells, names, strict=True):
            sites = t[t["well"] == well].sort_values("site")
            wg = group.require_group(name.split("/")[0]).require_group(name.split("/")[1])
            write_well_metadata(wg, [str(k) for k in range(len(sites))])
            for k, i in enumerate(sites.index):
                field = wg.require_group(str(k))
                write_image(tiles[i], field, axes="cyx", scale_factors=[2])
                field.attrs.update({"ome": {**field.attrs["ome"], "omero": {"channels": [
                    {"label": c, "color": "FFFFFF", "active": True, "window": {"start": 0, "end": 65535, "min": 0,
                                                                               "max": 65535}}
                    for c in store.channel_names]}}})
            first = sites.iloc[0]
            rows.append({"path": path.name, "plate": plate, "well": well, "batch": first["batch"],
                         "gene": first["perturbation"], "guide": first["guide"]})
    pd.DataFrame(rows).to_csv(root / "wells.csv", index=False)
    return root / "wells.csv"


@pytest.mark.parametrize("way", ["images", "ome_zarr", "checkpoint", "profiles"])
def test_each_way_in_runs_the_default_dag_to_the_report(way, trained, tmp_path):
    """The README's "three ways in": per-channel image files through a manifest, OME-Zarr HCS
    plates, and a trained checkpoint instead of training (imported features and pooled
    screens: the test above). Each runs the default DAG to the report, with non-degenerate
    numbers."""
    import tifffile

    store = TileStore.open(trained / "results" / "tiles.zarr")
    if way == "ome_zarr":
        pytest.importorskip("ome_zarr", reason="ome-zarr (the writer of the test plates) is a dev dependency")
        config = _tiny_config(tmp_path, source="ingest", ingest={
            "manifest": str(_omezarr_plates(store, tmp_path)), "format": "ome_zarr", "channels": store.channel_names,
            "tile_size": 32, "column_map": {"perturbation": "gene"}, "control_label": "non-targeting",
            "shard_tiles": 16})
    elif way == "images":  # every tile of the tiny store as one field, one TIFF per channel
        rows = []
        tiles = store.read(np.arange(store.n_tiles))
        for i, r in enumerate(store.metadata.itertuples()):
            for c, name in enumerate(store.channel_names):
                path = tmp_path / "images" / f"{r.tile_id}_{name}.tif"
                path.parent.mkdir(exist_ok=True)
                tifffile.imwrite(path, tiles[i, c])
                rows.append({"path": f"images/{path.name}", "plate": r.plate, "well": r.well, "site": r.site,
                             "channel": name, "batch": r.batch, "gene": r.perturbation, "guide": r.guide})
        pd.DataFrame(rows).to_csv(tmp_path / "manifest.csv", index=False)
        config = _tiny_config(tmp_path, source="ingest", ingest={
            "manifest": str(tmp_path / "manifest.csv"), "channels": store.channel_names, "tile_size": 32,
            "column_map": {"perturbation": "gene"}, "control_label": "non-targeting", "shard_tiles": 16})
    elif way == "profiles":  # images but no model: cp_measure's classical features
        pytest.importorskip("cp_measure", reason="cp_measure (the profiles extra) is not installed")
        config = _tiny_config(tmp_path, profiles={"enabled": True, "features": ["intensity", "sizeshape"]},
                              transform={"n_components": 6, "standardize": "controls", "drop_constant": True})
    else:
        config = _tiny_config(tmp_path, mae={"checkpoint": str(trained / "results" / "mae" / "seed0" /
                                                                "model.safetensors")})
    run = snakemake(tmp_path, configfile=config)
    assert run.returncode == 0, run.stderr[-4000:]
    res = tmp_path / "results"
    summary = pd.read_parquet(res / "eval" / "summary.parquet")
    auroc = summary[(summary["metric"] == "auroc_heldout") & (summary["row"] == "mean")]
    assert len(auroc) >= 4 and auroc["value"].between(0.05, 0.99).all() and auroc["value"].nunique() > 1
    assert (tmp_path / "reports" / "index.html").is_file()
    if way in ("images", "ome_zarr"):  # the ingested store holds the same tiles as the one they came from
        ingested = TileStore.open(res / "tiles.zarr")
        keys = ["batch", "plate", "well", "site"]

        def in_field_order(s):
            return s.read(s.metadata.sort_values(keys).index.to_numpy())

        assert ingested.n_tiles == store.n_tiles and np.array_equal(in_field_order(ingested), in_field_order(store))
    elif way == "profiles":  # measured, not trained
        assert not (res / "mae").exists() and (res / "embeddings" / "cp_measure" / "embeddings.h5ad").is_file()
    else:  # no training: the checkpoint's embedding
        assert not (res / "mae").exists() and (res / "embeddings" / "checkpoint" / "embeddings.h5ad").is_file()
