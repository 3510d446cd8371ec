# Baselines (docs/evaluation.md, "Baselines"): feature sets every result is read against, each
# made into features here and then evaluated by the same rules as the variants (their names
# are values of the {variant} wildcard of evaluate_chunk and gather_eval).
# cell_count: nuclei per tile, sharded and gathered like embeddings (model tag cell_count);
# untrained: the MAE's initial weights, embedded by the rule embed (model tag untrained);
# classical: cp_measure's profiles from the rule profile_tiles (model tag cp_measure).

if PLAN.has_images:

    rule untrained_mae:
        input:
            TILES,
        output:
            model=f"{RESULTS}/mae/untrained/model.safetensors",
            meta=f"{RESULTS}/mae/untrained/model.json",
        log:
            f"{LOGS}/untrained_mae.log",
        benchmark:
            f"{BENCH}/untrained_mae.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=10,
        params:
            args=cli_args("mae", TrainParams),
            ckpt=lambda wildcards, output: os.path.join(os.path.dirname(output.model), "checkpoints"),
        shell:
            "cellica train-mae --untrained --store {input:q} --out {output.model:q} --checkpoint-dir {params.ckpt:q}"
            " {params.args} 2> {log:q}"

    rule count_nuclei:
        input:
            TILES,
        output:
            temp(f"{RESULTS}/embeddings/cell_count/shards/{{shard}}-of-{N_SHARDS}.h5ad"),
        log:
            f"{LOGS}/count_nuclei/{{shard}}-of-{N_SHARDS}.log",
        benchmark:
            f"{BENCH}/count_nuclei/{{shard}}-of-{N_SHARDS}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=60,
        params:
            args=PLAN.nuclei_args(),
            n_shards=N_SHARDS,
        shell:
            "cellica count-nuclei --store {input:q} --out {output:q} --shard {wildcards.shard}/{params.n_shards}"
            " {params.args} 2> {log:q}"


rule baseline:
    input:
        baseline_input,
    output:
        f"{RESULTS}/features/{{baseline}}.h5ad",
    wildcard_constraints:
        baseline="|".join(BASELINES) or "no-baseline",
    log:
        f"{LOGS}/baseline/{{baseline}}.log",
    benchmark:
        f"{BENCH}/baseline/{{baseline}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        args=baseline_args,
    shell:
        "cellica baseline --name {wildcards.baseline:q} --input {input:q} --out {output:q} {params.args} 2> {log:q}"
