"""Stage 4, evaluation: per-gene LightGBM classifiers against shared controls, batch metrics,
replicate mAP, and the summary with uncertainty and the paper's claims."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "evaluate_genes": "cellica.evaluate.genes",
    "variant_metrics": "cellica.evaluate.batch",
    "summary_table": "cellica.evaluate.summary",
    "evaluate_files": "cellica.evaluate.tables",
    "gather_evaluations": "cellica.evaluate.tables",
    "batch_metrics_files": "cellica.evaluate.tables",
    "summarize_files": "cellica.evaluate.tables",
    "truth_genes_file": "cellica.evaluate.tables",
    "EvalParams": "cellica.evaluate.params",
})
