"""An independent reference of the whole recipe, and how the DAG's numbers compare with it.

    python benchmarks/reference_recipe.py [--seeds 0,1,2,3,4] [--fractions 0.5,1.0] [--cases ...] [--docs]
    python benchmarks/reference_recipe.py --sign-effect [--docs]

The reference (:func:`reference_recipe` and the functions above it) is written from the paper's
text and docs/evaluation.md, with numpy, scikit-learn, scipy, LightGBM, harmonypy and scanpy,
and imports nothing from cellica (``tests/test_reference_recipe.py`` checks it):

1. each batch's controls are split at random: ``fit_fraction`` of them fit the transforms, the
   others are the only controls the classifiers see (all of them at 1.0);
2. the transforms are fit on the fitting controls: per-batch centring (or centring and scaling)
   by each batch's fitting controls, or one z-score on all of them (scikit-learn's
   ``StandardScaler``; features that do not vary there dropped by ``max == min``, no tolerance:
   nothing is taken from cellica's rules), PCA whitening (scikit-learn ``PCA(whiten=True)``), then
   FastICA (scikit-learn; components made canonical as docs/stages.md says: positive skew,
   sorted by non-Gaussianity) or a Haar-random rotation (scipy ``ortho_group``); ZCA whitening
   (sphering); Harmony (harmonypy) on the PCA scores and ComBat (scanpy) on every row;
3. per perturbation, ``lightgbm.train`` with the paper's Table 6 parameters, one fold per batch
   holding the perturbation (test: that batch's perturbed samples and controls) or, for a
   perturbation in one batch, a stratified 3-fold split; AUROC, the Hoyer sparsity of the gain
   importances and the concentration of the held-out biological variation in the top 25% of
   features (ties at the cut sharing it), each averaged over the folds, then over perturbations.

The DAG's side (:func:`dag_recipe`) runs the functions the DAG's transform and evaluate jobs
run (``make_transform(...).fit_transform``, ``evaluate_genes``) on the same data. Each seed
re-seeds everything in both (cellica: ``transform.seed`` and ``evaluate.seeds``), so the seed
SD includes the draw of the fitting controls. Cases: the BBBC021 CellProfiler profiles by MoA
(leave-one-week-out) and by compound (one week each: random splits) as the example config
(per-week center_scale), BBBC021 by MoA as the plain profiling protocol (one z-score on all
DMSO wells, no per-batch correction, every control fitting), and a simulated screen of
linearly mixed independent factors. ``--docs`` writes the table into docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
BBBC021 = REPO.parent / "shared" / "data" / "bbbc021_profiles_weeks1-5" / "bbbc021_weeks1-5_well_profiles.csv.gz"
# The paper's Table 6; min_data_in_leaf is lowered where there are ~3 samples per perturbation.
TABLE6 = {"objective": "binary", "is_unbalance": True, "learning_rate": 0.05, "num_leaves": 31,
          "feature_fraction": 0.6, "reg_alpha": 5.0, "reg_lambda": 1.0, "min_data_in_leaf": 20, "max_bin": 255,
          "num_threads": 1, "deterministic": True, "force_col_wise": True, "verbose": -1}
N_TREES = 100
REF_VARIANTS = ("base", "pca", "pca_ica", "pca_rand", "sphering", "harmony", "combat")
METRIC_NAMES = ("auroc", "sparsity", "concentration")


# ------------------------------------------------------------------------------ the reference
def split_controls(meta: pd.DataFrame, fraction: float, seed: int) -> np.ndarray:
    """Which controls fit the transforms: ``fraction`` of each batch's, at random (all at 1.0)."""
    fit = meta["is_control"].to_numpy().copy()
    if fraction >= 1.0:
        return fit
    rng = np.random.default_rng(seed)
    for _, rows in meta[meta["is_control"]].groupby("batch").indices.items():
        idx = np.flatnonzero(meta["is_control"].to_numpy())[rows]
        n_fit = max(1, int(round(fraction * len(idx))))
        fit[rng.permutation(idx)[n_fit:]] = False
    return fit


