"""Where embedding time goes, per tile: each part of ``cellica embed`` timed on its own, in one process.

    python benchmarks/embed_breakdown.py [--tiles 512] [--size 224]
        [--models vit_tiny_patch16_224,vit_small_patch16_224]
                                         [--batch 64] [--loader-tiles 1024] [--docs]

The parts, in the order a tile meets them (each on the same tiles, timed alone, best of
``--rounds``): the store's verified read and decode of whole shard slabs (``read_range``);
the per-channel normalisation to float32 (``TileNormalizer``); the collation into batches
(slicing and ``torch.from_numpy``, and pinning on CUDA); the host-to-device copy (CUDA
only: on CPU the model reads host memory); the encoder's forward pass and pooling
(``model.encode``, bf16 autocast on CUDA, as ``embed_store`` runs it); the move back
(``.float().cpu().numpy()``); and building and writing the AnnData (``make_adata`` +
``write_h5ad``). Beside them: ``embed_store`` end to end on the same store and checkpoint,
and the loader alone (``TileBlocks`` through the DataLoader, ``--workers``), so the parts'
sum can be checked against the whole. A last table compares the loaders per core (the process
pinned to one CPU, on ``--loader-tiles`` tiles): before #34 (zarr decoding, copies, normalising
in the loader), the CPU path and the GPU path now, the GPU path from a store written with
``compression: lz4``, and, on all the job's CPUs, the GPU path with a read thread per CPU and
with a worker process per CPU. A fourth table stands in for a GPU on a machine without one:
``embed_store`` as a GPU job runs it (raw tiles, the job's CPUs but one reading), with the
model replaced by a device that takes a fixed time per tile and releases the host while it
works (a sleep: a GPU computes while the host thread waits), at several device rates: the
end-to-end rate against the device's own shows whether reading overlaps the device's work
and what the path around the model costs. ``--docs`` writes the tables into
docs/benchmarks.md (``embed-breakdown``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from _docs import DOCS, markdown, write_block
from embed import make_store

from cellica.core.adata import make_adata, write_h5ad
from cellica.embed._checkpoints import save_model
from cellica.embed._loader import TileBlocks, job_cpus, make_loader
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams
from cellica.store.tilestore import TileStore


def best(fn, rounds: int) -> float:
    """The shortest of ``rounds`` timings of ``fn()`` (seconds), after one warm-up call."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def parts(store_path: Path, model: MaskedAutoencoder, norm: TileNormalizer, n: int, batch: int, device: str,
          rounds: int, tmp: Path) -> dict[str, float]:
    """Seconds of each part for ``n`` tiles (the best of ``rounds``)."""
    store = TileStore.open(store_path)
    slabs = [(lo, min(lo + store.shard_tiles, n)) for lo in range(0, n, store.shard_tiles)]
    raw = [store.read_range(lo, hi) for lo, hi in slabs]
    normed = [norm(r) for r in raw]
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def collate():
        out = []
        for x in normed:
            for s in range(0, len(x), batch):
                t = torch.from_numpy(x[s:s + batch])
                out.append(t.pin_memory() if cuda else t)
        return out

    batches = collate()
    model = model.to(device).eval()

    def to_device():
        out = [b.to(device, non_blocking=True) for b in batches]
        sync()
        return out

    on_device = to_device()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

    def forward():
        with torch.inference_mode(), autocast:
            out = [model.encode(x, "mean", -1) for x in on_device]
        sync()
        return out

    encoded = forward()
    z = np.concatenate([e.float().cpu().numpy() for e in encoded])
    obs = store.metadata.iloc[:n].set_index("tile_id", drop=False)

    def write():
        write_h5ad(make_adata(z, obs, [f"mae_{k}" for k in range(z.shape[1])], {}, "bench"), tmp / "bench.h5ad")

    return {
        "read + decode (verified shard slabs)": best(lambda: [store.read_range(lo, hi) for lo, hi in slabs], rounds),
        "normalise to float32": best(lambda: [norm(r) for r in raw], rounds),
        "collate (batches, from_numpy" + (", pin)" if cuda else ")"): best(collate, rounds),
        "host to device": best(to_device, rounds) if cuda else 0.0,
        "forward + pooling": best(forward, rounds),
        "device to host": best(lambda: [e.float().cpu().numpy() for e in encoded], rounds),
        "AnnData build + write": best(write, rounds),
    }


