# Stage 1: the tile store, either simulated (the demo) or ingested from image files.


if PLAN.simulates:

    rule simulate:
        output:
            directory(TILES),
        log:
            f"{LOGS}/simulate.log",
        benchmark:
            f"{BENCH}/simulate.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=30,
        params:
            args=cli_args("simulate", SimulationParams),
        shell:
            "cellica simulate --out {output:q} {params.args} 2> {log:q}"

    rule export_truth:
        input:
            TILES,
        output:
            directory(PLAN.truth_tables),
        log:
            f"{LOGS}/export_truth.log",
        benchmark:
            f"{BENCH}/export_truth.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "cellica export-truth {input:q} --out {output:q} 2> {log:q}"

elif PLAN.ingests:

    rule ingest:
        input:
            manifest=PLAN.manifest,
        output:
            directory(TILES),
        log:
            f"{LOGS}/ingest.log",
        benchmark:
            f"{BENCH}/ingest.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=8000,
            runtime=240,
        params:
            args=cli_args("ingest", IngestParams),
        shell:
            "cellica ingest --manifest {input.manifest:q} --out {output:q} {params.args} 2> {log:q}"


if PLAN.has_images:

    rule inspect_tiles:
        input:
            TILES,
        output:
            report(
                f"{RESULTS}/qc/tiles_summary.txt",
                category="1. Data",
                caption="../report/tiles_summary.rst",
            ),
        log:
            f"{LOGS}/inspect_tiles.log",
        benchmark:
            f"{BENCH}/inspect_tiles.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "cellica inspect {input:q} > {output:q} 2> {log:q}"
