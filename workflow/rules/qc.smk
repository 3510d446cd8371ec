# Quality control of the plate layout, as tables the report draws (cellica qc): tiles per well,
# the controls' offset and pixel intensity per plate position, each variant's wells in 2-D.


rule qc_tables:
    input:
        unpack(qc_inputs),
    output:
        PLAN.qc_tables(),
    log:
        f"{LOGS}/qc.log",
    benchmark:
        f"{BENCH}/qc.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        store=PLAN.optional("--store", "tiles"),
        out=lambda wildcards, output: os.path.dirname(output[0]),
    shell:
        "cellica qc --features {input.features:q} {params.store} --out {params.out:q} 2> {log:q}"


if PLAN.has_images:

    # Example tiles of each perturbation for its report page, as tables (the report never opens
    # the tile store): one job per chunk of report pages.
    rule example_tiles:
        input:
            TILES,
        output:
            PLAN.examples_of,
        log:
            f"{LOGS}/example_tiles/{{chunk}}-of-{N_PAGE_CHUNKS}.log",
        benchmark:
            f"{BENCH}/example_tiles/{{chunk}}-of-{N_PAGE_CHUNKS}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=60,
        params:
            n_chunks=N_PAGE_CHUNKS,
        shell:
            "cellica example-tiles {input:q} --chunk {wildcards.chunk}/{params.n_chunks} --out {output:q} 2> {log:q}"
