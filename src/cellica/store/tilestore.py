"""The tile store: a zarr v3 group of image tiles plus per-tile metadata.

Layout of ``STORE.zarr/`` (the contract every later stage reads)::

    zarr.json            group attributes: channel_names, dtype, schema_version,
                         n_tiles, tile_shape, provenance (how the store was made) and
                         the manifest: a generation id, the byte count and crc32c of
                         every shard file, the sha256 of every table

    tiles/               array (N, C, H, W), uint8 or uint16, Blosc-zstd compressed,
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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cellica.core.atomic import (
    read_parquet,
)
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.remote import as_path, redact
from cellica.store.metadata import (
    GROUND_TRUTH_DIR,
    METADATA_FILE,
    normalise_metadata,
)
from cellica.store.shards import (
    MANIFEST_KEY,
    ShardDecoder,
    content_digest,
    generation_at,
    replaced_message,
    shard_path,
    shard_problem,
)

if TYPE_CHECKING:
    from cellica.store.writer import TileStoreWriter

log = get_logger("tilestore")


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

    def __init__(self, path: Path, array: Any, metadata: pd.DataFrame, attrs: dict, array_meta: bytes | None = None):
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
        meta_path = path / METADATA_FILE
        if not meta_path.is_file():
            raise CellicaError(f"{redact(path)}: missing {METADATA_FILE}")
        store = cls(path, array, pd.DataFrame(), attrs, array_meta)
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
        from cellica.store.writer import TileStoreWriter

        return TileStoreWriter(
            Path(path), list(channel_names), tuple(tile_size), dtype, dict(provenance or {}),
            shard_tiles, overwrite, checksums,
        )

    @property
    def label(self) -> str:
        """The store's location as messages show it (a URL without credentials)."""
        return redact(self.path)

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
    @property
    def generation(self) -> str | None:
        """The id written with this store (a new one each time the store is written); ``None``
        for stores written before generations existed."""
        return self._manifest.get("generation")

    def shard_file(self, shard: int) -> Path:
        """The file holding shard ``shard`` (tiles ``shard * shard_tiles`` onwards)."""
        return shard_path(self.path, shard)

    def _shard_tiles_range(self, shard: int) -> str:
        lo, hi = shard * self.shard_tiles, min((shard + 1) * self.shard_tiles, self.n_tiles)
        return f"tiles {lo}-{hi - 1}"

    def _damaged(self, shard: int, what: str) -> CellicaError:
        """The error for a shard that is not what was written: a replaced store says so."""
        now = self.current_generation()
        if self.generation is not None and now != self.generation:
            return CellicaError(replaced_message(self.label, self.generation, now))
        return CellicaError(f"{self.label}: shard file {redact(self.shard_file(shard))} "
                            f"({self._shard_tiles_range(shard)}) {what}; re-create the store")

    def _shard_bytes(self, shard: int) -> bytes:
        """Shard ``shard``'s file, read whole and checked against the manifest
        (:func:`cellica.store.shards.shard_problem`)."""
        try:
            data = self.shard_file(shard).read_bytes()
        except FileNotFoundError:
            data = None
        problem = shard_problem(data, shard, self._manifest)
        if problem:
            raise self._damaged(shard, problem)
        return data

    def _decoded(self, shards: range, read):
        """Run ``read(array)`` on an array holding only the verified bytes of ``shards``."""
        if self._decoder is None:  # pragma: no cover - every opened store has one
            raise CellicaError(f"{self.label}: not opened for reading")
        blobs = {s: self._shard_bytes(s) for s in shards}
        try:
            return self._decoder.read(blobs, read)
        except CellicaError:
            raise
        except Exception as exc:  # the codec's checks (per-chunk crc32c, Blosc) on verified bytes
            first, last = shards[0], shards[-1]
            where = (f"shard file {redact(self.shard_file(first))}" if first == last else
                     f"shard files {self.shard_file(first).name}..{self.shard_file(last).name}")
            raise CellicaError(f"{self.label}: {where} ({self._shard_tiles_range(first).split('-')[0]}-"
                               f"{self._shard_tiles_range(last).split('-')[1]}) is damaged: "
                               f"{type(exc).__name__}: {str(exc)[:160]}") from None

    def read_range(self, start: int, stop: int) -> np.ndarray:
        """Read tiles ``start:stop`` (a contiguous slab: the fast path), verified."""
        if stop <= start:
            return np.empty((0, self.n_channels, *self.tile_shape), dtype=self.dtype)
        shards = range(start // self.shard_tiles, (stop - 1) // self.shard_tiles + 1)
        return self._decoded(shards, lambda a: np.asarray(a[start:stop]))

    def current_generation(self) -> str | None:
        """The generation of the store now at :attr:`path` (``None`` when there is none)."""
        return generation_at(self.path)

    def check_unchanged(self) -> None:
        """Raise unless the store at :attr:`path` is still the one opened (call when a read
        finishes: a store replaced during the read fails the reader, never mixes)."""
        if self.generation is not None and self.current_generation() != self.generation:
            raise CellicaError(replaced_message(self.label, self.generation, self.current_generation()))

    def read_table(self, name: str, what: str) -> pd.DataFrame:
        """A table of the store (``metadata.parquet``, ``ground_truth/*.parquet``), its sha256
        checked against the manifest (a table from another store or edited is refused)."""
        import hashlib
        import io

        path = self.path / name
        if not path.is_file():
            raise CellicaError(f"{what} {redact(path)} does not exist")
        data = path.read_bytes()
        recorded = (self._manifest.get("files") or {}).get(name)
        if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
            now = self.current_generation()
            if self.generation is not None and now != self.generation:
                raise CellicaError(replaced_message(self.label, self.generation, now))
            raise CellicaError(f"{what} {redact(path)} is not the one written with this store (its sha256 "
                               "differs: edited, damaged or copied from another store); re-create the store")
        return read_parquet(io.BytesIO(data), what, label=redact(path))

    def read(self, indices: np.ndarray | list[int]) -> np.ndarray:
        """Read the tiles at ``indices`` (any order, repeats allowed) as one array.

        Indices are grouped by shard and each group is read as one contiguous
        slab, because zarr's fancy indexing across shards is an order of
        magnitude slower than slab reads.
        """
        idx = np.asarray(indices, dtype=np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_tiles):
            raise CellicaError(
                f"{self.label}: tile index out of range [0, {self.n_tiles}): "
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
            shard = range(lo // self.shard_tiles, lo // self.shard_tiles + 1)
            # Sparse picks in a shard are decoded one chunk each; dense ones as a slab.
            if hi - lo > 4 * members.size:
                picks = np.unique(members)
                decoded = self._decoded(shard, lambda a, picks=picks: [np.asarray(a[int(i)]) for i in picks])
                slab = dict(zip(picks.tolist(), decoded, strict=True))
                out[order[group]] = np.stack([slab[int(i)] for i in members])
            else:
                out[order[group]] = self.read_range(lo, hi)[members - lo]
        return out

    def iter_blocks(self, block_tiles: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, tiles)`` over the whole store in order, shard-aligned."""
        step = block_tiles or self.shard_tiles
        for start in range(0, self.n_tiles, step):
            yield start, self.read_range(start, min(start + step, self.n_tiles))

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
        """Read every tile and table back against the manifest: see :func:`cellica.store.describe.verify`."""
        from cellica.store.describe import verify

        return verify(self)

    def validate(self) -> None:
        """Check the store against the contract; raise :class:`CellicaError` listing problems."""
        from cellica.store.writer import validate_parts

        problems = validate_parts(self._array.shape, str(self.dtype), self.metadata, self.attrs)
        if problems:
            raise CellicaError(f"{self.label}: invalid tile store: " + "; ".join(problems))

    def describe(self, verify: bool = False, max_stat_tiles: int = 2048, max_rows: int = 30) -> str:
        """A readable account of the store (``cellica inspect``): see :func:`cellica.store.describe.describe`."""
        from cellica.store.describe import describe

        return describe(self, verify, max_stat_tiles, max_rows)

    def summary(self, max_stat_tiles: int = 2048, seed: int = 0) -> dict[str, Any]:
        """Counts and channel statistics: see :func:`cellica.store.describe.summary`."""
        from cellica.store.describe import summary

        return summary(self, max_stat_tiles, seed)
