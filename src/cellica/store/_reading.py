"""Verified reads of a tile store: every shard checked against the store's manifest before its
bytes are decoded, every table against its sha256, and the store's generation at the end.

:class:`VerifiedReads` is the reading half of :class:`cellica.store.tilestore.TileStore`; it
expects ``path``, ``label``, ``shard_tiles``, ``n_tiles``, ``n_channels``, ``tile_shape``,
``dtype``, ``_array`` (zarr's view, for sparse chunk reads), ``_manifest`` and ``_decoder``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from cellica.core.atomic import read_parquet
from cellica.core.errors import CellicaError
from cellica.core.remote import redact
from cellica.store._shards import (
    generation_at,
    index_problem,
    index_size,
    replaced_message,
    shard_path,
    shard_problem,
)


class VerifiedReads:
    """Reading tiles and tables, each checked against what was written."""

    @property
    def generation(self) -> str | None:
        """The digest of this store's manifest (a store written again with other contents gets
        another); ``None`` for stores written before generations existed."""
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
        (:func:`cellica.store._shards.shard_problem`)."""
        try:
            data = self.shard_file(shard).read_bytes()
        except FileNotFoundError:
            data = None
        problem = shard_problem(data, shard, self._manifest)
        if problem:
            raise self._damaged(shard, problem)
        return data

    def _decoded(self, shards: range, start: int, stop: int, check_chunks: bool = False) -> np.ndarray:
        """Tiles ``start:stop``, decoded from the verified bytes of ``shards`` (those holding them).
        Each chunk's crc32c is checked too where the manifest has no crc32c of the whole shard,
        or with ``check_chunks``."""
        if self._decoder is None:  # pragma: no cover - every opened store has one
            raise CellicaError(f"{self.label}: not opened for reading")
        blobs = {s: self._shard_bytes(s) for s in shards}
        try:
            return self._decoder.slab(blobs, start, stop,
                                      verified="shard_crc32c" in self._manifest and not check_chunks)
        except CellicaError:
            raise
        except Exception as exc:  # the codec's checks (per-chunk crc32c, Blosc) on verified bytes
            first, last = shards[0], shards[-1]
            where = (f"shard file {redact(self.shard_file(first))}" if first == last else
                     f"shard files {self.shard_file(first).name}..{self.shard_file(last).name}")
            raise CellicaError(f"{self.label}: {where} ({self._shard_tiles_range(first).split('-')[0]}-"
                               f"{self._shard_tiles_range(last).split('-')[1]}) is damaged: "
                               f"{type(exc).__name__}: {str(exc)[:160]}") from None

    def _sparse(self, shard: int, picks: np.ndarray) -> list[np.ndarray]:
        """Tiles ``picks`` of one shard, read chunk by chunk after checking the shard's size and
        index against the manifest (a full read would fetch the whole shard for a few tiles)."""
        f = self.shard_file(shard)
        try:
            size = f.stat().st_size
            with f.open("rb") as fh:
                fh.seek(max(0, size - index_size(self.shard_tiles)))
                index = fh.read()
        except FileNotFoundError:
            raise self._damaged(shard, shard_problem(None, shard, self._manifest)) from None
        problem = index_problem(size, index, shard, self._manifest)
        if problem:
            raise self._damaged(shard, problem)
        try:
            return [np.asarray(self._array[int(i)]) for i in picks]
        except Exception as exc:  # a chunk's crc32c or its decoding
            raise self._damaged(shard, f"is damaged: {type(exc).__name__}: {str(exc)[:160]}") from None

    def read_range(self, start: int, stop: int, check_chunks: bool = False) -> np.ndarray:
        """Read tiles ``start:stop`` (a contiguous slab: the fast path), verified; ``check_chunks``:
        each chunk's crc32c as well as the whole shard's (``cellica inspect --verify``)."""
        if stop <= start:
            return np.empty((0, self.n_channels, *self.tile_shape), dtype=self.dtype)
        shards = range(start // self.shard_tiles, (stop - 1) // self.shard_tiles + 1)
        return self._decoded(shards, start, stop, check_chunks)

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
            # Sparse picks in a shard are read one chunk each (the shard's size and index checked
            # against the manifest, each chunk's crc32c by zarr); dense ones as a verified slab.
            if hi - lo > 4 * members.size:
                picks = np.unique(members)
                decoded = self._sparse(lo // self.shard_tiles, picks)
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

