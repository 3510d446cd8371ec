# cellica's workflow lives in workflow/Snakefile (the layout of the Snakemake workflow
# catalog, docs/deploy.md); this file lets `snakemake --cores 2` run it from a clone.


include: "workflow/Snakefile"


# Snakemake forgets an included file's `default_target`: name it again here.
workflow.default_target = "all"