def centre_batches(x: np.ndarray, batch: np.ndarray, fit: np.ndarray, scale: bool) -> np.ndarray:
    """Each batch centred (and scaled) by its fitting controls' mean (and sd): scikit-learn's
    StandardScaler fit on them (a feature they do not vary on is dropped beforehand)."""
    from sklearn.preprocessing import StandardScaler

    out = np.empty_like(x)
    for b in np.unique(batch):
        rows, ref = batch == b, (batch == b) & fit
        out[rows] = StandardScaler(with_std=scale).fit(x[ref]).transform(x[rows])
    return out


def varies(x: np.ndarray) -> np.ndarray:
    """Features whose values are not all equal (max > min): no tolerance at all."""
    return np.ptp(x, axis=0) > 0


def transform(variant: str, x: np.ndarray, meta: pd.DataFrame, fit: np.ndarray, n_components, protocol: str,
              seed: int) -> np.ndarray:
    """The variant's features of every row, fit on the fitting controls. ``protocol``: how the
    features are put on one scale first: ``center`` (each batch centred on its fitting controls,
    in the PCA family), ``center_scale`` (also divided by their sd) or ``zscore`` (one z-score of
    every variant's input on all fitting controls, no per-batch statistics)."""
    from sklearn.decomposition import PCA, FastICA
    from sklearn.preprocessing import StandardScaler

    if protocol == "zscore":
        x = StandardScaler().fit(x[fit]).transform(x)
    if variant == "base":
        return x
    keep = varies(x if variant == "combat" else x[fit])  # constant where it is fit (ComBat: every row): dropped
    if protocol == "center_scale" and variant not in ("sphering", "combat"):
        batch = meta["batch"].to_numpy()
        for b in np.unique(batch):  # and constant on one batch's fitting controls (nothing to divide by)
            keep &= varies(x[fit & (batch == b)])
    x = x[:, keep]
    if variant == "sphering":
        mean = x[fit].mean(axis=0)
        lam, vec = np.linalg.eigh(np.cov(x[fit] - mean, rowvar=False))
        return (x - mean) @ (vec @ np.diag(1 / np.sqrt(np.maximum(lam, 0) + 1e-6)) @ vec.T).T
    if variant == "combat":
        import anndata as ad
        import scanpy as sc

        tmp = ad.AnnData(x, obs=pd.DataFrame({"b": meta["batch"].astype(str).to_numpy()},
                                             index=meta.index.astype(str)))
        return np.asarray(sc.pp.combat(tmp, key="b", inplace=False))
    if protocol != "zscore":
        x = centre_batches(x, meta["batch"].to_numpy(), fit, protocol == "center_scale")
    pca = PCA(n_components=n_components, whiten=variant != "harmony", svd_solver="full").fit(x[fit])
    z = pca.transform(x)
    if variant == "pca":
        return z
    if variant == "pca_rand":
        from scipy.stats import ortho_group

        return z @ ortho_group.rvs(z.shape[1], random_state=seed).T
    if variant == "pca_ica":
        ica = FastICA(whiten=False, max_iter=1000, tol=1e-4, random_state=seed).fit(z[fit])
        return canonical(ica.transform(z), fit)
    if variant == "harmony":
        import harmonypy

        ho = harmonypy.run_harmony(z, meta[["batch"]].astype(str), ["batch"], theta=2.0, max_iter_harmony=10,
                                   random_state=seed, verbose=False)
        out = np.asarray(ho.Z_corr)
        return out if out.shape[0] == z.shape[0] else out.T
    raise ValueError(variant)


