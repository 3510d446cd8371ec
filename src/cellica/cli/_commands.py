"""One function per ``cellica`` sub-command: parse the options into the stage's parameters,
call one library function, print what the user asked to see.

Heavy libraries (torch, scanpy, lightgbm) are imported inside the commands, so
``cellica --help`` and light stages start quickly under Snakemake.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cellica.cli.options import dataclass_from_args as params_of
from cellica.core.errors import CellicaError


class ReaderGone(Exception):
    """stdout was closed by its reader (``cellica inspect ... | head``) after the work was done."""


def show(text: str = "", end: str = "\n") -> None:
    """Print what the user asked to see; a reader that went away is not a failure (the work is
    done by then), unlike a closed pipe during the work, which :func:`cellica.cli.app.main` reports."""
    try:
        print(text, end=end, flush=True)
    except BrokenPipeError:
        raise ReaderGone from None


def simulate(ns: argparse.Namespace) -> None:
    from cellica.store.params import SimulationParams
    from cellica.store.simulate import simulate_screen

    simulate_screen(ns.out, params_of(SimulationParams, ns), overwrite=ns.overwrite)


def ingest(ns: argparse.Namespace) -> None:
    from cellica.store.ingest import ingest as run
    from cellica.store.params import IngestParams

    run(ns.manifest, ns.out, params_of(IngestParams, ns), overwrite=ns.overwrite)


def inspect(ns: argparse.Namespace) -> None:
    from cellica.store.tilestore import TileStore

    store = TileStore.open(ns.store)
    text = store.describe(verify=ns.verify, max_stat_tiles=ns.stat_tiles, max_rows=ns.max_rows)
    store.check_unchanged()
    if ns.embed_rate is not None:
        from cellica.embed.sizing import size_embed

        text += "\nembedding jobs: " + size_embed(store.n_tiles, store.shard_tiles, ns.embed_rate, ns.job_hours).text()
    show(text)


def train_mae(ns: argparse.Namespace) -> None:
    from cellica.embed.params import TrainParams
    from cellica.embed.train import train_mae as run

    run(ns.store, ns.out, params_of(TrainParams, ns), checkpoint_dir=ns.checkpoint_dir, untrained=ns.untrained)


def embed(ns: argparse.Namespace) -> None:
    from cellica.embed.extract import embed_store
    from cellica.embed.params import EmbedParams

    embed_store(ns.store, ns.checkpoint, ns.out, params=params_of(EmbedParams, ns), shard=ns.shard)


def profile_tiles(ns: argparse.Namespace) -> None:
    from cellica.embed.params import ProfileParams
    from cellica.embed.profiles import profile_store

    profile_store(ns.store, ns.out, params_of(ProfileParams, ns), shard=ns.shard)


def count_nuclei(ns: argparse.Namespace) -> None:
    from cellica.embed.cell_count import count_nuclei as run
    from cellica.embed.params import ProfileParams

    run(ns.store, ns.out, params_of(ProfileParams, ns), shard=ns.shard)


def baseline(ns: argparse.Namespace) -> None:
    from cellica.transform.apply import baseline_file
    from cellica.transform.params import TransformParams

    baseline_file(ns.name, ns.input, ns.out, params=params_of(TransformParams, ns), column=ns.column)


def gather_embeddings(ns: argparse.Namespace) -> None:
    from cellica.embed.extract import gather_embeddings as run

    run(ns.shards, ns.out, wells_out=ns.wells_out)


def import_features(ns: argparse.Namespace) -> None:
    from cellica.embed.features import import_features as run
    from cellica.embed.params import FeatureTableParams

    run(ns.table, ns.out, params_of(FeatureTableParams, ns))


def transform(ns: argparse.Namespace) -> None:
    from cellica.transform.apply import transform_file
    from cellica.transform.params import TransformParams

    transform_file(ns.input, ns.out, ns.variant, params=params_of(TransformParams, ns), model_out=ns.model_out,
                   apply=ns.apply)


def evaluate(ns: argparse.Namespace) -> None:
    from cellica.evaluate.params import EvalParams
    from cellica.evaluate.tables import evaluate_files

    evaluate_files(ns.features, ns.out, ns.importances_out, params=params_of(EvalParams, ns), chunk=ns.chunk,
                   variant=ns.variant, truth=ns.truth, threads=ns.threads)


def gather_eval(ns: argparse.Namespace) -> None:
    from cellica.evaluate.tables import gather_evaluations

    gather_evaluations(ns.per_gene, ns.importances, ns.out, importances_out=ns.importances_out)


def batch_metrics(ns: argparse.Namespace) -> None:
    from cellica.evaluate.params import EvalParams
    from cellica.evaluate.tables import batch_metrics_files

    batch_metrics_files(ns.features, ns.out, ns.activity_out, params=params_of(EvalParams, ns), truth=ns.truth)


def summarize(ns: argparse.Namespace) -> None:
    from cellica.evaluate.params import EvalParams
    from cellica.evaluate.tables import summarize_files

    if bool(ns.recall) != bool(ns.recall_differences):
        raise CellicaError("summarize: --recall and --recall-differences go together")
    summarize_files(ns.per_gene, ns.batch, ns.activity, out=ns.out, params=params_of(EvalParams, ns),
                    config_hash=ns.config_hash, recall=ns.recall, recall_differences=ns.recall_differences,
                    consistency=ns.consistency, entity=ns.entity)


def truth_genes(ns: argparse.Namespace) -> None:
    from cellica.evaluate.tables import truth_genes_file

    truth_genes_file(ns.per_gene, ns.truth, ns.out)


def example_tiles(ns: argparse.Namespace) -> None:
    from cellica.store.examples import write_example_tiles

    write_example_tiles(ns.store, ns.out, ns.chunk, seed=ns.seed)


def gene_map(ns: argparse.Namespace) -> None:
    from cellica.maps.gene_maps import gene_map_files
    from cellica.maps.params import MapParams

    gene_map_files(ns.features, ns.out, ns.consistency_out, params=params_of(MapParams, ns))


def recall(ns: argparse.Namespace) -> None:
    from cellica.maps.gene_maps import recall_files
    from cellica.maps.params import MapParams

    table = recall_files(ns.maps, ns.out, ns.differences_out, params=params_of(MapParams, ns))
    show(table[["variant", "source", "n_pairs", "recall", "ci_low", "ci_high", "null_recall"]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))


def export_efaar(ns: argparse.Namespace) -> None:
    from cellica.maps.gene_maps import efaar_files
    from cellica.maps.params import MapParams

    table = efaar_files(ns.maps, ns.out, params_of(MapParams, ns))
    show(table.drop(columns="folder").to_string(index=False, float_format=lambda v: f"{v:.3f}"))


def align(ns: argparse.Namespace) -> None:
    from cellica.stability.compare_runs import align_files
    from cellica.stability.params import AlignParams

    table = align_files(ns.a, ns.b, params_of(AlignParams, ns), out=ns.out)
    show(table[["map", "error", "n_train", "n_test", "dims"]].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    show(f"ICA efficiency: {table.attrs['ica_efficiency']:.1f}%")


def report(ns: argparse.Namespace) -> None:
    from cellica.report.build import report_from_files
    from cellica.report.params import ReportParams

    report_from_files(ns.summary, ns.per_gene, ns.importances, out_dir=ns.out, features=ns.features,
                      examples=ns.examples, truth_genes=ns.truth_genes, benchmarks=ns.benchmarks, config=ns.config,
                      config_hash=ns.config_hash, alignment=ns.alignment, entity=ns.entity, genes=ns.gene,
                      params=params_of(ReportParams, ns), part=ns.part, index_only=ns.index_only, maps=ns.maps,
                      recall=ns.recall, qc=ns.qc, environment=ns.environment)


def export_truth(ns: argparse.Namespace) -> None:
    from cellica.store.truth import export_truth as export

    export(ns.store, ns.out)


def qc(ns: argparse.Namespace) -> None:
    from cellica.core.adata import stored_variant
    from cellica.qc.write import qc_tables

    qc_tables({stored_variant(p, str(p)): p for p in ns.features}, ns.out, store=ns.store, seed=ns.seed)


def environment(ns: argparse.Namespace) -> None:
    from cellica.core import environment as env

    if ns.write_lock:
        packages = env.write_lock(ns.write_lock)
        show(f"wrote {len(packages)} pins to {ns.write_lock}")
        return
    record = env.write_environment(ns.out, ns.lock) if ns.out else env.environment(ns.lock)
    show("\n".join(env.summary_lines(record) + record["differences"]))
    if ns.check and not record["matches_lock"]:
        raise CellicaError("the environment departs from the lock: " + ("; ".join(record["differences"][:5]) or
                           "no lock file (set CELLICA_LOCK or run from a source checkout)"))


def deploy(ns: argparse.Namespace) -> None:
    from cellica.deploy import deploy_workflow

    snakefile = deploy_workflow(ns.out, ns.name)
    show(f"deployed: {snakefile} declares this checkout's workflow as module {ns.name!r}; put your config in "
         f"{Path(ns.out) / 'config' / 'config.yaml'} and run `snakemake --cores 2` in {ns.out}")


def schema(ns: argparse.Namespace) -> None:
    from cellica.config import reference_markdown, schema_yaml

    if ns.docs:
        from cellica.core.docs import write_block
        from cellica.registry import baselines_markdown, variants_markdown

        write_block(ns.docs, "variants", variants_markdown())
        write_block(ns.docs, "baselines", baselines_markdown())
        write_block(ns.docs, "config-reference", reference_markdown())
    text = schema_yaml()
    if not ns.out:
        show(text, end="")
        return
    from cellica.core.atomic import atomic_output

    with atomic_output(ns.out, overwrite=True) as tmp, open(tmp, "w") as fh:
        fh.write(text)
