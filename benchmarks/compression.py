"""What a tile store's compressor costs and buys: size on disk, write and read rates per core.

    python benchmarks/compression.py [--stride 112] [--rounds 5] [--docs]

Real Cell Painting fields (``../shared/data/cellpainting_fov``: a 6-channel Opera Phenix field
and a 3-channel JUMP field, 1080 px, 16-bit) are cut into 224 px tiles (``--stride`` apart)
and written to a store with each of ``cellica.store.params.COMPRESSIONS``. For each: bytes
on disk against the raw pixels, the write rate, and the read rate of the store's verified
shard slabs (``read_range``: the whole-shard crc32c against the manifest, then each chunk's
crc32c and Blosc, decoded directly) and, for reference, zarr decoding the same store (the
path before #34). Everything runs pinned to one CPU, so every rate is per core. Every read is
checked pixel for pixel against the tiles written. ``--docs`` writes the table into
docs/benchmarks.md (``tile-store-compression``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _docs import DOCS, markdown, write_block
from embed_breakdown import best, one_core

from cellica.store.params import COMPRESSIONS
from cellica.store.tilestore import TileStore

FOV = Path(__file__).resolve().parents[2] / "shared" / "data" / "cellpainting_fov"


def fields(stride: int, size: int = 224) -> dict[str, np.ndarray]:
    """Tiles of each real field of view, (n, C, size, size) uint16, per data set."""
    import tifffile

    manifest = pd.read_csv(FOV / "manifest.csv")
    out = {}
    for dataset, rows in manifest.groupby("dataset", sort=True):
        image = np.stack([tifffile.imread(FOV / p) for p in rows["path"]])
        h, w = image.shape[1:]
        out[f"{dataset} ({len(rows)} ch)"] = np.stack(
            [image[:, y : y + size, x : x + size] for y in range(0, h - size + 1, stride)
             for x in range(0, w - size + 1, stride)])
    return out


def measure(name: str, tiles: np.ndarray, root: Path, rounds: int) -> list[dict]:
    n = len(tiles)
    meta = pd.DataFrame({"tile_id": [f"t{i}" for i in range(n)], "plate": "P1", "well": "A01", "site": np.arange(n),
                         "batch": "B1", "perturbation": "ctrl", "is_control": True})
    rows = []
    for compression in COMPRESSIONS:
        path = root / f"{compression}.zarr"

        def write(path=path, compression=compression):
            with TileStore.create(path, [f"c{i}" for i in range(tiles.shape[1])], tiles.shape[2:], "uint16",
                                  shard_tiles=64, overwrite=True, compression=compression) as w:
                w.append(tiles, meta)

        wrote = best(write, 1)
        store = TileStore.open(path)
        slabs = [(lo, min(lo + store.shard_tiles, n)) for lo in range(0, n, store.shard_tiles)]
        np.testing.assert_array_equal(np.concatenate([store.read_range(lo, hi) for lo, hi in slabs]), tiles)
        direct = best(lambda store=store, slabs=slabs: [store.read_range(lo, hi) for lo, hi in slabs], rounds)
        by_zarr = TileStore.open(path)
        by_zarr._decoder.direct = None
        np.testing.assert_array_equal(by_zarr.read_range(0, n), tiles)
        zarr_read = best(lambda z=by_zarr, slabs=slabs: [z.read_range(lo, hi) for lo, hi in slabs], rounds)
        on_disk = sum(f.stat().st_size for f in (path / "tiles").rglob("*") if f.is_file())
        rows.append({"tiles": f"{name}: {n}", "compression": compression, "raw / on disk": tiles.nbytes / on_disk,
                     "write tiles/s": n / wrote, "read tiles/s (cellica)": n / direct,
                     "read tiles/s (zarr decodes)": n / zarr_read})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=112)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    if not FOV.is_dir():
        raise SystemExit(f"{FOV} is absent: this benchmark measures real Cell Painting tiles")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, one_core():
        for name, tiles in fields(args.stride).items():
            rows += measure(name, tiles, Path(tmp), args.rounds)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    if args.docs:
        head = (f"`python benchmarks/compression.py --docs` (one CPU core; 224 px tiles {args.stride} px apart, "
                "shards of 64, best of " f"{args.rounds})")
        write_block(DOCS / "benchmarks.md", "tile-store-compression", f"{head}\n\n{markdown(table, ',.2f')}")


if __name__ == "__main__":
    main()
