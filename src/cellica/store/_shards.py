"""The tile store's shard files and their manifest: where each shard lives, what was written
(byte count and crc32c per shard, sha256 per table, the generation), and the decoding of
verified shard bytes from memory, so the bytes checked are the bytes decoded.
"""

from __future__ import annotations

import json
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from cellica.core.remote import as_path
from cellica.store._metadata import GROUND_TRUTH_DIR, METADATA_FILE

MANIFEST_KEY = "manifest"


def replaced_message(label: str, opened: str | None, now: str | None) -> str:
    return (f"{label}: the tile store was replaced while it was being read (generation {opened} when opened, "
            f"{now or 'none'} now); nothing was written: run the step again")


class ShardDecoder:
    """Decodes verified shard bytes with the store's own array metadata, from memory: the
    bytes checked are the bytes decoded, and each shard file is read in one request.

    Stores in the layout cellica writes (one tile per chunk, little-endian pixels, one Blosc
    compressor, crc32c per chunk or none, the shard index at the end with its crc32c) are
    decoded directly: the index parsed, each chunk's crc32c checked (unless the whole shard's
    was, against the manifest: the same bytes) and Blosc's decompressor writing straight into
    the output slab. That is the same codec on the same bytes, so the
    same pixels (tests/test_store.py compares it with zarr tile for tile), without zarr's
    per-chunk asynchronous pipeline, which cost more than the decompression itself
    (docs/benchmarks.md, "Where embedding time goes"). Any other layout is decoded by zarr.
    """

    def __init__(self, array_meta: bytes):
        import zarr
        from zarr.core.buffer import cpu
        from zarr.storage import MemoryStore

        self._buffer = cpu.Buffer.from_bytes
        self._chunks: dict = {"zarr.json": self._buffer(array_meta)}
        self._array = zarr.open_array(MemoryStore(self._chunks), mode="r", zarr_format=3)
        self._lock = threading.Lock()  # zarr's reads share one in-memory store: one at a time
        self.direct = direct_layout(json.loads(array_meta))

    def read(self, blobs: dict[int, bytes], read):
        """``read(array)`` on a zarr array holding only the shards in ``blobs``."""
        keys = [f"c/{shard}/0/0/0" for shard in blobs]
        with self._lock:
            return self._read(keys, blobs, read)

    def _read(self, keys: list[str], blobs: dict[int, bytes], read):
        try:
            for key, data in zip(keys, blobs.values(), strict=True):
                self._chunks[key] = self._buffer(data)
            return read(self._array)
        finally:  # a shard not handed in must never be read (it would be zarr's fill value)
            for key in keys:
                self._chunks.pop(key, None)

    def slab(self, blobs: dict[int, bytes], start: int, stop: int, verified: bool = False) -> np.ndarray:
        """Tiles ``start:stop`` of the array, all of them in the shards of ``blobs``; ``verified``:
        each blob's crc32c was checked whole, so its chunks' need not be."""
        if self.direct is None:
            return self.read(blobs, lambda a: np.asarray(a[start:stop]))
        layout = self.direct
        out = np.empty((stop - start, *layout.tile_shape), dtype=layout.dtype)
        n = layout.shard_tiles
        for shard, blob in blobs.items():
            lo, hi = max(start, shard * n), min(stop, (shard + 1) * n)
            if lo < hi:
                layout.decode(blob, range(lo - shard * n, hi - shard * n), out[lo - start : hi - start], verified)
        return out


