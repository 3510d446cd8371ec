# Stage 3: one job per variant fits its transform on the embeddings and writes the
# transformed features plus the saved estimator (re-applicable with `cellica transform --apply`).
# Seeded variants (pca_ica, pca_rand, harmony) are re-fit once per further evaluation seed.

TRANSFORM_SHELL = (
    "cellica transform --variant {wildcards.variant:q} --input {input:q} --out {output.features:q}"
    " --model-out {output.model:q} {params.args} 2> {log:q}"
)

rule transform:
    input:
        transform_input,
    output:
        features=FEATURES,
        model=f"{RESULTS}/features/{{variant}}.npz",
    wildcard_constraints:
        variant="|".join(VARIANTS),
    log:
        f"{LOGS}/transform/{{variant}}.log",
    benchmark:
        f"{BENCH}/transform/{{variant}}.tsv"
    conda:
        CONDA_ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        args=transform_args,
    shell:
        TRANSFORM_SHELL


rule transform_seed:
    input:
        transform_input,
    output:
        features=f"{SEED_FEATURES}.h5ad",
        model=f"{SEED_FEATURES}.npz",
    log:
        f"{LOGS}/transform/{{variant}}-seed{{seed}}.log",
    benchmark:
        f"{BENCH}/transform/{{variant}}-seed{{seed}}.tsv"
    conda:
        CONDA_ENV
    wildcard_constraints:
        variant="|".join(SEEDED) or "no-seeded-variant",
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        args=transform_args,
    shell:
        TRANSFORM_SHELL + " --rotation-seed {wildcards.seed}"
