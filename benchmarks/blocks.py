"""Which transformer block embeds the biology best? Every block of one MAE, probed against the
simulated screen's true factors, classified per variant, and (``--rxrx1``) measured for the
batch signal it keeps on real control images.

    python benchmarks/blocks.py [--store results/tiles.zarr] [--checkpoint results/mae/seed0/model.safetensors]
                                [--epochs 5] [--seeds 0,1,2] [--no-classifiers] [--rxrx1] [--docs]

Without ``--store`` / ``--checkpoint`` it simulates the demo screen and trains the demo MAE
(config defaults) first. Then it embeds every tile at each block (``embed.block`` 0 .. last,
mean pooling; the last block also with ``cls`` and ``both``) and reports, per embedding:

* the ground-truth measures of :func:`cellica.evaluate.recovery.truth_recovery` (the DAG's
  own): held-out linear-probe R^2 of the true factors (higher: more biology, linearly) and
  of the plates' technical parameters (lower: less batch signal), the matched-factor MCC
  and the time to embed;
* the DAG's classifier metrics of the paper's four variants (demo config: 16 components,
  ``--seeds`` classifier and rotation seeds): per-gene held-out AUROC, Hoyer sparsity and
  concentration (means over genes, 95% bootstrap intervals) and the controls' batch
  accuracy, computed in this process by the same library functions the DAG calls.

``--rxrx1`` does the same for the real RxRx1 negative-control images of ``../shared/data``
(``config/examples/negctrl_images.yaml``: ingested, an MAE of ``--epochs`` trained on them,
64 components): no perturbations there, so only the batch signal on the held-back controls
(logistic and LightGBM balanced accuracy over the experiments, silhouette, kNN mixing).
``--docs`` writes the tables into docs/models.md (``blocks``, ``blocks-classifiers``,
``blocks-rxrx1``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml
from _docs import DOCS, markdown, write_block
from _variants import variant_text

import cellica
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams, TrainParams
from cellica.embed.train import train_mae
from cellica.evaluate.params import EvalParams
from cellica.evaluate.recovery import truth_recovery
from cellica.registry import metrics_of
from cellica.store.ingest import ingest
from cellica.store.params import IngestParams, SimulationParams
from cellica.store.simulate import simulate_screen
from cellica.store.tilestore import TileStore
from cellica.transform.params import TransformParams

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
CLASSIFIER_METRICS = ["auroc_heldout", "sparsity", "concentration", "batch_accuracy"]
BATCH_METRICS = list(metrics_of("batch"))


def settings(n_blocks: int) -> list[tuple[int, str]]:
    """(block, pooling) pairs: every block with mean pooling, the last also with cls and both."""
    return [(k, "mean") for k in range(n_blocks)] + [(n_blocks - 1, "cls"), (n_blocks - 1, "both")]


def sweep(store_path, checkpoint, measures: dict) -> tuple[dict[str, pd.DataFrame], int]:
    """Embed the store at every setting once; each measure(adata, seconds) returns rows for its table."""
    first = embed_store(store_path, checkpoint, params=EmbedParams(block=-1))
    n_blocks = int(first.uns["provenance"]["n_blocks"])
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in measures}
    for block, pooling in settings(n_blocks):
        t1 = time.perf_counter()
        adata = embed_store(store_path, checkpoint, params=EmbedParams(block=block, pooling=pooling))
        seconds = time.perf_counter() - t1
        for name, measure in measures.items():
            rows = measure(adata, seconds)
            rows.insert(0, "pooling", pooling)
            rows.insert(0, "block", block)
            tables[name].append(rows)
            print(rows.to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    return {name: pd.concat(t, ignore_index=True) for name, t in tables.items()}, n_blocks


def probes(store: TileStore, max_samples: int):
    latents, batches = store.ground_truth("latents"), store.ground_truth("batches")

    def measure(adata, seconds: float) -> pd.DataFrame:
        truth = truth_recovery(adata, latents, batches, max_samples=max_samples)
        return pd.DataFrame([{"dims": adata.n_vars, "factor probe R^2": truth["truth_factor_r2"],
                              "batch probe R^2": truth["truth_batch_r2"], "MCC": truth["truth_mcc"],
                              "embed s": seconds}])
    return measure


def classifiers(seeds: list[int], n_components: float | None, genes: bool, metrics: list[str]):
    """The paper's variants of each embedding through the DAG's transforms and classifiers."""
    def measure(adata, seconds: float) -> pd.DataFrame:
        summary = cellica.run(adata, transform=TransformParams(n_components=n_components),
                              evaluate=EvalParams(seeds=seeds), genes=genes).summary
        return variant_text(summary, metrics)
    return measure


def rxrx1_inputs(tmp: Path, epochs: int) -> tuple[Path, Path, int]:
    """The RxRx1 controls ingested as config/examples/negctrl_images.yaml says, and an MAE trained on them."""
    cfg = yaml.safe_load((REPO / "config" / "examples" / "negctrl_images.yaml").read_text())
    ing = dict(cfg["ingest"])
    manifest = SHARED / ing.pop("manifest").removeprefix("../shared/data/")
    store = ingest(manifest, tmp / "rxrx1.zarr", IngestParams(**ing))
    checkpoint = tmp / "rxrx1.safetensors"
    train_mae(store.path, checkpoint, TrainParams(epochs=epochs))
    return store.path, checkpoint, cfg["transform"]["n_components"]


def show(tables: dict[str, pd.DataFrame]) -> None:
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        for name, table in tables.items():
            print(f"\n== {name}\n{table.to_string(index=False, float_format=lambda v: f'{v:.3f}')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="a simulated store (default: simulate the demo screen)")
    ap.add_argument("--checkpoint", default=None, help="a cellica MAE (default: train the demo MAE)")
    ap.add_argument("--epochs", type=int, default=TrainParams.epochs)
    ap.add_argument("--max-samples", type=int, default=5000, help="tiles in the probes (seeded sample)")
    ap.add_argument("--seeds", default="0,1,2", help="classifier and rotation seeds")
    ap.add_argument("--no-classifiers", action="store_true", help="probes only (minutes instead of ~half an hour)")
    ap.add_argument("--rxrx1", action="store_true", help="also the RxRx1 controls' batch signal per block")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.rxrx1 and not SHARED.exists():
        raise SystemExit(f"--rxrx1 needs {SHARED}, which is absent")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        store_path = args.store or simulate_screen(tmp / "s.zarr", SimulationParams(**DEMO["simulate"])).path
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = tmp / "mae.safetensors"
            train_mae(store_path, checkpoint, TrainParams(epochs=args.epochs))
        store = TileStore.open(store_path)
        measures = {"blocks": probes(store, args.max_samples)}
        if not args.no_classifiers:
            measures["blocks-classifiers"] = classifiers(
                seeds, DEMO["transform"]["n_components"], True, CLASSIFIER_METRICS
            )
        tables, n_blocks = sweep(store_path, checkpoint, measures)
        took = time.perf_counter() - t0
        if args.rxrx1:
            t1 = time.perf_counter()
            rx_store, rx_checkpoint, n_components = rxrx1_inputs(tmp, args.epochs)
            rx, _ = sweep(rx_store, rx_checkpoint,
                          {"blocks-rxrx1": classifiers(seeds[:1], n_components, False, BATCH_METRICS)})
            tables.update(rx)
            took_rx = time.perf_counter() - t1
    print(f"\n{store.n_tiles} tiles, {n_blocks} blocks; {took / 60:.1f} min")
    show(tables)
    if args.docs:
        write_docs(tables, store.n_tiles, n_blocks, args, took, took_rx if args.rxrx1 else None)


def write_docs(tables: dict[str, pd.DataFrame], n_tiles: int, n_blocks: int, args, took: float,
               took_rx: float | None) -> None:
    flags = "".join(f" --{f}" for f in ("rxrx1", "no-classifiers") if getattr(args, f.replace("-", "_")))
    head = (f"`python benchmarks/blocks.py{flags} --docs` (the demo screen, {n_tiles} tiles; the demo MAE of "
            f"{n_blocks} blocks, {args.epochs} epochs; {took / 60:.0f} min on this machine"
            f"{'' if args.no_classifiers else ', with the classifiers'})")
    write_block(DOCS / "models.md", "blocks", f"{head}\n\n{markdown(tables['blocks'], '.3f')}")
    if "blocks-classifiers" in tables:
        write_block(DOCS / "models.md", "blocks-classifiers",
                    f"Seeds {args.seeds}; means over genes with 95% bootstrap intervals; the demo config's "
                    f"{DEMO['transform']['n_components']} components.\n\n{markdown(tables['blocks-classifiers'])}")
    if took_rx is not None:
        write_block(DOCS / "models.md", "blocks-rxrx1",
                    f"`--rxrx1` ({took_rx / 60:.0f} min: ingest, an MAE of {args.epochs} epochs, every block; "
                    f"seed {args.seeds.split(',')[0]}); balanced accuracy over the experiments with "
                    f"95% bootstrap intervals.\n\n{markdown(tables['blocks-rxrx1'])}")


if __name__ == "__main__":
    main()
