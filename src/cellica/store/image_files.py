"""Per-channel image files (TIFF or PNG) as a source of fields for ingestion (``ingest.format: files``).

The manifest has one row per image file: ``path``, ``plate``, ``well``, ``site``, ``channel``
plus metadata; rows sharing (batch, plate, well, site) form a field whose channel files are
stacked in the declared channel order (:func:`cellica.store.ingest.ingest` cuts and writes them).
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.remote import is_url, read_bytes, redact
from cellica.store.params import IngestParams

log = get_logger("ingest")
FIELD_KEYS = ("batch", "plate", "well", "site")


def _one_slot_per_file(df: pd.DataFrame, path) -> None:
    """A file listed twice would fill two channels (or fields) with one image, also when it is
    reached under two names (a link, ``a/../b``): local files are compared by identity."""
    ident = pd.Series([_file_identity(f) for f in df["_file"]], index=df.index)
    same_file = ident.duplicated(keep=False)
    if same_file.any():
        first = df[same_file].iloc[0]
        rows = (np.flatnonzero((ident == ident[first.name]).to_numpy())[:4] + 2).tolist()
        names = sorted(set(df.loc[ident == ident[first.name], "path"].astype(str)))
        raise CellicaError(f"manifest {path}: image file {first['path']!r} is listed more than once (rows {rows}"
                           + (f"; one file under the names {names[:3]}" if len(names) > 1 else "")
                           + "); each file fills one channel of one field")


def _file_identity(f: str) -> str:
    """What makes two manifest paths one file: the device and inode of a local file (a link and its
    target are one), else the path."""
    if is_url(f):
        return f
    try:
        st = os.stat(f)
    except OSError:
        return os.path.abspath(f)
    return f"{st.st_dev}:{st.st_ino}"


def read_image(path: str) -> np.ndarray:
    """Read one single-channel TIFF or PNG (8/16-bit integer or float) as a 2-D array, from a
    local path or an fsspec URL."""
    if not is_url(path) and not os.path.isfile(path):
        raise CellicaError(f"image file {path} is missing")
    source = io.BytesIO(read_bytes(path, "image file")) if is_url(path) else path
    path = redact(path)
    try:
        if path.lower().endswith((".tif", ".tiff")):
            import tifffile

            img = tifffile.imread(source)
        else:
            from PIL import Image

            with Image.open(source) as im:
                img = np.asarray(im)
    except Exception as exc:
        raise CellicaError(f"image file {path} is unreadable ({type(exc).__name__}: {exc})") from None
    img = np.squeeze(img)
    if img.ndim != 2:
        raise CellicaError(f"image file {path}: expected one channel (2-D), got shape {img.shape}")
    if img.dtype.kind == "f" and not np.isfinite(img).all():
        raise CellicaError(f"image file {path}: {int((~np.isfinite(img)).sum())} NaN/Inf pixel(s)")
    if img.dtype.kind not in "uif":
        raise CellicaError(f"image file {path}: unsupported pixel type {img.dtype}")
    return img


class FileFields:
    """The manifest grouped into fields, with the checks that need all channels
    (``ingest.format: files``; a :class:`cellica.store.ingest.FieldSource`)."""

    columns = ("path", "plate", "well", "site", "channel", "batch", "perturbation")

    @classmethod
    def check_manifest(cls, df: pd.DataFrame, path: str) -> None:
        """One file per channel of a field, and every channel row of a field saying the same of it."""
        df["channel"] = df["channel"].astype(str)
        _one_slot_per_file(df, path)
        # Every channel row of a field says the same of it (the field's tiles get one label).
        for col in ("perturbation", "is_control"):
            varies = df.groupby(list(FIELD_KEYS))[col].transform("nunique") > 1
            if varies.any():
                first = df[varies].iloc[0]
                rows = (np.flatnonzero(varies.to_numpy())[:4] + 2).tolist()
                raise CellicaError(f"manifest {path}: the channel rows of field "
                                   f"{tuple(first[k] for k in FIELD_KEYS)} disagree on {col!r} (rows {rows}); "
                                   f"one field has one {col}")
        dup = df.duplicated(list(FIELD_KEYS) + ["channel"], keep=False)
        if dup.any():
            first = df[dup].iloc[0]
            raise CellicaError(
                f"manifest {path}: several files for field {tuple(first[k] for k in FIELD_KEYS)} "
                f"channel {first['channel']!r} (rows {(np.flatnonzero(dup.to_numpy())[:4] + 2).tolist()})"
            )

    def __init__(self, manifest: pd.DataFrame, p: IngestParams, source: str):
        self.p = p
        self.source = source
        self.channel_dtypes: dict[int, tuple[np.dtype, str]] = {}
        wanted = [str(c) for c in p.channels]
        unknown = sorted(set(manifest["channel"]) - set(wanted))
        if unknown:
            log.info("ignoring manifest channel(s) %s not among the declared %s", unknown, wanted)
        self.groups = []
        self.skipped: list[dict[str, Any]] = []
        for key, rows in manifest.groupby(list(FIELD_KEYS), sort=True):
            by_channel = dict(zip(rows["channel"], rows["_file"], strict=True))
            lacking = [c for c in wanted if c not in by_channel]
            if lacking:
                where = dict(zip(FIELD_KEYS, key, strict=True))
                if p.incomplete_fields != "skip":
                    raise CellicaError(
                        f"manifest {source}: field {where} lacks declared channel(s) {lacking}; "
                        "fix the manifest or set incomplete_fields: skip"
                    )
                self.skipped.append({**where, "missing_channels": lacking})
                continue
            self.groups.append((key, rows.iloc[0], [by_channel[c] for c in wanted]))
        if self.skipped:
            log.warning(
                "skipped %d incomplete field(s) (all listed in the store's provenance), e.g. %s",
                len(self.skipped), self.skipped[:3],
            )
        if not self.groups:
            raise CellicaError(f"manifest {source}: no complete field to ingest")

    def load(self, files: list[str]) -> np.ndarray:
        """The field's channel images, stacked; every per-file problem names its file."""
        imgs = [read_image(f) for f in files]
        shapes = {f: im.shape for f, im in zip(files, imgs, strict=True)}
        if len(set(shapes.values())) > 1:
            raise CellicaError(f"channels of one field differ in shape: {shapes}")
        for channel, (f, im) in enumerate(zip(files, imgs, strict=True)):
            if im.dtype.kind == "f" and self.p.normalize is None:
                raise CellicaError(f"image file {f}: float pixels ({im.dtype}) need normalize: percentile to "
                                   "become integers")
            # One bit depth per channel: an 8-bit file among 16-bit ones would sit at 0-255 beside
            # values in the tens of thousands without anyone noticing.
            first = self.channel_dtypes.setdefault(channel, (im.dtype, f))
            if first[0] != im.dtype:
                raise CellicaError(f"image file {f}: {im.dtype} pixels, but channel {self.p.channels[channel]!r} "
                                   f"was {first[0]} in {first[1]}; convert the files to one bit depth")
        return np.stack(imgs)

    def provenance(self) -> dict[str, Any]:
        """Nothing beyond what every format records."""
        return {}