def canonical(s: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """Independent components as docs/stages.md makes them canonical: positive skew and sorted
    by non-Gaussianity (the negentropy proxy (E log cosh y - E log cosh nu)^2), on the fit rows."""
    y = s[fit]
    signs = np.where((y ** 3).mean(axis=0) < 0, -1.0, 1.0)
    negentropy = (np.log(np.cosh(y)).mean(axis=0) - 0.3745672075) ** 2
    return (s * signs)[:, np.argsort(-negentropy, kind="stable")]


def hoyer(v: np.ndarray) -> float:
    n, l2 = v.size, float(np.sqrt((v ** 2).sum()))
    return float("nan") if l2 == 0 else (math.sqrt(n) - np.abs(v).sum() / l2) / (math.sqrt(n) - 1)


def top_quarter_share(importance: np.ndarray, bio: np.ndarray) -> float:
    """(S - f) / (1 - f): S the share of ``bio`` in the top quarter by ``importance``, ties at
    the cut sharing the places left; f = k / n."""
    n = importance.size
    k = math.ceil(0.25 * n)
    order = np.sort(importance)[::-1]
    cut = order[k - 1]
    w = (importance > cut).astype(float)
    tied = importance == cut
    w[tied] = (k - w.sum()) / tied.sum()
    f = k / n
    return float(((w * bio).sum() / bio.sum() - f) / (1 - f)) if bio.sum() > 0 else float("nan")


def folds(pert: np.ndarray, ctrl: np.ndarray, batch: np.ndarray, seed: int):
    """Leave one batch (holding the perturbation) out; a perturbation in one batch: 3 stratified folds."""
    from sklearn.model_selection import StratifiedKFold

    batches = sorted(set(batch[pert]))
    if len(batches) > 1:
        out = []
        for b in batches:
            test, train = (batch == b) & (pert | ctrl), (batch != b) & (pert | ctrl)
            if (ctrl & (batch == b)).any() and pert[train].sum() >= 2:
                out.append((np.flatnonzero(train), np.flatnonzero(test)))
        return out
    rows = np.flatnonzero(pert | ctrl)
    k = min(3, int(pert.sum()))
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(rows[a], rows[b]) for a, b in skf.split(rows, pert[rows])]


def classify(x: np.ndarray, pert: np.ndarray, ctrl: np.ndarray, batch: np.ndarray, params: dict, seed: int):
    """One perturbation's AUROC, sparsity and concentration, each the mean over its folds."""
    import lightgbm as lgb
    from sklearn.metrics import roc_auc_score

    res = {m: [] for m in METRIC_NAMES}
    for train, test in folds(pert, ctrl, batch, seed):
        booster = lgb.train({**params, "seed": seed}, lgb.Dataset(x[train], label=pert[train].astype(float)),
                            N_TREES)
        score = booster.predict(x[test])
        imp = booster.feature_importance("gain").astype(float)
        y = pert[test]
        res["auroc"].append(roc_auc_score(y, score))
        res["sparsity"].append(hoyer(imp))
        xt = x[test].astype(np.float64)
        var = xt[~y].var(axis=0)
        diff2 = (xt[y].mean(axis=0) - xt[~y].mean(axis=0)) ** 2
        bio = np.divide(diff2, var, out=np.zeros_like(var), where=var > 0)  # no spread on the controls: 0
        res["concentration"].append(top_quarter_share(imp, bio))
    return {m: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for m, v in res.items()}


