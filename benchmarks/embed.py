"""Embedding throughput: the encoder against the loader alone (the loader must not be the bottleneck)
and against the bare forward pass of the same model (the embedding must not add to it).

    python benchmarks/embed.py [--tiles 256] [--ca-tiles 64] [--models vit_tiny_patch16_224,vit_small_patch16_224]
                               [--sizes 64,224] [--docs]

For each model (full 12-block timm ViT, 16 px patches, random weights: speed does
not depend on the weights), each architecture (`vit`; `channel_agnostic`, which
embeds each channel's patches apart: 6x the tokens) and tile size (64 and 224 px, 6
channels), prints the tiles/s of `embed_store` end to end and of the loader alone
(tiles read from the zarr store and normalised, no model), measured in this one
process, and the ratio loader / model, which should be at least 5; beside it the tiles/s of
the bare forward pass of the same model at the same batch size on batches made beforehand
(timm's ``forward_features`` and the mean of the patch tokens), and embed / bare, which should
be at least 0.9. It also reads the
same kind of tiles from an OME-Zarr HCS plate (fields of 4 x 4 tiles, written with
ome-zarr; read, cut and normalised as ingestion does): the rate a plate feeds
ingestion at, beside the tile store's. On a CUDA machine it also runs ViT-S/B at 256
px in bf16 and reports model FLOPs utilisation against the H100/H200 dense bf16 peak
(989 TFLOP/s). ``--docs`` writes the table into docs/benchmarks.md (``embed``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from _docs import DOCS, markdown, write_block

from cellica.embed._checkpoints import save_model
from cellica.embed._loader import TileBlocks, make_loader
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams
from cellica.store.params import SimulationParams
from cellica.store.simulate import simulate_screen

BF16_PEAK_TFLOPS = 989.0


def make_store(root: Path, size: int, n_tiles: int, compression: str = "zstd") -> Path:
    per_plate = max(1, n_tiles // 32)
    params = SimulationParams(n_genes=2, guides_per_gene=1, n_experiments=1, plates_per_experiment=4,
                              experiments_per_gene=1, control_wells_per_plate=6, tiles_per_well=per_plate,
                              tile_size=size, n_channels=6, shard_tiles=64, compression=compression)
    return simulate_screen(root / f"s{size}-{n_tiles}-{compression}.zarr", params).path


def loader_rate(store: Path, normalizer: TileNormalizer, n: int, workers: int) -> float:
    data = TileBlocks(store, np.arange(n), normalizer, batch_size=64)
    t0 = time.perf_counter()
    count = sum(x.shape[0] for _, x in make_loader(data, workers))
    return count / (time.perf_counter() - t0)


def forward_rate(model: MaskedAutoencoder, size: int, n: int, batch: int, device: str) -> float:
    """Tiles/s of the bare forward pass on batches made before the clock starts, in inference
    mode as ``embed_store`` runs it (bf16 autocast on CUDA): timm's own ``forward_features``
    for the ``vit`` architecture, the model's ``encode`` for ``channel_agnostic`` (its tokens
    are cellica's; timm has no such forward)."""
    import contextlib

    model = model.to(device).eval()
    x = torch.randn(batch, 6, size, size, device=device)
    ca = model.cfg.architecture == "channel_agnostic"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        fn = (
            (lambda: model.encode(x))
            if ca
            else (lambda: model.encoder.forward_features(x)[:, model.n_prefix :].mean(1))
        )
        fn()  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        t0, done = time.perf_counter(), 0
        while done < n:
            fn()
            done += batch
        if device == "cuda":
            torch.cuda.synchronize()
    return done / (time.perf_counter() - t0)


def vit_flops_per_tile(model: MaskedAutoencoder) -> float:
    """Forward FLOPs of the encoder on one tile (2 x multiply-adds of the matmuls)."""
    enc = model.encoder
    tokens = model.n_patches + model.n_prefix
    d = enc.embed_dim
    depth = len(enc.blocks)
    per_block = 2 * tokens * (4 * d * d + 2 * 4 * d * d) + 2 * 2 * tokens * tokens * d
    patch = (
        2 * model.n_patches * d * (model.cfg.patch_size**2 * (1 if model.cfg.channel_agnostic else model.cfg.in_chans))
    )
    return depth * per_block + patch


