"""Stage 4, evaluation: per-gene LightGBM classifiers against shared controls, batch metrics,
replicate mAP, and the summary with uncertainty and the paper's claims."""
