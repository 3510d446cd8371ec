"""OME-Zarr HCS plates as a source of fields for ingestion (``ingest.format: ome_zarr``).

An NGFF high-content-screening plate is a zarr group with ``plate`` metadata listing its
wells (``B/3``); each well group lists its fields (images ``0``, ``1``, ...), and each image
is a multiscale pyramid with ``omero`` channel labels. The metadata are read and validated
with ``ome-zarr-models`` (OME-Zarr 0.4 on zarr v2, 0.5 on zarr v3), the pixels with zarr.

The manifest then has one row per well: ``path`` (the plate), ``plate``, ``well``
(``B03`` or ``B3``), ``batch``, ``perturbation`` and the control column; every field of
that well becomes a field of the tile store (``site`` = the image's path in the well), cut,
normalised and described exactly as image files are (:func:`cellica.store.ingest.ingest`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.remote import redact
from cellica.store.params import IngestParams

log = get_logger("ingest")
WELL_NAME = re.compile(r"^([A-Za-z]+)0*(\d+)$")


def canonical_well(name: str) -> str:
    """``B3``, ``b03``, ``B/3`` -> ``B03``; other names unchanged."""
    m = WELL_NAME.match(str(name).replace("/", "").strip())
    return f"{m.group(1).upper()}{int(m.group(2)):02d}" if m else str(name)


def open_plate(path: str):
    """The plate's zarr group and its validated HCS model; a clear error for anything else."""
    import ome_zarr_models
    import zarr
    from ome_zarr_models.v04.hcs import HCS as HCS04
    from ome_zarr_models.v05.hcs import HCS as HCS05

    try:  # a local folder or an fsspec URL (zarr opens those through fsspec)
        group = zarr.open_group(path, mode="r")
    except Exception as exc:  # missing, not zarr, unreachable
        raise CellicaError(f"OME-Zarr plate {redact(path)} cannot be opened ({type(exc).__name__}: "
                           f"{redact(str(exc))[:200]})") from None
    path = redact(path)
    attrs = dict(group.attrs)
    if "plate" not in attrs and "plate" not in dict(attrs.get("ome", {})):
        raise CellicaError(f"{path} is not an OME-Zarr HCS plate: its group has no 'plate' metadata "
                           f"(attributes: {sorted(attrs)[:8]})")
    try:
        model = ome_zarr_models.open_ome_zarr(group)
    except Exception as exc:
        raise CellicaError(f"OME-Zarr plate {path}: invalid HCS metadata ({str(exc).splitlines()[0][:300]})") from None
    if not isinstance(model, HCS04 | HCS05):
        raise CellicaError(f"{path} is an OME-Zarr {type(model).__name__}, not an HCS plate")
    return group, model


def _image_model(model, group):
    """The Image model of one field's group, in the plate's OME-Zarr version."""
    from ome_zarr_models.v04.image import Image as Image04
    from ome_zarr_models.v05.image import Image as Image05

    image_cls = Image05 if type(model).__module__.startswith("ome_zarr_models.v05") else Image04
    return image_cls.from_zarr(group)


def _labels(attrs) -> list[str]:
    omero = getattr(attrs, "omero", None) or (attrs.model_extra or {}).get("omero")
    channels = (omero.get("channels") if isinstance(omero, dict) else getattr(omero, "channels", None)) or []
    return [str(c.get("label", "") if isinstance(c, dict) else getattr(c, "label", "")) for c in channels]


def channel_indices(wanted: list, labels: list[str], n_channels: int, where: str) -> list[int]:
    """Declared channels -> indices: a label from the omero metadata, or an index."""
    out = []
    for c in wanted:
        if labels.count(str(c)) > 1:
            raise CellicaError(f"{where}: channel label {c!r} names {labels.count(str(c))} channels {labels}; "
                               "give the channel by its index instead")
        if str(c) in labels:
            out.append(labels.index(str(c)))
        elif str(c).isdigit() and int(c) < n_channels:
            out.append(int(c))
        else:
            raise CellicaError(f"{where}: channel {c!r} is neither one of its labels {labels} nor an index "
                               f"below {n_channels}")
    if len(set(out)) != len(out):
        raise CellicaError(f"{where}: channels {list(wanted)} name channel {max(out, key=out.count)} more than once")
    return out


