# Gene-level maps: one profile per gene for every variant, its guides' consistency, and the
# recall of known gene-gene relationships by every map (cellica.maps); the maps and EFAAR's recall
# in EFAAR_benchmarking's layout (maps/efaar/).
MAPS = f"{RESULTS}/maps"


rule gene_map:
    input:
        FEATURES,
    output:
        gene_map=f"{MAPS}/{{variant}}.h5ad",
        consistency=f"{MAPS}/{{variant}}_consistency.parquet",
    log:
        f"{LOGS}/gene_map/{{variant}}.log",
    benchmark:
        f"{BENCH}/gene_map/{{variant}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        args=cli_args("maps", MapParams),
    shell:
        "cellica gene-map {input:q} --out {output.gene_map:q} --consistency-out {output.consistency:q}"
        " {params.args} 2> {log:q}"


rule export_efaar:
    input:
        expand(f"{MAPS}/{{variant}}.h5ad", variant=VARIANTS),
    output:
        directory(f"{MAPS}/efaar"),
    log:
        f"{LOGS}/export_efaar.log",
    benchmark:
        f"{BENCH}/export_efaar.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        args=cli_args("maps", MapParams),
    shell:
        "cellica export-efaar {input:q} --out {output:q} {params.args} 2> {log:q}"


rule recall:
    input:
        expand(f"{MAPS}/{{variant}}.h5ad", variant=VARIANTS),
    output:
        recall=f"{MAPS}/recall.parquet",
        differences=f"{MAPS}/recall_differences.parquet",
    log:
        f"{LOGS}/recall.log",
    benchmark:
        f"{BENCH}/recall.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        args=cli_args("maps", MapParams),
    shell:
        "cellica recall {input:q} --out {output.recall:q} --differences-out {output.differences:q}"
        " {params.args} 2> {log:q}"