def reference_recipe(x: np.ndarray, meta: pd.DataFrame, variant: str, seed: int, fraction: float,
                     n_components, protocol: str, min_samples: int, lgb_overrides: dict,
                     fit: np.ndarray | None = None) -> pd.DataFrame:
    """Per perturbation, the reference's AUROC, sparsity and concentration for one variant and seed.

    ``meta`` has columns ``perturbation``, ``is_control``, ``batch``; ``x`` is samples x features.
    ``fit``: the fitting controls to use instead of the reference's own draw (a paired comparison).
    """
    fit = split_controls(meta, fraction, seed) if fit is None else fit
    z = np.asarray(transform(variant, np.asarray(x, np.float64), meta, fit, n_components, protocol, seed),
                   np.float32)
    held = ~(meta["is_control"].to_numpy() & fit) if fraction < 1.0 else np.ones(len(meta), bool)
    z, m = z[held], meta[held]
    ctrl, batch = m["is_control"].to_numpy(), m["batch"].astype(str).to_numpy()
    perts = m["perturbation"].astype(str).to_numpy()
    rows = []
    for p in sorted(set(perts[~ctrl])):
        pert = (perts == p) & ~ctrl
        if pert.sum() >= min_samples:
            rows.append({"perturbation": p, **classify(z, pert, ctrl, batch, {**TABLE6, **lgb_overrides}, seed)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ the cases
def simulated_screen(seed: int = 0, genes: int = 24, factors: int = 16, per_gene: int = 48):
    """Independent Laplace factors, linearly mixed into as many features; each gene shifts 1-2
    factors; 4 batches add their own offsets and scale one mixed direction; 800 controls."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(factors, factors))
    batch_offset, rows, lat = rng.normal(0, 1.5, (4, factors)), [], []
    for i in range(800):
        lat.append(rng.laplace(size=factors))
        rows.append({"perturbation": "ctrl", "is_control": True, "batch": f"B{i % 4}"})
    for g in range(genes):
        moved = rng.choice(factors, rng.integers(1, 3), replace=False)
        b = rng.choice(4, 2, replace=False)
        for i in range(per_gene):
            s = rng.laplace(size=factors)
            s[moved] += rng.uniform(0.8, 1.6, moved.size)
            lat.append(s)
            rows.append({"perturbation": f"G{g:02d}", "is_control": False, "batch": f"B{b[i % 2]}"})
    meta = pd.DataFrame(rows, index=[f"s{i}" for i in range(len(rows))])
    x = np.asarray(lat) @ mixing.T + batch_offset[meta["batch"].str[1].astype(int).to_numpy()]
    return x.astype(np.float32), meta


def bbbc021(by: str):
    table = pd.read_csv(BBBC021)
    meta = pd.DataFrame({"perturbation": table[by].astype(str), "is_control": table["Metadata_is_control"].astype(bool),
                         "batch": table["Metadata_Batch"].astype(str), "plate": table["Metadata_Plate"].astype(str),
                         "well": table["Metadata_Well"].astype(str)})
    meta.index = (meta["plate"] + "_" + meta["well"]).to_numpy()
    features = [c for c in table.columns if not c.startswith("Metadata_") and c != "n_images"]
    return table[features].to_numpy(np.float32), meta


# Per case: the data, the transform settings both sides use (n_components, the protocol that puts
# features on one scale: see transform), the classifier settings (min_samples, LightGBM
# overrides), and the fit fractions it runs at (None: those asked for). BBBC021 as its example
# config (per-week center_scale on DMSO), and as the profiling recipes' plain protocol: one
# z-score on all DMSO wells, no per-batch statistics, every control fitting (zscore).
CASES = {
    "bbbc021_moa": (lambda: bbbc021("Metadata_MoA"), 60, "center_scale", 3, {"min_data_in_leaf": 3}, None),
    "bbbc021_compound": (lambda: bbbc021("Metadata_Perturbation"), 60, "center_scale", 3, {"min_data_in_leaf": 3},
                         None),
    "bbbc021_moa_zscore": (lambda: bbbc021("Metadata_MoA"), 60, "zscore", 3, {"min_data_in_leaf": 3}, [1.0]),
    "simulated": (simulated_screen, None, "center", 3, {}, None),
}


# ------------------------------------------------------------------------------ the DAG's side
def dag_recipe(x, meta, variant, seed, fraction, n_components, protocol, min_samples, lgb_overrides, threads=2):
    """The DAG's transform and evaluate functions on the same data and settings."""
    import anndata as ad

    from cellica.evaluate.genes import evaluate_genes
    from cellica.evaluate.params import EvalParams
    from cellica.transform.params import TransformParams
    from cellica.transform.variants import make_transform

    obs = meta.copy()
    obs.index = obs.index.astype(str)
    for col in ("plate", "well"):
        if col not in obs:
            obs[col] = obs["batch"] + "-P1" if col == "plate" else "W"
    scaling = ({"standardize": "controls", "batch_correction": None} if protocol == "zscore"
               else {"batch_correction": protocol})
    tp = TransformParams(fit_fraction=fraction, seed=seed, n_components=n_components, drop_constant=True, **scaling)
    feats = make_transform(variant, tp).fit_transform(ad.AnnData(np.asarray(x, np.float32), obs=obs))
    ep = EvalParams(seeds=[seed], min_samples=min_samples, **lgb_overrides)
    pg, _ = evaluate_genes(feats, ep, variant=variant, threads=threads)
    pg = pg[pg["skipped"] == ""]
    table = pd.DataFrame({"perturbation": pg["gene"], "auroc": pg["auroc_mean"], "sparsity": pg["sparsity"],
                          "concentration": pg["concentration"]})
    table.attrs["fit"] = feats.obs["transform_fit"].to_numpy(bool)  # the DAG's draw of fitting controls
    return table


def compare(case: str, seeds: list[int], fractions: list[float], variants, paired: bool = False) -> pd.DataFrame:
    """Per fraction, variant and metric: the DAG's and the reference's means over seeds, the
    pooled seed sd, and whether they agree within 3 sd. ``paired``: the reference fits on the
    DAG's own draw of fitting controls (what is left is the implementations' difference)."""
    load, n_components, protocol, min_samples, overrides, only = CASES[case]
    x, meta = load()
    rows = []
    for fraction in only or fractions:
        for variant in variants:
            t0 = time.perf_counter()
            per_seed = {"dag": [], "reference": []}
            for seed in seeds:
                args = (x, meta, variant, seed, fraction, n_components, protocol, min_samples, overrides)
                dag = dag_recipe(*args)
                per_seed["dag"].append(dag[list(METRIC_NAMES)].mean())
                ref = reference_recipe(*args, fit=dag.attrs["fit"] if paired else None)
                per_seed["reference"].append(ref[list(METRIC_NAMES)].mean())
            for metric in METRIC_NAMES:
                d = np.array([s[metric] for s in per_seed["dag"]])
                r = np.array([s[metric] for s in per_seed["reference"]])
                sd = float(np.sqrt((np.nanvar(d, ddof=1) + np.nanvar(r, ddof=1)) / 2))
                diff = float(np.nanmean(d) - np.nanmean(r))
                rows.append({"case": case, "split": "the DAG's" if paired else "own", "fit_fraction": fraction,
                             "variant": variant, "metric": metric,
                             "dag": float(np.nanmean(d)), "reference": float(np.nanmean(r)), "difference": diff,
                             "seed_sd": sd, "agree": bool(abs(diff) <= 3 * sd) if np.isfinite(diff) else None})
            print(f"{case} fit_fraction {fraction} {variant}: " + ", ".join(
                f"{r['metric']} {r['dag']:.3f} vs {r['reference']:.3f} (sd {r['seed_sd']:.3f})" for r in rows[-3:])
                + f" [{time.perf_counter() - t0:.0f} s]", flush=True)
    return pd.DataFrame(rows)


def sign_effect(case: str, seeds: list[int]) -> pd.DataFrame:
    """What a PCA component's sign alone does to the reference's classifiers: the ``pca`` variant
    at ``fit_fraction`` 1.0 (no split to draw) with every component as scikit-learn signs it,
    and with the signs of a seeded coin flip per component; per seed and metric."""
    load, n_components, protocol, min_samples, overrides, _ = CASES[case]
    x, meta = load()
    fit = split_controls(meta, 1.0, 0)
    z = transform("pca", np.asarray(x, np.float64), meta, fit, n_components, protocol, 0).astype(np.float32)
    ctrl, batch = meta["is_control"].to_numpy(), meta["batch"].astype(str).to_numpy()
    perts = meta["perturbation"].astype(str).to_numpy()
    rows = []
    for seed in seeds:
        flips = np.random.default_rng(100 + seed).choice([-1.0, 1.0], z.shape[1]).astype(np.float32)
        for label, data in (("scikit-learn signs", z), ("random signs", z * flips)):
            per = [classify(data, (perts == p) & ~ctrl, ctrl, batch, {**TABLE6, **overrides}, seed)
                   for p in sorted(set(perts[~ctrl])) if ((perts == p) & ~ctrl).sum() >= min_samples]
            rows.append({"case": case, "seed": seed, "signs": label, **pd.DataFrame(per).mean().to_dict()})
    table = pd.DataFrame(rows)
    wide = table.pivot_table(index="seed", columns="signs", values=list(METRIC_NAMES))
    out = []
    for metric in METRIC_NAMES:
        diff = wide[(metric, "random signs")] - wide[(metric, "scikit-learn signs")]
        out.append({"case": case, "metric": metric, "scikit-learn signs": wide[(metric, "scikit-learn signs")].mean(),
                    "random signs": wide[(metric, "random signs")].mean(), "mean difference": diff.mean(),
                    "largest |difference| of a seed": diff.abs().max(),
                    "seed sd (scikit-learn signs)": wide[(metric, "scikit-learn signs")].std()})
    return pd.DataFrame(out)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--fractions", default="0.5,1.0")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--variants", default=",".join(REF_VARIANTS))
    ap.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    ap.add_argument("--table", type=Path, default=None, help="show (and with --docs write) a table --out wrote")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/evaluation.md")
    ap.add_argument("--paired-split", action="store_true",
                    help="the reference fits on the DAG's own draw of fitting controls")
    ap.add_argument("--sign-effect", action="store_true",
                    help="only measure what PCA component signs alone change (pca, fit_fraction 1.0)")
    args = ap.parse_args(argv)
    if args.sign_effect:
        cases = [c for c in args.cases.split(",") if not c.startswith("bbbc021") or BBBC021.is_file()]
        table = pd.concat([sign_effect(c, [int(s) for s in args.seeds.split(",")]) for c in cases], ignore_index=True)
        print(table.round(4).to_string(index=False))
        if args.docs:
            from _docs import DOCS, markdown, write_block

            write_block(DOCS / "evaluation.md", "reference-signs", markdown(table, ".4f"))
        return table
    seeds = [int(s) for s in args.seeds.split(",")]
    fractions = [float(f) for f in args.fractions.split(",")]
    tables = [pd.read_csv(args.table)] if args.table else []
    for case in [] if args.table else args.cases.split(","):
        if case.startswith("bbbc021") and not BBBC021.is_file():
            print(f"{case}: skipped ({BBBC021} is absent)")
            continue
        tables.append(compare(case, seeds, fractions, args.variants.split(","), args.paired_split))
    table = pd.concat(tables, ignore_index=True)
    if "split" not in table:
        table.insert(1, "split", None)
    table["split"] = table["split"].fillna("the DAG's" if args.paired_split else "own")
    if args.out:
        table.to_csv(args.out, index=False)
    if args.docs:
        from _docs import DOCS, markdown, write_block

        shown = table.assign(agree=table["agree"].map({True: "yes", False: "**no**", None: "n/a"}))
        write_block(DOCS / "evaluation.md", "reference-recipe" + ("-paired" if args.paired_split else ""),
                    markdown(shown, ".4f"))
    print(table.round(4).to_string(index=False))
    return table


if __name__ == "__main__":
    main()
