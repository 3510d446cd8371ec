"""The ``cellica`` command line: one sub-command per stage.

Heavy libraries (torch, scanpy, lightgbm) are imported inside the commands, so
``cellica --help`` and light stages start quickly under Snakemake.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from cellica import __version__
from cellica.errors import CellicaError
from cellica.logs import configure, get_logger

log = get_logger("cli")

Command = Callable[[argparse.Namespace], None]


# ---------------------------------------------------------------------- commands
def _cmd_simulate(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.simulate import SimulationParams, simulate_screen

    simulate_screen(ns.out, dataclass_from_args(SimulationParams, ns), overwrite=ns.overwrite)


def _cmd_ingest(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.ingest import IngestParams, ingest

    ingest(ns.manifest, ns.out, dataclass_from_args(IngestParams, ns), overwrite=ns.overwrite)


def _cmd_train_mae(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.train import TrainParams, train_mae

    train_mae(ns.store, ns.out, dataclass_from_args(TrainParams, ns), checkpoint_dir=ns.checkpoint_dir)


def _cmd_embed(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.embed import EmbedParams, embed_store

    embed_store(ns.store, ns.checkpoint, ns.out, dataclass_from_args(EmbedParams, ns), shard=ns.shard)


def _cmd_gather(ns: argparse.Namespace) -> None:
    from cellica.adata import aggregate_wells, write_h5ad
    from cellica.embed import gather_embeddings

    tiles = gather_embeddings(ns.shards, ns.out)
    if ns.wells_out:
        write_h5ad(aggregate_wells(tiles), ns.wells_out)


def _cmd_import_features(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.features import FeatureTableParams, import_features

    import_features(ns.table, ns.out, dataclass_from_args(FeatureTableParams, ns))


def _cmd_transform(ns: argparse.Namespace) -> None:
    from cellica.adata import read_h5ad, write_h5ad
    from cellica.cli_params import dataclass_from_args
    from cellica.params import TransformParams
    from cellica.transforms import Transform, make_transform

    adata = read_h5ad(ns.input)
    if ns.apply:
        model = Transform.load(ns.apply)
        log.info("applying the saved %s transform %s to %s", model.variant, ns.apply, ns.input)
        write_h5ad(model.transform(adata), ns.out)
        return
    if not ns.variant:
        raise CellicaError("transform: give --variant (to fit) or --apply MODEL (to re-apply)")
    model = make_transform(ns.variant, dataclass_from_args(TransformParams, ns))
    out = model.fit_transform(adata)
    if not ns.model_out:
        write_h5ad(out, ns.out)
        return
    from cellica.atomic import atomic_outputs

    # The features and the transform that made them are committed together, or neither.
    with atomic_outputs([ns.out, ns.model_out], overwrite=True) as (tmp_out, tmp_model):
        out.write_h5ad(tmp_out)
        model.write(tmp_model)


def _cmd_evaluate(ns: argparse.Namespace) -> None:
    from cellica.adata import read_h5ad
    from cellica.atomic import write_parquets
    from cellica.cli_params import dataclass_from_args
    from cellica.evaluate import evaluate_genes
    from cellica.params import EvalParams

    params = dataclass_from_args(EvalParams, ns)
    adatas = [read_h5ad(path) for path in ns.features]
    variant = ns.variant or adatas[0].uns.get("transform", {}).get("variant", "features")
    truth = None
    if ns.truth:
        from cellica.recovery import read_truth

        gt = read_truth(ns.truth)
        if gt["effects"] is not None:  # which factors each gene moves: only simulated stores know
            truth = gt["latents"], gt["effects"]
    per_gene, imps = evaluate_genes(adatas if len(adatas) > 1 else adatas[0], params, ns.chunk, variant,
                                    threads=ns.threads, truth=truth)
    write_parquets([per_gene, imps], [ns.out, ns.importances_out])


def _cmd_gather_eval(ns: argparse.Namespace) -> None:
    import pandas as pd

    from cellica.atomic import read_parquet, write_parquets

    per_gene = pd.concat([read_parquet(p, "per-gene table") for p in ns.per_gene], ignore_index=True)
    keys = ["variant", "gene", "seed"] if "seed" in per_gene else ["variant", "gene"]
    dup = per_gene.duplicated(keys)
    if dup.any():
        raise CellicaError(f"gather-eval: genes evaluated twice, e.g. {per_gene.loc[dup, 'gene'].head(3).tolist()}")
    imps = pd.concat([read_parquet(p, "importances") for p in ns.importances], ignore_index=True)
    write_parquets([per_gene.sort_values(keys).reset_index(drop=True), imps], [ns.out, ns.importances_out])


def _cmd_batch_metrics(ns: argparse.Namespace) -> None:
    from cellica.adata import read_h5ad
    from cellica.atomic import write_parquets
    from cellica.cli_params import dataclass_from_args
    from cellica.evaluate import variant_metrics
    from cellica.params import EvalParams

    params = dataclass_from_args(EvalParams, ns)
    truth = None
    if ns.truth:
        from cellica.recovery import read_truth

        gt = read_truth(ns.truth)
        truth = gt["latents"], gt["batches"]
    features = {}
    for path in ns.features:
        adata = read_h5ad(path)
        features[adata.uns.get("transform", {}).get("variant", path)] = adata
    batch, activity = variant_metrics(features, params, truth)
    write_parquets([batch, activity], [ns.out, ns.activity_out])


def _cmd_summarize(ns: argparse.Namespace) -> None:
    import json

    import pandas as pd

    from cellica.atomic import read_parquet, write_parquet
    from cellica.cli_params import dataclass_from_args
    from cellica.compare import summary_table
    from cellica.params import EvalParams

    params = dataclass_from_args(EvalParams, ns)
    params.validate()
    per_gene = pd.concat([read_parquet(p, "per-gene table") for p in ns.per_gene], ignore_index=True)
    table = summary_table(per_gene, read_parquet(ns.batch, "batch metrics"), read_parquet(ns.activity, "activity table"), params.n_boot,
                          params.seed)
    for claim in table[table["table"] == "claim"].itertuples():
        log.info("claim %s: %s (%s)", claim.verdict.upper(), claim.row, claim.detail)
    table.attrs["provenance"] = json.dumps({"per_gene": ns.per_gene, "batch": ns.batch, "config_hash": ns.config_hash})
    write_parquet(table, ns.out)


def _cmd_report(ns: argparse.Namespace) -> None:
    from pathlib import Path

    from cellica.report import ReportInputs, build_report

    # Variant names come from the DAG's layout: eval/{variant}/per_gene.parquet, features/{variant}.h5ad.
    inputs = ReportInputs(
        summary=Path(ns.summary),
        per_gene={Path(p).parent.name: Path(p) for p in ns.per_gene},
        importances={Path(p).parent.name: Path(p) for p in ns.importances},
        features={Path(p).stem: Path(p) for p in ns.features or []},
        store=Path(ns.store) if ns.store else None,
        benchmarks=Path(ns.benchmarks) if ns.benchmarks else None,
        config=Path(ns.config) if ns.config else None,
        config_hash=ns.config_hash,
        alignment=Path(ns.alignment) if ns.alignment else None,
        entity=ns.entity,
    )
    build_report(inputs, ns.out, genes=ns.gene)


def _cmd_align(ns: argparse.Namespace) -> None:
    from cellica.adata import read_h5ad
    from cellica.align import align
    from cellica.atomic import write_parquet

    a, b = read_h5ad(ns.a), read_h5ad(ns.b)
    ica = {"backend": ns.ica_backend, "max_iter": ns.ica_max_iter, "tol": ns.ica_tol}
    table = align(a, b, test_fraction=ns.test_fraction, seed=ns.seed, ica_kwargs=ica, names=(ns.a, ns.b),
                  ica_components=ns.ica_components)
    table["ica_components"] = ns.ica_components or 0
    table["a"], table["b"] = ns.a, ns.b
    print(table[["map", "error", "n_train", "n_test", "dims"]].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"ICA efficiency: {table.attrs['ica_efficiency']:.1f}%")
    if ns.out:
        write_parquet(table, ns.out)


def _cmd_inspect(ns: argparse.Namespace) -> None:
    import pandas as pd

    from cellica.tilestore import TileStore

    store = TileStore.open(ns.store)
    if ns.verify:
        report = store.verify()
        print(f"{store.path}: OK: {report['tiles']} tiles in {report['shards']} shard(s) read back; chunk "
              f"checksums {'verified' if report['chunk_checksums'] else 'absent (a store written before crc32c)'}; "
              f"content digest {'matches' if report['content_digest'] else 'not recorded (an older store)'}")
        return
    info = store.summary(max_stat_tiles=ns.stat_tiles)
    with pd.option_context("display.max_rows", ns.max_rows, "display.width", 120):
        print(f"store       {info['path']}")
        print(f"tiles       {info['n_tiles']} x {info['tile_shape']} {info['dtype']}")
        print(f"controls    {info['n_controls']}")
        print(f"source      {info['provenance'].get('source', '?')}")
        for title, key in (
            ("tiles per batch", "per_batch"),
            ("tiles per plate", "per_plate"),
            ("tiles per perturbation", "per_perturbation"),
        ):
            print(f"\n{title}:\n{info[key].head(ns.max_rows).to_string()}")
        print(f"\nchannel intensities (sample of {info['stats_tiles']} tiles):")
        print(info["channel_stats"].to_string(index=False, float_format=lambda v: f"{v:.4g}"))


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document the CLI)."""
    from cellica.cli_params import add_dataclass_args
    from cellica.features import FeatureTableParams
    from cellica.ingest import IngestParams
    from cellica.params import EmbedParams, EvalParams, TrainParams, TransformParams
    from cellica.simulate import SimulationParams

    parser = argparse.ArgumentParser(
        prog="cellica",
        description="MAE embeddings of cell-microscopy screens, PCA whitening + ICA, evaluation.",
    )
    parser.add_argument("--version", action="version", version=f"cellica {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--debug", action="store_true", help="show tracebacks (also CELLICA_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="<stage>", required=True)

    p = sub.add_parser("simulate", help="simulate a screen with known ground truth into a tile store")
    p.add_argument("--out", required=True, help="tile store to write (*.zarr)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    add_dataclass_args(p, SimulationParams)
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("ingest", help="cut per-channel TIFF/PNG images from a manifest into a tile store")
    p.add_argument("--manifest", required=True, help="CSV, one row per image file")
    p.add_argument("--out", required=True, help="tile store to write (*.zarr)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    add_dataclass_args(p, IngestParams)
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("train-mae", help="pre-train a masked autoencoder (timm ViT) on a tile store")
    p.add_argument("--store", required=True, help="tile store (*.zarr)")
    p.add_argument("--out", required=True, help="weights to write (*.safetensors, with a .json sidecar)")
    p.add_argument("--checkpoint-dir", default=None, help="per-epoch checkpoints (default: beside --out)")
    add_dataclass_args(p, TrainParams)
    p.set_defaults(func=_cmd_train_mae)

    p = sub.add_parser("embed", help="extract embeddings of a store's tiles into AnnData (.h5ad)")
    p.add_argument("--store", required=True, help="tile store (*.zarr)")
    p.add_argument("--checkpoint", required=True, help="cellica .safetensors or timm state dict")
    p.add_argument("--out", required=True, help="embeddings to write (*.h5ad)")
    p.add_argument("--shard", default=None, help="i/n: embed only the i-th (0-based) of n tile ranges")
    add_dataclass_args(p, EmbedParams)
    p.set_defaults(func=_cmd_embed)

    p = sub.add_parser("gather-embeddings", help="concatenate embedding shards, checking none is missing")
    p.add_argument("shards", nargs="+", help="shard .h5ad files (any order)")
    p.add_argument("--out", required=True, help="tile-level embeddings (*.h5ad)")
    p.add_argument("--wells-out", default=None, help="also write well-level means (*.h5ad)")
    p.set_defaults(func=_cmd_gather)

    p = sub.add_parser("import-features", help="bring your own embeddings or profiles (table -> .h5ad)")
    p.add_argument("table", help=".h5ad, .parquet, .csv or .tsv (optionally .gz)")
    p.add_argument("--out", required=True, help="features to write (*.h5ad)")
    add_dataclass_args(p, FeatureTableParams)
    p.set_defaults(func=_cmd_import_features)

    p = sub.add_parser("transform", help="whitening, ICA, random rotation or a comparator correction")
    p.add_argument("--input", required=True, help="features to transform (*.h5ad)")
    p.add_argument("--out", required=True, help="transformed features (*.h5ad)")
    p.add_argument("--variant", default=None, help="base, pca, pca_ica, pca_rand, sphering, harmony or combat")
    p.add_argument("--model-out", default=None, help="save the fitted transform (*.npz)")
    p.add_argument("--apply", default=None, metavar="MODEL", help="apply a saved transform instead of fitting")
    add_dataclass_args(p, TransformParams)
    p.set_defaults(func=_cmd_transform)

    p = sub.add_parser("evaluate", help="per-gene LightGBM classifiers vs shared controls (AUROC, sparsity, ...)")
    p.add_argument("--features", required=True, nargs="+",
                   help="features of one variant (*.h5ad): one file, or one per seed of --seeds")
    p.add_argument("--out", required=True, help="per-gene table (*.parquet)")
    p.add_argument("--importances-out", required=True, help="feature importances (*.parquet)")
    p.add_argument("--variant", default=None, help="name in the tables (default: from the file)")
    p.add_argument("--chunk", default=None, help="i/n: only every n-th gene from the i-th (0-based)")
    p.add_argument("--truth", default=None, help="simulated tile store: add ground-truth alignment columns "
                   "(a table of true factors has no per-gene effects: no alignment columns)")
    p.add_argument("--threads", type=int, default=1, help="genes fitted in parallel (one thread each)")
    add_dataclass_args(p, EvalParams)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("gather-eval", help="merge per-gene chunks of one variant")
    p.add_argument("--per-gene", nargs="+", required=True)
    p.add_argument("--importances", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--importances-out", required=True)
    p.set_defaults(func=_cmd_gather_eval)

    p = sub.add_parser("batch-metrics", help="batch signal on controls and replicate mAP, per variant")
    p.add_argument("features", nargs="+", help="features of each variant (*.h5ad)")
    p.add_argument("--out", required=True, help="batch metrics (*.parquet)")
    p.add_argument("--activity-out", required=True, help="mAP per perturbation (*.parquet)")
    p.add_argument("--truth", default=None,
                   help="simulated tile store, or a table of true factors keyed by sample_id: add ground-truth "
                   "recovery (MCC, factor and batch probe R2, InfoM/InfoE/InfoC)")
    add_dataclass_args(p, EvalParams)
    p.set_defaults(func=_cmd_batch_metrics)

    p = sub.add_parser("summarize", help="the paper's Tables 3-4 from the evaluation outputs")
    p.add_argument("--per-gene", nargs="+", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--activity", required=True)
    p.add_argument("--config-hash", default="")
    p.add_argument("--out", required=True)
    add_dataclass_args(p, EvalParams)
    p.set_defaults(func=_cmd_summarize)

    p = sub.add_parser("align", help="alignment error between two embeddings of the same samples, per class of map")
    p.add_argument("a", help="embedding A (*.h5ad)")
    p.add_argument("b", help="embedding B (*.h5ad); samples paired with A by obs_names (tile ids)")
    p.add_argument("--out", default=None, help="table (*.parquet)")
    p.add_argument("--test-fraction", type=float, default=0.5, help="held-out share of the common samples")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the ICA")
    p.add_argument("--ica-backend", default="cellica", choices=("cellica", "sklearn", "picard"))
    p.add_argument("--ica-max-iter", type=int, default=1000)
    p.add_argument("--ica-tol", type=float, default=1e-4)
    p.add_argument("--ica-components", type=int, default=None,
                   help="leading principal components each side keeps before its ICA (default: all)")
    p.set_defaults(func=_cmd_align)

    p = sub.add_parser("report", help="HTML reports: index.html and one page per gene")
    p.add_argument("--summary", required=True, help="eval/summary.parquet")
    p.add_argument("--per-gene", nargs="+", required=True, help="eval/{variant}/per_gene.parquet files")
    p.add_argument("--importances", nargs="+", required=True, help="eval/{variant}/importances.parquet files")
    p.add_argument("--features", nargs="*", help="features/{variant}.h5ad files (embedding plots, diagnostics)")
    p.add_argument("--store", default=None, help="tile store (example tiles, ground truth)")
    p.add_argument("--benchmarks", default=None, help="Snakemake benchmark folder (stage times)")
    p.add_argument("--config", default=None, help="config file shown on the index")
    p.add_argument("--config-hash", default="")
    p.add_argument("--alignment", default=None, help="stability/alignment.parquet (cellica align between MAE seeds)")
    p.add_argument("--gene", nargs="*", default=None, help="only these genes' pages (default: all)")
    p.add_argument("--entity", default="gene", help="what the perturbations are called on the pages "
                   "(gene, compound, MoA, perturbation, ...)")
    p.add_argument("--out", required=True, help="report folder (index.html, genes/)")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("inspect", help="print counts and channel statistics of a tile store")
    p.add_argument("store", help="tile store (*.zarr)")
    p.add_argument("--stat-tiles", type=int, default=2048, help="tiles sampled for intensity stats")
    p.add_argument("--max-rows", type=int, default=30, help="rows shown per table")
    p.add_argument("--verify", action="store_true",
                   help="read every tile back: every shard present, every chunk's checksum and the content digest")
    p.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cellica`` console script; returns the exit status.

    Every error a user can cause or meet (bad input, a missing or damaged file, a full
    disk, no permission, a checksum mismatch) is one line naming the file and the
    cause, exit status 2. Anything else is an internal error: one line and exit 1.
    ``--debug`` (or ``CELLICA_DEBUG=1``) shows the traceback instead. Output into a
    closed pipe (``cellica inspect ... | head``) ends quietly.
    """
    parser = build_parser()
    ns = parser.parse_args(argv)
    configure(ns.log_level)
    debug = ns.debug or os.environ.get("CELLICA_DEBUG", "") not in ("", "0")
    try:
        ns.func(ns)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"cellica {ns.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        from cellica.errors import describe

        user_error = isinstance(exc, CellicaError | OSError)
        hint = "" if user_error else " (internal error: please report it; --debug shows the traceback)"
        print(f"cellica {ns.command}: error: {describe(exc)}{hint}", file=sys.stderr)
        return 2 if user_error else 1
    return 0


def run() -> None:  # pragma: no cover - the console script
    """Console entry point: run :func:`main`, then leave without interpreter teardown.

    Native thread pools (pyarrow, LightGBM/OpenMP) occasionally abort the process
    while Python shuts down ("terminate called without an active exception"), which
    turned finished Snakemake jobs into failures. Every output is written and
    closed (and renamed into place) before ``main`` returns, so exiting directly is safe.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
