# Stage 3: one job per variant fits its transform on the embeddings and writes the
# transformed features plus the saved estimator (re-applicable with `cellica transform --apply`).

rule transform:
    input:
        transform_input,
    output:
        features=FEATURES,
        model=f"{RESULTS}/features/{{variant}}.npz",
    log:
        f"{LOGS}/transform/{{variant}}.log",
    benchmark:
        f"{BENCH}/transform/{{variant}}.tsv"
    conda:
        CONDA_ENV
    wildcard_constraints:
        variant="|".join(VARIANTS),
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        args=cli_args(config["transform"], skip=("variants", "level")),
    shell:
        "cellica transform --variant {wildcards.variant} --input {input} --out {output.features}"
        " --model-out {output.model} {params.args} 2> {log}"
