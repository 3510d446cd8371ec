# Config validation, output paths and the helper that turns a config section into CLI options.
import hashlib
import json
import os
import shlex

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from cellica.configcheck import config_problem
from cellica.report import entity_label
from cellica.transforms import seeded_variants


_problem = config_problem(config, workflow.source_path("../schemas/config.schema.yaml"))
if _problem:
    raise WorkflowError(f"invalid configuration:\n{_problem}")
validate(config, schema="../schemas/config.schema.yaml")  # also fills in the defaults

RESULTS = config["results_dir"]
REPORTS = config["reports_dir"]
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
TILES = f"{RESULTS}/tiles.zarr"
EMB = f"{RESULTS}/embeddings/embeddings.h5ad"
WELLS = f"{RESULTS}/embeddings/wells.h5ad"
MODEL = config["mae"]["checkpoint"] or f"{RESULTS}/mae/model.safetensors"
N_SHARDS = config["embed"]["shards"]
GPUS = config["compute"]["gpus"]
VARIANTS = config["transform"]["variants"]
FEATURES = f"{RESULTS}/features/{{variant}}.h5ad"
# Evaluation seeds after the first re-fit the seeded variants (ICA start, random rotation).
SEEDS = config["evaluate"]["seeds"]
SEEDED = [v for v in VARIANTS if v in seeded_variants()]
SEED_FEATURES = f"{RESULTS}/features/seeds/{{variant}}-{{seed}}"
EVAL = f"{RESULTS}/eval"
SUMMARY = f"{EVAL}/summary.parquet"
N_CHUNKS = config["evaluate"]["chunks"]
ENTITY = entity_label(config["source"], config["features"]["column_map"])
STABILITY = f"{RESULTS}/stability"
ALIGNMENT = f"{STABILITY}/alignment.parquet"
if config["stability"]["enabled"] and config["source"] == "features":
    raise WorkflowError("stability.enabled needs an image source (simulate or ingest): there is no MAE to train "
                        "twice when source is 'features'")
if len(config["stability"]["seeds"]) != 2 or len(set(config["stability"]["seeds"])) != 2:
    raise WorkflowError(f"stability.seeds must be two different seeds, got {config['stability']['seeds']}")
# Short hash of the validated config (defaults filled): every report number cites it.
CONFIG_FILE = (workflow.overwrite_configfiles or ["config/config.yaml"])[-1]
CONFIG_HASH = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
CONDA_ENV = "../envs/cellica.yaml"


def cli_value(value):
    """One config value in the syntax of cellica's generated CLI options."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def cli_args(section, skip=()):
    """Render a config section as `--key value` options (keys map 1:1 to CLI options)."""
    return " ".join(
        f"--{key.replace('_', '-')} {shlex.quote(cli_value(value))}"
        for key, value in section.items()
        if key not in skip
    )


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


def stability_ica_components():
    """The ICA map of `cellica align` works in the same subspace as the transform stage:
    transform.n_components when it is a count (a variance fraction or null: all)."""
    n = config["transform"]["n_components"]
    return f" --ica-components {int(n)}" if n is not None and n >= 1 else ""


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
    return inputs


def final_outputs():
    outputs = [SUMMARY, f"{REPORTS}/index.html", f"{REPORTS}/genes"]
    if config["source"] != "features":
        outputs.append(f"{RESULTS}/qc/tiles_summary.txt")
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


onstart:
    check_slurm_settings()
