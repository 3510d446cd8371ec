"""Does the fast evaluation path agree with the faithful one, and how much faster is it?

    python benchmarks/evaluate.py [--seeds 0,1,2,3,4] [--cases simulated,few_positives,bbbc021_moa,bbbc021_compound]
                                  [--speed-genes 4] [--speed-controls 22000] [--speed-dims 384] [--threads 2]
                                  [--docs]

Faithful (``binning: lightgbm``, the default): the paper's Table 6 parameters with
LightGBM's own binning of every training set (max_bin 255). Fast (``binning: controls``):
every feature cut once at quantiles of the controls, one binned Dataset, folds as row
subsets. For each case and seed both paths fit every gene; the per-gene differences
(fast - faithful) of held-out AUROC and Hoyer sparsity are averaged over seeds, and
their mean over genes gets a 95% bootstrap interval. The fast path *agrees* when that
interval contains 0 and lies within +-0.01. Beside it, the faithful path's own seed
noise (seed s vs s+1) for scale. Cases:

* ``simulated``: 30 genes x 4,000 controls x 64 dims over 4 batches, 64 samples per
  gene shifting 1-3 features by 0.3-1 SD;
* ``few_positives``: the same with 8 samples per gene (4 per batch, 4 training positives
  per held-out fold);
* ``bbbc021_moa`` / ``bbbc021_compound``: the real BBBC021 CellProfiler profiles
  (``../shared/data``), whitened as in ``config/examples/cellprofiler_profiles.yaml``
  (per-week centre-scale on DMSO, 60 components), perturbation = mechanism of action
  (held-out weeks) or compound at concentration (one week each: random split).

Then the speed of both paths on ``--speed-genes`` genes of a 22,000-control x 384-dim
screen, in this one process, as seconds per gene and their ratio. ``--docs`` writes the
tables into ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
from _docs import DOCS, markdown, write_block

from cellica.evaluate._compare import bootstrap_ci
from cellica.evaluate.genes import evaluate_genes
from cellica.evaluate.params import EvalParams
from cellica.transform.params import TransformParams

REPO = Path(__file__).resolve().parents[1]
BBBC021 = REPO.parent / "shared" / "data" / "bbbc021_profiles_weeks1-5" / "bbbc021_weeks1-5_well_profiles.csv.gz"


def make_screen(genes: int, controls: int, dims: int, per_gene: int, effect=(0.3, 1.0), seed: int = 0):
    """Standard-normal controls and genes over 4 batches; each gene shifts 1-3 features."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((controls, dims), dtype=np.float32)]
    rows = [{"perturbation": "ctrl", "is_control": True, "batch": f"B{i % 4}"} for i in range(controls)]
    for g in range(genes):
        x = rng.standard_normal((per_gene, dims), dtype=np.float32)
        cols = rng.choice(dims, rng.integers(1, 4), replace=False)
        x[:, cols] += rng.uniform(*effect, cols.size).astype(np.float32)
        xs.append(x)
        b = rng.choice(4, 2, replace=False)
        rows += [{"perturbation": f"G{g:03d}", "is_control": False, "batch": f"B{b[i % 2]}"} for i in range(per_gene)]
    obs = pd.DataFrame(rows, index=[f"s{i}" for i in range(len(rows))])
    obs["plate"], obs["well"] = obs["batch"] + "-P1", "W"
    return ad.AnnData(np.vstack(xs), obs=obs)


def bbbc021(perturbation: str):
    """BBBC021 profiles whitened like the example config (pca variant), or None without ../shared."""
    if not BBBC021.is_file():
        return None
    from cellica.embed.features import import_features
    from cellica.embed.params import FeatureTableParams
    from cellica.transform.variants import make_transform

    cols = {"plate": "Metadata_Plate", "well": "Metadata_Well", "batch": "Metadata_Batch",
            "perturbation": perturbation, "is_control": "Metadata_is_control"}
    adata = import_features(BBBC021, params=FeatureTableParams(column_map=cols, extra_metadata=["n_images"]))
    params = TransformParams(batch_correction="center_scale", n_components=60, drop_constant=True)
    return make_transform("pca", params).fit_transform(adata)


