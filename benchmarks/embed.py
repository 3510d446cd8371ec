"""Embedding throughput: the encoder against the loader alone (the loader must not be the bottleneck).

    python benchmarks/embed.py [--tiles 256] [--models vit_tiny_patch16_224,vit_small_patch16_224]

For each model (full 12-block timm ViT, 16 px patches, random weights: speed does
not depend on the weights) and tile size (64 and 224 px, 6 channels), prints the
tiles/s of `embed_store` end to end and of the loader alone (tiles read from the
zarr store and normalised, no model), measured in this one process, and the
ratio loader / model, which should be at least 5. On a CUDA machine it also runs
ViT-B/16 at 256 px in bf16 and reports model FLOPs utilisation against the
H100/H200 dense bf16 peak (989 TFLOP/s).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cellica.embed.checkpoints import save_model
from cellica.embed.extract import embed_store
from cellica.embed.loader import TileBlocks, make_loader
from cellica.embed.mae import MAEConfig, MaskedAutoencoder, TileNormalizer
from cellica.embed.params import EmbedParams
from cellica.store.params import SimulationParams
from cellica.store.simulate import simulate_screen

BF16_PEAK_TFLOPS = 989.0


def make_store(root: Path, size: int, n_tiles: int) -> Path:
    per_plate = max(1, n_tiles // 32)
    params = SimulationParams(n_genes=2, guides_per_gene=1, n_experiments=1, plates_per_experiment=4,
                              experiments_per_gene=1, control_wells_per_plate=6, tiles_per_well=per_plate,
                              tile_size=size, n_channels=6, shard_tiles=64)
    return simulate_screen(root / f"s{size}.zarr", params).path


def loader_rate(store: Path, normalizer: TileNormalizer, n: int, workers: int) -> float:
    data = TileBlocks(store, np.arange(n), normalizer, batch_size=64)
    t0 = time.perf_counter()
    count = sum(x.shape[0] for _, x in make_loader(data, workers))
    return count / (time.perf_counter() - t0)


def vit_flops_per_tile(model: MaskedAutoencoder) -> float:
    """Forward FLOPs of the encoder on one tile (2 x multiply-adds of the matmuls)."""
    enc = model.encoder
    tokens = model.n_patches + model.n_prefix
    d = enc.embed_dim
    depth = len(enc.blocks)
    per_block = 2 * tokens * (4 * d * d + 2 * 4 * d * d) + 2 * 2 * tokens * tokens * d
    patch = 2 * model.n_patches * d * (model.cfg.patch_size**2 * model.cfg.in_chans)
    return depth * per_block + patch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=256)
    ap.add_argument("--models", default="vit_tiny_patch16_224,vit_small_patch16_224")
    ap.add_argument("--sizes", default="64,224")
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    settings = [(m, int(s), "cpu") for m in args.models.split(",") for s in args.sizes.split(",")]
    if cuda:
        settings += [(m, 256, "cuda") for m in ("vit_small_patch16_224", "vit_base_patch16_224")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stores: dict[int, Path] = {}
        for name, size, device in settings:
            n = args.tiles * (8 if device == "cuda" else 1)
            if size not in stores:
                stores[size] = make_store(root, size, n)
            torch.manual_seed(0)
            model = MaskedAutoencoder(MAEConfig(model_name=name, in_chans=6, img_size=size, patch_size=16))
            norm = TileNormalizer("tile")
            ckpt = save_model(model, norm, root / f"{name}-{size}.safetensors")
            params = EmbedParams(batch_size=64 if device == "cpu" else 256, device=device, num_workers=args.workers)
            embed_store(stores[size], ckpt, params=params)  # warm-up (also compiles kernels on GPU)
            t0 = time.perf_counter()
            adata = embed_store(stores[size], ckpt, params=params)
            model_rate = adata.n_obs / (time.perf_counter() - t0)
            load_rate = loader_rate(stores[size], norm, adata.n_obs, args.workers)
            row = {"model": name, "px": size, "device": device, "tiles": adata.n_obs,
                   "embed tiles/s": model_rate, "loader tiles/s": load_rate, "loader/model": load_rate / model_rate}
            if device == "cuda":
                row["MFU %"] = 100 * vit_flops_per_tile(model) * model_rate / (BF16_PEAK_TFLOPS * 1e12)
            rows.append(row)
            print(pd.DataFrame([row]).to_string(index=False, float_format=lambda v: f"{v:,.1f}"), flush=True)
    table = pd.DataFrame(rows)
    print("\nsummary")
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cuda {cuda}")
    print("loader at least 5x faster than the model everywhere:", bool((table["loader/model"] >= 5).all()))


if __name__ == "__main__":
    main()
