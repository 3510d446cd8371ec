"""Tile store throughput: writes, and random-batch reads against per-channel image files.

    python benchmarks/tile_store.py [--tiles 2000] [--size 256] [--channels 6]

Writes N tiles of C x S x S uint16 (smooth random images, compressible like real
microscopy) to a tile store and to per-channel PNG and TIFF files, then reads
random batches of 64 tiles from each, cold and warm page cache alike (the files
were just written, so all are warm: the comparison is decoding and file overhead).
Prints tiles/s and MB/s and the store's speed-up over each per-file baseline, and what
the per-chunk crc32c checksums cost: random and sequential reads of the same tiles from a
store written with and without them, alternated over `--repeats` rounds (median ratio).

What verify-on-read costs (`--docs` writes the `tile-store-verify` table): every shard read
whole and checked against the store's manifest (byte count, crc32c) before it is decoded,
against zarr reading the same store unchecked (the path before manifests), alternated over
`--repeats` rounds, for the reads embedding and training make (sequential shard slabs, and
shuffled shard groups through the data loader), plus the crc32c's own share of the read time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import tifffile
from PIL import Image
from scipy import ndimage

from cellica.store.tilestore import TileStore


def make_tiles(n: int, c: int, s: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = ndimage.gaussian_filter(rng.random((8, c, s, s), dtype=np.float32), sigma=(0, 0, 3, 3))
    base = (base - base.min()) / (base.max() - base.min())
    noise = rng.poisson(20, (n, c, s, s)).astype(np.float32)
    return (base[np.arange(n) % 8] * 30000 + noise * 50).astype(np.uint16)


def metadata(n: int) -> pd.DataFrame:
    return pd.DataFrame({"tile_id": [f"t{i}" for i in range(n)], "plate": "P1", "well": "A01", "site": np.arange(n),
                         "batch": "B1", "perturbation": "ctrl", "is_control": True})


def time_it(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=2000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--channels", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--shard-tiles", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--docs", action="store_true", help="write the checksum-cost table into docs/benchmarks.md")
    args = ap.parse_args()
    n, c, s = args.tiles, args.channels, args.size
    tiles = make_tiles(n, c, s)
    mb = tiles.nbytes / 1e6
    print(f"{n} tiles of {c} x {s} x {s} uint16 ({mb:.0f} MB raw)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = []

        def write_store(name="s.zarr", checksums=True):
            with TileStore.create(root / name, [f"c{i}" for i in range(c)], (s, s), "uint16",
                                  shard_tiles=args.shard_tiles, checksums=checksums) as w:
                for start in range(0, n, 256):
                    w.append(tiles[start : start + 256], metadata(n).iloc[start : start + 256])

        def write_files(ext):
            (root / ext).mkdir()
            for i in range(n):
                for ch in range(c):
                    path = root / ext / f"t{i}_c{ch}.{ext}"
                    if ext == "png":
                        Image.fromarray(tiles[i, ch]).save(path, compress_level=1)
                    else:
                        tifffile.imwrite(path, tiles[i, ch], compression="zlib", compressionargs={"level": 1})

        writes = {"zarr store": time_it(write_store), "PNG files": time_it(lambda: write_files("png")),
                  "TIFF files": time_it(lambda: write_files("tif"))}
        store = TileStore.open(root / "s.zarr")
        rng = np.random.default_rng(1)
        batches = [rng.choice(n, args.batch, replace=False) for _ in range(args.batches)]

        def read_files(ext, idx):
            if ext == "png":
                return np.stack(
                    [
                        np.stack([np.asarray(Image.open(root / ext / f"t{i}_c{ch}.{ext}")) for ch in range(c)])
                        for i in idx
                    ]
                )
            return np.stack(
                [np.stack([tifffile.imread(root / ext / f"t{i}_c{ch}.{ext}") for ch in range(c)]) for i in idx]
            )

        assert np.array_equal(store.read(batches[0]), tiles[batches[0]])
        assert np.array_equal(read_files("png", batches[0][:4]), tiles[batches[0][:4]])
        reads = {
            "zarr store": time_it(lambda: [store.read(b) for b in batches]),
            "PNG files": time_it(lambda: [read_files("png", b) for b in batches]),
            "TIFF files": time_it(lambda: [read_files("tif", b) for b in batches]),
        }
        seq = time_it(lambda: [None for _ in store.iter_blocks()])
        n_read = args.batch * args.batches
        disk = {k: sum(f.stat().st_size for f in (root / d).rglob("*") if f.is_file()) / 1e6
                for k, d in (("zarr store", "s.zarr"), ("PNG files", "png"), ("TIFF files", "tif"))}
        for name in writes:
            rows.append({"format": name, "write tiles/s": n / writes[name], "write MB/s": mb / writes[name],
                         "random read tiles/s": n_read / reads[name],
                         "random read MB/s": n_read * c * s * s * 2 / 1e6 / reads[name],
                         "on disk MB": disk[name]})
        table = pd.DataFrame(rows).set_index("format")
        print(table.to_string(float_format=lambda v: f"{v:,.1f}"))
        print(f"store sequential read (iter_blocks): {n / seq:,.0f} tiles/s")
        for base in ("PNG files", "TIFF files"):
            print(f"random read speed-up of the store over {base}: "
                  f"{reads[base] / reads['zarr store']:.2f}x; write: {writes[base] / writes['zarr store']:.2f}x")
        cost = checksum_cost(root, write_store, batches, args.repeats, n)
        verify = verify_cost(root, args.repeats, n)
        if args.docs:
            from _docs import DOCS, markdown, write_block

            write_block(DOCS / "benchmarks.md", "tile-store-verify", markdown(verify, ".3f"))

            write_block(DOCS / "benchmarks.md", "tile-store-checksums", markdown(cost, ".2f"))


def checksum_cost(root: Path, write_store, batches, repeats: int, n: int) -> pd.DataFrame:
    """Reads from stores with and without per-chunk crc32c, alternated: the checksums' cost."""
    write_store("plain.zarr", checksums=False)
    stores = {"crc32c": TileStore.open(root / "s.zarr"), "none": TileStore.open(root / "plain.zarr")}
    assert np.array_equal(stores["crc32c"].read(batches[0]), stores["none"].read(batches[0]))
    rand = {k: [] for k in stores}
    seq = {k: [] for k in stores}
    for _ in range(repeats):
        for k, st in stores.items():
            rand[k].append(time_it(lambda st=st: [st.read(b) for b in batches]))
            seq[k].append(time_it(lambda st=st: [None for _ in st.iter_blocks()]))
    n_read = sum(len(b) for b in batches)
    rows = []
    for label, times, count in (("random batches of 64", rand, n_read), ("sequential", seq, n)):
        with_crc, without = np.median(times["crc32c"]), np.median(times["none"])
        print(f"checksums, {label}: {count / with_crc:,.0f} tiles/s with crc32c vs {count / without:,.0f} without "
              f"({without / with_crc:.2f}x of the throughput without; median of {repeats})", flush=True)
        rows.append({"read": label, "tiles/s with crc32c": count / with_crc, "tiles/s without": count / without,
                     "throughput with / without": without / with_crc, "rounds": repeats})
    return pd.DataFrame(rows)