class BlocksBefore(TileBlocks):
    """The loader's loop as it was before #34 (kept here as the baseline; extraction order): each
    shard decoded by zarr's codec pipeline, its slab copied by fancy indexing and concatenated,
    then normalised per batch."""

    def __iter__(self):
        store = TileStore.open(self.store_path)
        store._decoder.direct = None  # zarr decodes, as before #34
        for g in self._blocks(store.shard_tiles):
            tiles = np.concatenate([store.read_range(int(g[0]), int(g[-1]) + 1)[g - g[0]]])
            for s in range(0, g.size, self.batch_size):
                yield torch.from_numpy(g[s:s + self.batch_size]), torch.from_numpy(
                    self.normalizer(tiles[s:s + self.batch_size]))


@contextlib.contextmanager
def one_core():
    """This process (and the threads it starts: zarr's, Blosc's) pinned to one CPU, so a rate is
    a rate per core whatever the machine has."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


def loaders(store_path: Path, lz4_path: Path, n: int, norm: TileNormalizer, batch: int, rounds: int) -> list[dict]:
    """Loader tiles/s per core (this one process pinned to one CPU, no workers): before #34, now
    on CPU (normalised in the loader), and now feeding a GPU (raw integer tiles), from the
    default (zstd) store and from the same tiles stored with lz4; then, unpinned, the GPU path
    with one read thread per CPU of the job (each store), and with one worker process per CPU."""
    def run(blocks, workers: int = 0) -> int:
        return sum(len(i) for i, _ in make_loader(blocks, workers))

    ways = {"before #34: zarr decodes, slab copied (fancy index + concatenate), normalised":
            lambda: run(BlocksBefore(store_path, np.arange(n), norm, batch)),
            "now, CPU default: direct decode, slab as read, normalised in the loader":
            lambda: run(TileBlocks(store_path, np.arange(n), norm, batch)),
            "now, GPU default: direct decode, raw integer tiles (normalised on the device)":
            lambda: run(TileBlocks(store_path, np.arange(n), norm, batch, raw=True)),
            "now, GPU default, store written with compression lz4":
            lambda: run(TileBlocks(lz4_path, np.arange(n), norm, batch, raw=True))}
    with one_core():
        times = {f"{way}; one core": best(fn, rounds) for way, fn in ways.items()}
    cpus = job_cpus()
    if cpus > 1:  # does reading scale with cores? One read thread, or one worker process, per CPU
        for name, path in (("zstd", store_path), ("lz4", lz4_path)):
            times[f"now, GPU default, {name} store, {cpus} read threads on {cpus} cores"] = best(lambda p=path: run(
                TileBlocks(p, np.arange(n), norm, batch, raw=True, read_threads=cpus)), rounds)
        times[f"now, GPU default, zstd store, {cpus} worker processes on {cpus} cores"] = best(lambda: run(
            TileBlocks(store_path, np.arange(n), norm, batch, raw=True), cpus), rounds)
    base = times[next(iter(times))]
    return [{"loader": way, "tiles/s": n / t, "speed-up vs before": base / t} for way, t in times.items()]


@contextlib.contextmanager
def simulated_device(tiles_per_second: float, width: int):
    """The encoder replaced by a device working at ``tiles_per_second`` (sleeping: the host is
    free meanwhile, as while a GPU computes), the pixels' conversion and normalisation left to it
    (on a GPU they are kernels the host only launches; on this CPU they would be host work)."""
    import cellica.embed.extract as extract

    def encode(self, x, pooling="mean", block=-1):
        time.sleep(len(x) / tiles_per_second)
        return torch.zeros(len(x), width)

    saved = MaskedAutoencoder.encode, TileNormalizer.torch, extract.pixels_to_float
    MaskedAutoencoder.encode, TileNormalizer.torch = encode, lambda self, x: x
    extract.pixels_to_float = lambda x, stored: x
    try:
        yield
    finally:
        MaskedAutoencoder.encode, TileNormalizer.torch, extract.pixels_to_float = saved


def device_feed(store_path: Path, ckpt: Path, n: int, batch: int, rates: list[float], loader: float) -> list[dict]:
    """``embed_store`` as a GPU job (raw tiles, read threads for the job's CPUs but one), its model
    a simulated device at each rate: end to end against the device alone, and against what
    reading then computing one after the other (no overlap) would give."""
    threads = max(1, job_cpus() - 1)
    params = EmbedParams(batch_size=batch, normalize_on="device", read_threads=threads)
    rows = []
    for rate in rates:
        with simulated_device(rate, 192):  # the loop's own time (embed_store's log), not the model's loading
            seconds = min(embed_store(store_path, ckpt, params=params).uns["provenance"]["seconds"] for _ in range(3))
        rows.append({"device tiles/s": rate, "read threads": threads, "embed_store tiles/s": n / seconds,
                     "share of the device's rate": n / seconds / rate,
                     "share of min(device, loader)": n / seconds / min(rate, loader),
                     "one after the other tiles/s": 1 / (1 / rate + 1 / loader)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=512)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--loader-tiles", type=int, default=1024, help="tiles of the loaders' comparison")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--device-rates", default="500,1000,1500,2000,4000", help="simulated device tiles/s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, wholes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = make_store(root, args.size, args.tiles)
        n = TileStore.open(store).n_tiles
        norm = TileNormalizer("tile")
        for name in args.models.split(","):
            torch.manual_seed(0)
            model = MaskedAutoencoder(MAEConfig(model_name=name, in_chans=6, img_size=args.size, patch_size=16))
            ckpt = save_model(model, norm, root / f"{name}.safetensors")
            seconds = parts(store, model, norm, n, args.batch, device, args.rounds, root)
            params = EmbedParams(batch_size=args.batch, device=device, num_workers=args.workers)
            whole = best(lambda: embed_store(store, ckpt, params=params), args.rounds)  # noqa: B023
            loader = best(lambda: sum(len(i) for i, _ in make_loader(  # noqa: B023
                TileBlocks(store, np.arange(n), norm, args.batch), args.workers)), args.rounds)
            total = sum(seconds.values())
            for part, s in seconds.items():
                rows.append({"model": name, "part": part, "ms per tile": 1e3 * s / n, "share of the parts": s / total,
                             "tiles/s": f"{n / s:,.0f}" if s / n >= 1e-6 else "n/a (under 1 µs a tile)"})
            forward = seconds["forward + pooling"]
            wholes.append({"model": name, "tiles": n, "sum of the parts s": total, "embed_store s": whole,
                           "embed_store tiles/s": n / whole, "bare forward tiles/s": n / forward,
                           "embed_store / bare forward": forward / whole, "loader alone tiles/s": n / loader,
                           "read + normalise tiles/s": n / (seconds["read + decode (verified shard slabs)"]
                                                            + seconds["normalise to float32"])})
        # The loaders on more tiles (their start-up, workers' above all, weighs less).
        zstd, lz4 = (make_store(root, args.size, args.loader_tiles, compression=c) for c in ("zstd", "lz4"))
        m = TileStore.open(zstd).n_tiles
        np.testing.assert_array_equal(TileStore.open(lz4).read_range(0, m), TileStore.open(zstd).read_range(0, m))
        loads = pd.DataFrame(loaders(zstd, lz4, m, norm, args.batch, max(args.rounds, 3)))
        # the loader a GPU job on these CPUs has: raw tiles, read threads for its CPUs but one
        feed_loader = m / best(lambda: sum(len(i) for i, _ in make_loader(TileBlocks(
            zstd, np.arange(m), norm, args.batch, raw=True, read_threads=max(1, job_cpus() - 1)))), 3)
        feed = pd.DataFrame(device_feed(zstd, ckpt, m, args.batch, [float(r) for r in args.device_rates.split(",")],
                                        feed_loader))
    table, whole = pd.DataFrame(rows), pd.DataFrame(wholes)
    print(loads.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    where = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(whole.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(feed.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(f"torch {torch.__version__}, {where}, {args.size} px, 6 channels, batch {args.batch}")
    if args.docs:
        head = (
            f"`python benchmarks/embed_breakdown.py --docs` ({where}, torch {torch.__version__}; {n} tiles of "
            f"{args.size} px, 6 channels, uint16, shards of 64; batch {args.batch}; loader workers {args.workers}; "
            "the loaders' comparison on "
            f"{m} tiles)"
        )
        write_block(DOCS / "benchmarks.md", "embed-breakdown",
                    f"{head}\n\n{markdown(table, ',.3f')}\n\n{markdown(whole, ',.2f')}\n\n{markdown(loads, ',.2f')}"
                    f"\n\nA simulated device ({m} tiles, zstd store; its loader alone: {feed_loader:,.0f} tiles/s):\n\n"
                    f"{markdown(feed, ',.2f')}")


if __name__ == "__main__":
    main()
