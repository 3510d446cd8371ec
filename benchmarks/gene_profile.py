"""Where one gene's classifiers spend their time, against the floor of bare LightGBM calls.

    python benchmarks/gene_profile.py [--controls 20000] [--dims 384] [--per-gene 64] [--repeats 2] [--docs]

A screen of ``--controls`` standard-normal controls x ``--dims`` features over 4 batches and one
gene of ``--per-gene`` samples in every batch (a shift of 0.5 SD on 3 features): 4 held-out-batch
folds and the 3 within-batch folds, 7 LightGBM fits of the paper's Table 6 (100 trees).

* **cellica**: ``GeneClassifiers.evaluate_gene`` (what an evaluate job runs per gene), whole.
* **floor**: the same 7 ``lightgbm.train`` calls (same rows, labels, parameters and seed) on
  training matrices made before the clock starts, each followed by ``predict`` and
  ``feature_importance``: nothing but LightGBM.
* **parts**: the floor's calls taken apart (Dataset construction, the boosting rounds, the model's
  round trip through its text, prediction, importances), and what cellica adds (row copies, the
  metrics: AUROC, ROC points, biological variation, concentration), each timed on its own.

All in this one process, one LightGBM thread per fit, best of ``--repeats``. ``--docs`` writes the
table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from cellica.evaluate._classifiers import GeneClassifiers, lgb_params
from cellica.evaluate.metrics import biological_variation, concentration
from cellica.evaluate.params import EvalParams


def screen(controls: int, dims: int, per_gene: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((controls + per_gene, dims), dtype=np.float32)
    x[controls:, :3] += 0.5
    obs = pd.DataFrame({"perturbation": ["ctrl"] * controls + ["G1"] * per_gene,
                        "is_control": [True] * controls + [False] * per_gene,
                        "batch": [f"B{i % 4}" for i in range(controls + per_gene)]})
    return x, obs


def best(fn, repeats: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def profile(controls: int, dims: int, per_gene: int, repeats: int) -> pd.DataFrame:
    import lightgbm as lgb

    x, obs = screen(controls, dims, per_gene)
    p = EvalParams()
    clf = GeneClassifiers(x, obs, p, seed=0)
    pert = (obs["perturbation"] == "G1").to_numpy()
    batches = sorted(set(obs.loc[pert, "batch"]))
    folds = clf._folds(pert, batches)[0] + clf._random_folds(pert)
    params = lgb_params(p, 0)
    ds_params = {"max_bin": 255, "verbose": -1, "min_data_in_leaf": p.min_data_in_leaf, "seed": 0}
    made = [(np.ascontiguousarray(x[tr]), pert[tr].astype(float), np.ascontiguousarray(x[te])) for tr, te in folds]

    whole, _ = best(lambda: clf.evaluate_gene("G1"), repeats)

    def floor():
        for xtr, ytr, xte in made:
            booster = lgb.train(params, lgb.Dataset(xtr, label=ytr), p.n_trees)
            booster.predict(xte)
            booster.feature_importance(importance_type=p.importance_type)

    bare, _ = best(floor, repeats)
    parts = {"Dataset construction": 0.0, "Dataset construction, one thread (as the floor's)": 0.0,
             "boosting rounds": 0.0, "model text round trip": 0.0,
             "prediction": 0.0, "importances": 0.0, "row copies (x[train], x[test])": 0.0, "metrics": 0.0}
    for (tr, te), (xtr, ytr, xte) in zip(folds, made, strict=True):
        t, _ = best(lambda tr=tr, te=te: (x[tr], x[te]), repeats)
        parts["row copies (x[train], x[test])"] += t
        t, ds = best(lambda xtr=xtr, ytr=ytr: lgb.Dataset(xtr, label=ytr, params=ds_params).construct(), 1)
        parts["Dataset construction"] += t
        t, _ = best(lambda xtr=xtr, ytr=ytr: lgb.Dataset(xtr, label=ytr, params={**ds_params, "num_threads": 1})
                    .construct(), 1)
        parts["Dataset construction, one thread (as the floor's)"] += t
        booster = lgb.Booster(params=params, train_set=ds)
        t0 = time.perf_counter()
        for _ in range(p.n_trees):
            booster.update()
        parts["boosting rounds"] += time.perf_counter() - t0
        t, _ = best(lambda b=booster: b.model_from_string(b.model_to_string()), repeats)
        parts["model text round trip"] += t
        t, score = best(lambda b=booster, xte=xte: b.predict(xte), repeats)
        parts["prediction"] += t
        t, imp = best(lambda b=booster: b.feature_importance(importance_type=p.importance_type), repeats)
        parts["importances"] += t
        y = pert[te]

        def metrics(y=y, score=score, imp=imp, te=te):
            from sklearn.metrics import roc_auc_score, roc_curve

            roc_auc_score(y, score), roc_curve(y, score)
            concentration(imp.astype(float), biological_variation(x[te][y], x[te][~y]))

        t, _ = best(metrics, repeats)
        parts["metrics"] += t
    rows = [{"part": k, "seconds": v, "share of floor": v / bare} for k, v in parts.items()]
    rows += [{"part": "floor: 7 bare lightgbm.train + predict + importances", "seconds": bare, "share of floor": 1.0},
             {"part": "cellica: evaluate_gene, whole", "seconds": whole, "share of floor": whole / bare}]
    table = pd.DataFrame(rows)
    table.attrs["setting"] = (f"{controls:,} controls x {dims} dims, one gene of {per_gene} samples in 4 batches: "
                              f"{len(folds)} fits of {p.n_trees} trees, best of {repeats}")
    return table


def utilisation(controls: int, dims: int, per_gene: int, genes: int, threads: int) -> dict:
    """CPU time over wall time x cores of ``evaluate_genes`` (what an evaluate_chunk job runs)
    on ``genes`` genes with ``threads`` genes in parallel."""
    import os
    import resource

    import anndata as ad

    from cellica.evaluate.genes import evaluate_genes

    rng = np.random.default_rng(1)
    x, obs = screen(controls, dims, per_gene)
    extra = rng.standard_normal((per_gene * (genes - 1), dims), dtype=np.float32)
    extra[:, 3:6] += 0.5
    obs = pd.concat([obs, pd.DataFrame({"perturbation": [f"G{2 + i // per_gene}" for i in range(len(extra))],
                                        "is_control": False, "batch": [f"B{i % 4}" for i in range(len(extra))]})],
                    ignore_index=True)
    obs.index = [f"s{i}" for i in range(len(obs))]
    obs["plate"], obs["well"] = obs["batch"] + "-P1", "W"
    data = ad.AnnData(np.vstack([x, extra]), obs=obs)
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    evaluate_genes(data, EvalParams(), threads=threads)
    cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"genes": genes, "threads": threads, "cores": os.cpu_count(), "wall s": wall, "cpu s": cpu,
            "utilisation": cpu / (wall * min(threads, os.cpu_count()))}


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--controls", type=int, default=20000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--per-gene", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--genes", type=int, default=4, help="genes of the CPU-utilisation run")
    ap.add_argument("--threads", type=int, default=2, help="genes in parallel in the CPU-utilisation run")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args(argv)
    table = profile(args.controls, args.dims, args.per_gene, args.repeats)
    print(table.attrs["setting"])
    print(table.round(3).to_string(index=False))
    use = pd.DataFrame([utilisation(args.controls, args.dims, args.per_gene, args.genes, args.threads)])
    print(use.round(3).to_string(index=False))
    if args.docs:
        from _docs import DOCS, markdown, write_block

        write_block(DOCS / "benchmarks.md", "gene-profile", f"{table.attrs['setting']}.\n\n" + markdown(table)
                    + "\n\nCPU use of `evaluate_genes` (an evaluate_chunk job's work):\n\n" + markdown(use))
    return table


if __name__ == "__main__":
    main()
