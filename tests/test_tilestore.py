import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.store.tilestore import TileStore


def _meta(n, start=0, control_every=2):
    return pd.DataFrame(
        {
            "tile_id": [f"t{i}" for i in range(start, start + n)],
            "plate": "P1",
            "well": "A01",
            "site": np.arange(start, start + n),
            "batch": "B1",
            "perturbation": ["ctrl" if i % control_every == 0 else "G1" for i in range(start, start + n)],
            "is_control": [i % control_every == 0 for i in range(start, start + n)],
            "guide": "g1",
        }
    )


def _tiles(n, start=0, c=2, h=4, w=3):
    # Each tile is filled with its own index, so reads are checkable by eye.
    return (np.arange(start, start + n, dtype=np.uint16)[:, None, None, None] * np.ones((1, c, h, w), np.uint16))


def _write(path, sizes=(5, 7, 1), shard=4, **kw):
    with TileStore.create(path, ["a", "b"], (4, 3), "uint16", {"source": "test"}, shard, **kw) as w:
        start = 0
        for n in sizes:
            w.append(_tiles(n, start), _meta(n, start))
            start += n
    return TileStore.open(path)


def test_roundtrip_blocks_shards_and_random_read(tmp_path):
    store = _write(tmp_path / "s.zarr")
    assert store.n_tiles == 13 and store.n_channels == 2 and store.tile_shape == (4, 3)
    assert store.channel_names == ["a", "b"] and store.dtype == np.uint16
    assert store.attrs["provenance"] == {"source": "test"}
    assert store.metadata["guide"].tolist() == ["g1"] * 13  # optional column kept
    assert store.metadata["is_control"].dtype == bool
    idx = [12, 0, 5, 5, 3, 9]
    got = store.read(idx)
    assert got.shape == (6, 2, 4, 3)
    assert got[:, 0, 0, 0].tolist() == idx
    assert store.read_range(4, 8)[:, 1, 3, 2].tolist() == [4, 5, 6, 7]
    blocks = list(store.iter_blocks())
    assert [s for s, _ in blocks] == [0, 4, 8, 12]
    # Shards: 13 tiles of 4 per shard make 4 shard files, not 13 chunk files.
    files = [f for f in (tmp_path / "s.zarr" / "tiles").rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert len(files) == 4


def test_read_out_of_range(tmp_path):
    store = _write(tmp_path / "s.zarr")
    with pytest.raises(CellicaError, match="out of range"):
        store.read([13])


def test_refuses_existing_store_without_overwrite(tmp_path):
    _write(tmp_path / "s.zarr")
    with pytest.raises(CellicaError, match="already exists; pass --overwrite"):
        _write(tmp_path / "s.zarr")
    store = _write(tmp_path / "s.zarr", sizes=(2,), overwrite=True)
    assert store.n_tiles == 2


def test_duplicate_tile_ids_leave_nothing(tmp_path):
    path = tmp_path / "dup.zarr"
    with pytest.raises(CellicaError, match=r"duplicate tile_id\(s\): \['t0', 't1'\]"):
        with TileStore.create(path, ["a", "b"], (4, 3), "uint16") as w:
            w.append(_tiles(2), _meta(2))
            w.append(_tiles(2), _meta(2))
    assert list(tmp_path.iterdir()) == []


def test_no_controls_is_an_error(tmp_path):
    meta = _meta(3)
    meta["is_control"] = False
    with pytest.raises(CellicaError, match="no control tiles"):
        with TileStore.create(tmp_path / "s.zarr", ["a", "b"], (4, 3), "uint16") as w:
            w.append(_tiles(3), meta)
    assert list(tmp_path.iterdir()) == []


def test_missing_column_and_bad_values(tmp_path):
    with TileStore.create(tmp_path / "s.zarr", ["a", "b"], (4, 3), "uint16") as w:
        with pytest.raises(CellicaError, match=r"missing required column\(s\) \['batch'\]"):
            w.append(_tiles(2), _meta(2).drop(columns="batch"))
        bad = _meta(2)
        bad["is_control"] = ["yes", "maybe"]
        with pytest.raises(CellicaError, match="'maybe'"):
            w.append(_tiles(2), bad)
        with pytest.raises(CellicaError, match="does not match tiles"):
            w.append(_tiles(2, h=5), _meta(2))
        with pytest.raises(CellicaError, match="block dtype uint8"):
            w.append(_tiles(2).astype(np.uint8), _meta(2))
        w.abort()
    assert list(tmp_path.iterdir()) == []


def test_exception_mid_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with TileStore.create(tmp_path / "s.zarr", ["a", "b"], (4, 3), "uint16", shard_tiles=2) as w:
            w.append(_tiles(5), _meta(5))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_open_rejects_non_store(tmp_path):
    with pytest.raises(CellicaError, match="not a tile store"):
        TileStore.open(tmp_path)


def test_summary_counts(tiny_store):
    info = tiny_store.summary()
    assert info["n_tiles"] == tiny_store.n_tiles
    assert info["n_controls"] == int(tiny_store.metadata["is_control"].sum())
    assert info["per_batch"].sum() == tiny_store.n_tiles
    assert list(info["channel_stats"]["channel"]) == tiny_store.channel_names
