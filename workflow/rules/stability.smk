# Optional `stability` target: the MAE trained twice with different seeds on the same store
# (the train_mae, embed and gather_embeddings rules with {model} = seed<N>), and `cellica
# align` measuring how well one run maps onto the other per class of map (the paper's
# Table 1); with stability.enabled the table joins the summary report.


rule align_seeds:
    input:
        PLAN.stability_embeddings(),
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
        args=align_args(),
    shell:
        "cellica align {input:q} --out {output:q} {params.args} > {log:q} 2>&1"


rule stability:
    input:
        ALIGNMENT,
