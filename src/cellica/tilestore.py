"""The tile store: a zarr v3 group of image tiles plus per-tile metadata.

Layout of ``STORE.zarr/`` (the contract every later stage reads)::

    zarr.json            group attributes: channel_names, dtype, schema_version,
                         n_tiles, tile_shape, provenance (how the store was made)
    tiles/               array (N, C, H, W), uint8 or uint16, Blosc-zstd compressed,
                         one chunk per tile, sharded ``shard_tiles`` tiles per file
    metadata.parquet     one row per tile, in tile order: tile_id, plate, well, site,
                         batch, perturbation, is_control (+ any optional columns)
    ground_truth/        optional tables (simulated screens only)

Stores are written into a temporary sibling directory and renamed into place only
once complete and valid, so a failed run never leaves a half-written store.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.atomic import (
    check_can_write,
    commit,
    output_lock,
    read_parquet,
    recover,
    remove,
    tmp_sibling,
)
from cellica.contracts import as_bool
from cellica.errors import CellicaError
from cellica.logs import get_logger

SCHEMA_VERSION = 1
REQUIRED_COLUMNS = ("tile_id", "plate", "well", "site", "batch", "perturbation", "is_control")
STRING_COLUMNS = ("tile_id", "plate", "well", "batch", "perturbation")
ALLOWED_DTYPES = ("uint8", "uint16")
METADATA_FILE = "metadata.parquet"
GROUND_TRUTH_DIR = "ground_truth"

log = get_logger("tilestore")


def normalise_metadata(metadata: pd.DataFrame, source: str = "metadata") -> pd.DataFrame:
    """Check the required columns and coerce them to the contract's types.

    Parameters
    ----------
    metadata
        One row per tile.
    source
        Where the table came from, for error messages.

    Returns
    -------
    pandas.DataFrame
        A copy with string identifiers, integer ``site`` and boolean ``is_control``
        and a fresh RangeIndex. Optional columns are kept unchanged.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in metadata.columns]
    if missing:
        raise CellicaError(
            f"{source}: missing required column(s) {missing}; "
            f"the tile store needs {list(REQUIRED_COLUMNS)}"
        )
    out = metadata.reset_index(drop=True).copy()
    for col in REQUIRED_COLUMNS:
        nulls = out[col].isna()
        if nulls.any():
            raise CellicaError(
                f"{source}: column {col!r} has {int(nulls.sum())} empty value(s), "
                f"first at row {int(np.flatnonzero(nulls.to_numpy())[0])}"
            )
    for col in STRING_COLUMNS:
        out[col] = out[col].astype(str)
    try:
        out["site"] = pd.to_numeric(out["site"], downcast=None).astype("int64")
    except (ValueError, TypeError) as exc:
        raise CellicaError(f"{source}: column 'site' must be integers ({exc})") from None
    out["is_control"] = as_bool(out["is_control"], source)
    return out


def duplicated_ids(tile_ids: pd.Series) -> list[str]:
    """Return (up to five) tile ids that occur more than once."""
    dup = tile_ids[tile_ids.duplicated()]
    return list(dict.fromkeys(dup.tolist()))[:5]


