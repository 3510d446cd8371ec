"""Per-gene evaluation speed: shared pre-binned controls vs fitting every classifier from scratch.

    python benchmarks/evaluate.py [--genes 100] [--baseline-genes 100] [--raw-genes 20] [--controls 22000]
                                  [--dims 384] [--per-gene 64] [--threads 2] [--seed-noise]

Synthetic features: controls and genes drawn from a standard normal in `--dims`
dimensions, each gene shifting 1-3 random features by `--effect` SD (default 0.3-1.0:
realistic per-sample effect sizes), over 4 batches. All runs are in this one process on
the same data with the paper's LightGBM parameters:

* cellica: features binned once at control quantiles, one binned Dataset, every fold a
  row subset of it, `--threads` genes in parallel with one LightGBM thread each;
* from scratch, same bins: a new LightGBM Dataset per fit (the straightforward way),
  LightGBM using all `--threads` cores per fit, on the first `--baseline-genes` genes;
  its AUROCs must equal cellica's exactly;
* from scratch, same bins, 1 thread per fit (a plain loop over genes), first `--raw-genes` genes;
* from scratch on the raw float features with LightGBM's own per-fit binning (how the
  classifiers were fitted before the bins were fixed), first `--raw-genes` genes: how much
  fixing the bins moves AUROC, beside `--seed-noise` (the same fits with another LightGBM
  seed).

Speed-ups compare seconds per gene, so baselines may run on fewer genes.
"""

from __future__ import annotations

import argparse
import time

import anndata as ad
import lightgbm as lgb
import numpy as np
import pandas as pd

from cellica.evaluate import GeneClassifiers, evaluate_genes, prepare
from cellica.params import EvalParams


def make_screen(genes: int, controls: int, dims: int, per_gene: int, effect: tuple[float, float], seed: int = 0):
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
    obs["plate"] = obs["batch"] + "-P1"
    obs["well"] = "W"
    return ad.AnnData(np.vstack(xs), obs=obs)


class RawFromScratch(GeneClassifiers):
    """LightGBM's own binning of the raw float features, a new Dataset per fit."""

    def fit_predict(self, train, y_train, test):
        # LightGBM's default min_data_in_bin (3): its own binning, as before the bins were fixed.
        ds = lgb.Dataset(self.x[train], label=y_train.astype(float), params={**self._ds_params(), "min_data_in_bin": 3})
        booster = lgb.train(self.params, ds, num_boost_round=self.p.n_trees)
        return booster.predict(self.x[test]), booster


def run_baseline(cls, data, params: EvalParams, genes: list[str], model_threads: int) -> tuple[pd.DataFrame, float]:
    """Per-gene rows of the given classifier set, one gene after another; (table, seconds)."""
    t0 = time.perf_counter()
    adata = prepare(data, params)
    clf = cls(np.asarray(adata.X), adata.obs, params, shared_bins=False, model_threads=model_threads)
    rows = [clf.evaluate_gene(g)[0] for g in genes]
    return pd.DataFrame(rows).set_index("gene"), time.perf_counter() - t0


def compare(name: str, ours: pd.DataFrame, other: pd.DataFrame, secs: float, per_gene_ours: float) -> None:
    diff = (ours.loc[other.index, "auroc_mean"] - other["auroc_mean"]).abs()
    print(f"{name}: {secs:.1f} s for {len(other)} genes ({secs / len(other):.2f} s/gene) -> cellica "
          f"{secs / len(other) / per_gene_ours:.2f}x faster; AUROC |difference| max {diff.max():.4f}, "
          f"mean {diff.mean():.4f}; mean AUROC {other['auroc_mean'].mean():.4f} vs cellica "
          f"{ours.loc[other.index, 'auroc_mean'].mean():.4f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--genes", type=int, default=100)
    ap.add_argument("--baseline-genes", type=int, default=None, help="genes for the same-bins baseline (all)")
    ap.add_argument("--raw-genes", type=int, default=20, help="genes for the 1-thread and raw baselines (0: skip)")
    ap.add_argument("--controls", type=int, default=22000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--per-gene", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--max-bin", type=int, default=EvalParams.max_bin)
    ap.add_argument("--effect", default="0.3,1.0", help="range of the per-feature shifts, in SD")
    ap.add_argument("--seed-noise", action="store_true",
                    help="also fit the raw baseline with another LightGBM seed: the per-gene AUROC noise floor")
    args = ap.parse_args()
    effect = tuple(float(v) for v in args.effect.split(","))
    data = make_screen(args.genes, args.controls, args.dims, args.per_gene, effect)
    print(f"{args.genes} genes x {args.controls} controls x {args.dims} features, effects {effect} SD, {args.trees} trees, "
          f"max_bin {args.max_bin}, {args.threads} thread(s)", flush=True)
    params = EvalParams(n_trees=args.trees, max_bin=args.max_bin)
    t0 = time.perf_counter()
    ours, _ = evaluate_genes(data, params, threads=args.threads)
    secs = time.perf_counter() - t0
    ours = ours.set_index("gene")
    per_gene = secs / len(ours)
    print(f"cellica (shared bins, {args.threads} genes in parallel): {secs:.1f} s for {len(ours)} genes "
          f"({per_gene:.2f} s/gene); mean AUROC {ours['auroc_mean'].mean():.4f}", flush=True)
    genes = list(ours.index)
    table, t = run_baseline(GeneClassifiers, data, params, genes[:args.baseline_genes], args.threads)
    compare(f"from scratch, same bins, {args.threads} LightGBM threads per fit", ours, table, t, per_gene)
    if args.raw_genes:
        sub = genes[:args.raw_genes]
        table, t = run_baseline(GeneClassifiers, data, params, sub, 1)
        compare("from scratch, same bins, 1 thread per fit", ours, table, t, per_gene)
        raw, t = run_baseline(RawFromScratch, data, params, sub, 1)
        compare("from scratch, raw features, LightGBM's per-fit bins, 1 thread", ours, raw, t, per_gene)
        if args.seed_noise:
            # The same raw fits with only LightGBM's seed changed (feature_fraction sampling):
            # how much per-gene AUROC moves for reasons unrelated to binning.
            other, t = run_baseline(RawFromScratch, data, EvalParams(n_trees=args.trees, max_bin=args.max_bin, seed=1),
                                    sub, 1)
            noise = (raw["auroc_mean"] - other["auroc_mean"]).abs()
            print(f"raw from scratch, LightGBM seed 0 vs 1 ({t:.1f} s): AUROC |difference| max {noise.max():.4f}, "
                  f"mean {noise.mean():.4f}", flush=True)


if __name__ == "__main__":
    main()
