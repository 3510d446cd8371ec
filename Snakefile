# cellica: MAE embeddings of a cell-microscopy screen, PCA whitening + ICA, evaluation.
# The science lives in the `cellica` package; these rules only call its CLI.
from snakemake.utils import min_version

min_version("8.20")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/tiles.smk"
include: "workflow/rules/embed.smk"
include: "workflow/rules/transform.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


if config["source"] != "features":

    include: "workflow/rules/stability.smk"



rule all:
    input:
        final_outputs(),
    default_target: True
