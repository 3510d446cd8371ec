# Config validation, output paths and the helpers that turn config sections into CLI options.
import hashlib
import json
import os
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from cellica.config import (apply_overrides, check_config_size, command_args, config_problem, config_rules,
                            config_sources, provenance)
from cellica.core.errors import CellicaError
from cellica.embed.params import EmbedParams, FeatureTableParams, ProfileParams, TrainParams
from cellica.evaluate.params import EvalParams
from cellica.identify.params import AlignParams
from cellica.maps.params import MapParams
from cellica.report.content import entity_label, times_text
from cellica.report.params import ReportParams
from cellica.store.params import IngestParams, SimulationParams
from cellica.transform.params import TransformParams
from cellica.registry import VARIANTS as VARIANT_REGISTRY, seeded_variants


# `--config section='{key: value}'` arrives as text: read it with each key's type first.
try:
    check_config_size(config)  # before anything walks it: a YAML alias bomb stops here
except CellicaError as exc:
    raise WorkflowError(f"invalid configuration: {exc}") from None
apply_overrides(config)
_problem = config_problem(config)
if _problem:
    raise WorkflowError(f"invalid configuration:\n{_problem}")
validate(config, schema="../schemas/config.schema.yaml")  # also fills in the defaults
# Everything a job would refuse later, refused now: each section's bounds and cross-key rules.
_problem = config_rules(config)
if _problem:
    raise WorkflowError(f"invalid configuration:\n{_problem}")

RESULTS = config["results_dir"]
REPORTS = config["reports_dir"]
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
TILES = f"{RESULTS}/tiles.zarr"
# One MAE per {model}: seed<N> (trained with that seed) or checkpoint (mae.checkpoint); or no
# model at all: cp_measure's profiles (profiles.enabled).
if config["profiles"]["enabled"]:
    MODEL_TAG = "cp_measure"
elif config["mae"]["checkpoint"]:
    MODEL_TAG = "checkpoint"
else:
    MODEL_TAG = f"seed{config['mae']['seed']}"
MODEL = f"{RESULTS}/mae/{{model}}/model.safetensors"
EMB_OF = f"{RESULTS}/embeddings/{{model}}/embeddings.h5ad"
WELLS_OF = f"{RESULTS}/embeddings/{{model}}/wells.h5ad"
EMB = EMB_OF.format(model=MODEL_TAG)
WELLS = WELLS_OF.format(model=MODEL_TAG)
N_SHARDS = config["embed"]["shards"]
# Only train_mae and embed use a GPU; they request one only when compute.gpus asks for it
# (the SLURM profile then sends them to a GPU partition: docs/hpc.md).
GPU_RESOURCES = {"gpu": config["compute"]["gpus"]} if config["compute"]["gpus"] else {}
VARIANTS = config["transform"]["variants"]
FEATURES = f"{RESULTS}/features/{{variant}}.h5ad"
# Evaluation seeds after the first re-fit the seeded variants (ICA start, random rotation).
SEEDS = config["evaluate"]["seeds"]
SEEDED = [v for v in VARIANTS if v in seeded_variants()]
SEED_FEATURES = f"{RESULTS}/features/seeds/{{variant}}-{{seed}}"
EVAL = f"{RESULTS}/eval"
SUMMARY = f"{EVAL}/summary.parquet"
N_CHUNKS = config["evaluate"]["chunks"]
N_PAGE_CHUNKS = config["report"]["chunks"]
ENTITY = config["report"]["entity"] or entity_label(config["source"], config["features"]["column_map"])
STABILITY = f"{RESULTS}/stability"
ALIGNMENT = f"{STABILITY}/alignment.parquet"
# Short hash of the validated config (defaults filled): every report number cites it.
CONFIG_FILE = (workflow.overwrite_configfiles or [DEMO_CONFIG])[-1]
CONFIG_HASH = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
CONDA_ENV = "../envs/cellica.yaml"


