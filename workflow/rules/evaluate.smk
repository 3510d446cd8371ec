# Stage 4: per-gene classifiers in chunks of genes (separate jobs), merged per variant;
# batch metrics and replicate mAP per variant; the summary tables.


rule evaluate_chunk:
    input:
        unpack(evaluate_inputs),
    output:
        per_gene=temp(f"{EVAL}/{{variant}}/chunks/{{chunk}}-of-{N_CHUNKS}.parquet"),
        importances=temp(f"{EVAL}/{{variant}}/chunks/{{chunk}}-of-{N_CHUNKS}.importances.parquet"),
    log:
        f"{LOGS}/evaluate/{{variant}}-{{chunk}}-of-{N_CHUNKS}.log",
    benchmark:
        f"{BENCH}/evaluate/{{variant}}-{{chunk}}-of-{N_CHUNKS}.tsv"
    conda:
        CONDA_ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=240,
    params:
        args=cli_args("evaluate", EvalParams),
        n_chunks=N_CHUNKS,
        truth=PLAN.optional("--truth", "truth"),
    shell:
        "cellica evaluate --features {input.features:q} --out {output.per_gene:q}"
        " --importances-out {output.importances:q} --chunk {wildcards.chunk}/{params.n_chunks}"
        " --threads {threads} {params.truth} {params.args} 2> {log:q}"


rule gather_eval:
    input:
        per_gene=expand(f"{EVAL}/{{{{variant}}}}/chunks/{{chunk}}-of-{N_CHUNKS}.parquet", chunk=range(N_CHUNKS)),
        importances=expand(
            f"{EVAL}/{{{{variant}}}}/chunks/{{chunk}}-of-{N_CHUNKS}.importances.parquet", chunk=range(N_CHUNKS)
        ),
    output:
        per_gene=f"{EVAL}/{{variant}}/per_gene.parquet",
        importances=f"{EVAL}/{{variant}}/importances.parquet",
    log:
        f"{LOGS}/gather_eval/{{variant}}.log",
    benchmark:
        f"{BENCH}/gather_eval/{{variant}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "cellica gather-eval --per-gene {input.per_gene:q} --importances {input.importances:q}"
        " --out {output.per_gene:q} --importances-out {output.importances:q} 2> {log:q}"


rule batch_metrics:
    input:
        unpack(batch_metrics_inputs),
    output:
        batch=f"{EVAL}/batch_metrics.parquet",
        activity=f"{EVAL}/activity.parquet",
    log:
        f"{LOGS}/batch_metrics.log",
    benchmark:
        f"{BENCH}/batch_metrics.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        args=cli_args("evaluate", EvalParams),
        truth=PLAN.optional("--truth", "truth"),
    shell:
        "cellica batch-metrics {input.features:q} {params.truth} --out {output.batch:q} --activity-out {output.activity:q} {params.args} 2> {log:q}"


rule summarize:
    input:
        unpack(summarize_inputs),
    output:
        report(SUMMARY, category="2. Evaluation", caption="../report/summary.rst"),
    log:
        f"{LOGS}/summarize.log",
    benchmark:
        f"{BENCH}/summarize.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        config_hash=CONFIG_HASH,
        args=cli_args("evaluate", EvalParams),
        maps=summarize_map_args,
        entity=ENTITY,
    shell:
        "cellica summarize --per-gene {input.per_gene:q} --batch {input.batch:q} --activity {input.activity:q}"
        " --config-hash {params.config_hash} {params.maps} {params.args} --entity {params.entity:q}"
        " --out {output:q} 2> {log:q}"


if PLAN.simulates:

    # What the simulation says each gene does, and whether any feature set found a strong effect
    # (the gene pages' verdict, decided here, not in the report).
    rule truth_genes:
        input:
            per_gene=PLAN.evaluated_files(f"{EVAL}/{{variant}}/per_gene.parquet"),
            truth=PLAN.truth_tables,
        output:
            PLAN.truth_genes,
        log:
            f"{LOGS}/truth_genes.log",
        benchmark:
            f"{BENCH}/truth_genes.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "cellica truth-genes --per-gene {input.per_gene:q} --truth {input.truth:q} --out {output:q} 2> {log:q}"
