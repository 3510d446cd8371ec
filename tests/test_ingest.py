import numpy as np
import pandas as pd
import pytest
import tifffile
from PIL import Image

from cellica.core.errors import CellicaError
from cellica.store.ingest import ingest, tile_grid
from cellica.store.params import IngestParams
from tests.conftest import shared

CHANNELS = ["DNA", "ER", "Mito"]


def make_fields(
    root,
    fields=(("B1", "P1", "A01", 1, True), ("B1", "P1", "A02", 1, False), ("B2", "P2", "A01", 1, True)),
    shape=(50, 70),
    fmt="tif",
    dtype=np.uint16,
    channel_order=CHANNELS,
):
    """Write per-channel images and a manifest; pixel value = 1000*channel + field index."""
    rows = []
    for f, (batch, plate, well, site, ctrl) in enumerate(fields):
        for c, ch in enumerate(CHANNELS):
            img = (
                np.full(shape, 1000 * (c + 1) + f, dtype=dtype)
                if dtype != np.uint8
                else np.full(shape, 10 * (c + 1) + f, dtype)
            )
            path = root / f"{plate}_{well}_s{site}_{ch}.{fmt}"
            if fmt == "tif":
                tifffile.imwrite(path, img, compression="zlib")
            else:
                Image.fromarray(img).save(path)
            rows.append(dict(path=path.name, plate=plate, well=well, site=site, channel=ch, run=batch,
                             gene="ctrl" if ctrl else "G1", note=f"field{f}", mean=float(img.mean())))
    manifest = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # order must not matter
    manifest.to_csv(root / "manifest.csv", index=False)
    return root / "manifest.csv"


def params(**kw):
    base = dict(channels=list(reversed(CHANNELS)), tile_size=32, column_map={"batch": "run", "perturbation": "gene"},
                control_label="ctrl")
    return IngestParams(**{**base, **kw})


def test_tile_grid_counts_partial_tiles():
    corners, partial = tile_grid(50, 70, 32, 32)
    assert corners == [(0, 0), (0, 32)] and partial == 6 - 2
    corners, partial = tile_grid(64, 64, 32, 16)
    assert len(corners) == 9 and partial == 16 - 9


def test_ingest_tiff_channel_order_and_metadata(tmp_path):
    manifest = make_fields(tmp_path)
    store = ingest(manifest, tmp_path / "s.zarr", params())
    assert store.channel_names == ["Mito", "ER", "DNA"]
    assert store.n_tiles == 3 * 2 and store.dtype == np.uint16
    md = store.metadata
    # Stacked in the declared order (Mito first), whatever the manifest row order.
    first = store.read([0])[0]
    assert first[0].max() == 3000 + 0 and first[2].max() == 1000 + 0
    assert md["is_control"].tolist() == [True, True, False, False, True, True]
    assert md["note"].tolist()[:2] == ["field0", "field0"]  # constant per field: kept
    assert "mean" not in md  # varies per file: not a tile property
    assert md[["field_y", "field_x"]].values.tolist()[:2] == [[0, 0], [0, 32]]
    assert md["tile_id"].is_unique
    prov = store.attrs["provenance"]
    assert prov["source"] == "ingest" and prov["dropped_partial_tiles"] == 3 * 4
    assert len(prov["manifest_sha256"]) == 64


def test_ingest_png_8bit_with_percentile_normalisation(tmp_path):
    manifest = make_fields(tmp_path, fmt="png", dtype=np.uint8)
    store = ingest(manifest, tmp_path / "s.zarr", params(normalize="percentile", dtype="uint8"))
    norm = store.attrs["provenance"]["normalization"]
    assert set(norm) == {"B1/P1", "B2/P2"}
    assert store.dtype == np.uint8


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda m, root: m.drop(columns="well"), r"missing column\(s\) \['well'\]"),
        (lambda m, root: m.assign(path=m.path.where(m.index != m.index[0], "nope.tif")), "nope.tif is missing"),
        (lambda m, root: m[~((m.well == "A02") & (m.channel == "ER"))], r"lacks declared channel\(s\) \['ER'\]"),
        (lambda m, root: m.assign(gene="G1"), "control_label 'ctrl' matches no perturbation"),
        (lambda m, root: pd.concat([m, m.iloc[:1]]), "is listed more than once"),
        # one image file pointed at two channels of a field: the stored channels would be identical
        (lambda m, root: m.sort_values(["plate", "well", "channel"], ignore_index=True).pipe(
            lambda d: d.assign(path=d.path.where(d.index != 1, d.path.iloc[0]))),
         r"image file 'P1_A01_s1_.*' is listed more than once \(rows \[2, 3\]\)"),
        # the same file reached under a second name (a link): still one file in two slots
        (lambda m, root: m.sort_values(["plate", "well", "channel"], ignore_index=True).pipe(
            lambda d: (root.joinpath("link.tif").symlink_to(root / d.path.iloc[0]),
                       d.assign(path=d.path.where(d.index != 1, "link.tif")))[1]),
         r"image file 'P1_A01_s1_.*' is listed more than once \(rows \[2, 3\]; one file under the names "
         r"\['P1_A01_s1_.*', 'link.tif'\]\)"),
        # the channel rows of one field disagree on its perturbation
        (lambda m, root: m.sort_values(["plate", "well", "channel"], ignore_index=True).pipe(
            lambda d: d.assign(gene=d.gene.where(d.index != 1, "G9"))),
         r"channel rows of field .* disagree on 'perturbation' \(rows \[2, 3, 4\]\)"),
    ],
)
def test_bad_manifests(tmp_path, mutate, match):
    manifest = make_fields(tmp_path)
    mutate(pd.read_csv(manifest), tmp_path).to_csv(manifest, index=False)
    with pytest.raises(CellicaError, match=match):
        ingest(manifest, tmp_path / "s.zarr", params())
    assert not (tmp_path / "s.zarr").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s.zarr")]