wildcard_constraints:
    variant="|".join(VARIANTS),
    seed=r"-?\d+",
    model=r"seed-?\d+|checkpoint|cp_measure",
    shard=r"\d+",
    chunk=r"\d+",


def cli_args(section, cls):
    """The options of `cls`'s command from config[section] (only keys that are its options)."""
    return command_args(config, section, cls)


def transform_args(wildcards):
    """Only the transform parameters the variant uses: changing another leaves it up to date."""
    return command_args(config, "transform", TransformParams, only=VARIANT_REGISTRY[wildcards.variant].uses)


def transform_input(wildcards):
    """Tile embeddings, or well means when transform.level is wells (image sources only)."""
    if config["transform"]["level"] == "wells" and config["source"] != "features":
        return WELLS
    return EMB


def with_truth(inputs):
    """Add the ground truth to a rule's inputs: the simulated tile store, or features.truth."""
    if config["source"] == "simulate":
        inputs["truth"] = TILES
    elif config["source"] == "features" and config["features"]["truth"]:
        inputs["truth"] = config["features"]["truth"]
    return inputs


def seed_features(variant):
    """The features each evaluation seed classifies: one file for an unseeded variant, else the
    main file for the first seed and a re-seeded transform for each further seed."""
    if variant not in SEEDED:
        return [FEATURES.format(variant=variant)]
    return [FEATURES.format(variant=variant)] + [
        SEED_FEATURES.format(variant=variant, seed=s) + ".h5ad" for s in SEEDS[1:]
    ]


def evaluate_inputs(wildcards):
    """The variant's features (per seed), plus the simulated store for ground-truth alignment."""
    return with_truth({"features": seed_features(wildcards.variant)})


def batch_metrics_inputs(wildcards):
    """Every variant's features, plus the simulated store for ground-truth recovery."""
    return with_truth({"features": expand(FEATURES, variant=VARIANTS)})


def summarize_inputs(wildcards):
    """The evaluation's tables, plus the gene maps' recall and consistency when maps are on."""
    inputs = {
        "per_gene": expand(f"{EVAL}/{{variant}}/per_gene.parquet", variant=VARIANTS),
        "batch": f"{EVAL}/batch_metrics.parquet",
        "activity": f"{EVAL}/activity.parquet",
    }
    if config["maps"]["enabled"]:
        inputs["recall"] = f"{RESULTS}/maps/recall.parquet"
        inputs["recall_differences"] = f"{RESULTS}/maps/recall_differences.parquet"
        inputs["consistency"] = expand(f"{RESULTS}/maps/{{variant}}_consistency.parquet", variant=VARIANTS)
    return inputs


def summarize_map_args(wildcards, input):
    """`cellica summarize` options naming the gene maps' tables (quoted), when maps are on."""
    if "recall" not in input.keys():
        return ""
    files = " ".join(shlex.quote(f) for f in input.consistency)
    return (f"--recall {shlex.quote(input.recall)} --recall-differences {shlex.quote(input.recall_differences)}"
            f" --consistency {files}")


def align_args():
    """`cellica align` whitens and rotates as the transform stage does: its settings, and the split."""
    split = command_args(config, "stability", AlignParams)
    return f"{command_args(config, 'transform', AlignParams)} {split}"


def model_file(wildcards):
    """The MAE a {model} names: a trained seed, or the user's checkpoint."""
    return config["mae"]["checkpoint"] if wildcards.model == "checkpoint" else MODEL.format(model=wildcards.model)


def report_inputs(wildcards):
    """Everything the HTML reports read; the tile store only when there is one."""
    inputs = {
        "summary": SUMMARY,
        "per_gene": expand(f"{EVAL}/{{variant}}/per_gene.parquet", variant=VARIANTS),
        "importances": expand(f"{EVAL}/{{variant}}/importances.parquet", variant=VARIANTS),
        "features": expand(FEATURES, variant=VARIANTS),
    }
    if config["source"] != "features":
        inputs["tiles"] = TILES
    if config["stability"]["enabled"]:
        inputs["alignment"] = ALIGNMENT
    if config["maps"]["enabled"]:
        inputs["maps"] = expand(f"{RESULTS}/maps/{{variant}}.h5ad", variant=VARIANTS)
        inputs["recall"] = f"{RESULTS}/maps/recall.parquet"
    return inputs


