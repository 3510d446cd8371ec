# Stage 5: the HTML reports (index + one page per gene) and the Snakemake report hooks.


rule report:
    input:
        unpack(report_inputs),
    output:
        index=report(
            f"{REPORTS}/index.html",
            category="3. Reports",
            caption="../report/index.rst",
        ),
        genes=report(
            directory(f"{REPORTS}/genes"),
            category="3. Reports",
            htmlindex="index.html",
            caption="../report/genes.rst",
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
        store=lambda wildcards, input: f"--store {shlex.quote(input.tiles)}" if "tiles" in input.keys() else "",
        alignment=lambda wildcards, input: (
            f"--alignment {shlex.quote(input.alignment)}" if "alignment" in input.keys() else ""
        ),
        bench=BENCH,
        config_hash=CONFIG_HASH,
        config_file=CONFIG_FILE,
        reports=lambda wildcards, output: os.path.dirname(output.index),
        entity=ENTITY,
    shell:
        "cellica report --summary {input.summary:q} --per-gene {input.per_gene:q} --importances {input.importances:q}"
        " --features {input.features:q} {params.store} --benchmarks {params.bench:q} --config {params.config_file:q}"
        " --config-hash {params.config_hash} {params.alignment} --entity {params.entity:q} --out {params.reports:q}"
        " 2> {log:q}"
