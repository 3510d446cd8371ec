"""How many whitened components suit classical profiles? cp_measure profiles of the demo screen
through the paper's four variants at several ``transform.n_components``.

    python benchmarks/profile_components.py [--store results/tiles.zarr] [--profiles profiles.h5ad]
                                            [--components 16,32,64,128,0.9,0.99] [--seeds 0,1,2] [--docs]

Without ``--store`` it simulates the demo screen; without ``--profiles`` it measures the
profiles (``profiles`` defaults, nuclei on the first channel: ~5 minutes on one core).
Each setting keeps ``transform.drop_constant: true`` (as for any CellProfiler-style table),
without and with ``transform.standardize: controls``, and with ``transform.outlier_cutoff:
500`` added (features beyond 500 robust z-units on the fit controls dropped), and fits the
DAG's transforms, classifiers and summary in this process (:mod:`_variants`): per-gene held-out
AUROC, Hoyer sparsity (means over genes, 95% bootstrap intervals), the true factors' probe R^2
and the controls' batch accuracy.
A fraction (``0.9``) keeps the components explaining that share of the control variance;
``dims`` says how many that was.
``--docs`` writes the table into docs/models.md (``profiles-components``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from itertools import product
from pathlib import Path

import anndata as ad
import pandas as pd
import yaml
from _docs import DOCS, markdown, write_block
from _variants import variant_text

import cellica
from cellica.embed.params import ProfileParams
from cellica.embed.profiles import profile_store
from cellica.evaluate.params import EvalParams
from cellica.registry import PAPER_VARIANTS
from cellica.store.params import SimulationParams
from cellica.store.simulate import simulate_screen
from cellica.store.tilestore import TileStore
from cellica.transform.params import TransformParams

DEMO = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
# (standardize, outlier_cutoff): as measured, z-scored on the fit controls first, and then also
# without the features beyond 500 robust z-units (pycytominer's drop_outliers cut-off)
SETTINGS = ((None, None), ("controls", None), ("controls", 500.0))
METRICS = ["auroc_heldout", "sparsity", "truth_factor_r2", "batch_accuracy"]


def components(text: str) -> list[int | float]:
    """'16,0.9' -> [16, 0.9]: integers are counts, fractions are shares of the control variance."""
    return [float(v) if "." in v else int(v) for v in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="a simulated store (default: simulate the demo screen)")
    ap.add_argument("--profiles", default=None, help="its profiles .h5ad (default: measure them)")
    ap.add_argument("--components", default="16,32,64,128,0.9,0.99")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    counts = components(args.components)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store_path = args.store or simulate_screen(Path(tmp) / "s.zarr", SimulationParams(**DEMO["simulate"])).path
        store = TileStore.open(store_path)
        truth = (store.ground_truth("latents"), store.ground_truth("batches"))
        profiles = ad.read_h5ad(args.profiles) if args.profiles else profile_store(store_path, None, ProfileParams())
        measured = time.perf_counter() - t0
        print(f"{profiles.n_obs} tiles x {profiles.n_vars} profile features ({measured:.0f} s)", flush=True)
        for (standardize, cutoff), n in product(SETTINGS, counts):
            t1 = time.perf_counter()
            params = TransformParams(n_components=n, drop_constant=True, standardize=standardize,
                                     outlier_cutoff=cutoff)
            # base does not depend on n_components: evaluated once per standardisation
            summary = cellica.run(profiles, transform=params, evaluate=EvalParams(seeds=seeds), truth=truth,
                                  variants=None if n == counts[0] else PAPER_VARIANTS[1:]).summary
            table = variant_text(summary, METRICS)
            table.insert(0, "dims", table["variant"].map(summary.attrs["dims"]))
            table.insert(0, "n_components", str(n))
            table.insert(0, "outlier_cutoff", str(cutoff))
            table.insert(0, "standardize", str(standardize))
            rows.append(table)
            print(table.to_string(index=False), f"\n({time.perf_counter() - t1:.0f} s)", flush=True)
    table = pd.concat(rows, ignore_index=True)
    took = time.perf_counter() - t0
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(f"\n{table.to_string(index=False)}\n{took / 60:.1f} min")
    if args.docs:
        given = " --profiles P" if args.profiles else ""
        head = (f"`python benchmarks/profile_components.py{given} --docs` (the demo screen, {profiles.n_obs} tiles "
                f"x {profiles.n_vars} cp_measure features; `drop_constant: true`, without and with `standardize: "
                f"controls`, then `outlier_cutoff: 500`; seeds {args.seeds}; means over genes with 95% bootstrap "
                f"intervals; {took / 60:.0f} min on this machine)")
        write_block(DOCS / "models.md", "profiles-components", f"{head}\n\n{markdown(table)}")


if __name__ == "__main__":
    main()