def final_outputs():
    outputs = [SUMMARY, f"{REPORTS}/index.html", f"{REPORTS}/gene_index"]
    if config["source"] != "features":
        outputs.append(f"{RESULTS}/qc/tiles_summary.txt")
    if config["maps"]["enabled"]:
        outputs.append(f"{RESULTS}/maps/recall.parquet")
    return outputs


def check_slurm_settings():
    """Stop before the first submission when a SLURM run lacks its account or partition.

    The slurm profile leaves both to the user (SET_ME); sbatch's own error would
    come only after the first jobs were queued, and a missing account otherwise
    triggers a slow, noisy guess through sacct.
    """
    plugin = workflow.executor_plugin
    if plugin is None or plugin.cli_prefix != "slurm":
        return
    missing = {}
    for job in workflow.dag.needrun_jobs():
        if job.is_local:
            continue
        for key in ("slurm_account", "slurm_partition"):
            value = job.resources.get(key)
            if value in (None, "", "SET_ME"):
                missing.setdefault(f"{key} (now {value or 'unset'})", set()).add(job.rule.name)
    if missing:
        rules = sorted(set().union(*missing.values()))
        raise WorkflowError(
            f"SLURM run stopped before submitting anything: set {' and '.join(sorted(missing))} under "
            "default-resources in workflow/profiles/slurm/config.yaml (or your copy of it), or per rule "
            f"under set-resources; rules that would be submitted: {', '.join(rules)}. "
            "See docs/hpc.md."
        )


def log_effective_config():
    """The run log states every value that differs from its default, and where it came from."""
    sources = config_sources(workflow.overwrite_configfiles or [DEMO_CONFIG], dict(workflow.config_settings.config))
    lines = provenance(config, sources)
    logger.info(f"cellica config {CONFIG_HASH} ({len(lines)} value(s) differ from the defaults):")
    for line in lines:
        logger.info(f"  {line}")


def log_stage_times():
    """The run ends with the time and peak memory of its jobs (also on the index of the report)."""
    logger.info(f"time and peak memory of every job, per step, from {BENCH} (also in {REPORTS}/index.html):\n"
                f"{times_text(Path(BENCH))}")


def log_where_progress_is():
    """Jobs write their progress bars into their log files: say so where the user looks, naming
    a log this run writes."""
    if config["source"] == "features":
        example = f"`tail -f {LOGS}/evaluate/{VARIANTS[0]}-0-of-{N_CHUNKS}.log` while the classifiers run"
    elif MODEL_TAG == "cp_measure":
        example = f"`tail -f {LOGS}/profile_tiles/0-of-{N_SHARDS}.log` while the tiles are measured"
    elif MODEL_TAG == "checkpoint":
        example = f"`tail -f {LOGS}/embed/{MODEL_TAG}/0-of-{N_SHARDS}.log` while the tiles are embedded"
    else:
        example = f"`tail -f {LOGS}/train_mae/{MODEL_TAG}.log` while the MAE trains"
    logger.info(f"each job's progress (rate and ETA, a line every 30 s) is in its log file under {LOGS}/; "
                f"e.g. {example}")


def log_failed_jobs(snakemake_log):
    """The run ends with each failed job's own error line and its log, not only Snakemake's
    `CalledProcessError` (cellica.core.logs.failed_jobs)."""
    from cellica.core.logs import failed_jobs

    for rule, path, line in failed_jobs(snakemake_log):
        logger.error(f"{rule} failed: {line}\n  (whole log: {path})")


onstart:
    log_effective_config()
    log_where_progress_is()
    check_slurm_settings()