class DirectLayout:
    """A shard layout :class:`ShardDecoder` decodes itself (see :func:`direct_layout`)."""

    EMPTY = 2**64 - 1  # an index entry of a chunk never written: the array's fill value

    def __init__(self, dtype: str, tile_shape: tuple[int, ...], shard_tiles: int, chunk_crc: bool, fill_value):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.tile_shape = tile_shape
        self.shard_tiles = shard_tiles
        self.chunk_crc = chunk_crc
        self.fill_value = fill_value
        self.tile_bytes = int(np.prod(tile_shape)) * self.dtype.itemsize

    def decode(self, blob: bytes, tiles: range, out: np.ndarray, verified: bool = False) -> None:
        """Decode chunks ``tiles`` of one shard's bytes into ``out`` (one row per tile);
        ``verified``: the blob's crc32c was checked whole, the chunks' are not checked again."""
        import google_crc32c
        from numcodecs import blosc

        tail = index_size(self.shard_tiles)
        if len(blob) < tail:
            raise ValueError(f"{len(blob)} bytes, shorter than the shard index ({tail} bytes)")
        index = blob[-tail:]
        if google_crc32c.value(index[:-4]) != int.from_bytes(index[-4:], "little"):
            raise ValueError("the shard index's crc32c does not match")
        entries = np.frombuffer(index[:-4], dtype="<u8").reshape(self.shard_tiles, 2)
        view, end = memoryview(blob), len(blob) - tail
        for row, tile in enumerate(tiles):
            offset, nbytes = (int(v) for v in entries[tile])
            if offset == self.EMPTY and nbytes == self.EMPTY:
                out[row] = self.fill_value
                continue
            if offset + nbytes > end or nbytes < 16 + 4 * self.chunk_crc:
                raise ValueError(f"chunk {tile}'s index entry ({offset}, {nbytes}) lies outside the shard's data")
            body = view[offset : offset + nbytes - 4 * self.chunk_crc]
            if self.chunk_crc and not verified and google_crc32c.value(bytes(body)) != int.from_bytes(
                    view[offset + nbytes - 4 : offset + nbytes], "little"):
                raise ValueError(f"chunk {tile}'s crc32c does not match")
            # Blosc's header: uncompressed and compressed sizes (bytes 4-8 and 12-16).
            decoded, compressed = struct.unpack_from("<I", body, 4)[0], struct.unpack_from("<I", body, 12)[0]
            if decoded != self.tile_bytes or compressed != len(body):
                raise ValueError(f"chunk {tile} holds {decoded} bytes in {compressed}, not a tile's "
                                 f"{self.tile_bytes} in {len(body)}")
            blosc.decompress(body, out[row])


