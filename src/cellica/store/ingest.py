"""Ingestion of real image files (per-channel TIFF or PNG) or OME-Zarr HCS plates
(:mod:`cellica.store.omezarr`) into a tile store.

A manifest CSV has one row per image file: ``path``, ``plate``, ``well``, ``site``,
``channel`` plus metadata columns (``batch``, ``perturbation``, ``is_control`` or
a control label, anything else). Rows sharing (batch, plate, well, site) form a
field; its channel files are stacked in the declared channel order, cut into
tiles, optionally intensity-normalised per plate, and written to the store.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.core.names import missing_columns_message
from cellica.core.remote import is_url, join, parent, read_bytes, redact
from cellica.store._metadata import REQUIRED_COLUMNS
from cellica.store.image_files import FIELD_KEYS
from cellica.store.params import IngestParams
from cellica.store.tilestore import TileStore

log = get_logger("ingest")



class FieldSource(Protocol):
    """An image format ingestion reads fields from (``ingest.format``; registered in
    :data:`cellica.registry.FORMATS`): the manifest columns it needs, the checks of a whole
    manifest, the fields grouped with their images, and what the store's provenance records.

    ``groups`` holds one ``(key, manifest row, images)`` per field, in the store's order;
    :meth:`load` turns a field's ``images`` into a (channels, height, width) array.
    """

    columns: tuple[str, ...]
    p: IngestParams
    groups: list[tuple[Any, pd.Series, list[Any]]]
    skipped: list[dict[str, Any]]

    @classmethod
    def check_manifest(cls, df: pd.DataFrame, path: str) -> None:
        """Refuse a manifest this format cannot read (one line naming ``path`` and the column)."""

    def __init__(self, manifest: pd.DataFrame, p: IngestParams, source: str): ...

    def load(self, images: list[Any]) -> np.ndarray:
        """One field's images as a (channels, height, width) array."""

    def provenance(self) -> dict[str, Any]:
        """What the store's provenance records of the source."""


def field_source(name: str) -> type[FieldSource]:
    """The field source of ``ingest.format`` ``name``, imported only when used."""
    from cellica.registry import FORMATS

    module, _, cls = FORMATS[name].source.partition(":")
    return getattr(importlib.import_module(module), cls)


def read_manifest(path: str | os.PathLike, p: IngestParams) -> pd.DataFrame:
    """Load the manifest (a local path or an fsspec URL), apply the column map and constants,
    check the columns; each row's ``path`` is resolved against the manifest's folder."""
    base = parent(path)
    data = read_bytes(path, "manifest")
    path = redact(path)  # what messages show
    try:
        raw = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except Exception as exc:
        raise CellicaError(f"manifest {path}: cannot read as CSV ({exc})") from None
    missing_src = [src for src in p.column_map.values() if src not in raw.columns]
    if missing_src:
        raise CellicaError(f"manifest {path}: " + missing_columns_message(missing_src, raw.columns,
                                                                           "ingest.column_map"))
    df = raw.copy()
    for ours, theirs in p.column_map.items():
        df[ours] = raw[theirs]
    for col, value in p.constants.items():
        if col in df.columns and col not in p.column_map:
            raise CellicaError(f"manifest {path}: constant for {col!r}, but the manifest has that column")
        df[col] = str(value)
    if "is_control" not in df.columns:
        if p.control_label is None:
            raise CellicaError(
                f"manifest {path}: no 'is_control' column; map one or set control_label "
                "(the perturbation value of control wells)"
            )
        df["is_control"] = df["perturbation"].eq(p.control_label) if "perturbation" in df else False
        if not df["is_control"].any():
            seen = sorted(map(str, df["perturbation"].unique()))[:8] if "perturbation" in df else []
            raise CellicaError(f"manifest {path}: control_label {p.control_label!r} matches no perturbation "
                               f"(values include {seen}); no tile would be a control")
    source = field_source(p.format)
    required = source.columns
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise CellicaError(
            f"manifest {path}: missing column(s) {missing}; map them with column_map "
            f"(it has {list(raw.columns)})"
        )
    empty = [c for c in required if (df[c].astype(str).str.strip() == "").any()]
    if empty:
        row = int(np.flatnonzero((df[empty[0]].astype(str).str.strip() == "").to_numpy())[0])
        raise CellicaError(f"manifest {path}: empty value in column {empty[0]!r} (row {row + 2})")
    df["_file"] = [join(base, v) for v in df["path"]]
    source.check_manifest(df, path)
    return df


