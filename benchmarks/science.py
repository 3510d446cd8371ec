"""Does the method do what the paper claims, here? Runs the real DAG on several data sets and checks.

    python benchmarks/science.py [--seeds 0,1,2] [--sets synthetic,linear,linear_all,bbbc021,bbbc021_moa]
                                 [--out results/science] [--docs]

Every set is evaluated with ``evaluate.seeds`` = ``--seeds`` (classifier seeds, and the
ICA / random-rotation seeds of the seeded variants), and judged by cellica's own claims
table (``cellica.evaluate._compare``): each claim holds / fails / is inconclusive at 95%, from
paired per-gene differences with bootstrap intervals and Holm-corrected Wilcoxon tests,
with the seed noise beside them. Nothing is tuned to make a claim hold.

* ``synthetic``: the demo screen through the real Snakefile (simulate -> MAE -> embed ->
  transform -> evaluate), simulator and MAE seed 0.
* ``linear``: the identifiability setting itself, without the MAE: the simulator's true
  latent factors mixed linearly into 32 dims, plus per-plate technical offsets and gains
  and a little noise, evaluated in-process with the same transforms, classifiers and
  summary, keeping the components that explain 99% of the control variance (the signal
  subspace). Shows whether PCA+ICA works when its assumption holds.
* ``linear_all``: the same with all 32 whitened dimensions kept (23 of them pure noise).
* ``bbbc021`` / ``bbbc021_moa``: the real BBBC021 CellProfiler profiles (bring-your-own
  path, ``config/examples/cellprofiler_profiles.yaml``), perturbation = compound at
  concentration / mechanism of action, batch = week.
* ``rxrx1``: real RxRx1 control images: ingest -> MAE -> embed -> transform -> batch
  metrics (no perturbations: only the batch claim; not in the default sets, slow).

``--docs`` writes each set's claims and per-variant tables into ``docs/science.md``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from _variants import variant_text

import cellica
from cellica._launch import environment, snakemake_command
from cellica.evaluate.params import EvalParams
from cellica.registry import GENE_METRICS

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CLAIM_METRICS = [*(m for m in GENE_METRICS if m != "auroc_within"), "batch_accuracy", "batch_accuracy_lgbm",
                 "truth_mcc", "truth_infom"]


def run_dag(config: dict, out: Path, target: str | None = None) -> Path:
    """Run the Snakefile on ``config`` (written next to its results); returns the results folder."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    t0 = time.perf_counter()
    subprocess.run(snakemake_command(*([target] if target else []), "--quiet", "rules", directory=REPO,
                                     configfile=cfg_path), check=True, env=environment())
    print(f"  {out}: {time.perf_counter() - t0:.0f} s", flush=True)
    return Path(config["results_dir"])


def summary(results: Path) -> pd.DataFrame:
    return pd.read_parquet(results / "eval" / "summary.parquet")


def synthetic(seeds: list[int], out: Path) -> pd.DataFrame:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results_dir"], cfg["reports_dir"] = str(out / "synthetic"), str(out / "synthetic" / "reports")
    cfg.setdefault("evaluate", {})["seeds"] = seeds
    return summary(run_dag(cfg, out / "synthetic"))


def linear(seeds: list[int], out: Path, n_components: float | None, dims: int = 32) -> pd.DataFrame:
    """The simulator's true factors, linearly mixed, with plate effects: no MAE in the way.

    ``n_components``: 0.99 keeps the whitened signal subspace (about the 9 factors);
    None keeps all 32 dimensions, 23 of them pure noise after whitening.
    """
    import anndata as ad

    from cellica.store.params import SimulationParams
    from cellica.store.simulate import simulate_screen
    from cellica.store.tilestore import TileStore
    from cellica.transform.params import TransformParams

    sim_cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["simulate"]
    path = out / "linear" / "tiles.zarr"
    if not (path / "metadata.parquet").exists():
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Only the ground truth is used: the smallest tiles make the store quick.
        simulate_screen(path, SimulationParams(**{**sim_cfg, "tile_size": 16, "seed": 0}))
    store = TileStore.open(path)
    meta, lat, bat = store.metadata, store.ground_truth("latents"), store.ground_truth("batches")
    z = lat.set_index("tile_id").loc[meta["tile_id"]].to_numpy()
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(z.shape[1], dims))
    plates = meta["plate"].astype(str).to_numpy()
    offset = {p: rng.normal(0, 1.0, dims) for p in np.unique(plates)}
    gain = {p: np.exp(rng.normal(0, 0.1, dims)) for p in np.unique(plates)}
    x = (z @ mixing) * np.stack([gain[p] for p in plates]) + np.stack([offset[p] for p in plates])
    x += rng.normal(0, 0.3, x.shape)
    obs = meta.set_index("tile_id")
    obs.index = obs.index.astype(str)
    emb = ad.AnnData(x.astype(np.float32), obs=obs)
    return cellica.run(emb, transform=TransformParams(n_components=n_components), evaluate=EvalParams(seeds=seeds),
                       truth=(lat, bat)).summary