def verify_cost(root: Path, repeats: int, n: int) -> pd.DataFrame:
    """Verified reads (the manifest checked, shard by shard) against unverified zarr reads of the
    same store, alternated; and the crc32c's share of a verified read."""
    import google_crc32c

    from cellica.embed._loader import TileBlocks
    from cellica.embed._mae import TileNormalizer

    store = TileStore.open(root / "s.zarr")
    step = store.shard_tiles
    unchecked = {
        "sequential shard slabs (embed)": lambda: [np.asarray(store._array[a : a + step]) for a in range(0, n, step)],
        "shuffled shard groups (train loader)": None,
    }
    checked = {
        "sequential shard slabs (embed)": lambda: [store.read_range(a, min(a + step, n)) for a in range(0, n, step)],
        "shuffled shard groups (train loader)": None,
    }
    norm = TileNormalizer(mode="tile")

    def loader(verified: bool):
        data = TileBlocks(store.path, np.arange(n), norm, 64, shuffle_seed=0, generation=store.generation)
        if not verified:  # the same iteration with zarr's own unchecked read
            data._store = TileStore.open(store.path)
            data._store.read_range = lambda a, b, st=data._store: np.asarray(st._array[a:b])
        return lambda: [None for _ in data]

    checked["shuffled shard groups (train loader)"] = loader(True)
    unchecked["shuffled shard groups (train loader)"] = loader(False)
    assert all(np.array_equal(a, b) for a, b in zip(checked["sequential shard slabs (embed)"](),
                                                    unchecked["sequential shard slabs (embed)"](), strict=True))
    times = {k: {"verified": [], "unverified": []} for k in checked}
    for _ in range(repeats):
        for k in checked:
            times[k]["verified"].append(time_it(checked[k]))
            times[k]["unverified"].append(time_it(unchecked[k]))
    blobs = [store.shard_file(i).read_bytes() for i in range(-(-n // step))]
    crc = np.median([time_it(lambda: [google_crc32c.value(b) for b in blobs]) for _ in range(repeats)])
    rows = []
    for k, t in times.items():
        v, u = np.median(t["verified"]), np.median(t["unverified"])
        rows.append({"read": k, "tiles/s verified": n / v, "tiles/s unverified": n / u,
                     "verified / unverified time": v / u, "crc32c share of the verified read": crc / v,
                     "rounds": repeats})
        print(f"verify-on-read, {k}: {n / v:,.0f} tiles/s verified vs {n / u:,.0f} unverified "
              f"(time {v / u:.3f}x; crc32c {crc / v:.1%} of it)", flush=True)
    return pd.DataFrame(rows)


if __name__ == "__main__":
    main()
