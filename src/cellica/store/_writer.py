"""Writing a tile store: tiles appended in shard-sized blocks with a crc32c per chunk,
metadata and tables, the content digest, and one atomic commit at the end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.core.atomic import (
    check_can_write,
    commit,
    output_lock,
    recover,
    remove,
    tmp_sibling,
    to_parquet,
)
from cellica.core.errors import CellicaError, writing_failed
from cellica.core.logs import get_logger
from cellica.store._metadata import (
    ALLOWED_DTYPES,
    GROUND_TRUTH_DIR,
    METADATA_FILE,
    REQUIRED_COLUMNS,
    SCHEMA_VERSION,
    duplicated_ids,
    normalise_metadata,
)
from cellica.store._shards import MANIFEST_KEY, content_digest, store_manifest
from cellica.store.params import COMPRESSIONS
from cellica.store.tilestore import TileStore

log = get_logger("tilestore")


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
        compression: str = "zstd",
    ):
        import zarr
        from zarr.codecs import BloscCodec, BloscShuffle, Crc32cCodec

        if dtype not in ALLOWED_DTYPES:
            raise CellicaError(f"tile dtype must be one of {ALLOWED_DTYPES}, got {dtype!r}")
        if len(channel_names) == 0 or len(set(channel_names)) != len(channel_names):
            raise CellicaError(f"channel names must be unique and non-empty: {channel_names}")
        if compression not in COMPRESSIONS:
            raise CellicaError(f"compression must be one of {tuple(COMPRESSIONS)}, got {compression!r}")
        if shard_tiles < 1:
            raise CellicaError(f"shard_tiles must be >= 1, got {shard_tiles}")
        check_can_write(path, overwrite, kind="store")  # before the lock file is made beside it
        # One writer per store, for the whole write; leftovers of a killed run are cleaned first.
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(output_lock(Path(path)))
        try:
            recover(Path(path))
            self.path = check_can_write(path, overwrite, kind="store")
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
        cname, clevel = COMPRESSIONS[compression]
        shuffle = BloscShuffle.bitshuffle if self.dtype.itemsize > 1 else BloscShuffle.shuffle
        self.array = self.group.create_array(
            "tiles",
            shape=(0, *self.tile_shape),
            chunks=(1, *self.tile_shape),
            shards=(self.shard_tiles, *self.tile_shape),
            dtype=self.dtype,
            # Every chunk carries a crc32c checksum (the shard index has its own): reads verify it.
            compressors=(
                BloscCodec(cname=cname, clevel=clevel, shuffle=shuffle),
                *([Crc32cCodec()] if checksums else []),
            ),
            dimension_names=("tile", "channel", "y", "x"),
            fill_value=0,
        )
        self.attrs = {
            "schema_version": SCHEMA_VERSION,
            "channel_names": channel_names,
            "dtype": str(self.dtype),
            "shard_tiles": self.shard_tiles,
            "checksums": "crc32c" if checksums else "none",
            "compression": compression,
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
        try:
            self.array.resize((self._written + n, *self.tile_shape))
            self.array[self._written : self._written + n] = head
        except OSError as exc:  # a full disk or no permission: name the store, not a temporary
            raise writing_failed([self.path], exc) from None
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
            try:
                to_parquet(metadata, self.tmp / METADATA_FILE)
                if self._extra_tables:
                    (self.tmp / GROUND_TRUTH_DIR).mkdir()
                    for name, table in self._extra_tables.items():
                        to_parquet(table, self.tmp / GROUND_TRUTH_DIR / f"{name}.parquet")
                # What the store holds, for anything keyed on it (e.g. resuming MAE training), and
                # what every read is checked against (TileStore._shard_bytes, read_table).
                self.attrs["content_sha256"] = content_digest(self.tmp, self._written, self.shard_tiles)
                self.attrs[MANIFEST_KEY] = store_manifest(self.tmp, self._written, self.shard_tiles, self.attrs)
                self.group.attrs.update(json.loads(json.dumps(self.attrs)))
                commit(self.tmp, self.path, self.overwrite)
            except OSError as exc:
                raise writing_failed([self.path], exc) from None
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