def direct_layout(meta: dict) -> DirectLayout | None:
    """The :class:`DirectLayout` of a tile array's metadata (``tiles/zarr.json``) when it is the
    one cellica writes, else ``None`` (zarr decodes it)."""
    try:
        (sharding,) = meta["codecs"]
        conf = sharding["configuration"]
        shape, shard_shape, chunk = (
            meta["shape"],
            meta["chunk_grid"]["configuration"]["chunk_shape"],
            conf["chunk_shape"],
        )
        inner = [c["name"] for c in conf["codecs"]]
        endian = (conf["codecs"][0].get("configuration") or {}).get("endian", "little")
        index = [(c["name"], (c.get("configuration") or {}).get("endian")) for c in conf["index_codecs"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if (sharding["name"] != "sharding_indexed" or conf.get("index_location", "end") != "end"
            or index != [("bytes", "little"), ("crc32c", None)] or inner[:2] != ["bytes", "blosc"]
            or inner[2:] not in ([], ["crc32c"]) or endian != "little" or sys.byteorder != "little"
            or meta.get("data_type") not in ("uint8", "uint16") or len(shape) != 4 or chunk[0] != 1
            or list(chunk[1:]) != list(shape[1:]) or list(shard_shape[1:]) != list(shape[1:])
            or meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/") != "/"
            or not isinstance(meta.get("fill_value"), int)):
        return None
    return DirectLayout(meta["data_type"], tuple(shape[1:]), int(shard_shape[0]), inner[2:] == ["crc32c"],
                        meta["fill_value"])


def shard_problem(data: bytes | None, shard: int, manifest: dict) -> str | None:
    """What is wrong with shard ``shard``'s bytes (``None``: missing file) against the manifest:
    absent, empty, another size or crc32c than written (damaged, or a shard of another store).
    (A store without a manifest is refused when it is opened: :func:`attributes_problem`.)"""
    import google_crc32c

    if data is None:
        return "is missing: the store is damaged (it would read as zeros)"
    if not data:
        return "is empty (0 bytes): the store is damaged (it would read as zeros)"
    sizes, crcs = manifest.get("shard_bytes"), manifest.get("shard_crc32c")
    if sizes is not None and len(data) != sizes[shard]:
        return (
            f"is damaged: {len(data)} bytes where {sizes[shard]} were written (truncated, or a shard of another store)"
        )
    if crcs is not None and google_crc32c.value(data) != crcs[shard]:
        return ("is damaged: its crc32c differs from the one recorded when the store was written (flipped bytes, or "
                "a shard of another store)")
    return None


def index_size(shard_tiles: int) -> int:
    """Bytes of a shard's index at its end: an offset and a length per chunk, then its crc32c."""
    return 16 * shard_tiles + 4


def index_problem(size: int, index: bytes, shard: int, manifest: dict) -> str | None:
    """:func:`shard_problem` for a sparse read, which reads a shard's index and a few chunks
    instead of the whole file: the file's size and its index's crc32c (every chunk read carries
    its own crc32c, checked by zarr)."""
    import google_crc32c

    # The crc32c of the index without its own trailing crc32c: a crc over bytes that end in their
    # own crc is one constant for every valid index, so it would check nothing.
    sizes, index_crcs = manifest.get("shard_bytes"), manifest.get("shard_index_body_crc32c")
    if size == 0:
        return "is empty (0 bytes): the store is damaged (it would read as zeros)"
    if sizes is not None and size != sizes[shard]:
        return f"is damaged: {size} bytes where {sizes[shard]} were written (truncated, or a shard of another store)"
    if index_crcs is not None and google_crc32c.value(index[:-4]) != index_crcs[shard]:
        return ("is damaged: its index differs from the one recorded when the store was written (flipped bytes, or "
                "a shard of another store)")
    return None


def generation_at(path: Path) -> str | None:
    """The generation of the store now at ``path`` (``None``: gone, half-replaced or unreadable)."""
    try:
        attrs = json.loads((as_path(path) / "zarr.json").read_bytes()).get("attributes", {})
    except Exception:  # not the generation a reader holds, whatever the cause
        return None
    return (attrs.get(MANIFEST_KEY) or {}).get("generation")


def shard_path(store: Path, shard: int) -> Path:
    """Where zarr keeps shard ``shard`` of the 4-D ``tiles`` array (default chunk-key encoding)."""
    return as_path(store) / "tiles" / "c" / str(shard) / "0" / "0" / "0"


def content_digest(store: Path, n_tiles: int, shard_tiles: int) -> str:
    """sha256 over the metadata table and every shard file, in shard order."""
    import hashlib

    h = hashlib.sha256()
    files = [as_path(store) / METADATA_FILE] + [shard_path(store, i) for i in range(-(-n_tiles // shard_tiles))]
    for f in files:
        h.update(f.name.encode())
        if f.is_file():
            with f.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                    h.update(block)
        else:
            h.update(b"<missing>")
    return h.hexdigest()


def attribute_digests(attrs: dict[str, Any]) -> dict[str, str]:
    """sha256 (16 hex digits) of each store attribute as JSON, the manifest itself excepted:
    what :meth:`cellica.store.tilestore.TileStore.open` checks, naming an attribute edited since."""
    import hashlib

    return {k: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:16]
            for k, v in sorted(attrs.items()) if k != MANIFEST_KEY}


def attributes_problem(attrs: dict[str, Any], array_meta: bytes) -> str | None:
    """What is wrong with a store's attributes and array metadata against its manifest
    (``None``: nothing). A store without a manifest is refused: its absence cannot be told from
    its removal, and without it an index of empty entries reads as zeros. Manifests written
    before attributes were recorded are checked for what they hold."""
    import hashlib

    manifest = attrs.get(MANIFEST_KEY)
    if not isinstance(manifest, dict) or "shard_bytes" not in manifest:
        return ("has no manifest (the sizes and checksums every read is checked against: removed from zarr.json, "
                "or written by a cellica before manifests)")
    recorded = manifest.get("attributes")
    if recorded is not None:
        found = attribute_digests(attrs)
        changed = sorted(k for k in set(recorded) | set(found) if recorded.get(k) != found.get(k))
        if changed:
            return (f"its attribute(s) {', '.join(changed)} differ from those written with it (zarr.json was "
                    "edited: a reordered channel list would misname every channel)")
    array = manifest.get("array_sha256")
    if array is not None and hashlib.sha256(array_meta).hexdigest() != array:
        return "its array metadata (tiles/zarr.json) differs from the one written with it (edited or replaced)"
    return None


def store_manifest(path: Path, n_tiles: int, shard_tiles: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """What a reader checks: each shard file's byte count and crc32c and its index's crc32c,
    each table's sha256, the array's metadata (``tiles/zarr.json``) and every store attribute
    (``channel_names``, ``dtype``, provenance, ...), and the generation: a digest of all of
    them, so a store written again with other contents has a new one, while the same contents
    (same seed) keep the same bytes."""
    import hashlib

    import google_crc32c

    sizes, crcs, index_crcs = [], [], []
    tail = index_size(shard_tiles)
    for shard in range(-(-n_tiles // shard_tiles)):
        data = shard_path(path, shard).read_bytes()
        sizes.append(len(data))
        crcs.append(google_crc32c.value(data))
        index_crcs.append(google_crc32c.value(data[-tail:-4]))
    tables = [
        METADATA_FILE,
        *(f"{GROUND_TRUTH_DIR}/{f.name}" for f in sorted((path / GROUND_TRUTH_DIR).glob("*.parquet"))),
    ]
    files = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in tables}
    manifest = {"shard_bytes": sizes, "shard_crc32c": crcs, "shard_index_body_crc32c": index_crcs, "files": files,
                "array_sha256": hashlib.sha256((path / "tiles" / "zarr.json").read_bytes()).hexdigest(),
                "attributes": attribute_digests(json.loads(json.dumps(attrs)))}
    generation = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:32]
    return {"generation": generation, **manifest}