def plate_rate(root: Path, size: int, n_tiles: int) -> float:
    """Tiles/s read from an OME-Zarr plate (6 channels, fields of 4 x 4 tiles), cut and
    normalised as ingestion and the loader do; the plate's writing is not timed."""
    import zarr
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    from cellica.store.omezarr import PlateFields
    from cellica.store.params import IngestParams

    fields = max(1, n_tiles // 16)
    path = root / f"plate{size}.zarr"
    group = zarr.open_group(str(path), mode="w")
    wells = [f"A/{k + 1}" for k in range(fields)]
    write_plate_metadata(group, ["A"], [str(k + 1) for k in range(fields)], wells, field_count=1)
    rng = np.random.default_rng(0)
    for well in wells:
        wg = group.require_group("A").require_group(well.split("/")[1])
        write_well_metadata(wg, ["0"])
        write_image(rng.integers(0, 4000, (6, 4 * size, 4 * size)).astype(np.uint16), wg.require_group("0"),
                    axes="cyx", scale_factors=[])
    manifest = pd.DataFrame({"_file": str(path), "plate": "P", "well": [f"A{k + 1:02d}" for k in range(fields)],
                             "batch": "B", "perturbation": "x", "is_control": "False"})
    norm = TileNormalizer("tile")
    t0 = time.perf_counter()
    plate = PlateFields(manifest, IngestParams(format="ome_zarr", channels=list(range(6)), tile_size=size), "bench")
    count = 0
    for _, _, files in plate.groups:
        stack = plate.load(files)
        tiles = stack.reshape(6, 4, size, 4, size).transpose(1, 3, 0, 2, 4).reshape(16, 6, size, size)
        count += norm(tiles).shape[0]
    return count / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=256)
    ap.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224")
    ap.add_argument("--sizes", default="64,224")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--ca-tiles", type=int, default=64, help="tiles for the channel-agnostic encoder (6x the tokens)")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    settings = [(m, int(s), "cpu", a) for a in ("vit", "channel_agnostic") for m in args.models.split(",")
                for s in args.sizes.split(",")]
    if cuda:
        settings += [(m, 256, "cuda", a) for a in ("vit", "channel_agnostic")
                     for m in ("vit_small_patch16_224", "vit_base_patch16_224")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stores: dict[int, Path] = {}
        for name, size, device, arch in settings:
            n = (args.tiles if arch == "vit" else args.ca_tiles) * (8 if device == "cuda" else 1)
            if (size, n) not in stores:
                stores[(size, n)] = make_store(root, size, n)
            store = stores[(size, n)]
            torch.manual_seed(0)
            model = MaskedAutoencoder(MAEConfig(model_name=name, in_chans=6, img_size=size, patch_size=16,
                                                architecture=arch))
            norm = TileNormalizer("tile")
            ckpt = save_model(model, norm, root / f"{name}-{size}-{arch}.safetensors")
            params = EmbedParams(batch_size=64 if device == "cpu" else 256, device=device, num_workers=args.workers)
            embed_store(store, ckpt, params=params)  # warm-up (also compiles kernels on GPU)
            t0 = time.perf_counter()
            adata = embed_store(store, ckpt, params=params)
            model_rate = adata.n_obs / (time.perf_counter() - t0)
            load_rate = loader_rate(store, norm, adata.n_obs, args.workers)
            bare = forward_rate(model, size, adata.n_obs, params.batch_size, device)
            row = {"model": name, "architecture": arch, "px": size, "device": device, "tiles": adata.n_obs,
                   "embed tiles/s": model_rate, "bare forward tiles/s": bare, "embed/bare": model_rate / bare,
                   "loader tiles/s": load_rate, "loader/model": load_rate / model_rate}
            if device == "cuda":
                row["MFU %"] = 100 * vit_flops_per_tile(model) * model_rate / (BF16_PEAK_TFLOPS * 1e12)
            rows.append(row)
            print(pd.DataFrame([row]).to_string(index=False, float_format=lambda v: f"{v:,.2f}"), flush=True)
        plates = [{"px": size, "OME-Zarr plate tiles/s": plate_rate(root, size, args.tiles),
                   "tile store loader tiles/s": loader_rate(stores[(size, args.tiles)], TileNormalizer("tile"),
                                                            args.tiles, args.workers)}
                  for size in sorted({s for _, s, d, _ in settings if d == "cpu"})]
    table, plates = pd.DataFrame(rows), pd.DataFrame(plates)
    print("\nsummary")
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(plates.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    device = torch.cuda.get_device_name(0) if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {device}")
    print("loader at least 5x faster than the model everywhere:", bool((table["loader/model"] >= 5).all()))
    print("embed at least 0.9 of the bare forward pass everywhere:", bool((table["embed/bare"] >= 0.9).all()))
    if args.docs:
        head = f"`python benchmarks/embed.py --docs` ({device}, torch {torch.__version__}; 6 channels, 16 px patches)"
        write_block(
            DOCS / "benchmarks.md", "embed", f"{head}\n\n{markdown(table, ',.2f')}\n\n{markdown(plates, ',.1f')}"
        )


if __name__ == "__main__":
    main()
