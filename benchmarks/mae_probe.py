"""Does the demo MAE learn the synthetic screen's biology? A linear probe, trained vs random.

    python benchmarks/mae_probe.py [--store results/tiles.zarr] [--epochs 5]

Trains the demo MAE (config defaults) on a simulated store, embeds every tile with
it and with the same architecture at random initialisation (same seed), and
prints the held-out R^2 of a ridge probe from each embedding to every latent
factor of the simulation, plus the time taken. Both embeddings are made in
this one process, so the ratio between them is the figure to quote.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd

from cellica.embed._checkpoints import save_model, sidecar_path
from cellica.embed._mae import MaskedAutoencoder, TileNormalizer
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams, TrainParams
from cellica.embed.train import train_mae
from cellica.evaluate.recovery import linear_probe_r2
from cellica.store._render import FACTOR_NAMES
from cellica.store.params import SimulationParams
from cellica.store.simulate import simulate_screen
from cellica.store.tilestore import TileStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="simulated store (default: simulate the demo screen)")
    ap.add_argument("--epochs", type=int, default=TrainParams.epochs)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--normalization", default=TrainParams.normalization, choices=["tile", "store"])
    ap.add_argument("--norm-pix-loss", default="true", choices=["true", "false"])
    ap.add_argument("--lr", type=float, default=TrainParams.lr)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store_path = args.store or simulate_screen(tmp / "s.zarr", SimulationParams(seed=args.seed)).path
        store = TileStore.open(store_path)
        params = TrainParams(epochs=args.epochs, seed=args.seed, normalization=args.normalization,
                             norm_pix_loss=args.norm_pix_loss == "true", lr=args.lr)
        t0 = time.perf_counter()
        train_mae(store_path, tmp / "trained.safetensors", params)
        train_s = time.perf_counter() - t0
        import torch

        torch.manual_seed(args.seed)
        random_model = MaskedAutoencoder(params.mae_config(store.n_channels, store.tile_shape[0]))
        # The random encoder sees tiles normalised exactly as the trained one does.
        sidecar = json.loads(sidecar_path(tmp / "trained.safetensors").read_text())
        normalizer = TileNormalizer(**sidecar["normalization"])
        save_model(random_model, normalizer, tmp / "random.safetensors")
        latents = store.ground_truth("latents").set_index("tile_id")[list(FACTOR_NAMES)]
        rows = {}
        for name in ("random", "trained"):
            adata = embed_store(store_path, tmp / f"{name}.safetensors", params=EmbedParams())
            rows[f"{name} init" if name == "random" else "MAE-trained"] = linear_probe_r2(
                adata.X, latents.loc[adata.obs_names], seed=args.seed)
        table = pd.DataFrame(rows)
        table.loc["mean"] = table.mean()
        print(f"store {store_path}: {store.n_tiles} tiles; training {args.epochs} epochs took {train_s:.0f} s")
        print(table.to_string(float_format=lambda v: f"{v:.3f}"))
        ratio = table.loc["mean", "MAE-trained"] / max(table.loc["mean", "random init"], 1e-9)
        print(f"mean probe R^2: trained {table.loc['mean', 'MAE-trained']:.3f} vs random "
              f"{table.loc['mean', 'random init']:.3f} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