def test_unreadable_file_different_shapes_nan_and_small_fields(tmp_path):
    manifest = make_fields(tmp_path)
    (tmp_path / "P1_A01_s1_ER.tif").write_bytes(b"not a tiff")
    with pytest.raises(CellicaError, match=r"P1_A01_s1_ER.tif is unreadable"):
        ingest(manifest, tmp_path / "s.zarr", params())
    manifest = make_fields(tmp_path)
    tifffile.imwrite(tmp_path / "P1_A01_s1_ER.tif", np.zeros((40, 70), np.uint16))
    with pytest.raises(CellicaError, match="differ in shape"):
        ingest(manifest, tmp_path / "s.zarr", params())
    manifest = make_fields(tmp_path)
    bad = np.ones((50, 70), np.float32)
    bad[3, 3] = np.nan
    tifffile.imwrite(tmp_path / "P1_A01_s1_ER.tif", bad)
    with pytest.raises(CellicaError, match=r"P1_A01_s1_ER.tif: 1 NaN/Inf"):
        ingest(manifest, tmp_path / "s.zarr", params(normalize="percentile"))
    manifest = make_fields(tmp_path, shape=(20, 20))
    with pytest.raises(CellicaError, match="smaller than tile_size"):
        ingest(manifest, tmp_path / "s.zarr", params())
    assert not (tmp_path / "s.zarr").exists()


def test_skip_incomplete_fields_is_recorded(tmp_path):
    manifest = make_fields(tmp_path)
    m = pd.read_csv(manifest)
    m[~((m.well == "A02") & (m.channel == "ER"))].to_csv(manifest, index=False)
    store = ingest(manifest, tmp_path / "s.zarr", params(incomplete_fields="skip"))
    assert store.n_tiles == 4
    skipped = store.attrs["provenance"]["skipped_fields"]
    assert skipped == [{"batch": "B1", "plate": "P1", "well": "A02", "site": "1", "missing_channels": ["ER"]}]


def test_overwrite_protection(tmp_path):
    manifest = make_fields(tmp_path)
    ingest(manifest, tmp_path / "s.zarr", params())
    with pytest.raises(CellicaError, match="already exists"):
        ingest(manifest, tmp_path / "s.zarr", params())
    assert ingest(manifest, tmp_path / "s.zarr", params(), overwrite=True).n_tiles == 6


def test_real_rxrx1_pngs(tmp_path):
    root = shared("rxrx1_negctrl_6ch")
    p = IngestParams(
        channels=[1, 2, 3, 4, 5, 6],
        tile_size=256,
        column_map={"batch": "experiment", "perturbation": "sirna"},
        control_label="UNTREATED",
        incomplete_fields="skip",
        dtype="uint8",
    )
    store = ingest(root / "manifest.csv", tmp_path / "rx.zarr", p)
    md = store.metadata
    assert store.n_tiles == 18 * 4 and store.n_channels == 6
    assert md["batch"].nunique() == 5 and md["is_control"].all()
    assert md.groupby(["batch", "plate"]).ngroups == 18
    assert len(store.attrs["provenance"]["skipped_fields"]) == 18  # site 2 lacks w5, w6
    assert store.read([0]).max() > 0


def test_real_cellpainting_tiffs_channel_order_from_manifest(tmp_path):
    root = shared("cellpainting_fov")
    p = IngestParams(channels=["DNA", "RNA", "AGP"], tile_size=256, column_map={"batch": "dataset"},
                     constants={"is_control": "true"}, normalize="percentile")
    store = ingest(root / "manifest.csv", tmp_path / "cp.zarr", p)
    assert store.n_tiles == 2 * 16 and store.channel_names == ["DNA", "RNA", "AGP"]
    assert store.attrs["provenance"]["dropped_partial_tiles"] == 2 * 9
    # The first channel is the DNA file of the JUMP field (ch5), not the file named first.
    tiles = store.read(np.arange(16)).astype(float)
    orig = root / "JUMP_plate_BR00117006/images/orig"
    dna = tifffile.imread(orig / "r01c01f01p01-ch5sk1fk1fl1.tiff")
    rna = tifffile.imread(orig / "r01c01f01p01-ch3sk1fk1fl1.tiff")
    assert dna.dtype == np.uint16 and dna.shape == (1080, 1080)

    def corr(a, b):
        return np.corrcoef(a.ravel(), b[:256, :256].astype(float).ravel())[0, 1]

    assert corr(tiles[0, 0], dna) > 0.95 > corr(tiles[0, 0], rna)
    assert corr(tiles[0, 1], rna) > 0.95
