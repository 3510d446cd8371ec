"""OME-Zarr HCS plates into the tile store (ingest.format: ome_zarr), each plate written here
with ome-zarr's own writer."""

import numpy as np
import pandas as pd
import pytest
import tifffile
import zarr

from cellica.core.errors import CellicaError
from cellica.store.ingest import ingest
from cellica.store.omezarr import canonical_well
from cellica.store.params import IngestParams
from cellica.store.tilestore import TileStore

pytest.importorskip("ome_zarr", reason="ome-zarr (the writer of the test plates) is a dev dependency")
LABELS = ["DNA", "ER", "RNA"]


def write_plate(path, wells=("A/1", "B/2"), fields=2, size=64, channels=3, odd=None, seed=0):
    """An HCS plate: each well's fields are (channels, size, size) uint16 images with omero
    labels, two resolution levels. ``odd`` names a field given one channel fewer."""
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    rng = np.random.default_rng(seed)
    root = zarr.open_group(str(path), mode="w")
    rows = sorted({w.split("/")[0] for w in wells})
    cols = sorted({w.split("/")[1] for w in wells})
    write_plate_metadata(root, rows, cols, list(wells), field_count=fields, name=path.stem)
    pixels = {}
    for well in wells:
        r, c = well.split("/")
        wg = root.require_group(r).require_group(c)
        write_well_metadata(wg, [str(f) for f in range(fields)])
        for f in range(fields):
            n = channels - 1 if odd == f"{well}/{f}" else channels
            img = rng.integers(0, 4000, (n, size, size)).astype(np.uint16)
            g = wg.require_group(str(f))
            write_image(img, g, axes="cyx", scale_factors=[2])
            omero = {"channels": [{"label": LABELS[k], "color": "FFFFFF", "active": True,
                                   "window": {"start": 0, "end": 4000, "min": 0, "max": 65535}} for k in range(n)]}
            g.attrs.update({"ome": {**g.attrs["ome"], "omero": omero}})
            pixels[(canonical_well(well), str(f))] = img
    return pixels


def well_manifest(tmp_path, plate, wells=("A01", "B02")):
    rows = [{"path": plate.name, "plate": "P1", "well": w, "batch": "B1", "perturbation": "ctrl" if i == 0 else "G1",
             "dose": "1"} for i, w in enumerate(wells)]
    path = tmp_path / "wells.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


PARAMS = dict(format="ome_zarr", channels=["ER", "DNA"], tile_size=32, control_label="ctrl", shard_tiles=8)


def test_plate_is_tiled_like_image_files(tmp_path):
    pixels = write_plate(tmp_path / "plate.zarr")
    store = ingest(well_manifest(tmp_path, tmp_path / "plate.zarr"), tmp_path / "s.zarr", IngestParams(**PARAMS))
    assert store.n_tiles == 2 * 2 * 4 and store.channel_names == ["ER", "DNA"]
    md = store.metadata
    assert md["well"].tolist()[:4] == ["A01"] * 4 and set(md["site"].astype(str)) == {"0", "1"}
    assert md["is_control"].tolist() == [True] * 8 + [False] * 8 and "dose" in md.columns
    first = pixels[("A01", "0")][[1, 0]]  # ER then DNA, by label
    np.testing.assert_array_equal(store.read([0])[0], first[:, :32, :32])
    np.testing.assert_array_equal(store.read([3])[0], first[:, 32:, 32:])
    assert store.attrs["provenance"]["format"] == "ome_zarr"
    # the same pixels as one TIFF per field and channel: the same store, tile for tile
    rows = []
    for (well, site), img in pixels.items():
        for k, label in enumerate(LABELS):
            name = f"{well}_{site}_{label}.tif"
            tifffile.imwrite(tmp_path / name, img[k])
            rows.append({"path": name, "plate": "P1", "well": well, "site": site, "channel": label, "batch": "B1",
                         "perturbation": "ctrl" if well == "A01" else "G1", "dose": "1"})
    pd.DataFrame(rows).to_csv(tmp_path / "files.csv", index=False)
    files = ingest(tmp_path / "files.csv", tmp_path / "f.zarr", IngestParams(**{**PARAMS, "format": "files"}))
    np.testing.assert_array_equal(files.read(np.arange(16)), store.read(np.arange(16)))
    pd.testing.assert_frame_equal(files.metadata.astype(str), md.astype(str))


def test_resolution_level_and_channel_indices(tmp_path):
    pixels = write_plate(tmp_path / "plate.zarr")
    params = IngestParams(**{**PARAMS, "channels": [2], "level": 1, "tile_size": 16})
    store = ingest(well_manifest(tmp_path, tmp_path / "plate.zarr", ["a1", "B2"]), tmp_path / "s.zarr", params)
    assert store.n_tiles == 2 * 2 * 4 and store.tile_shape == (16, 16)
    assert store.read([0])[0].shape == (1, 16, 16)
    assert abs(float(store.read([0])[0].mean()) - float(pixels[("A01", "0")][2, :32, :32].mean())) < 200
    with pytest.raises(CellicaError, match="level 2 asked for, it has 2 level"):
        ingest(tmp_path / "wells.csv", tmp_path / "t.zarr", IngestParams(**{**PARAMS, "level": 2}))
    with pytest.raises(CellicaError, match="channel 'Mito' is neither one of its labels"):
        ingest(tmp_path / "wells.csv", tmp_path / "t.zarr", IngestParams(**{**PARAMS, "channels": ["Mito"]}))
    assert not (tmp_path / "t.zarr").exists()


def test_bad_plates(tmp_path):
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w").attrs["foo"] = 1
    with pytest.raises(CellicaError, match="plain.zarr is not an OME-Zarr HCS plate: its group has no 'plate'"):
        ingest(well_manifest(tmp_path, tmp_path / "plain.zarr"), tmp_path / "s.zarr", IngestParams(**PARAMS))
    write_plate(tmp_path / "odd.zarr", odd="B/2/1")
    with pytest.raises(CellicaError, match=r"odd.zarr/B/2/1 has 2 channels, but .*odd.zarr/A/1/0 has 3: the "
                                           "plate's fields disagree in channel count"):
        ingest(well_manifest(tmp_path, tmp_path / "odd.zarr"), tmp_path / "s.zarr", IngestParams(**PARAMS))
    write_plate(tmp_path / "plate.zarr")
    with pytest.raises(CellicaError, match="well 'C03' of plate 'P1' is not in"):
        ingest(well_manifest(tmp_path, tmp_path / "plate.zarr", ["A01", "C03"]), tmp_path / "s.zarr",
               IngestParams(**PARAMS))
    with pytest.raises(CellicaError, match="OME-Zarr plate .*missing.zarr cannot be opened"):
        ingest(well_manifest(tmp_path, tmp_path / "missing.zarr"), tmp_path / "s.zarr", IngestParams(**PARAMS))
    assert not (tmp_path / "s.zarr").exists()


def test_unlisted_wells_are_counted(tmp_path, caplog):
    write_plate(tmp_path / "plate.zarr", wells=("A/1", "B/2", "C/3"))
    store = ingest(well_manifest(tmp_path, tmp_path / "plate.zarr"), tmp_path / "s.zarr", IngestParams(**PARAMS))
    assert "1 well(s) of the plate are not in the manifest" in caplog.text
    plates = store.attrs["provenance"]["plates"]
    assert next(iter(plates.values()))["not_in_manifest"] == ["C03"]
    assert TileStore.open(tmp_path / "s.zarr").n_tiles == 16
