"""Does the method do what the paper claims, here? Runs the real DAG on several data sets and checks.

    python benchmarks/science.py [--seeds 0,1,2] [--sets synthetic,linear,bbbc021,bbbc021_moa,rxrx1]
                                 [--out results/science]

Data sets (each through the real Snakefile with `snakemake --cores 2`, except `linear`):

* ``synthetic``: the demo screen (simulate -> MAE -> embed -> transform -> evaluate) with
  several seeds (simulator, MAE and transforms); mean and spread over seeds.
* ``linear``: the identifiability setting itself, without the MAE: the simulator's true
  latent factors mixed linearly into 32 dims, plus per-plate technical offsets and gains
  and a little noise, evaluated in-process with the same transforms and classifiers,
  keeping the components that explain 99% of the control variance (the signal subspace).
  Shows whether PCA+ICA works when its assumption (a linear map of independent factors) holds.
* ``linear_all``: the same with all 32 whitened dimensions kept (23 of them pure noise).
* ``bbbc021`` / ``bbbc021_moa``: the real BBBC021 CellProfiler profiles (bring-your-own
  path), perturbation = compound at concentration / mechanism of action, batch = week.
* ``rxrx1``: real RxRx1 control images: ingest -> MAE -> embed -> transform -> batch metrics.

For each data set it prints the per-variant table and, for each of the paper's claims,
whether it holds here, with the numbers. Nothing is tuned to make a claim hold.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
METRICS = ["auroc_mean", "auroc_within", "sparsity", "concentration", "map_mean", "batch_accuracy", "chance_accuracy",
           "knn_mixing", "truth_mcc", "truth_factor_r2", "truth_batch_r2"]


def run_dag(config: dict, out: Path, target: str | None = None) -> Path:
    """Run the Snakefile on ``config`` (written next to its results); returns the results folder."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    exe = shutil.which("snakemake", path=env["PATH"])
    cmd = [exe, *([target] if target else []), "--snakefile", str(REPO / "Snakefile"), "--directory", str(REPO),
           "--cores", "2", "--configfile", str(cfg_path), "--quiet", "rules"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    print(f"  {out}: {time.perf_counter() - t0:.0f} s", flush=True)
    return Path(config["results_dir"])


def per_variant(results: Path) -> pd.DataFrame:
    s = pd.read_parquet(results / "eval" / "summary.parquet")
    pv = s[s["table"] == "per_variant"].pivot(index="variant", columns="metric", values="value")
    return pv.reindex(columns=[m for m in METRICS if m in pv.columns])


def synthetic(seeds: list[int], out: Path) -> list[pd.DataFrame]:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    tables = []
    for seed in seeds:
        cfg = yaml.safe_load(yaml.safe_dump(base))
        cfg["results_dir"] = str(out / f"synthetic_seed{seed}")
        cfg["reports_dir"] = str(out / f"synthetic_seed{seed}" / "reports")
        cfg["simulate"]["seed"] = seed
        cfg["mae"]["seed"] = seed
        cfg.setdefault("transform", {})["seed"] = seed
        cfg.setdefault("evaluate", {})["seed"] = seed
        tables.append(per_variant(run_dag(cfg, out / f"synthetic_seed{seed}")))
    return tables


def linear(seeds: list[int], out: Path, n_components: float | None, dims: int = 32) -> list[pd.DataFrame]:
    """The simulator's true factors, linearly mixed, with plate effects: no MAE in the way.

    ``n_components``: 0.99 keeps the whitened signal subspace (about the 9 factors);
    None keeps all 32 dimensions, 23 of them pure noise after whitening.
    """
    import anndata as ad

    from cellica.evaluate import batch_metrics, evaluate_genes, summary_table
    from cellica.params import EvalParams, TransformParams
    from cellica.recovery import truth_recovery
    from cellica.simulate import SimulationParams, simulate_screen
    from cellica.tilestore import TileStore
    from cellica.transforms import make_transform

    sim_cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["simulate"]
    tables = []
    for seed in seeds:
        path = out / f"linear_seed{seed}" / "tiles.zarr"
        if not (path / "metadata.parquet").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Only the ground truth is used: the smallest tiles make the store quick.
            simulate_screen(path, SimulationParams(**{**sim_cfg, "tile_size": 16, "seed": seed}))
        store = TileStore.open(path)
        meta, lat, bat = store.metadata, store.ground_truth("latents"), store.ground_truth("batches")
        z = lat.set_index("tile_id").loc[meta["tile_id"]].to_numpy()
        rng = np.random.default_rng(seed)
        mixing = rng.normal(size=(z.shape[1], dims))
        plates = meta["plate"].astype(str).to_numpy()
        offset = {p: rng.normal(0, 1.0, dims) for p in np.unique(plates)}
        gain = {p: np.exp(rng.normal(0, 0.1, dims)) for p in np.unique(plates)}
        x = (z @ mixing) * np.stack([gain[p] for p in plates]) + np.stack([offset[p] for p in plates])
        x += rng.normal(0, 0.3, x.shape)
        obs = meta.set_index("tile_id")
        obs.index = obs.index.astype(str)
        emb = ad.AnnData(x.astype(np.float32), obs=obs)
        per_gene, batch = [], []
        for variant in ("base", "pca", "pca_ica", "pca_rand"):
            feats = make_transform(variant, TransformParams(seed=seed, n_components=n_components)).fit_transform(emb)
            pg, _ = evaluate_genes(feats, EvalParams(seed=seed), threads=2)
            pg["variant"] = variant
            per_gene.append(pg)
            batch.append({**batch_metrics(feats, variant, EvalParams(seed=seed)), **truth_recovery(feats, lat, bat)})
        s = summary_table(pd.concat(per_gene, ignore_index=True), pd.DataFrame(batch), pd.DataFrame())
        pv = s[s["table"] == "per_variant"].pivot(index="variant", columns="metric", values="value")
        tables.append(pv.reindex(columns=[m for m in METRICS if m in pv.columns]))
        print(f"  linear seed {seed} done", flush=True)
    return tables


def bbbc021(out: Path, moa: bool) -> list[pd.DataFrame]:
    cfg = yaml.safe_load((REPO / "config" / "examples" / "cellprofiler_profiles.yaml").read_text())
    name = "bbbc021_moa" if moa else "bbbc021"
    cfg["results_dir"], cfg["reports_dir"] = str(out / name), str(out / name / "reports")
    cfg["features"]["path"] = str(SHARED / "bbbc021_profiles_weeks1-5" / "bbbc021_weeks1-5_well_profiles.csv.gz")
    if moa:
        cfg["features"]["column_map"]["perturbation"] = "Metadata_MoA"
    return [per_variant(run_dag(cfg, out / name))]


def rxrx1(out: Path) -> list[pd.DataFrame]:
    cfg = yaml.safe_load((REPO / "config" / "examples" / "negctrl_images.yaml").read_text())
    cfg["results_dir"], cfg["reports_dir"] = str(out / "rxrx1"), str(out / "rxrx1" / "reports")
    for key, value in list(cfg.get("ingest", {}).items()):
        if isinstance(value, str) and value.startswith("../shared/data"):
            cfg["ingest"][key] = str(SHARED / value.removeprefix("../shared/data/"))
    results = run_dag(cfg, out / "rxrx1", target=f"{out / 'rxrx1'}/eval/batch_metrics.parquet")
    b = pd.read_parquet(results / "eval" / "batch_metrics.parquet").set_index("variant")
    return [b[["batch_accuracy", "chance_accuracy", "silhouette", "knn_mixing"]]]


def claims(t: pd.DataFrame) -> list[tuple[str, bool | None, str]]:
    """The paper's claims on a mean per-variant table: (claim, holds?, numbers)."""
    def has(*cols):
        return all(c in t.columns for c in cols) and all(v in t.index for v in ("base", "pca", "pca_ica", "pca_rand"))

    out = []
    if has("auroc_mean", "sparsity"):
        a, s = t["auroc_mean"], t["sparsity"]
        out.append(("AUROC: PCA+ICA > PCA", a["pca_ica"] > a["pca"], f"{a['pca_ica']:.3f} vs {a['pca']:.3f}"))
        out.append(("sparsity: PCA+ICA > PCA", s["pca_ica"] > s["pca"], f"{s['pca_ica']:.3f} vs {s['pca']:.3f}"))
        out.append(("AUROC: PCA+ICA > PCA+Rand", a["pca_ica"] > a["pca_rand"],
                    f"{a['pca_ica']:.3f} vs {a['pca_rand']:.3f}"))
        out.append(("sparsity: PCA+ICA > PCA+Rand", s["pca_ica"] > s["pca_rand"],
                    f"{s['pca_ica']:.3f} vs {s['pca_rand']:.3f}"))
    if has("concentration"):
        c = t["concentration"]
        order = c["base"] < c["pca_rand"] < c["pca"] < c["pca_ica"]
        out.append(("concentration: Base < PCA+Rand < PCA < PCA+ICA", bool(order),
                    " / ".join(f"{v} {c[v]:.3f}" for v in ("base", "pca_rand", "pca", "pca_ica"))))
    if "batch_accuracy" in t.columns and {"base", "pca_ica"} <= set(t.index):
        b = t["batch_accuracy"]
        out.append(("batch signal reduced (batch accuracy PCA+ICA < Base)", b["pca_ica"] < b["base"],
                    f"{b['pca_ica']:.3f} vs {b['base']:.3f} (chance {t['chance_accuracy'].iloc[0]:.3f})"))
    if has("truth_mcc"):
        m = t["truth_mcc"]
        out.append(("ground truth: MCC PCA+ICA > PCA and > PCA+Rand", m["pca_ica"] > max(m["pca"], m["pca_rand"]),
                    f"{m['pca_ica']:.3f} vs {m['pca']:.3f} / {m['pca_rand']:.3f}"))
    return out


def show(name: str, tables: list[pd.DataFrame]) -> pd.DataFrame:
    mean = sum(tables) / len(tables)
    print(f"\n== {name} ({len(tables)} run{'s' if len(tables) > 1 else ''})")
    shown = mean.copy()
    if len(tables) > 1:
        sd = pd.concat(tables).groupby(level=0).std()
        shown = mean.map(lambda v: f"{v:.3f}").astype(str) + " +- " + sd.reindex_like(mean).map(lambda v: f"{v:.3f}")
    print(shown.to_string(float_format=lambda v: f"{v:.3f}"))
    for text, holds, numbers in claims(mean):
        print(f"  [{'holds' if holds else 'does NOT hold'}] {text}: {numbers}")
    return mean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sets", default="synthetic,linear,linear_all,bbbc021,bbbc021_moa,rxrx1")
    ap.add_argument("--out", default="results/science")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out).resolve()
    sets = args.sets.split(",")
    needs_shared = {"bbbc021", "bbbc021_moa", "rxrx1"} & set(sets)
    if needs_shared and not SHARED.exists():
        print(f"skipping {sorted(needs_shared)}: {SHARED} is absent")
        sets = [s for s in sets if s not in needs_shared]
    results = {}
    for name in sets:
        print(f"running {name} ...", flush=True)
        if name == "synthetic":
            results[name] = synthetic(seeds, out)
        elif name == "linear":
            results[name] = linear(seeds, out, n_components=0.99)
        elif name == "linear_all":
            results[name] = linear(seeds, out, n_components=None)
        elif name in ("bbbc021", "bbbc021_moa"):
            results[name] = bbbc021(out, moa=name.endswith("moa"))
        elif name == "rxrx1":
            results[name] = rxrx1(out)
        else:
            raise SystemExit(f"unknown data set {name!r}")
    for name, tables in results.items():
        show(name, tables)


if __name__ == "__main__":
    main()