CASES = {
    "simulated": (lambda: make_screen(30, 4000, 64, 64), {}),
    "few_positives": (lambda: make_screen(30, 4000, 64, 8, seed=1), {"min_data_in_leaf": 3, "min_samples": 3}),
    "bbbc021_moa": (lambda: bbbc021("Metadata_MoA"), {"min_samples": 3, "min_data_in_leaf": 3}),
    "bbbc021_compound": (lambda: bbbc021("Metadata_Perturbation"), {"min_samples": 3, "min_data_in_leaf": 3}),
}
METRICS = {"auroc_mean": "held-out AUROC", "sparsity": "Hoyer sparsity"}


def paired(a: pd.DataFrame, b: pd.DataFrame, metric: str) -> pd.Series:
    """Per-gene mean over seeds of a - b (genes both scored)."""
    wide = pd.concat({"a": a.set_index(["gene", "seed"])[metric], "b": b.set_index(["gene", "seed"])[metric]}, axis=1)
    return (wide["a"] - wide["b"]).dropna().groupby("gene").mean()


def agreement(case: str, data, extra: dict, seeds: list[int], threads: int) -> list[dict]:
    base = replace(EvalParams(**extra), seeds=seeds)
    t0 = time.perf_counter()
    faithful, _ = evaluate_genes(data, base, threads=threads)
    fast, _ = evaluate_genes(data, replace(base, binning="controls"), threads=threads)
    shifted, _ = evaluate_genes(data, replace(base, seeds=[s + 1000 for s in seeds]), threads=threads)
    shifted["seed"] -= 1000
    rows = []
    for metric, label in METRICS.items():
        d = paired(fast, faithful, metric)
        noise = paired(shifted, faithful, metric)
        mean, lo, hi = bootstrap_ci(d, seed=0)
        rows.append({"case": case, "metric": label, "genes": int(d.size), "seeds": len(seeds),
                     "fast - faithful": mean, "95% CI low": lo, "95% CI high": hi,
                     "agrees": "yes" if lo <= 0 <= hi and -0.01 <= lo and hi <= 0.01 else "NO",
                     "mean abs(fast - faithful) per gene": float(d.abs().mean()),
                     "faithful seed noise, mean abs(diff)": float(noise.abs().mean()),
                     "faithful mean": float(faithful.groupby("gene")[metric].mean().mean())})
    print(f"{case}: {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def speed(genes: int, controls: int, dims: int, threads: int) -> dict:
    data = make_screen(genes, controls, dims, 64, seed=2)
    out = {"screen": f"{genes} genes x {controls} controls x {dims} dims, {threads} genes in parallel"}
    for name, binning in (("faithful", "lightgbm"), ("fast", "controls")):
        t0 = time.perf_counter()
        evaluate_genes(data, EvalParams(binning=binning), threads=threads)
        out[f"{name} s/gene"] = (time.perf_counter() - t0) / genes
    out["fast speed-up"] = out["faithful s/gene"] / out["fast s/gene"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speed-genes", type=int, default=4)
    ap.add_argument("--speed-controls", type=int, default=22000)
    ap.add_argument("--speed-dims", type=int, default=384)
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/benchmarks.md")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for case in args.cases.split(","):
        make, extra = CASES[case]
        data = make()
        if data is None:
            print(f"{case}: skipped ({BBBC021} is absent)", flush=True)
            continue
        rows += agreement(case, data, extra, seeds, args.threads)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:+.4f}"), flush=True)
    sp = pd.DataFrame([speed(args.speed_genes, args.speed_controls, args.speed_dims, args.threads)]) \
        if args.speed_genes else pd.DataFrame()
    if not sp.empty:
        print(sp.to_string(index=False, float_format=lambda v: f"{v:.2f}"), flush=True)
    if args.docs:
        write_block(DOCS / "benchmarks.md", "evaluate-agreement", markdown(table, "+.4f"))
        if not sp.empty:
            write_block(DOCS / "benchmarks.md", "evaluate-speed", markdown(sp, ".2f"))


if __name__ == "__main__":
    main()