class TileStore:
    """Read access to a finished tile store.

    Use :meth:`TileStore.open` to read and :meth:`TileStore.create` to write.

    Attributes
    ----------
    path : pathlib.Path
        The store's directory.
    metadata : pandas.DataFrame
        One row per tile, in tile order.
    """

    def __init__(self, path: Path, array: Any, metadata: pd.DataFrame, attrs: dict):
        self.path = path
        self._array = array
        self.metadata = metadata
        self.attrs = attrs

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike) -> TileStore:
        """Open an existing store for reading (structure is checked, see :meth:`validate`)."""
        import zarr

        path = Path(path)
        if not (path / "zarr.json").is_file():
            raise CellicaError(f"{path}: not a tile store (no zarr.json); run simulate or ingest")
        try:
            group = zarr.open_group(str(path), mode="r", zarr_format=3)
            array = group["tiles"]
        except Exception as exc:  # zarr raises several types for a broken store
            raise CellicaError(f"{path}: cannot open the tile store ({exc})") from None
        meta_path = path / METADATA_FILE
        if not meta_path.is_file():
            raise CellicaError(f"{path}: missing {METADATA_FILE}")
        metadata = normalise_metadata(read_parquet(meta_path, "tile metadata"), str(meta_path))
        store = cls(path, array, metadata, dict(group.attrs))
        store.validate()
        return store

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        channel_names: list[str],
        tile_size: tuple[int, int],
        dtype: str = "uint16",
        provenance: Mapping[str, Any] | None = None,
        shard_tiles: int = 256,
        overwrite: bool = False,
        checksums: bool = True,
    ) -> TileStoreWriter:
        """Start writing a new store; returns a :class:`TileStoreWriter`.

        Parameters
        ----------
        path
            Target directory (conventionally ``*.zarr``).
        channel_names
            One name per channel, in array order.
        tile_size
            ``(H, W)`` of every tile.
        dtype
            ``"uint8"`` or ``"uint16"``.
        provenance
            How the store was made (JSON-serialisable), kept in the attributes.
        shard_tiles
            Tiles per shard file; a million tiles become ``1e6 / shard_tiles`` files.
        overwrite
            Replace an existing store at ``path`` (only once the new one is complete).
        checksums
            A crc32c checksum per chunk, verified on every read (default). ``False`` only
            for measuring what the checksums cost (``benchmarks/tile_store.py``).
        """
        return TileStoreWriter(
            Path(path), list(channel_names), tuple(tile_size), dtype, dict(provenance or {}),
            shard_tiles, overwrite, checksums,
        )

    # ------------------------------------------------------------------ shape
    @property
    def n_tiles(self) -> int:
        return int(self._array.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self._array.shape[1])

    @property
    def tile_shape(self) -> tuple[int, int]:
        return int(self._array.shape[2]), int(self._array.shape[3])

    @property
    def channel_names(self) -> list[str]:
        return list(self.attrs["channel_names"])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._array.dtype)

    @property
    def shard_tiles(self) -> int:
        return int(self.attrs.get("shard_tiles", self._array.shape[0] or 1))

    def __len__(self) -> int:
        return self.n_tiles

    def __repr__(self) -> str:
        return (
            f"TileStore({str(self.path)!r}, n_tiles={self.n_tiles}, "
            f"channels={self.channel_names}, tile_shape={self.tile_shape}, dtype={self.dtype})"
        )

    # ------------------------------------------------------------------ reading
    def shard_file(self, shard: int) -> Path:
        """The file holding shard ``shard`` (tiles ``shard * shard_tiles`` onwards)."""
        return shard_path(self.path, shard)

    def _checked(self, start: int, stop: int, read):
        """Run ``read()`` for tiles ``start:stop``: their shard files must exist (a missing one
        would read as zeros) and every chunk's checksum must match (zarr verifies it)."""
        if stop <= start:
            return read()
        first, last = start // self.shard_tiles, (stop - 1) // self.shard_tiles
        for shard in range(first, last + 1):
            if not self.shard_file(shard).is_file():
                lo, hi = shard * self.shard_tiles, min((shard + 1) * self.shard_tiles, self.n_tiles)
                raise CellicaError(f"{self.path}: shard file {self.shard_file(shard)} (tiles {lo}-{hi - 1}) is "
                                   "missing: the store is damaged (it would read as zeros); re-create it")
        try:
            return read()
        except Exception as exc:
            if first == last:
                where = f"shard file {self.shard_file(first)}"
            else:
                where = f"shard files {self.shard_file(first).name}..{self.shard_file(last).name}"
            raise CellicaError(f"{self.path}: {where} (tiles {start}-{stop - 1}) is damaged: "
                               f"{type(exc).__name__}: {str(exc)[:160]}") from None

    def read_range(self, start: int, stop: int) -> np.ndarray:
        """Read tiles ``start:stop`` (a contiguous slab: the fast path), verified."""
        return self._checked(start, stop, lambda: np.asarray(self._array[start:stop]))

    def read(self, indices: np.ndarray | list[int]) -> np.ndarray:
        """Read the tiles at ``indices`` (any order, repeats allowed) as one array.

        Indices are grouped by shard and each group is read as one contiguous
        slab, because zarr's fancy indexing across shards is an order of
        magnitude slower than slab reads.
        """
        idx = np.asarray(indices, dtype=np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_tiles):
            raise CellicaError(
                f"{self.path}: tile index out of range [0, {self.n_tiles}): "
                f"{int(idx.min())}..{int(idx.max())}"
            )
        out = np.empty((idx.size, self.n_channels, *self.tile_shape), dtype=self.dtype)
        if idx.size == 0:
            return out
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        shard = sorted_idx // self.shard_tiles
        bounds = np.flatnonzero(np.diff(shard)) + 1
        for group in np.split(np.arange(idx.size), bounds):
            members = sorted_idx[group]
            lo, hi = int(members[0]), int(members[-1]) + 1
            # Sparse picks in a shard are read one chunk each; dense ones as a slab.
            if hi - lo > 4 * members.size:
                slab = {int(i): self._checked(int(i), int(i) + 1, lambda i=i: np.asarray(self._array[int(i)]))
                        for i in np.unique(members)}
                out[order[group]] = np.stack([slab[int(i)] for i in members])
            else:
                out[order[group]] = self.read_range(lo, hi)[members - lo]
        return out

    def iter_blocks(self, block_tiles: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, tiles)`` over the whole store in order, shard-aligned."""
        step = block_tiles or self.shard_tiles
        for start in range(0, self.n_tiles, step):
            yield start, self.read_range(start, min(start + step, self.n_tiles))

    def ground_truth(self, name: str) -> pd.DataFrame:
        """Read a ground-truth table written by ``cellica simulate`` (e.g. ``latents``)."""
        path = self.path / GROUND_TRUTH_DIR / f"{name}.parquet"
        if not path.is_file():
            raise CellicaError(f"{self.path}: no ground-truth table {name!r} (is it simulated?)")
        return read_parquet(path, "ground-truth table")

    # ------------------------------------------------------------------ checks
    @property
    def content_sha256(self) -> str:
        """Digest of the store's contents (metadata and every shard file), recorded at write time
        (computed now for stores written before it was recorded)."""
        return self.attrs.get("content_sha256") or content_digest(self.path, self.n_tiles, self.shard_tiles)

    def verify(self) -> dict[str, Any]:
        """Read every tile, checking that every shard file exists, every chunk's checksum
        and the recorded content digest; raises :class:`CellicaError` naming what is damaged."""
        from tqdm.auto import tqdm

        n_shards = -(-self.n_tiles // self.shard_tiles)
        for shard in tqdm(range(n_shards), desc=f"verify {self.path.name}", unit="shard", disable=None):
            self.read_range(shard * self.shard_tiles, min((shard + 1) * self.shard_tiles, self.n_tiles))
        recorded = self.attrs.get("content_sha256")
        if recorded and content_digest(self.path, self.n_tiles, self.shard_tiles) != recorded:
            raise CellicaError(f"{self.path}: contents differ from the digest recorded when the store was written "
                               "(a shard or the metadata was changed); re-create it")
        return {"shards": n_shards, "tiles": self.n_tiles, "chunk_checksums": self.attrs.get("checksums") == "crc32c",
                "content_digest": bool(recorded)}

    def validate(self) -> None:
        """Check the store against the contract; raise :class:`CellicaError` listing problems."""
        problems = validate_parts(self._array.shape, str(self.dtype), self.metadata, self.attrs)
        if problems:
            raise CellicaError(f"{self.path}: invalid tile store: " + "; ".join(problems))

    def summary(self, max_stat_tiles: int = 2048, seed: int = 0) -> dict[str, Any]:
        """Counts per batch / plate / perturbation, controls, and channel intensity stats.

        Intensity statistics use a seeded random sample of at most ``max_stat_tiles``
        tiles so that inspecting a million-tile store stays quick.
        """
        md = self.metadata
        n_sample = min(self.n_tiles, max_stat_tiles)
        rng = np.random.default_rng(seed)
        sample = np.sort(rng.choice(self.n_tiles, size=n_sample, replace=False))
        tiles = self.read(sample).astype(np.float64)
        per_channel = tiles.transpose(1, 0, 2, 3).reshape(self.n_channels, -1)
        stats = pd.DataFrame(
            {
                "channel": self.channel_names,
                "mean": per_channel.mean(axis=1),
                "std": per_channel.std(axis=1),
                "p01": np.percentile(per_channel, 1, axis=1),
                "p99": np.percentile(per_channel, 99, axis=1),
                "max": per_channel.max(axis=1),
                "saturated_frac": (per_channel >= np.iinfo(self.dtype).max).mean(axis=1),
            }
        )
        return {
            "path": str(self.path),
            "n_tiles": self.n_tiles,
            "tile_shape": [self.n_channels, *self.tile_shape],
            "dtype": str(self.dtype),
            "n_controls": int(md["is_control"].sum()),
            "per_batch": md.groupby("batch").size(),
            "per_plate": md.groupby(["batch", "plate"]).size(),
            "per_perturbation": md.groupby("perturbation").size().sort_values(ascending=False),
            "channel_stats": stats,
            "stats_tiles": n_sample,
            "provenance": self.attrs.get("provenance", {}),
        }


def shard_path(store: Path, shard: int) -> Path:
    """Where zarr keeps shard ``shard`` of the 4-D ``tiles`` array (default chunk-key encoding)."""
    return Path(store) / "tiles" / "c" / str(shard) / "0" / "0" / "0"


def content_digest(store: Path, n_tiles: int, shard_tiles: int) -> str:
    """sha256 over the metadata table and every shard file, in shard order."""
    import hashlib

    h = hashlib.sha256()
    files = [Path(store) / METADATA_FILE] + [shard_path(store, i) for i in range(-(-n_tiles // shard_tiles))]
    for f in files:
        h.update(f.name.encode())
        if f.is_file():
            with open(f, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                    h.update(block)
        else:
            h.update(b"<missing>")
    return h.hexdigest()


def validate_parts(
    shape: tuple[int, ...], dtype: str, metadata: pd.DataFrame, attrs: Mapping[str, Any]
) -> list[str]:
    """Return the list of contract violations (empty when the store is valid)."""
    problems = []
    if len(shape) != 4:
        problems.append(f"tiles array must be 4-D (N, C, H, W), got shape {tuple(shape)}")
        return problems
    if dtype not in ALLOWED_DTYPES:
        problems.append(f"tiles dtype must be one of {ALLOWED_DTYPES}, got {dtype}")
    if len(metadata) != shape[0]:
        problems.append(f"{len(metadata)} metadata rows for {shape[0]} tiles")
    names = attrs.get("channel_names")
    if not isinstance(names, list) or len(names) != shape[1]:
        problems.append(f"channel_names {names!r} do not match {shape[1]} channels")
    elif len(set(names)) != len(names):
        problems.append(f"channel_names are not unique: {names}")
    if attrs.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version {attrs.get('schema_version')!r} != {SCHEMA_VERSION}")
    dups = duplicated_ids(metadata["tile_id"])
    if dups:
        problems.append(f"duplicate tile_id(s): {dups}")
    if len(metadata) and not metadata["is_control"].any():
        problems.append("no control tiles (is_control is false everywhere)")
    return problems


class TileStoreWriter:
    """Appends tiles in blocks to a new store; :meth:`close` validates and publishes it.

    Tiles are buffered until a whole shard can be written, so every shard file is
    written exactly once. Use as a context manager: on an exception the temporary
    directory is removed and nothing appears at the target path.
    """

    def __init__(
        self,
        path: Path,
        channel_names: list[str],
        tile_size: tuple[int, int],
        dtype: str,
        provenance: dict,
        shard_tiles: int,
        overwrite: bool,
        checksums: bool = True,
    ):
        import zarr
        from zarr.codecs import BloscCodec, BloscShuffle, Crc32cCodec

        if dtype not in ALLOWED_DTYPES:
            raise CellicaError(f"tile dtype must be one of {ALLOWED_DTYPES}, got {dtype!r}")
        if len(channel_names) == 0 or len(set(channel_names)) != len(channel_names):
            raise CellicaError(f"channel names must be unique and non-empty: {channel_names}")
        if shard_tiles < 1:
            raise CellicaError(f"shard_tiles must be >= 1, got {shard_tiles}")
        # One writer per store, for the whole write; leftovers of a killed run are cleaned first.
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(output_lock(Path(path)))
        try:
            recover(Path(path))
            self.path = check_can_write(path, overwrite)
        except BaseException:
            self._lock.close()
            raise
        self.overwrite = overwrite
        self.tmp = tmp_sibling(self.path)
        self.channel_names = channel_names
        self.tile_shape = (len(channel_names), int(tile_size[0]), int(tile_size[1]))
        self.dtype = np.dtype(dtype)
        self.shard_tiles = int(shard_tiles)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._written = 0
        self._metadata: list[pd.DataFrame] = []
        self._extra_tables: dict[str, pd.DataFrame] = {}
        self._closed = False
        self.group = zarr.open_group(str(self.tmp), mode="w", zarr_format=3)
        # Bit-shuffle suits 16-bit images; byte shuffle is equivalent for 8-bit.
        shuffle = BloscShuffle.bitshuffle if self.dtype.itemsize > 1 else BloscShuffle.shuffle
        self.array = self.group.create_array(
            "tiles",
            shape=(0, *self.tile_shape),
            chunks=(1, *self.tile_shape),
            shards=(self.shard_tiles, *self.tile_shape),
            dtype=self.dtype,
            # Every chunk carries a crc32c checksum (the shard index has its own): reads verify it.
            compressors=(BloscCodec(cname="zstd", clevel=5, shuffle=shuffle), *([Crc32cCodec()] if checksums else [])),
            dimension_names=("tile", "channel", "y", "x"),
            fill_value=0,
        )
        self.attrs = {
            "schema_version": SCHEMA_VERSION,
            "channel_names": channel_names,
            "dtype": str(self.dtype),
            "shard_tiles": self.shard_tiles,
            "checksums": "crc32c" if checksums else "none",
            "cellica_version": __version__,
            "provenance": provenance,
        }

    def append(self, tiles: np.ndarray, metadata: pd.DataFrame) -> None:
        """Add a block of tiles (n, C, H, W) with their n metadata rows."""
        tiles = np.asarray(tiles)
        if tiles.ndim != 4 or tiles.shape[1:] != self.tile_shape:
            raise CellicaError(
                f"{self.path}: block of shape {tiles.shape} does not match tiles of shape "
                f"(n, {', '.join(map(str, self.tile_shape))})"
            )
        if tiles.dtype != self.dtype:
            raise CellicaError(f"{self.path}: block dtype {tiles.dtype} != store dtype {self.dtype}")
        if len(metadata) != tiles.shape[0]:
            raise CellicaError(
                f"{self.path}: {len(metadata)} metadata rows for a block of {tiles.shape[0]} tiles"
            )
        self._metadata.append(normalise_metadata(metadata, f"{self.path} metadata"))
        self._pending.append(tiles)
        self._pending_n += tiles.shape[0]
        while self._pending_n >= self.shard_tiles:
            self._flush(self.shard_tiles)

    def add_table(self, name: str, table: pd.DataFrame) -> None:
        """Store an extra table under ``ground_truth/{name}.parquet``."""
        self._extra_tables[name] = table

    @property
    def n_tiles(self) -> int:
        return self._written + self._pending_n

    def _flush(self, n: int) -> None:
        block = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        head, rest = block[:n], block[n:]
        self.array.resize((self._written + n, *self.tile_shape))
        self.array[self._written : self._written + n] = head
        self._written += n
        self._pending = [rest] if rest.shape[0] else []
        self._pending_n = rest.shape[0]

    def close(self) -> TileStore:
        """Flush, write metadata and attributes, validate, and rename into place."""
        if self._closed:
            raise CellicaError(f"{self.path}: writer already closed")
        try:
            if self._pending_n:
                self._flush(self._pending_n)
            metadata = (
                pd.concat(self._metadata, ignore_index=True)
                if self._metadata
                else normalise_metadata(pd.DataFrame(columns=list(REQUIRED_COLUMNS)))
            )
            self.attrs["n_tiles"] = self._written
            self.attrs["tile_shape"] = list(self.tile_shape)
            problems = validate_parts(self.array.shape, str(self.dtype), metadata, self.attrs)
            if problems:
                raise CellicaError(f"{self.path}: refusing to write an invalid store: " + "; ".join(problems))
            metadata.to_parquet(self.tmp / METADATA_FILE, index=False)
            if self._extra_tables:
                (self.tmp / GROUND_TRUTH_DIR).mkdir()
                for name, table in self._extra_tables.items():
                    table.to_parquet(self.tmp / GROUND_TRUTH_DIR / f"{name}.parquet", index=False)
            # What the store holds, for anything keyed on it (e.g. resuming MAE training).
            self.attrs["content_sha256"] = content_digest(self.tmp, self._written, self.shard_tiles)
            self.group.attrs.update(json.loads(json.dumps(self.attrs)))
            commit(self.tmp, self.path, self.overwrite)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._lock.close()
        log.info(
            "wrote %s: %d tiles of %s %s in %d shard(s)",
            self.path, self._written, self.tile_shape, self.dtype,
            -(-self._written // self.shard_tiles),
        )
        return TileStore.open(self.path)

    def abort(self) -> None:
        """Discard everything written so far."""
        self._closed = True
        remove(self.tmp)
        self._lock.close()

    def __enter__(self) -> TileStoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()
