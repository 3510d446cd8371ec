"""The tile store: a zarr v3 group of image tiles plus per-tile metadata.

Layout of ``STORE.zarr/`` (the contract every later stage reads)::

    zarr.json            group attributes: channel_names, dtype, schema_version,
                         n_tiles, tile_shape, provenance (how the store was made) and
                         the manifest: a generation id, the byte count and crc32c of
                         every shard file, the sha256 of every table

    tiles/               array (N, C, H, W), uint8 or uint16, Blosc-zstd (or -lz4) compressed,
                         one chunk per tile, sharded ``shard_tiles`` tiles per file
    metadata.parquet     one row per tile, in tile order: tile_id, plate, well, site,
                         batch, perturbation, is_control (+ any optional columns)
    ground_truth/        optional tables (simulated screens only)

Stores are written into a temporary sibling directory and renamed into place only
once complete and valid, so a failed run never leaves a half-written store.

Every read is verified against the manifest: a shard file is read whole (one request),
its size and crc32c compared with what was written, and only those verified bytes are
decoded. A missing, empty, truncated or damaged shard, or one copied from another store,
is an error naming the file and its tiles, never tiles of zeros. A store replaced while a
reader holds it (a new ``generation``) fails that reader instead of mixing two stores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.remote import as_path, redact
from cellica.store._metadata import (
    GROUND_TRUTH_DIR,
    METADATA_FILE,
    normalise_metadata,
)
from cellica.store._reading import VerifiedReads
from cellica.store._shards import (
    MANIFEST_KEY,
    ShardDecoder,
    attributes_problem,
    content_digest,
    replaced_message,
)

if TYPE_CHECKING:
    from cellica.store._writer import TileStoreWriter

log = get_logger("tilestore")


class TileStore(VerifiedReads):
    """Read access to a finished tile store.

    Use :meth:`TileStore.open` to read and :meth:`TileStore.create` to write.

    Attributes
    ----------
    path : pathlib.Path
        The store's directory.
    metadata : pandas.DataFrame
        One row per tile, in tile order.
    """

    def __init__(self, path: Path, array: Any, metadata: pd.DataFrame, *, attrs: dict, array_meta: bytes | None = None):
        self.path = path
        self._array = array
        self.metadata = metadata
        self.attrs = attrs
        self._manifest: dict = attrs.get(MANIFEST_KEY) or {}
        self._decoder = None if array_meta is None else ShardDecoder(array_meta)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike, generation: str | None = None) -> TileStore:
        """Open an existing store for reading (structure is checked, see :meth:`validate`):
        a local folder or an fsspec URL (``s3://``, ``gs://``, ``https://``, ...).

        ``generation``: the store must still be the one a reader opened before (a data-loader
        worker reopening the store its parent opened); a replaced store is an error."""
        import zarr

        path = as_path(path)
        try:  # remote: ask for the file's info, as is_file() reads an unreachable host as "no file"
            found = (path / "zarr.json").is_file() if isinstance(path, Path) else \
                bool(path.fs.info((path / "zarr.json").path))
        except FileNotFoundError as exc:
            if exc.__cause__ is not None:  # fsspec's http reports an unreachable host as not found
                raise CellicaError(f"{redact(path)}: the tile store is unreachable "
                                   f"({type(exc.__cause__).__name__}: {redact(str(exc.__cause__))[:200]})") from None
            found = False
        except Exception as exc:  # a remote file system that cannot be reached
            raise CellicaError(f"{redact(path)}: the tile store is unreachable ({type(exc).__name__}: "
                               f"{redact(str(exc))[:200]})") from None
        if not found:
            raise CellicaError(f"{redact(path)}: not a tile store (no zarr.json); run simulate or ingest")
        try:
            group = zarr.open_group(str(path), mode="r", zarr_format=3)
            array = group["tiles"]
            array_meta = (path / "tiles" / "zarr.json").read_bytes()
        except Exception as exc:  # zarr raises several types for a broken store
            raise CellicaError(f"{redact(path)}: cannot open the tile store ({redact(str(exc))})") from None
        attrs = dict(group.attrs)
        found_generation = (attrs.get(MANIFEST_KEY) or {}).get("generation")
        if generation is not None and found_generation != generation:
            raise CellicaError(replaced_message(redact(path), generation, found_generation))
        problem = attributes_problem(attrs, array_meta)
        if problem:
            raise CellicaError(f"{redact(path)}: {problem}; re-create the store")
        meta_path = path / METADATA_FILE
        if not meta_path.is_file():
            raise CellicaError(f"{redact(path)}: missing {METADATA_FILE}")
        store = cls(path, array, pd.DataFrame(), attrs=attrs, array_meta=array_meta)
        metadata = normalise_metadata(store.read_table(METADATA_FILE, "tile metadata"), str(meta_path))
        store.metadata = metadata
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
        compression: str = "zstd",
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
        compression
            The chunks' Blosc compressor, a key of :data:`cellica.store.params.COMPRESSIONS`.
        """
        from cellica.store._writer import TileStoreWriter

        return TileStoreWriter(
            Path(path), list(channel_names), tuple(tile_size), dtype, dict(provenance or {}),
            shard_tiles, overwrite, checksums, compression,
        )

    @property
    def label(self) -> str:
        """The store's location as messages show it (a URL without credentials)."""
        return redact(self.path)

    # ------------------------------------------------------------------ shape
    @property
    def n_tiles(self) -> int:
        """How many tiles the store holds."""
        return int(self._array.shape[0])

    @property
    def n_channels(self) -> int:
        """How many channels each tile has."""
        return int(self._array.shape[1])

    @property
    def tile_shape(self) -> tuple[int, int]:
        """The (height, width) of a tile in pixels."""
        return int(self._array.shape[2]), int(self._array.shape[3])

    @property
    def channel_names(self) -> list[str]:
        """The channels' names, in the store's order."""
        return list(self.attrs["channel_names"])

    @property
    def dtype(self) -> np.dtype:
        """The stored pixel dtype."""
        return np.dtype(self._array.dtype)

    @property
    def shard_tiles(self) -> int:
        """How many tiles one shard (the unit of a read) holds."""
        return int(self.attrs.get("shard_tiles", self._array.shape[0] or 1))

    def __len__(self) -> int:
        """How many tiles the store holds."""
        return self.n_tiles

    def __repr__(self) -> str:
        """The store's path, size, channels, tile shape and dtype."""
        return (
            f"TileStore({str(self.path)!r}, n_tiles={self.n_tiles}, "
            f"channels={self.channel_names}, tile_shape={self.tile_shape}, dtype={self.dtype})"
        )

    @property
    def has_ground_truth(self) -> bool:
        """Whether the store holds ground-truth tables (a simulated screen)."""
        return (self.path / GROUND_TRUTH_DIR).is_dir()

    def ground_truth(self, name: str) -> pd.DataFrame:
        """Read a ground-truth table written by ``cellica simulate`` (e.g. ``latents``)."""
        path = self.path / GROUND_TRUTH_DIR / f"{name}.parquet"
        if not path.is_file():
            raise CellicaError(f"{self.label}: no ground-truth table {name!r} (is it simulated?)")
        return self.read_table(f"{GROUND_TRUTH_DIR}/{name}.parquet", "ground-truth table")

    # ------------------------------------------------------------------ checks
    @property
    def content_sha256(self) -> str:
        """Digest of the store's contents (metadata and every shard file), recorded at write time
        (computed now for stores written before it was recorded)."""
        return self.attrs.get("content_sha256") or content_digest(self.path, self.n_tiles, self.shard_tiles)

    def verify(self) -> dict[str, Any]:
        """Read every tile and table back against the manifest: see :func:`cellica.store._describe.verify`."""
        from cellica.store._describe import verify

        return verify(self)

    def validate(self) -> None:
        """Check the store against the contract; raise :class:`CellicaError` listing problems."""
        from cellica.store._writer import validate_parts

        problems = validate_parts(self._array.shape, str(self.dtype), self.metadata, self.attrs)
        if problems:
            raise CellicaError(f"{self.label}: invalid tile store: " + "; ".join(problems))

    def describe(self, verify: bool = False, max_stat_tiles: int = 2048, max_rows: int = 30) -> str:
        """A readable account of the store (``cellica inspect``): see :func:`cellica.store._describe.describe`."""
        from cellica.store._describe import describe

        return describe(self, verify, max_stat_tiles, max_rows)

    def summary(self, max_stat_tiles: int = 2048, seed: int = 0) -> dict[str, Any]:
        """Counts and channel statistics: see :func:`cellica.store._describe.summary`."""
        from cellica.store._describe import summary

        return summary(self, max_stat_tiles, seed)
