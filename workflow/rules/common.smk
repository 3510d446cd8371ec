# The run plan (cellica.plan) decides everything: these names and helpers only ask it.
import os
import sys
from pathlib import Path


from cellica.config import config_sources, provenance
from cellica.core.errors import CellicaError
from cellica.core.jobtimes import times_text
from cellica.embed.params import EmbedParams, FeatureTableParams, ProfileParams, TrainParams
from cellica.evaluate.params import EvalParams
from cellica.maps.params import MapParams
from cellica.plan import RunPlan
from cellica.slurm import missing_slurm_settings, unset_profile_settings
from cellica.report.params import ReportParams
from cellica.store.params import IngestParams, SimulationParams


def stop(message):
    """End the run with cellica's own lines, exit 2: the user's problem, not Snakemake's traceback
    (a WorkflowError would print `WorkflowError in file .../common.smk, line N` around it)."""
    print(f"cellica: {message}", file=sys.stderr)
    raise SystemExit(2)


# Checked and completed in place (overrides retyped, schema, defaults, cross-key rules).
try:
    PLAN = RunPlan(config, configfiles=workflow.overwrite_configfiles)
except CellicaError as exc:
    stop(f"invalid configuration:\n{exc}")

# Settings whose time or memory is out of proportion, with the estimate: said before any job starts.
DEFAULT_RESOURCES = getattr(getattr(workflow.resource_settings, "default_resources", None), "args", None)
for line in PLAN.warnings + [unset_profile_settings(DEFAULT_RESOURCES)]:
    if line:
        logger.warning(f"cellica: warning: {line}")

RESULTS, REPORTS, LOGS, BENCH, TILES = PLAN.results, PLAN.reports, PLAN.logs, PLAN.bench, PLAN.tiles
MODEL, EMB_OF, WELLS_OF = PLAN.model_of, PLAN.emb_of, PLAN.wells_of
TRAINED_MODELS, ENCODER_MODELS = PLAN.model_patterns()
EMB = PLAN.emb
N_SHARDS, GPU_RESOURCES = PLAN.n_shards, PLAN.gpu_resources
VARIANTS, FEATURES, SEEDED, SEED_FEATURES = PLAN.variants, PLAN.features, PLAN.seeded, PLAN.seed_features_of
EVAL, SUMMARY, N_CHUNKS, N_PAGE_CHUNKS = PLAN.eval, PLAN.summary, PLAN.n_chunks, PLAN.n_page_chunks
ENTITY, ALIGNMENT, CONFIG_HASH = PLAN.entity, PLAN.alignment, PLAN.hash
CONFIG_FILE = (workflow.overwrite_configfiles or [DEMO_CONFIG])[-1]
ENVIRONMENT = PLAN.environment
BASELINES = PLAN.baselines


# Every job's image under `--software-deployment-method apptainer` (workflow/envs/cellica.def).
container: PLAN.container


SOFTWARE = PLAN.software
CONDA_ENV = "../envs/cellica.yaml"


wildcard_constraints:
    **PLAN.wildcard_constraints(),


def cli_args(section, cls):
    return PLAN.cli_args(section, cls)


def transform_args(wildcards):
    return PLAN.transform_args(wildcards.variant)


def transform_input(wildcards):
    return PLAN.transform_input()


def baseline_input(wildcards):
    return PLAN.baseline_input(wildcards.baseline)


def baseline_args(wildcards):
    return PLAN.baseline_args(wildcards.baseline)


def evaluate_inputs(wildcards):
    return PLAN.evaluate_inputs(wildcards.variant)


def batch_metrics_inputs(wildcards):
    return PLAN.batch_metrics_inputs()


def summarize_inputs(wildcards):
    return PLAN.summarize_inputs()


def summarize_map_args(wildcards, input):
    return PLAN.summarize_map_args(dict(input.items()))


def align_args():
    return PLAN.align_args()


def model_file(wildcards):
    return PLAN.model_file(wildcards.model)


def qc_inputs(wildcards):
    return PLAN.qc_inputs()


def report_inputs(wildcards):
    return PLAN.report_inputs()


def final_outputs():
    return PLAN.final_outputs()


def check_slurm_settings():
    """Stop before the first submission when a SLURM run lacks its account or partition."""
    plugin = workflow.executor_plugin
    if plugin is None or plugin.cli_prefix != "slurm":
        return
    problem = missing_slurm_settings(
        (job.rule.name, job.resources, job.is_local) for job in workflow.dag.needrun_jobs())
    if problem:
        stop(problem)


def log_effective_config():
    """The run log states every value that differs from its default, and where it came from."""
    sources = config_sources(workflow.overwrite_configfiles or [DEMO_CONFIG], dict(workflow.config_settings.config))
    lines = provenance(config, sources)
    logger.info(f"cellica config {CONFIG_HASH} ({len(lines)} value(s) differ from the defaults):")
    for line in lines:
        logger.info(f"  {line}")
    for line in PLAN.baseline_notes:
        logger.info(line)


def log_stage_times():
    """The run ends with the time and peak memory of its jobs (also on the index of the report)."""
    logger.info(f"time and peak memory of every job, per step, from {BENCH} (also in {REPORTS}/index.html):\n"
                f"{times_text(Path(BENCH))}")


def log_where_progress_is():
    """Jobs write their progress bars into their log files: say so where the user looks."""
    logger.info(PLAN.progress_hint())


def log_failed_jobs(snakemake_log):
    """The run ends with each failed job's own error line and its log, not only Snakemake's
    `CalledProcessError` (cellica.core.logs.failed_jobs)."""
    from cellica.core.logs import failed_jobs

    for rule, path, line in failed_jobs(snakemake_log):
        logger.error(f"{rule} failed: {line}\n  (whole log: {path})")


def hold_results():
    """One run per results folder (cellica.core.runlock): a second run stops here, before any job."""
    try:
        PLAN.hold_results()
    except CellicaError as exc:
        stop(str(exc))


onstart:
    hold_results()
    log_effective_config()
    log_where_progress_is()
    check_slurm_settings()

