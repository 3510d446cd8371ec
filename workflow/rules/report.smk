# Stage 5: the HTML reports: gene pages in chunks of genes (separate jobs, genes/<i>-of-<n>/), then the index
# (index.html and the paged gene index) with every job's time and peak memory and the run's software
# (rule environment: results/environment.json); Snakemake report hooks.

REPORT_ARGS = (
    "cellica report --summary {input.summary:q} --per-gene {input.per_gene:q} --importances {input.importances:q}"
    " --features {input.features:q} {params.examples} {params.truth_genes} --config-hash {params.config_hash} {params.alignment}"
    " --entity {params.entity:q} {params.maps} --qc {input.qc:q} {params.args} --out {params.reports:q}"
)
REPORT_PARAMS = {
    "examples": PLAN.optional("--examples", "examples"),
    "truth_genes": PLAN.optional("--truth-genes", "truth_genes"),
    "alignment": PLAN.optional("--alignment", "alignment"),
    "maps": PLAN.optional("--recall", "recall", more=("--maps", "maps")),
    "config_hash": CONFIG_HASH,
    "reports": REPORTS,
    "entity": ENTITY,
    "args": cli_args("report", ReportParams),
}


rule report_pages:
    input:
        unpack(report_inputs),
    output:
        report(
            directory(f"{REPORTS}/genes/{{chunk}}-of-{N_PAGE_CHUNKS}"),
            category="3. Reports",
            subcategory="Gene pages",
            htmlindex="index.html",
            caption="../report/genes.rst",
        ),
    log:
        f"{LOGS}/report/pages-{{chunk}}-of-{N_PAGE_CHUNKS}.log",
    benchmark:
        f"{BENCH}/report_pages/{{chunk}}-of-{N_PAGE_CHUNKS}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        **{**REPORT_PARAMS, "reports": lambda wildcards, output: os.path.dirname(os.path.dirname(output[0]))},
    shell:
        f"{REPORT_ARGS} --part {{wildcards.chunk}} 2> {{log:q}}"


rule environment:
    output:
        ENVIRONMENT,
    log:
        f"{LOGS}/environment.log",
    benchmark:
        f"{BENCH}/environment.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        software=SOFTWARE,
    shell:
        "cellica environment --out {output:q} 2> {log:q}"


rule report:
    input:
        unpack(report_inputs),
        environment=ENVIRONMENT,
        pages=expand(f"{REPORTS}/genes/{{chunk}}-of-{N_PAGE_CHUNKS}", chunk=range(N_PAGE_CHUNKS)),
    output:
        index=report(
            f"{REPORTS}/index.html",
            category="3. Reports",
            caption="../report/index.rst",
        ),
        gene_index=report(
            directory(f"{REPORTS}/gene_index"),
            category="3. Reports",
            htmlindex="genes-1.html",
            caption="../report/gene_index.rst",
        ),
    log:
        f"{LOGS}/report.log",
    benchmark:
        f"{BENCH}/report.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        **{**REPORT_PARAMS, "reports": lambda wildcards, output: os.path.dirname(output.index)},
        bench=BENCH,
        config_file=CONFIG_FILE,
    shell:
        f"{REPORT_ARGS} --index-only --benchmarks {{params.bench:q}} --config {{params.config_file:q}}"
        " --environment {input.environment:q} 2> {log:q}"