def bbbc021(seeds: list[int], out: Path, moa: bool) -> pd.DataFrame:
    cfg = yaml.safe_load((REPO / "config" / "examples" / "cellprofiler_profiles.yaml").read_text())
    name = "bbbc021_moa" if moa else "bbbc021"
    cfg["results_dir"], cfg["reports_dir"] = str(out / name), str(out / name / "reports")
    cfg["features"]["path"] = str(SHARED / "bbbc021_profiles_weeks1-5" / "bbbc021_weeks1-5_well_profiles.csv.gz")
    cfg.setdefault("evaluate", {})["seeds"] = seeds
    if moa:
        cfg["features"]["column_map"]["perturbation"] = "Metadata_MoA"
    return summary(run_dag(cfg, out / name))


def rxrx1(seeds: list[int], out: Path) -> pd.DataFrame:
    from cellica.evaluate.summary import summary_table

    cfg = yaml.safe_load((REPO / "config" / "examples" / "negctrl_images.yaml").read_text())
    cfg["results_dir"], cfg["reports_dir"] = str(out / "rxrx1"), str(out / "rxrx1" / "reports")
    cfg.setdefault("evaluate", {})["seeds"] = seeds
    for key, value in list(cfg.get("ingest", {}).items()):
        if isinstance(value, str) and value.startswith("../shared/data"):
            cfg["ingest"][key] = str(SHARED / value.removeprefix("../shared/data/"))
    results = run_dag(cfg, out / "rxrx1", target=f"{out / 'rxrx1'}/eval/batch_metrics.parquet")
    batch = pd.read_parquet(results / "eval" / "batch_metrics.parquet")
    empty = pd.DataFrame(columns=["variant", "gene", "seed", "skipped", "split", "auroc_mean", "n_features"])
    return summary_table(empty, batch, pd.DataFrame())


def claims_text(s: pd.DataFrame) -> pd.DataFrame:
    return s[s["table"] == "claim"][["row", "verdict", "detail"]].rename(columns={"row": "claim"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sets", default="synthetic,linear,linear_all,bbbc021,bbbc021_moa")
    ap.add_argument("--out", default="results/science")
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/science.md")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out).resolve()
    sets = args.sets.split(",")
    needs_shared = {"bbbc021", "bbbc021_moa", "rxrx1"} & set(sets)
    if needs_shared and not SHARED.exists():
        print(f"skipping {sorted(needs_shared)}: {SHARED} is absent")
        sets = [s for s in sets if s not in needs_shared]
    runs = {"synthetic": lambda: synthetic(seeds, out), "linear": lambda: linear(seeds, out, 0.99),
            "linear_all": lambda: linear(seeds, out, None), "bbbc021": lambda: bbbc021(seeds, out, moa=False),
            "bbbc021_moa": lambda: bbbc021(seeds, out, moa=True), "rxrx1": lambda: rxrx1(seeds, out)}
    for name in sets:
        if name not in runs:
            raise SystemExit(f"unknown data set {name!r}; choose from {sorted(runs)}")
        print(f"running {name} ...", flush=True)
        t0 = time.perf_counter()
        s = runs[name]()
        claims, variants = claims_text(s), variant_text(s, CLAIM_METRICS)
        with pd.option_context("display.width", 250, "display.max_colwidth", 400):
            print(f"\n== {name} (seeds {seeds}, {time.perf_counter() - t0:.0f} s)")
            print(variants.to_string(index=False))
            for c in claims.itertuples():
                print(f"  [{c.verdict}] {c.claim}: {c.detail}")
        if args.docs:
            from _docs import DOCS, markdown, write_block

            text = (f"Seeds {seeds}; means over genes with 95% bootstrap intervals.\n\n{markdown(variants)}\n\n"
                    f"{markdown(claims)}")
            write_block(DOCS / "science.md", f"science-{name}", text)


if __name__ == "__main__":
    main()
