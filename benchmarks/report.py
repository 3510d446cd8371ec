"""Report speed: the index and per-gene pages for 1,000 genes.

    python benchmarks/report.py [--genes 1000] [--variants 4]

Builds synthetic evaluation outputs (per-gene tables with ROC points, importances
over 384 features, features files of 20,000 samples) and times the index and the
gene pages separately; prints the index's size.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd

from cellica.evaluate.summary import summary_table
from cellica.registry import VARIANT_NAMES
from cellica.report._pages import ReportBuilder
from cellica.report.content import ReportInputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--genes", type=int, default=1000)
    ap.add_argument("--variants", type=int, default=4)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--samples", type=int, default=20000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    variants = list(VARIANT_NAMES)[: args.variants]
    genes = [f"GENE{i:05d}" for i in range(args.genes)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_gene, importances, features, summary = {}, {}, {}, []
        obs = pd.DataFrame({"plate": "P", "well": "W", "batch": rng.choice(["B1", "B2", "B3"], args.samples),
                            "perturbation": rng.choice(["ctrl", *genes], args.samples), "is_control": False},
                           index=[f"s{i}" for i in range(args.samples)])
        obs["is_control"] = obs["perturbation"] == "ctrl"
        feats = [f"f{j}" for j in range(args.dims)]
        grid = np.linspace(0, 1, 40).round(3).tolist()
        folds = json.dumps([[grid, grid], [grid, grid]])
        for v in variants:
            (root / v).mkdir()
            pg = pd.DataFrame({"gene": genes, "variant": v, "n_samples": 64, "n_controls": 1000, "guides": "g1,g2",
                               "batches": "B1,B2", "n_batches": 2, "single_batch": False, "skipped": "",
                               "auroc_mean": rng.uniform(0.5, 0.9, args.genes), "auroc_sd": 0.05,
                               "auroc_within": 0.8, "sparsity": rng.uniform(0.5, 0.9, args.genes),
                               "concentration": rng.uniform(0, 0.4, args.genes), "n_folds": 2,
                               "roc_folds": folds, "top_features": "f1,f2", "notes": "", "seed": 0, "split": "batch",
                               "no_split": False, "n_features": args.dims})
            pg.to_parquet(root / v / "per_gene.parquet")
            imp = pd.DataFrame(
                {
                    "gene": np.repeat(genes, args.dims),
                    "feature": feats * args.genes,
                    "importance": rng.exponential(size=args.genes * args.dims)
                    * (rng.random(args.genes * args.dims) < 0.1),
                }
            )
            imp.to_parquet(root / v / "importances.parquet")
            ad.AnnData(rng.standard_normal((args.samples, args.dims), dtype=np.float32), obs=obs,
                       var=pd.DataFrame(index=feats)).write_h5ad(root / f"{v}.h5ad")
            per_gene[v], importances[v], features[v] = (
                root / v / "per_gene.parquet",
                root / v / "importances.parquet",
                root / f"{v}.h5ad",
            )
            summary.append(pg)
        summary_table(pd.concat(summary, ignore_index=True), pd.DataFrame(), pd.DataFrame(), n_boot=200).to_parquet(
            root / "summary.parquet")
        inputs = ReportInputs(summary=root / "summary.parquet", per_gene=per_gene, importances=importances,
                              features=features)
        t0 = time.perf_counter()
        builder = ReportBuilder(inputs, root / "reports")
        index = builder.build_index()
        t_index = time.perf_counter() - t0
        t0 = time.perf_counter()
        pages = builder.build_genes()
        t_genes = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in pages)
        print(
            f"{args.genes} genes x {len(variants)} variants: index {t_index:.1f} s "
            f"({index.stat().st_size / 1e6:.2f} MB), "
            f"{len(pages)} gene pages {t_genes:.1f} s ({1000 * t_genes / len(pages):.0f} ms/page, "
            f"{size / len(pages) / 1e3:.0f} kB/page)"
        )


if __name__ == "__main__":
    main()
