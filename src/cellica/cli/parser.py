"""The ``cellica`` argument parser, built from a table: each sub-command's files and the
parameter classes whose fields become its options."""

from __future__ import annotations

import argparse

from cellica import __version__
from cellica.cli import _commands as commands
from cellica.cli.options import add_dataclass_args
from cellica.core import kinds

REQ = {"required": True}
STORE = ("--store", {"required": True, "help": "tile store (*.zarr)"})
OVERWRITE = ("--overwrite", {"action": "store_true", "help": "replace an existing store"})
EVAL_FILES = ("--features", {"required": True, "nargs": "+", "help": "features of one variant (*.h5ad): one file, "
                             "or one per seed of --seeds"})
ENTITY = ("--entity", {"default": "gene", "help": "what the perturbations are called in sentences and on the "
                      "pages (gene, compound, MoA, perturbation, ...)"})
TRUTH = ("--truth", {"default": None, "help": "a simulated screen's truth tables (the folder cellica export-truth "
                     "writes), or a table of true factors keyed by sample_id: add ground-truth columns"})


# Every option that names a file, by role (the destinations argparse gives them): no output may
# equal, lie inside or contain an input (cellica.core.paths.check_disjoint, run by cellica.cli.app
# before any command). tests/test_cli.py checks that every option of every command is classified.
OUTPUT_OPTIONS = frozenset({"out", "model_out", "importances_out", "wells_out", "activity_out", "consistency_out",
                            "differences_out", "checkpoint_dir", "write_lock"})
# Output folders a command writes its own files into (never replaced whole): a stranger's files beside
# them are left alone, so only the files written are checked for ownership (when written). Every other
# output is replaced whole and must be absent or cellica's (cellica.core.ownership).
WRITTEN_INTO = frozenset({("qc", "--out"), ("export-truth", "--out"), ("train-mae", "--checkpoint-dir"),
                          ("report", "--out")})
INPUT_OPTIONS = frozenset({"store", "manifest", "checkpoint", "shards", "table", "input", "apply", "features",
                           "per_gene", "importances", "batch", "activity", "truth", "recall", "recall_differences",
                           "consistency", "maps", "a", "b", "summary", "benchmarks", "config", "alignment",
                           "arm_table", "annotation_file", "position_table", "unexpressed_genes", "qc", "lock",
                           "environment", "examples", "truth_genes"})

# The kinds of object each input option takes (cellica.core.kinds): another kind is refused before any
# work, naming both. An option not listed takes any regular file or folder (never a FIFO or a device).
_K = kinds
_FEATURES, _TABLE = (_K.FEATURES,), (_K.PARQUET,)
INPUT_KINDS = {
    "store": (_K.TILE_STORE,), "checkpoint": (_K.SAFETENSORS, _K.ZIP, _K.OTHER), "apply": (_K.ZIP,),
    "input": _FEATURES, "shards": _FEATURES, "features": _FEATURES, "a": _FEATURES, "b": _FEATURES,
    "maps": (_K.GENE_MAP, _K.ANNDATA), "table": (_K.FEATURES, _K.ANNDATA, _K.PARQUET, _K.OTHER),
    "manifest": (_K.OTHER, _K.PARQUET), "truth": (_K.FOLDER, _K.PARQUET, _K.OTHER),
    "per_gene": _TABLE, "importances": _TABLE, "batch": _TABLE, "activity": _TABLE, "summary": _TABLE,
    "recall": _TABLE, "recall_differences": _TABLE, "consistency": _TABLE, "alignment": _TABLE,
    "examples": _TABLE, "truth_genes": _TABLE,
}


