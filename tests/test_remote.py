"""fsspec URLs for the manifest, its images and OME-Zarr plates (memory:// stands in for s3://,
gs://, https://), and what an unreachable one does."""

import fsspec
import numpy as np
import pandas as pd
import pytest
import tifffile

from cellica.core.errors import CellicaError
from cellica.core.remote import is_url, join, parent, redact
from cellica.store.ingest import ingest
from cellica.store.params import IngestParams


@pytest.fixture
def memfs():
    fs = fsspec.filesystem("memory")
    yield fs
    fs.store.clear()  # memory:// is one file system per process


def test_url_helpers_by_hand():
    assert is_url("s3://b/k") and is_url("memory://x") and not is_url("/data/x.tif") and not is_url("C:x")
    assert redact("https://alice:s3cr3t@host/p.tif") == "https://***@host/p.tif"
    assert redact("https://host/p.tif?X-Amz-Signature=abc&X-Amz-Credential=k") == "https://host/p.tif?***"
    assert redact("failed for s3://key:sec@b/x, retry") == "failed for s3://***@b/x, retry"
    assert join("s3://b/screen", "img/a.tif") == "s3://b/screen/img/a.tif"
    assert join("s3://b/screen", "gs://c/a.tif") == "gs://c/a.tif" and join("/m", "/abs/a.tif") == "/abs/a.tif"
    assert parent("s3://b/screen/manifest.csv") == "s3://b/screen"


def _images(tmp_path, fs=None):
    """One 64 x 64 field of two channels per well (2 wells); the manifest beside the images."""
    rng = np.random.default_rng(0)
    rows = []
    for w in ("A01", "A02"):
        for c in ("dna", "er"):
            img = rng.integers(0, 4000, (64, 64)).astype(np.uint16)
            name = f"{w}_{c}.tif"
            tifffile.imwrite(tmp_path / name, img)
            if fs is not None:
                fs.pipe(f"/screen/{name}", (tmp_path / name).read_bytes())
            rows.append({"path": name, "plate": "P1", "well": w, "site": 1, "channel": c, "batch": "B1",
                         "perturbation": "ctrl" if w == "A01" else "G1"})
    pd.DataFrame(rows).to_csv(tmp_path / "manifest.csv", index=False)
    if fs is not None:
        fs.pipe("/screen/manifest.csv", (tmp_path / "manifest.csv").read_bytes())


PARAMS = dict(channels=["dna", "er"], tile_size=32, control_label="ctrl", shard_tiles=4)


def test_manifest_and_images_from_a_url_equal_local_ones(tmp_path, memfs):
    _images(tmp_path, memfs)
    local = ingest(tmp_path / "manifest.csv", tmp_path / "local.zarr", IngestParams(**PARAMS))
    remote = ingest("memory://screen/manifest.csv", tmp_path / "remote.zarr", IngestParams(**PARAMS))
    np.testing.assert_array_equal(remote.read(np.arange(8)), local.read(np.arange(8)))
    pd.testing.assert_frame_equal(remote.metadata, local.metadata)
    assert remote.attrs["provenance"]["manifest"] == "memory://screen/manifest.csv"
    assert remote.attrs["provenance"]["manifest_sha256"] == local.attrs["provenance"]["manifest_sha256"]


def test_an_ome_zarr_plate_from_a_url(tmp_path, memfs):
    pytest.importorskip("ome_zarr", reason="ome-zarr (the writer of the test plates) is a dev dependency")
    from tests.test_omezarr import PARAMS as PLATE
    from tests.test_omezarr import well_manifest, write_plate

    write_plate(tmp_path / "plate.zarr")
    for f in (tmp_path / "plate.zarr").rglob("*"):
        if f.is_file():
            memfs.pipe(f"/screen/{f.relative_to(tmp_path).as_posix()}", f.read_bytes())
    local = ingest(well_manifest(tmp_path, tmp_path / "plate.zarr"), tmp_path / "l.zarr", IngestParams(**PLATE))
    memfs.pipe("/screen/wells.csv", (tmp_path / "wells.csv").read_bytes())
    remote = ingest("memory://screen/wells.csv", tmp_path / "r.zarr", IngestParams(**PLATE))
    np.testing.assert_array_equal(remote.read(np.arange(16)), local.read(np.arange(16)))


def test_unreachable_remote_paths_fail_cleanly_without_leaking_secrets(tmp_path, memfs):
    _images(tmp_path, memfs)
    table = pd.read_csv(tmp_path / "manifest.csv")
    table.loc[3, "path"] = "https://alice:s3cr3t@127.0.0.1:9/A02_er.tif"  # nothing listens on port 9
    table.to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(CellicaError, match=r"image file https://\*\*\*@127.0.0.1:9/A02_er.tif is unreachable") as err:
        ingest(tmp_path / "m.csv", tmp_path / "s.zarr", IngestParams(**PARAMS))
    assert "s3cr3t" not in str(err.value) and not (tmp_path / "s.zarr").exists()
    with pytest.raises(CellicaError, match="manifest memory://screen/nothing.csv is unreachable"):
        ingest("memory://screen/nothing.csv", tmp_path / "s.zarr", IngestParams(**PARAMS))
    table = pd.read_csv(tmp_path / "manifest.csv").assign(path="memory://screen/gone.zarr")
    table.drop_duplicates(["well"]).drop(columns=["site", "channel"]).to_csv(tmp_path / "w.csv", index=False)
    with pytest.raises(CellicaError, match="OME-Zarr plate memory://screen/gone.zarr cannot be opened"):
        ingest(tmp_path / "w.csv", tmp_path / "s.zarr", IngestParams(**{**PARAMS, "format": "ome_zarr"}))
    assert not (tmp_path / "s.zarr").exists()


def test_a_tile_store_read_from_a_url(tiny_store, tiny_model, memfs, tmp_path):
    from cellica.embed.extract import embed_store
    from cellica.store.tilestore import TileStore

    root = tiny_store.path
    for f in root.rglob("*"):
        if f.is_file():
            memfs.pipe(f"/screen/tiny.zarr/{f.relative_to(root).as_posix()}", f.read_bytes())
    remote = TileStore.open("memory://screen/tiny.zarr")
    assert remote.n_tiles == tiny_store.n_tiles and remote.has_ground_truth
    np.testing.assert_array_equal(remote.read(np.arange(remote.n_tiles)), tiny_store.read(np.arange(remote.n_tiles)))
    assert remote.verify()["content_digest"] and remote.content_sha256 == tiny_store.content_sha256
    a, b = embed_store("memory://screen/tiny.zarr", tiny_model), embed_store(root, tiny_model)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.uns["provenance"]["store"] == "memory://screen/tiny.zarr"
    memfs.rm("/screen/tiny.zarr/tiles/c/1/0/0/0")  # a lost shard reads as an error, never as zeros
    with pytest.raises(CellicaError, match=r"memory://screen/tiny.zarr: shard file .*tiles/c/1/0/0/0 .* is missing"):
        TileStore.open("memory://screen/tiny.zarr").read_range(16, 20)
    with pytest.raises(CellicaError, match=r"https://\*\*\*@127.0.0.1:9/s.zarr: the tile store is unreachable") as err:
        TileStore.open("https://bob:pw@127.0.0.1:9/s.zarr")
    assert "pw" not in str(err.value).replace("https", "")
