"""Which transformer block embeds the biology best? Every block of one MAE, probed against the
simulated screen's true factors and its plates' technical parameters.

    python benchmarks/blocks.py [--store results/tiles.zarr] [--checkpoint results/mae/seed0/model.safetensors]
                                [--epochs 5] [--docs]

Without ``--store`` / ``--checkpoint`` it simulates the demo screen and trains the demo MAE
(config defaults) first. Then it embeds every tile at each block (``embed.block`` 0 .. last,
mean pooling; the last block also with ``cls`` and ``both``) and reports, per embedding,
the ground-truth measures of :func:`cellica.identify.recovery.truth_recovery` (the DAG's own):
held-out linear-probe R^2 of the true factors (higher: more biology, linearly) and of the
plates' technical parameters (lower: less batch signal), the matched-factor MCC and the
time to embed. All embeddings are made in this one process. ``--docs`` writes the table into
docs/models.md (``blocks``). The variants' classifier metrics per block are the DAG's: run it
with ``--config embed="{block: K}"``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
from _docs import DOCS, markdown, write_block

from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams, TrainParams
from cellica.embed.train import train_mae
from cellica.identify.recovery import truth_recovery
from cellica.store.params import SimulationParams
from cellica.store.simulate import simulate_screen
from cellica.store.tilestore import TileStore


def settings(n_blocks: int) -> list[tuple[int, str]]:
    """(block, pooling) pairs: every block with mean pooling, the last also with cls and both."""
    return [(k, "mean") for k in range(n_blocks)] + [(n_blocks - 1, "cls"), (n_blocks - 1, "both")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="a simulated store (default: simulate the demo screen)")
    ap.add_argument("--checkpoint", default=None, help="a cellica MAE (default: train the demo MAE)")
    ap.add_argument("--epochs", type=int, default=TrainParams.epochs)
    ap.add_argument("--max-samples", type=int, default=5000, help="tiles in the probes (seeded sample)")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        store_path = args.store or simulate_screen(tmp / "s.zarr", SimulationParams()).path
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = tmp / "mae.safetensors"
            train_mae(store_path, checkpoint, TrainParams(epochs=args.epochs))
        store = TileStore.open(store_path)
        latents, batches = store.ground_truth("latents"), store.ground_truth("batches")
        first = embed_store(store_path, checkpoint, params=EmbedParams(block=-1))
        n_blocks = int(first.uns["provenance"]["n_blocks"])
        rows = []
        for block, pooling in settings(n_blocks):
            t1 = time.perf_counter()
            adata = embed_store(store_path, checkpoint, params=EmbedParams(block=block, pooling=pooling))
            seconds = time.perf_counter() - t1
            truth = truth_recovery(adata, latents, batches, max_samples=args.max_samples)
            rows.append({"block": block, "pooling": pooling, "dims": adata.n_vars,
                         "factor probe R^2": truth["truth_factor_r2"], "batch probe R^2": truth["truth_batch_r2"],
                         "MCC": truth["truth_mcc"], "embed s": seconds})
            print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
        table = pd.DataFrame(rows)
        took = time.perf_counter() - t0
    print(f"\n{store.n_tiles} tiles, {n_blocks} blocks; {took / 60:.1f} min")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.docs:
        head = (f"`python benchmarks/blocks.py --docs` (the demo screen, {store.n_tiles} tiles; the demo MAE of "
                f"{n_blocks} blocks, {args.epochs} epochs; {took / 60:.0f} min on this machine)")
        write_block(DOCS / "models.md", "blocks", f"{head}\n\n{markdown(table, '.3f')}")


if __name__ == "__main__":
    main()
