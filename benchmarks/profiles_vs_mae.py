"""Classical cp_measure profiles against the demo MAE: the same screen, the same transforms and
evaluation, two ways of turning tiles into features.

    snakemake --cores 2                                    # the demo (MAE) into results/
    snakemake --cores 2 --config 'profiles={enabled: true}' 'stability={enabled: false}' \\
        'transform={drop_constant: true}' results_dir=results_cp reports_dir=reports_cp
    python benchmarks/profiles_vs_mae.py --mae results --profiles results_cp [results_cps ...] [--docs]

Prints, per variant, the per-variant means of the summary (with their 95% intervals over
genes) for both runs, and the run times of their embedding steps from the benchmark files;
``--docs`` writes the table into docs/models.md (``profiles-vs-mae``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from _docs import DOCS, markdown, write_block

from cellica.core.jobtimes import benchmark_jobs
from cellica.registry import COMPARED_METRICS, PAPER_VARIANTS
from cellica.registry import METRICS as REGISTRY_METRICS

# Metrics and variants as the registry names them (a misspelt name would select nothing).
METRICS = [*COMPARED_METRICS, "batch_accuracy_lgbm", "recall", "truth_factor_r2"]
assert set(METRICS) <= set(REGISTRY_METRICS)
VARIANTS = list(PAPER_VARIANTS)


def summary(results: Path, label: str) -> pd.DataFrame:
    s = pd.read_parquet(results / "eval" / "summary.parquet")
    s = s[(s["table"] == "per_variant") & s["metric"].isin(METRICS) & s["variant"].isin(VARIANTS)]
    cell = [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{v:.3f}"
            for v, lo, hi in zip(s["value"], s["ci_low"], s["ci_high"], strict=True)]
    return s.assign(features=label, cell=cell)[["metric", "variant", "features", "cell"]]


def embedding_seconds(results: Path) -> float:
    jobs = benchmark_jobs(results / "benchmarks")
    return float(jobs[jobs["step"].isin(["train_mae", "embed", "profile_tiles", "gather_embeddings"])]["seconds"].sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mae", default="results", help="results folder of the MAE run")
    ap.add_argument("--profiles", nargs="+", default=["results_cp"],
                    help="results folders of profiles runs (e.g. without and with transform.standardize)")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    runs = {"demo MAE": Path(args.mae), **{f"cp_measure ({Path(p).name})": Path(p) for p in args.profiles}}
    long = pd.concat([summary(path, label) for label, path in runs.items()])
    table = long.pivot_table(index=["metric", "variant"], columns="features", values="cell", aggfunc="first")
    table = table.reindex(columns=list(runs)).reset_index()
    table["metric"] = pd.Categorical(table["metric"], METRICS, ordered=True)
    table = table.sort_values(["metric", "variant"]).astype({"metric": str})
    times = {label: embedding_seconds(path) for label, path in runs.items()}
    print(table.to_string(index=False))
    print("embedding steps (s):", {k: round(v, 1) for k, v in times.items()})
    if args.docs:
        steps = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
        head = (f"`python benchmarks/profiles_vs_mae.py --profiles {' '.join(args.profiles)} --docs` (the demo "
                f"screen; means over genes with 95% intervals; embedding steps, training included: {steps})")
        write_block(DOCS / "models.md", "profiles-vs-mae", f"{head}\n\n{markdown(table)}")


if __name__ == "__main__":
    main()