def tile_grid(height: int, width: int, size: int, stride: int) -> tuple[list[tuple[int, int]], int]:
    """Top-left corners of the whole tiles in a field, and the number of partial tiles dropped.

    Tiles start every ``stride`` pixels; a tile that would cross the right or
    bottom edge is partial and is dropped (and counted, for the log).
    """
    ys = [y for y in range(0, height, stride) if y + size <= height]
    xs = [x for x in range(0, width, stride) if x + size <= width]
    n_all = len(range(0, height, stride)) * len(range(0, width, stride))
    return [(y, x) for y in ys for x in xs], n_all - len(ys) * len(xs)


def plate_percentiles(fields: FieldSource) -> dict[str, dict[str, list[float]]]:
    """Per (batch, plate): per-channel low/high intensity percentiles from a pixel sample."""
    p = fields.p
    rng = np.random.default_rng(p.seed)
    samples: dict[str, list[np.ndarray]] = {}
    for key, _, files in progress(fields.groups, desc="percentiles", unit="field"):
        stack = fields.load(files)
        stack = stack.reshape(stack.shape[0], -1)
        pick = rng.choice(stack.shape[1], size=min(p.sample_pixels, stack.shape[1]), replace=False)
        samples.setdefault(_plate_key(key), []).append(stack[:, pick].astype(np.float64))
    out = {}
    for plate, chunks in samples.items():
        pix = np.concatenate(chunks, axis=1)
        lo, hi = np.percentile(pix, p.percentiles, axis=1)
        out[plate] = {"low": lo.tolist(), "high": hi.tolist()}
    return out


def field_constant_columns(df: pd.DataFrame) -> list[str]:
    """Optional manifest columns that are constant within every field (kept per tile).

    Columns that vary between a field's channel files (file size, per-file
    intensity statistics) describe files, not tiles, and are left out (logged).
    """
    described = (*FIELD_KEYS, "path", "channel", "perturbation", "_file", "is_control")
    extra = [c for c in df.columns if c not in described]
    if not extra or "site" not in df.columns:  # a plate manifest: one row per well, so all are kept
        return extra
    varying = df.groupby(list(FIELD_KEYS))[extra].nunique(dropna=False).max() > 1
    if varying.any():
        log.info("per-file manifest column(s) not kept per tile: %s", list(varying[varying].index))
    return [c for c in extra if not varying[c]]


def _plate_key(key: tuple) -> str:
    return f"{key[0]}/{key[1]}"


