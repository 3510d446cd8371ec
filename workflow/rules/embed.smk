# Stage 2: embeddings. Train an MAE (unless config names a checkpoint), embed the store in
# shards (separate jobs), gather them; or import a user's own features table instead.

if config["source"] == "features":

    rule import_features:
        input:
            table=config["features"]["path"],
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
            args=cli_args(config["features"], skip=("path", "truth")),
        shell:
            "cellica import-features {input.table:q} --out {output:q} {params.args} 2> {log:q}"

else:
    if not config["mae"]["checkpoint"]:

        rule train_mae:
            input:
                TILES,
            output:
                model=MODEL,
                meta=MODEL.removesuffix(".safetensors") + ".json",
            log:
                f"{LOGS}/train_mae.log",
            benchmark:
                f"{BENCH}/train_mae.tsv"
            conda:
                CONDA_ENV
            threads: 2
            resources:
                mem_mb=8000,
                runtime=240,
                gpu=GPUS,
            params:
                args=cli_args(config["mae"], skip=("checkpoint",)),
                ckpt=f"{RESULTS}/mae/checkpoints",
            shell:
                "cellica train-mae --store {input:q} --out {output.model:q} --checkpoint-dir {params.ckpt:q}"
                " --threads {threads} {params.args} 2> {log:q}"

    rule embed:
        input:
            store=TILES,
            model=MODEL,
        output:
            temp(f"{RESULTS}/embeddings/shards/{{shard}}-of-{N_SHARDS}.h5ad"),
        log:
            f"{LOGS}/embed/{{shard}}-of-{N_SHARDS}.log",
        benchmark:
            f"{BENCH}/embed/{{shard}}-of-{N_SHARDS}.tsv"
        conda:
            CONDA_ENV
        threads: 2
        resources:
            mem_mb=8000,
            runtime=240,
            gpu=GPUS,
        params:
            args=cli_args(config["embed"], skip=("shards",)),
            n_shards=N_SHARDS,
        shell:
            "cellica embed --store {input.store:q} --checkpoint {input.model:q} --out {output:q}"
            " --shard {wildcards.shard}/{params.n_shards} --threads {threads} {params.args} 2> {log:q}"

    rule gather_embeddings:
        input:
            expand(f"{RESULTS}/embeddings/shards/{{shard}}-of-{N_SHARDS}.h5ad", shard=range(N_SHARDS)),
        output:
            tiles=EMB,
            wells=WELLS,
        log:
            f"{LOGS}/gather_embeddings.log",
        benchmark:
            f"{BENCH}/gather_embeddings.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        shell:
            "cellica gather-embeddings {input:q} --out {output.tiles:q} --wells-out {output.wells:q} 2> {log:q}"
