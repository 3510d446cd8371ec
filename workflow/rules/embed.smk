# Stage 2: embeddings. Train an MAE per {model} (seed<N>; none when config names a checkpoint),
# embed the store in shards (separate jobs), gather them; or measure cp_measure's profiles of the
# tiles in shards instead (profiles.enabled); or import a user's own features table.
# The optional stability target uses the same rules with a second and third seed.

if PLAN.imports_features:

    rule import_features:
        input:
            table=PLAN.features_table,
        output:
            EMB,
        log:
            f"{LOGS}/import_features.log",
        benchmark:
            f"{BENCH}/import_features.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            args=cli_args("features", FeatureTableParams),
        shell:
            "cellica import-features {input.table:q} --out {output:q} {params.args} 2> {log:q}"

else:

    rule train_mae:
        input:
            TILES,
        output:
            model=MODEL,
            meta=MODEL.removesuffix(".safetensors") + ".json",
        log:
            f"{LOGS}/train_mae/{{model}}.log",
        benchmark:
            f"{BENCH}/train_mae/{{model}}.tsv"
        conda:
            CONDA_ENV
        wildcard_constraints:
            model=TRAINED_MODELS,
        threads: PLAN.threads("mae")
        resources:
            mem_mb=8000,
            runtime=240,
            **GPU_RESOURCES,
        params:
            args=cli_args("mae", TrainParams),
            seed=lambda wildcards: wildcards.model.removeprefix("seed"),
            ckpt=lambda wildcards, output: os.path.join(os.path.dirname(output.model), "checkpoints"),
        shell:
            "cellica train-mae --store {input:q} --out {output.model:q} --checkpoint-dir {params.ckpt:q}"
            " {params.args} --seed {params.seed} 2> {log:q}"

    rule profile_tiles:
        input:
            TILES,
        output:
            temp(f"{RESULTS}/embeddings/cp_measure/shards/{{shard}}-of-{N_SHARDS}.h5ad"),
        log:
            f"{LOGS}/profile_tiles/{{shard}}-of-{N_SHARDS}.log",
        benchmark:
            f"{BENCH}/profile_tiles/{{shard}}-of-{N_SHARDS}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=240,
        params:
            args=cli_args("profiles", ProfileParams),
            n_shards=N_SHARDS,
        shell:
            "cellica profile-tiles --store {input:q} --out {output:q} --shard {wildcards.shard}/{params.n_shards}"
            " {params.args} 2> {log:q}"

    rule embed:
        input:
            store=TILES,
            model=model_file,
        output:
            temp(f"{RESULTS}/embeddings/{{model}}/shards/{{shard}}-of-{N_SHARDS}.h5ad"),
        wildcard_constraints:
            model=ENCODER_MODELS,
        log:
            f"{LOGS}/embed/{{model}}/{{shard}}-of-{N_SHARDS}.log",
        benchmark:
            f"{BENCH}/embed/{{model}}/{{shard}}-of-{N_SHARDS}.tsv"
        conda:
            CONDA_ENV
        threads: PLAN.threads("embed")
        resources:
            mem_mb=8000,
            runtime=240,
            **GPU_RESOURCES,
        params:
            args=cli_args("embed", EmbedParams),
            n_shards=N_SHARDS,
        shell:
            "cellica embed --store {input.store:q} --checkpoint {input.model:q} --out {output:q}"
            " --shard {wildcards.shard}/{params.n_shards} {params.args} 2> {log:q}"

    rule gather_embeddings:
        input:
            expand(
                f"{RESULTS}/embeddings/{{{{model}}}}/shards/{{shard}}-of-{N_SHARDS}.h5ad", shard=range(N_SHARDS)
            ),
        output:
            tiles=EMB_OF,
            wells=WELLS_OF,
        log:
            f"{LOGS}/gather_embeddings/{{model}}.log",
        benchmark:
            f"{BENCH}/gather_embeddings/{{model}}.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        shell:
            "cellica gather-embeddings {input:q} --out {output.tiles:q} --wells-out {output.wells:q} 2> {log:q}"