def paths_by_role(ns: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The (option, path) pairs of a parsed command: its inputs and its outputs."""
    def pairs(names):
        out = []
        for name in sorted(names):
            value = getattr(ns, name, None)
            for v in value if isinstance(value, list | tuple) else [value]:
                if isinstance(v, str) and v and v != "null":
                    out.append((name if len(name) == 1 else f"--{name.replace('_', '-')}", v))
        return out
    return pairs(INPUT_OPTIONS), pairs(OUTPUT_OPTIONS)


def _params(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(f"cellica.{module}"), name)


# name, help, command, [(flag, argparse options)], parameter class (module, class) or None
COMMANDS = [
    ("simulate", "simulate a screen with known ground truth into a tile store", commands.simulate,
     [("--out", {**REQ, "help": "tile store to write (*.zarr)"}), OVERWRITE], ("store.params", "SimulationParams")),
    ("ingest", "cut per-channel TIFF/PNG images from a manifest into a tile store", commands.ingest,
     [("--manifest", {**REQ, "help": "CSV, one row per image file"}),
      ("--out", {**REQ, "help": "tile store to write (*.zarr)"}), OVERWRITE], ("store.params", "IngestParams")),
    ("inspect", "print counts and channel statistics of a tile store", commands.inspect,
     [("store", {"help": "tile store (*.zarr)"}),
      ("--stat-tiles", {"type": int, "default": 2048, "help": "tiles sampled for intensity stats"}),
      ("--max-rows", {"type": int, "default": 30, "help": "rows shown per table"}),
      ("--verify", {"action": "store_true", "help": "read every tile back: every shard present, every chunk's "
                    "checksum and the content digest"}),
      ("--embed-rate", {"type": float, "default": None, "metavar": "TILES_PER_S",
                        "help": "size the embedding jobs for this rate of one job (an embed log's tiles/s): "
                        "embed.shards and each job's runtime (docs/hpc.md)"}),
      ("--job-hours", {"type": float, "default": 2.0,
                       "help": "with --embed-rate: the longest an embed job should run"})],
     None),
    ("train-mae", "pre-train a masked autoencoder (timm ViT) on a tile store", commands.train_mae,
     [STORE, ("--out", {**REQ, "help": "weights to write (*.safetensors, with a .json sidecar)"}),
      ("--checkpoint-dir", {"default": None, "help": "per-epoch checkpoints (default: beside --out)"}),
      ("--untrained", {"action": "store_true", "help": "write the initial weights, no training step (the "
                       "untrained-encoder baseline)"})],
     ("embed.params", "TrainParams")),
    ("embed", "extract embeddings of a store's tiles into AnnData (.h5ad)", commands.embed,
     [STORE, ("--checkpoint", {**REQ, "help": "cellica .safetensors or timm state dict"}),
      ("--out", {**REQ, "help": "embeddings to write (*.h5ad)"}),
      ("--shard", {"default": None, "help": "i/n: embed only the i-th (0-based) of n tile ranges"})],
     ("embed.params", "EmbedParams")),
    ("profile-tiles", "CellProfiler-style features of a store's tiles with cp_measure (no model)",
     commands.profile_tiles,
     [STORE, ("--out", {**REQ, "help": "profiles to write (*.h5ad), the contract of embeddings"}),
      ("--shard", {"default": None, "help": "i/n: measure only the i-th (0-based) of n tile ranges"})],
     ("embed.params", "ProfileParams")),
    ("count-nuclei", "nuclei per tile of a store, as a one-feature embedding (the cell-count baseline)",
     commands.count_nuclei,
     [STORE, ("--out", {**REQ, "help": "counts to write (*.h5ad), the contract of embeddings"}),
      ("--shard", {"default": None, "help": "i/n: count only the i-th (0-based) of n tile ranges"})],
     ("embed.params", "ProfileParams")),
    ("gather-embeddings", "concatenate embedding shards, checking none is missing", commands.gather_embeddings,
     [("shards", {"nargs": "+", "help": "shard .h5ad files (any order)"}),
      ("--out", {**REQ, "help": "tile-level embeddings (*.h5ad)"}),
      ("--wells-out", {"default": None, "help": "also write well-level means (*.h5ad)"})], None),
    ("import-features", "bring your own embeddings or profiles (table -> .h5ad)", commands.import_features,
     [("table", {"help": ".h5ad, .parquet, .csv or .tsv (optionally .gz)"}),
      ("--out", {**REQ, "help": "features to write (*.h5ad)"})], ("embed.params", "FeatureTableParams")),
    ("transform", "whitening, ICA, random rotation or a comparator correction", commands.transform,
     [("--input", {**REQ, "help": "features to transform (*.h5ad)"}),
      ("--out", {**REQ, "help": "transformed features (*.h5ad)"}),
      ("--variant", {"default": None, "help": "the variant to fit (cellica.registry)"}),
      ("--model-out", {"default": None, "help": "save the fitted transform (*.npz)"}),
      ("--apply", {"default": None, "metavar": "MODEL", "help": "apply a saved transform instead of fitting"})],
     ("transform.params", "TransformParams")),
    ("baseline", "a baseline's features (cellica.registry.BASELINES): its embeddings, or one column of them, "
     "through the base variant", commands.baseline,
     [("--name", {**REQ, "help": "the baseline (cell_count, untrained, classical)"}),
      ("--input", {**REQ, "help": "its embeddings (*.h5ad)"}),
      ("--column", {"default": None,
                    "help": "only this column (.obs or a feature): a cell count of imported features"}),
      ("--out", {**REQ, "help": "features to write (*.h5ad)"})], ("transform.params", "TransformParams")),
    ("evaluate", "per-gene LightGBM classifiers vs shared controls (AUROC, sparsity, ...)", commands.evaluate,
     [EVAL_FILES, ("--out", {**REQ, "help": "per-gene table (*.parquet)"}),
      ("--importances-out", {**REQ, "help": "feature importances (*.parquet)"}),
      ("--variant", {"default": None, "help": "name in the tables (default: from the file)"}),
      ("--chunk", {"default": None, "help": "i/n: only every n-th gene from the i-th (0-based)"}), TRUTH,
      ("--threads", {"type": int, "default": 1, "help": "genes fitted in parallel (one thread each)"})],
     ("evaluate.params", "EvalParams")),
    ("gather-eval", "merge per-gene chunks of one variant", commands.gather_eval,
     [("--per-gene", {**REQ, "nargs": "+"}), ("--importances", {**REQ, "nargs": "+"}), ("--out", REQ),
      ("--importances-out", REQ)], None),
    ("batch-metrics", "batch signal on controls and replicate mAP, per variant", commands.batch_metrics,
     [("features", {"nargs": "+", "help": "features of each variant (*.h5ad)"}),
      ("--out", {**REQ, "help": "batch metrics (*.parquet)"}),
      ("--activity-out", {**REQ, "help": "mAP per perturbation (*.parquet)"}), TRUTH],
     ("evaluate.params", "EvalParams")),
    ("summarize", "the paper's Tables 3-4 and the claims from the evaluation outputs", commands.summarize,
     [("--per-gene", {**REQ, "nargs": "+"}), ("--batch", REQ), ("--activity", REQ),
      ("--config-hash", {"default": ""}), ("--out", REQ),
      ("--recall", {"default": None, "help": "gene maps' recall table (maps/recall.parquet)"}),
      ("--recall-differences", {"default": None, "help": "its paired differences (maps/recall_differences.parquet)"}),
      ("--consistency", {"nargs": "*", "default": [], "help": "guide consistency tables, one per variant"}),
      ENTITY],
     ("evaluate.params", "EvalParams")),
    ("truth-genes", "a simulated screen's truth per evaluated gene, and whether any feature set found a strong "
     "effect (what the report's gene pages show)", commands.truth_genes,
     [("--per-gene", {**REQ, "nargs": "+", "help": "per-gene tables of every variant and baseline"}),
      ("--truth", {**REQ, "help": "the simulated screen's truth tables (the folder cellica export-truth writes)"}),
      ("--out", {**REQ, "help": "the table to write (eval/truth_genes.parquet)"})], None),
    ("gene-map", "gene-level map of one variant (tiles -> wells -> guides -> genes) and guide consistency",
     commands.gene_map, [("features", {"help": "features of one variant (*.h5ad)"}),
                         ("--out", {**REQ, "help": "gene map to write (*.h5ad)"}),
                         ("--consistency-out", {**REQ, "help": "guide consistency per gene (*.parquet)"})],
     ("maps.params", "MapParams")),
    ("recall", "recall of known gene-gene relationships by each variant's gene map", commands.recall,
     [("maps", {"nargs": "+", "help": "gene maps of the variants (*.h5ad, from cellica gene-map)"}),
      ("--out", {**REQ, "help": "recall per variant and source (*.parquet)"}),
      ("--differences-out", {**REQ, "help": "paired differences between variants (*.parquet)"})],
     ("maps.params", "MapParams")),
    ("export-efaar", "gene maps and their recall in EFAAR_benchmarking's layout (their recall definition: "
     "every pair of the map as the null)", commands.export_efaar,
     [("maps", {"nargs": "+", "help": "gene maps of the variants (*.h5ad, from cellica gene-map)"}),
      ("--out", {**REQ, "help": "folder: <variant>/features.parquet, <variant>/metadata.parquet, recall.parquet"})],
     ("maps.params", "MapParams")),
    ("align", "alignment error between two embeddings of the same samples, per class of map", commands.align,
     [("a", {"help": "embedding A (*.h5ad)"}),
      ("b", {"help": "embedding B (*.h5ad); samples paired with A by obs_names (tile ids)"}),
      ("--out", {"default": None, "help": "table (*.parquet)"})], ("stability.params", "AlignParams")),
    ("report", "HTML reports: index.html and one page per gene", commands.report,
     [("--summary", {**REQ, "help": "eval/summary.parquet"}),
      ("--per-gene", {**REQ, "nargs": "+", "help": "per-gene tables, one per variant"}),
      ("--importances", {**REQ, "nargs": "+", "help": "importance tables, in the order of --per-gene"}),
      ("--features", {"nargs": "*", "help": "features files (embedding plots, diagnostics)"}),
      ("--examples", {"nargs": "*", "default": [], "help": "example-tile tables (qc/examples/*.parquet, from "
                       "cellica example-tiles)"}),
      ("--truth-genes", {"default": None, "help": "a simulated screen's truth per gene (eval/truth_genes.parquet, "
                         "from cellica truth-genes)"}),
      ("--benchmarks", {"default": None, "help": "Snakemake benchmark folder (stage times)"}),
      ("--config", {"default": None, "help": "config file shown on the index"}),
      ("--environment", {"default": None, "help": "the run's software record (results/environment.json, from "
                         "cellica environment --out), shown on the index"}),
      ("--config-hash", {"default": ""}),
      ("--alignment", {"default": None, "help": "stability/alignment.parquet (cellica align between MAE seeds)"}),
      ("--maps", {"nargs": "*", "default": [], "help": "gene maps of the variants (maps/{variant}.h5ad): UMAPs"}),
      ("--recall", {"default": None, "help": "maps/recall.parquet: recall bars per source"}),
      ("--qc", {"nargs": "*", "default": [], "help": "the qc tables (qc/*.parquet, from cellica qc): plate "
                "layout, control intensity and well pictures"}),
      ("--gene", {"nargs": "*", "default": None, "help": "only these genes' pages (default: all)"}),
      ("--part", {"type": int, "default": None, "help": "only the pages of the genes of chunk PART of --chunks "
                  "(genes/PART-of-CHUNKS/), no index"}),
      ("--index-only", {"action": "store_true", "help": "only index.html and the paged gene index"}),
      ENTITY,
      ("--out", {**REQ, "help": "report folder (index.html, gene_index/, genes/)"})],
     ("report.params", "ReportParams")),
    ("export-truth", "a simulated store's ground truth as tables (what evaluate --truth reads)", commands.export_truth,
     [("store", {"help": "tile store written by cellica simulate (*.zarr)"}),
      ("--out", {**REQ, "help": "folder of the tables (results/truth)"})], None),
    ("example-tiles", "example tiles of each perturbation and of the controls, as PNG montages in a table (what "
     "the report's gene pages show)", commands.example_tiles,
     [("store", {"help": "tile store (*.zarr)"}),
      ("--chunk", {"default": None, "help": "i/n: every n-th perturbation from the i-th, sorted"}),
      ("--seed", {"type": int, "default": 0, "help": "seed of the drawn tiles"}),
      ("--out", {**REQ, "help": "the table to write (qc/examples/<i>-of-<n>.parquet)"})], None),
    ("qc", "plate-layout tables of a run: tiles per well, the controls' offset and intensity per position, "
     "each variant's wells in 2-D", commands.qc,
     [("--features", {**REQ, "nargs": "+", "help": "each variant's features (*.h5ad); layout from base"}),
      ("--store", {"default": None, "help": "tile store (control intensity per position)"}),
      ("--seed", {"type": int, "default": 0, "help": "seed of the sampled tiles and wells and the UMAP"}),
      ("--out", {**REQ, "help": "folder of the tables (results/qc)"})], None),
    ("environment", "the software this runs in (every package's version) against the lock file", commands.environment,
     [("--out", {"default": None, "help": "write the record as JSON (results/environment.json)"}),
      ("--lock", {"default": None, "help": "the lock to compare with (default: $CELLICA_LOCK, or requirements.lock "
                  "of a source checkout)"}),
      ("--write-lock", {"default": None, "help": "write this environment as a new lock file (requirements.lock)"}),
      ("--check", {"action": "store_true", "help": "exit with status 2 unless every installed package is at the "
                   "lock's version (the container's build and CI run this)"})],
     None),
    ("deploy", "a folder of its own that runs this checkout's workflow as a Snakemake module (docs/deploy.md)",
     commands.deploy,
     [("--out", {**REQ, "help": "the folder to deploy into (absent or empty): its workflow/Snakefile and config/"}),
      ("--name", {"default": "cellica", "help": "the module's name (its rules are NAME_*)"})],
     None),
    ("schema", "print (or write) the workflow's config schema, generated from the parameter classes",
     commands.schema, [("--out", {"default": None, "help": "file to write (workflow/schemas/config.schema.yaml)"}),
                       ("--docs", {"default": None, "help": "also write the configuration reference into this "
                                   "markdown file (docs/configuration.md), between its config-reference markers"})],
     None),
]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document the CLI)."""
    parser = argparse.ArgumentParser(
        prog="cellica", description="MAE embeddings of cell-microscopy screens, PCA whitening + ICA, evaluation.")
    parser.add_argument("--version", action="version", version=f"cellica {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--debug", action="store_true", help="show tracebacks (also CELLICA_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="<stage>", required=True)
    for name, help_text, func, args, params in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        for flag, options in args:
            p.add_argument(flag, **options)
        if params:
            add_dataclass_args(p, _params(*params))
        p.set_defaults(func=func)
    return parser