def check_stored(array, index: tuple, where: str) -> None:
    """Every stored chunk (or shard) that ``array[index]`` reads must exist and be non-empty:
    zarr reads a missing one as its fill value, so a lost chunk would be ingested as zeros."""
    import itertools

    from zarr.core.sync import sync

    unit = array.shards or array.chunks
    ranges = []
    for dim, (sel, size, step) in enumerate(zip(index, array.shape, unit, strict=True)):
        if isinstance(sel, slice):
            lo, hi, _ = sel.indices(size)
            ranges.append(range(lo // step, -(-hi // step)))
        else:
            ranges.append(range(int(sel) // step, int(sel) // step + 1))
        if not ranges[dim]:
            return
    store, prefix = array.store_path.store, array.store_path.path
    for coords in itertools.product(*ranges):
        key = array.metadata.encode_chunk_key(coords)
        full = f"{prefix}/{key}" if prefix else key
        try:
            size = sync(store.getsize(full))
        except FileNotFoundError:
            raise CellicaError(f"{where}: chunk {key} is missing (zarr would read it as zeros); the plate is "
                               "damaged or incompletely copied") from None
        if size == 0:
            raise CellicaError(f"{where}: chunk {key} is empty (0 bytes); the plate is damaged")


class PlateFields:
    """The fields of the manifest's wells in their OME-Zarr plates, with the checks that need
    all of them (same channels everywhere, one pixel type per channel): a
    :class:`cellica.store.ingest.FieldSource`, ``groups`` of (key, manifest row, [field]) and
    :meth:`load`."""

    columns = ("path", "plate", "well", "batch", "perturbation")  # one row per well, its path the plate

    @classmethod
    def check_manifest(cls, df: pd.DataFrame, path: str) -> None:
        """Each well of a plate listed once (``B3`` and ``B03`` are one well)."""
        dup = df.assign(well=df["well"].map(canonical_well)).duplicated(["plate", "well"], keep=False)
        if dup.any():
            first = df[dup].iloc[0]
            raise CellicaError(f"manifest {path}: well {first['well']!r} of plate {first['plate']!r} is listed "
                               f"more than once (rows {(np.flatnonzero(dup.to_numpy())[:4] + 2).tolist()})")

    def provenance(self) -> dict[str, Any]:
        """Each plate's well count and the wells the manifest left out."""
        return {"plates": self.plates}

    def __init__(self, manifest: pd.DataFrame, p: IngestParams, source: str):
        self.p, self.source = p, source
        self.skipped: list[dict[str, Any]] = []
        self.channel_dtypes: dict[int, tuple[np.dtype, str]] = {}
        self.arrays: dict[str, tuple[Any, list[int], tuple[int, ...]]] = {}  # field -> array, channels, index
        self.groups = []
        self.plates: dict[str, dict[str, Any]] = {}
        first_field: tuple[str, int] | None = None
        for plate_path, rows in manifest.groupby("_file", sort=True):
            group, model = open_plate(plate_path)
            plate_path = redact(plate_path)  # names fields in messages and provenance
            wells = {canonical_well(w.path): w.path for w in model.ome_attributes.plate.wells}
            listed = set(rows["well"].map(canonical_well))
            unlisted = sorted(set(wells) - listed)
            if unlisted:
                log.warning("%s: %d well(s) of the plate are not in the manifest and are not ingested, e.g. %s",
                            plate_path, len(unlisted), unlisted[:5])
            self.plates[plate_path] = {"wells": len(wells), "not_in_manifest": unlisted}
            for _, row in rows.sort_values("well").iterrows():
                well = canonical_well(row["well"])
                if well not in wells:
                    raise CellicaError(f"manifest {source}: well {row['well']!r} of plate {row['plate']!r} is not "
                                       f"in {plate_path} (it has {sorted(wells)[:8]} ...)")
                for site, field, n in self._fields(group, model, plate_path, wells[well]):
                    first_field = first_field or (field, n)
                    if n != first_field[1]:
                        raise CellicaError(f"OME-Zarr field {field} has {n} channels, but {first_field[0]} has "
                                           f"{first_field[1]}: the plate's fields disagree in channel count")
                    key = (row["batch"], row["plate"], well, site)
                    first = row.copy()
                    first["well"], first["site"] = well, site
                    self.groups.append((key, first, [field]))
        if not self.groups:
            raise CellicaError(f"manifest {source}: no field to ingest in its OME-Zarr plates")

    def _fields(self, group, model, plate_path: str, well_path: str):
        """(site, field name, channel count) of each image of a well, its array noted for :meth:`load`."""
        from ome_zarr_models.v04.well import Well as Well04
        from ome_zarr_models.v05.well import Well as Well05

        well_cls = Well05 if type(model).__module__.startswith("ome_zarr_models.v05") else Well04
        try:
            images = well_cls.from_zarr(group[well_path]).ome_attributes.well.images
        except Exception as exc:
            raise CellicaError(f"OME-Zarr plate {plate_path}: well {well_path} is unreadable ({exc})") from None
        for image in images:
            field = f"{plate_path}/{well_path}/{image.path}"
            try:
                attrs = _image_model(model, group[f"{well_path}/{image.path}"]).ome_attributes
            except Exception as exc:  # listed by the well but absent or not an image
                raise CellicaError(f"OME-Zarr field {field}: listed by well {well_path} but unreadable "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
                                   ) from None
            scales = attrs.multiscales[0]
            if self.p.level >= len(scales.datasets):
                raise CellicaError(f"OME-Zarr field {field}: level {self.p.level} asked for, it has "
                                   f"{len(scales.datasets)} level(s)")
            axes = [a.name for a in scales.axes]
            if not {"c", "y", "x"} <= set(axes):
                raise CellicaError(f"OME-Zarr field {field}: axes {axes} lack c, y or x")
            try:
                array = group[f"{well_path}/{image.path}/{scales.datasets[self.p.level].path}"]
            except KeyError:
                raise CellicaError(f"OME-Zarr field {field}: level {self.p.level} "
                                   f"({scales.datasets[self.p.level].path}) is listed but absent") from None
            n = int(array.shape[axes.index("c")])
            channels = channel_indices(list(self.p.channels), _labels(attrs), n, f"OME-Zarr field {field}")
            # the first time point and z plane: a screen's fields are 2-D images
            index = tuple(slice(None) if a in ("c", "y", "x") else 0 for a in axes)
            self.arrays[field] = (array, channels, index)
            yield str(image.path), field, n

    def load(self, files: list[str]) -> np.ndarray:
        """The field's declared channels as one (C, H, W) array."""
        array, channels, index = self.arrays[files[0]]
        check_stored(array, index, f"OME-Zarr field {files[0]}")
        try:
            img = np.asarray(array[index])[channels]
        except Exception as exc:  # a chunk that does not decode (truncated, damaged)
            raise CellicaError(f"OME-Zarr field {files[0]}: a chunk does not decode ({type(exc).__name__}: "
                               f"{str(exc)[:160]}); the plate is damaged") from None
        for channel in range(img.shape[0]):
            first = self.channel_dtypes.setdefault(channel, (img.dtype, files[0]))
            if first[0] != img.dtype:
                raise CellicaError(f"OME-Zarr field {files[0]}: {img.dtype} pixels, but {first[1]} has {first[0]}")
        if img.dtype.kind == "f" and self.p.normalize is None:
            raise CellicaError(f"OME-Zarr field {files[0]}: float pixels ({img.dtype}) need normalize: percentile")
        return img
