# Optional `stability` target: the MAE trained twice with different seeds on the same
# store, both runs embed the tiles, and `cellica align` measures how well one run maps
# onto the other per class of map (the paper's Table 1); the table joins the summary report.


rule train_mae_seed:
    input:
        TILES,
    output:
        model=f"{STABILITY}/seed{{seed}}/model.safetensors",
        meta=f"{STABILITY}/seed{{seed}}/model.json",
    log:
        f"{LOGS}/stability/train_mae_seed{{seed}}.log",
    benchmark:
        f"{BENCH}/stability/train_mae_seed{{seed}}.tsv"
    conda:
        CONDA_ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=240,
        gpu=GPUS,
    params:
        args=cli_args(config["mae"], skip=("checkpoint", "seed")),
        ckpt=lambda wildcards, output: os.path.join(os.path.dirname(output.model), "checkpoints"),
    shell:
        "cellica train-mae --store {input:q} --out {output.model:q} --checkpoint-dir {params.ckpt:q}"
        " --seed {wildcards.seed} --threads {threads} {params.args} 2> {log:q}"


rule embed_seed:
    input:
        store=TILES,
        model=f"{STABILITY}/seed{{seed}}/model.safetensors",
    output:
        f"{STABILITY}/seed{{seed}}/embeddings.h5ad",
    log:
        f"{LOGS}/stability/embed_seed{{seed}}.log",
    benchmark:
        f"{BENCH}/stability/embed_seed{{seed}}.tsv"
    conda:
        CONDA_ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=240,
        gpu=GPUS,
    params:
        args=cli_args(config["embed"], skip=("shards",)),
    shell:
        "cellica embed --store {input.store:q} --checkpoint {input.model:q} --out {output:q}"
        " --threads {threads} {params.args} 2> {log:q}"


rule align_seeds:
    input:
        expand(f"{STABILITY}/seed{{seed}}/embeddings.h5ad", seed=config["stability"]["seeds"]),
    output:
        report(ALIGNMENT, category="2. Evaluation", caption="../report/alignment.rst"),
    log:
        f"{LOGS}/stability/align.log",
    benchmark:
        f"{BENCH}/stability/align.tsv"
    conda:
        CONDA_ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        test_fraction=config["stability"]["test_fraction"],
        ica=f"--ica-backend {config['transform']['ica_backend']} --ica-max-iter {config['transform']['ica_max_iter']}"
        f" --ica-tol {config['transform']['ica_tol']} --seed {config['transform']['seed']}"
        + stability_ica_components(),
    shell:
        "cellica align {input:q} --out {output:q} --test-fraction {params.test_fraction} {params.ica} > {log:q} 2>&1"


rule stability:
    input:
        ALIGNMENT,
