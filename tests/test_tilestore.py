import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.store._shards import direct_layout, index_size
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


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_the_direct_decoder_reads_what_zarr_reads(tmp_path, dtype, checksums, compression):
    import json

    import zarr

    rng = np.random.default_rng(3)
    top = np.iinfo(dtype).max
    tiles = (rng.gamma(2.0, top / 12, size=(11, 2, 16, 16))).clip(0, top).astype(dtype)
    tiles[4] = 0  # an all-fill tile: zarr writes no chunk for it (an empty index entry)
    tiles[7, 1] = top
    path = tmp_path / "s.zarr"
    with TileStore.create(path, ["a", "b"], (16, 16), dtype, {"source": "test"}, 4, checksums=checksums,
                          compression=compression) as w:
        w.append(tiles, _meta(11))
    store = TileStore.open(path)
    blosc = json.loads((path / "tiles" / "zarr.json").read_bytes())["codecs"][0]["configuration"]["codecs"][1]
    assert store.attrs["compression"] == compression == blosc["configuration"]["cname"]
    assert store._decoder.direct is not None and store._decoder.direct.chunk_crc == checksums  # the fast path runs
    index = np.frombuffer(store.shard_file(1).read_bytes()[-index_size(4):-4], "<u8").reshape(4, 2)
    assert index[0].tolist() == [2**64 - 1] * 2  # tile 4 has no chunk
    by_zarr = np.asarray(zarr.open_array(str(path / "tiles"), mode="r")[:])
    np.testing.assert_array_equal(by_zarr, tiles)
    for start, stop in [(0, 11), (0, 4), (3, 9), (8, 11), (10, 11), (4, 5)]:
        got = store.read_range(start, stop)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, by_zarr[start:stop])
    np.testing.assert_array_equal(store.read([10, 0, 4, 4, 7]), by_zarr[[10, 0, 4, 4, 7]])
    # A layout it does not know (here: the index at the shard's start) is left to zarr.
    meta = json.loads((path / "tiles" / "zarr.json").read_bytes())
    assert direct_layout(meta) is not None
    meta["codecs"][0]["configuration"]["index_location"] = "start"
    assert direct_layout(meta) is None


def test_a_store_without_a_manifest_is_refused(tmp_path):
    """Without its manifest an index of empty entries reads as zeros and a shard of another store
    reads as this one's: its absence cannot be told from its removal, so it is an error."""
    import json

    path = tmp_path / "s.zarr"
    _write(path, sizes=(13,), shard=4)
    attrs_file = path / "zarr.json"
    meta = json.loads(attrs_file.read_text())
    meta["attributes"].pop("manifest")
    attrs_file.write_text(json.dumps(meta))
    with pytest.raises(CellicaError, match=r"s.zarr: has no manifest"):
        TileStore.open(path)


def test_verify_checks_every_chunk_even_where_the_shard_checksum_agrees(tmp_path):
    """Reads check the whole shard's crc32c (the chunks' would check the same bytes again);
    ``inspect --verify`` checks the chunks' too: a shard damaged and its manifest entry
    rewritten to match is still caught."""
    import json

    import google_crc32c

    path = tmp_path / "s.zarr"
    _write(path, sizes=(13,), shard=4)
    shard = TileStore.open(path).shard_file(1)
    data = bytearray(shard.read_bytes())
    data[20] ^= 0xFF
    shard.write_bytes(bytes(data))
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["manifest"]["shard_crc32c"][1] = google_crc32c.value(bytes(data))
    (path / "zarr.json").write_text(json.dumps(meta))
    store = TileStore.open(path)
    with pytest.raises(CellicaError, match=r"\(tiles 4-7\) is damaged: ValueError: chunk 0's crc32c does not match"):
        store.read_range(4, 8, check_chunks=True)
    with pytest.raises(CellicaError, match="chunk 0's crc32c does not match"):
        store.verify()


# ---------------------------------------------------------------------- every check can fail
def _edit_zarr_json(path, edit):
    import json

    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_a_sparse_read_checks_the_shard_index_against_the_manifest(tmp_path):
    """Two chunks' index entries exchanged, the index's own crc32c made valid again: every chunk
    and the index are self-consistent, so only the manifest's digest of the index can tell. (It
    was once taken over the index *with* its own crc32c: a constant for every valid index.)"""
    import google_crc32c

    from cellica.store._shards import index_size

    path = tmp_path / "s.zarr"
    store = _write(path, sizes=(64,), shard=32)
    np.testing.assert_array_equal(store.read([0, 31]), _tiles(1, 0).tolist() + _tiles(1, 31).tolist())
    shard = store.shard_file(0)
    data = bytearray(shard.read_bytes())
    tail = index_size(32)
    entries = np.frombuffer(bytes(data[-tail:-4]), dtype="<u8").reshape(32, 2).copy()
    entries[[0, 31]] = entries[[31, 0]]
    body = entries.tobytes()
    data[-tail:] = body + google_crc32c.value(body).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    with pytest.raises(CellicaError, match=r"tiles/c/0/0/0/0 \(tiles 0-31\) is damaged: its index differs"):
        TileStore.open(path).read([0, 31])


@pytest.mark.parametrize("edit, named", [
    (lambda a: a.__setitem__("channel_names", a["channel_names"][::-1]), "channel_names"),
    (lambda a: a.__setitem__("dtype", "uint8"), "dtype"),
    (lambda a: a["provenance"].__setitem__("source", "ingest"), "provenance"),
    (lambda a: a.__setitem__("note", "added"), "note"),
])
def test_an_edited_store_attribute_is_named_when_the_store_is_opened(tmp_path, edit, named, capsys):
    from cellica.cli.app import main

    path = tmp_path / "s.zarr"
    _write(path, sizes=(13,), shard=4)
    _edit_zarr_json(path / "zarr.json", lambda m: edit(m["attributes"]))
    with pytest.raises(CellicaError, match=rf"its attribute\(s\) {named} differ from those written with it"):
        TileStore.open(path)
    assert main(["inspect", str(path), "--verify"]) == 2
    assert f"attribute(s) {named} differ" in capsys.readouterr().err


def test_edited_array_metadata_is_refused(tmp_path):
    path = tmp_path / "s.zarr"
    _write(path, sizes=(13,), shard=4)
    _edit_zarr_json(path / "tiles" / "zarr.json", lambda m: m.__setitem__("fill_value", 7))
    with pytest.raises(CellicaError, match=r"its array metadata \(tiles/zarr.json\) differs"):
        TileStore.open(path)