def _to_dtype(stack: np.ndarray, dtype: np.dtype, norm: dict | None, source: str,
              files: list[str] | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    if norm is not None:
        lo = np.asarray(norm["low"])[:, None, None]
        hi = np.asarray(norm["high"])[:, None, None]
        scaled = (stack.astype(np.float64) - lo) / np.maximum(hi - lo, 1e-12)
        return (np.clip(scaled, 0, 1) * info.max).round().astype(dtype)
    if stack.dtype.kind == "f":
        raise CellicaError(f"{source}: float images need normalize: percentile to become integers")
    if stack.min() < 0 or stack.max() > info.max:
        bad = int(np.flatnonzero((stack.reshape(len(stack), -1).min(axis=1) < 0)
                                 | (stack.reshape(len(stack), -1).max(axis=1) > info.max))[0])
        culprit = f"image file {files[bad]}" if files else source
        raise CellicaError(
            f"{culprit}: pixel values {stack[bad].min()}..{stack[bad].max()} do not fit {dtype}; "
            "choose dtype uint16 or normalize: percentile"
        )
    return stack.astype(dtype)


def _field_tiles(fields, key, first, files, norms, extra_cols, manifest: str, stride: int):
    """The tiles of one field (channels stacked, converted, cut) and their metadata rows."""
    p = fields.p
    where = f"field {dict(zip(FIELD_KEYS, key, strict=True))}"
    try:
        stack = fields.load(files)
    except CellicaError as exc:
        raise CellicaError(f"manifest {manifest}, {where}: {exc}") from None
    h, w = stack.shape[1:]
    if h < p.tile_size or w < p.tile_size:
        raise CellicaError(f"{where} ({files[0]}): {h}x{w} is smaller than tile_size {p.tile_size}")
    stack = _to_dtype(stack, np.dtype(p.dtype), norms.get(_plate_key(key)), where, files)
    corners, partial = tile_grid(h, w, p.tile_size, stride)
    tiles = np.stack([stack[:, y : y + p.tile_size, x : x + p.tile_size] for y, x in corners])
    meta = pd.DataFrame(
        {
            "tile_id": [f"{key[0]}-{key[1]}-{key[2]}-s{key[3]}-y{y}x{x}" for y, x in corners],
            **{c: first[c] for c in (*FIELD_KEYS, "perturbation", "is_control")},
            **{c: first[c] for c in extra_cols},
            "field_y": [y for y, _ in corners],
            "field_x": [x for _, x in corners],
        },
        index=range(len(corners)),
    )
    return tiles, meta[[*REQUIRED_COLUMNS, *extra_cols, "field_y", "field_x"]], partial


def ingest(
    manifest: str | os.PathLike, out: str | os.PathLike, params: IngestParams, *, overwrite: bool = False
) -> TileStore:
    """Ingest the images of a manifest into a new tile store.

    Parameters
    ----------
    manifest
        CSV with one row per image file (paths relative to the CSV's folder or absolute).
    out
        Target store directory.
    params
        Channels, tiling, column mapping and normalisation.
    overwrite
        Replace an existing store at ``out``.

    Returns
    -------
    TileStore
        The new store.
    """
    p = params
    start = time.perf_counter()
    stride = p.stride or p.tile_size
    df = read_manifest(manifest, p)
    fields = field_source(p.format)(df, p, str(manifest))
    names = [str(c) for c in (p.channel_names or p.channels)]
    if len(names) != len(p.channels):
        raise CellicaError(f"{len(names)} channel_names for {len(p.channels)} channels")
    norms = plate_percentiles(fields) if p.normalize else {}
    extra_cols = field_constant_columns(df)
    provenance = {
        "source": "ingest",
        "manifest": redact(manifest) if is_url(manifest) else str(Path(manifest).resolve()),
        "manifest_sha256": hashlib.sha256(read_bytes(manifest, "manifest")).hexdigest(),
        "params": {k: v for k, v in vars(p).items()},
        "normalization": norms,
        "skipped_fields": fields.skipped,
        "format": p.format,
        **fields.provenance(),
    }
    n_partial = 0
    writer = TileStore.create(out, names, (p.tile_size, p.tile_size), p.dtype, provenance, p.shard_tiles, overwrite,
                               compression=p.compression)
    with writer:
        for key, first, files in progress(fields.groups, desc="ingest", unit="field"):
            tiles, meta, partial = _field_tiles(fields, key, first, files, norms, extra_cols, str(manifest), stride)
            n_partial += partial
            writer.append(tiles, meta)
        writer.attrs["provenance"]["dropped_partial_tiles"] = n_partial
        store = writer.close()
    log.info(
        "ingested %d field(s) into %d tiles of %d x %d x %d (%d partial edge tiles dropped, "
        "%d incomplete field(s) skipped) in %.1f s",
        len(fields.groups), store.n_tiles, len(names), p.tile_size, p.tile_size, n_partial,
        len(fields.skipped), time.perf_counter() - start,
    )
    return store
