# cellica: MAE embeddings of a cell-microscopy screen, PCA whitening + ICA, evaluation.
# The science lives in the `cellica` package; these rules only call its CLI.
from snakemake.utils import min_version

min_version("9.27")  # pyproject.toml pins the range CI has run


# The demo's settings apply only to a plain run: a run with --configfile starts from the
# defaults and the user's file alone (the run log lists every non-default value and its origin).
DEMO_CONFIG = "config/config.yaml"

if not workflow.overwrite_configfiles:

    configfile: DEMO_CONFIG


include: "workflow/rules/common.smk"
include: "workflow/rules/tiles.smk"
include: "workflow/rules/embed.smk"
include: "workflow/rules/transform.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/maps.smk"
include: "workflow/rules/qc.smk"
include: "workflow/rules/report.smk"


include: "workflow/rules/stability.smk"


rule all:
    input:
        final_outputs(),
    default_target: True


onsuccess:
    log_stage_times()


onerror:
    log_failed_jobs(log)
