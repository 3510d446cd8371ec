"""Static HTML reports: ``reports/index.html`` (the run at a glance) and one page per gene.

Pages are self-contained (inline CSS, inline SVG charts, thumbnails as data
URIs, a few lines of inline JavaScript for sorting, filtering and paging: no
CDN, no fonts), every text from user files is escaped by Jinja2's autoescape,
and gene names become file names only through :func:`cellica.names.safe_filename`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.atomic import atomic_output
from cellica.errors import CellicaError
from cellica.logs import get_logger
from cellica.names import safe_filename
from cellica.svg import bar_chart, line_chart, scatter

log = get_logger("report")

VARIANT_ORDER = ["base", "pca", "pca_ica", "pca_rand", "sphering", "harmony", "combat"]
# Per-variant metrics: (label, higher is better?)
VARIANT_METRICS = {
    "auroc_mean": ("AUROC, held-out batches", True),
    "auroc_within": ("AUROC, within batch (random split)", True),
    "sparsity": ("Hoyer sparsity of importances", True),
    "concentration": ("Concentration in top 25%", True),
    "map_mean": ("mAP vs controls", True),
    "active_fraction": ("Fraction of perturbations active (FDR 5%)", True),
    "batch_accuracy": ("Batch classifier balanced accuracy (controls)", False),
    "chance_accuracy": ("... chance level", None),
    "silhouette": ("Batch silhouette (controls)", False),
    "knn_mixing": ("kNN batch mixing (1 = mixed)", True),
    "truth_mcc": ("Ground truth: MCC features vs true factors", True),
    "truth_factor_r2": ("Ground truth: factor probe R^2", True),
    "truth_batch_r2": ("Ground truth: batch-parameter probe R^2", False),
}


@dataclass
class ReportInputs:
    """Everything a report is built from (paths are cited on the pages)."""

    summary: Path
    per_gene: dict[str, Path]
    importances: dict[str, Path]
    features: dict[str, Path] = field(default_factory=dict)
    store: Path | None = None
    benchmarks: Path | None = None
    config: Path | None = None
    config_hash: str = ""
    alignment: Path | None = None


def _env():
    from jinja2 import Environment, PackageLoader, select_autoescape

    return Environment(loader=PackageLoader("cellica", "templates"), autoescape=select_autoescape(["html"]),
                       trim_blocks=True, lstrip_blocks=True)


def _ordered(variants) -> list[str]:
    return sorted(variants, key=lambda v: (VARIANT_ORDER.index(v) if v in VARIANT_ORDER else 99, v))


def _png_uri(rgb: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"
    return f"{v:.3f}" if isinstance(v, float | np.floating) else str(v)


def stage_times(bench_dir: Path | None) -> pd.DataFrame:
    """Wall time and peak memory per rule, from Snakemake's ``benchmark:`` files."""
    rows = []
    if bench_dir and bench_dir.is_dir():
        for tsv in sorted(bench_dir.rglob("*.tsv")):
            t = pd.read_csv(tsv, sep="\t")
            rows.append({"step": str(tsv.relative_to(bench_dir).with_suffix("")), "seconds": float(t["s"].iloc[0]),
                         "max_rss_mb": float(t["max_rss"].iloc[0]) if "max_rss" in t else float("nan")})
    return pd.DataFrame(rows, columns=["step", "seconds", "max_rss_mb"])


def transform_diagnostics(features: dict[str, Path]) -> list[dict[str, Any]]:
    """What each transform did, from ``.uns['transform']`` (read without loading ``.X``)."""
    import anndata as ad

    rows = []
    for variant in _ordered(features):
        a = ad.read_h5ad(features[variant], backed="r")
        tr = a.uns.get("transform", {})
        diag = dict(tr.get("diagnostics", {}))
        ica = diag.pop("ica", None)
        rows.append({"variant": variant, "dims": int(a.n_vars),
                     "details": ", ".join(f"{k}={_fmt(v)}" for k, v in diag.items() if not isinstance(v, list | dict | np.ndarray)),
                     "ica": None if ica is None else {k: _fmt(v) for k, v in ica.items() if not isinstance(v, list | dict | np.ndarray)}})
        a.file.close()
    return rows


class ReportBuilder:
    """Builds the index and per-gene pages from the evaluation outputs."""

    def __init__(self, inputs: ReportInputs, out_dir: str | os.PathLike, max_points: int = 400, seed: int = 0):
        self.inp = inputs
        self.out = Path(out_dir)
        self.max_points = max_points
        self.seed = seed
        for label, path in [("summary", inputs.summary), *[(f"per-gene table of {v}", p) for v, p in inputs.per_gene.items()]]:
            if not Path(path).is_file():
                raise CellicaError(f"report: {label} {path} does not exist (run the evaluate stage first)")
        self.summary = pd.read_parquet(inputs.summary)
        self.per_gene = pd.concat([pd.read_parquet(p) for p in inputs.per_gene.values()], ignore_index=True)
        self.variants = _ordered(self.per_gene["variant"].unique())
        self.genes = sorted(self.per_gene["gene"].astype(str).unique())
        self.links = {g: f"genes/{safe_filename(g)}.html" for g in self.genes}
        self.env = _env()
        self.provenance = {"config_hash": inputs.config_hash, "cellica_version": __version__,
                           "built": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": str(inputs.summary)}

    # ------------------------------------------------------------------ index
    def index_context(self) -> dict[str, Any]:
        s = self.summary
        pv = s[s["table"] == "per_variant"].pivot(index="metric", columns="variant", values="value")
        pv = pv.reindex(columns=[v for v in self.variants if v in pv.columns])
        metric_rows = []
        for metric, (label, higher) in VARIANT_METRICS.items():
            if metric not in pv.index:
                continue
            vals = pv.loc[metric]
            best = None
            if higher is not None and vals.notna().any():
                best = vals.idxmax() if higher else vals.idxmin()
            metric_rows.append({"metric": metric, "label": label, "best": best,
                                "cells": [(v, _fmt(vals[v]), v == best) for v in pv.columns]})
        auc = self.per_gene.pivot_table(index="gene", columns="variant", values="auroc_mean")
        sp = self.per_gene.pivot_table(index="gene", columns="variant", values="sparsity")
        meta = self.per_gene.drop_duplicates("gene").set_index("gene")
        gene_rows = []
        for g in self.genes:
            a = [auc.loc[g, v] if g in auc.index and v in auc.columns else float("nan") for v in self.variants]
            best = self.variants[int(np.nanargmax(a))] if np.isfinite(a).any() else None
            gene_rows.append({
                "gene": g, "link": self.links[g], "n": int(meta.loc[g, "n_samples"]), "batches": meta.loc[g, "batches"],
                "skipped": meta.loc[g, "skipped"],
                "auroc": [(_fmt(x), v == best) for x, v in zip(a, self.variants, strict=True)],
                "sparsity": [_fmt(sp.loc[g, v] if g in sp.index and v in sp.columns else float("nan")) for v in self.variants],
            })
        chart_metrics = [m for m in ("auroc_mean", "sparsity", "concentration") if m in pv.index]
        charts = [bar_chart(list(pv.columns), [float(pv.loc[m, v]) for v in pv.columns], VARIANT_METRICS[m][0],
                            vmin=0.0 if m != "auroc_mean" else 0.4, vmax=1.0 if m != "concentration" else max(0.5, float(np.nanmax(pv.loc[m]))))
                  for m in chart_metrics]
        return {"variants": list(pv.columns), "gene_variants": self.variants, "metric_rows": metric_rows,
                "gene_rows": gene_rows, "charts": charts,
                "diagnostics": transform_diagnostics(self.inp.features) if self.inp.features else [],
                "times": stage_times(self.inp.benchmarks).to_dict("records"),
                "config_text": Path(self.inp.config).read_text() if self.inp.config and Path(self.inp.config).is_file() else "",
                "prov": self.provenance, "n_genes": len(self.genes), "alignment": self._alignment()}

    def _alignment(self) -> dict[str, Any] | None:
        """The stability table (two MAE seeds aligned per class of map), when it was computed."""
        if not self.inp.alignment:
            return None
        if not Path(self.inp.alignment).is_file():
            raise CellicaError(f"report: alignment table {self.inp.alignment} does not exist")
        t = pd.read_parquet(self.inp.alignment)
        return {"rows": [(r.map, _fmt(r.error), r.dims, r.note) for r in t.itertuples()],
                "efficiency": f"{float(t['ica_efficiency'].iloc[0]):.1f}",
                "ica_components": int(t["ica_components"].iloc[0]) if "ica_components" in t else 0, "n_train": int(t["n_train"].iloc[0]),
                "n_test": int(t["n_test"].iloc[0]), "a": str(t["a"].iloc[0]), "b": str(t["b"].iloc[0]),
                "source": str(self.inp.alignment)}

    def build_index(self) -> Path:
        html = self.env.get_template("index.html").render(**self.index_context())
        return _write(self.out / "index.html", html)

    # ------------------------------------------------------------------ genes
    def _load_features(self) -> dict[str, Any]:
        import anndata as ad

        data = {}
        for v, path in self.inp.features.items():
            if Path(path).is_file():
                data[v] = ad.read_h5ad(path)
        return data

    def _thumbnails(self, store, gene: str) -> dict[str, str]:
        from cellica.thumbnails import montage

        md = store.metadata
        rng = np.random.default_rng(self.seed)
        out = {}
        for label, mask in (("perturbed", (md["perturbation"].astype(str) == gene).to_numpy()),
                            ("control", md["is_control"].to_numpy())):
            idx = np.flatnonzero(mask)
            if idx.size:
                pick = np.sort(rng.choice(idx, min(8, idx.size), replace=False))
                out[label] = _png_uri(montage(store.read(pick), ncols=8))
        return out

    def build_genes(self, genes: list[str] | None = None) -> list[Path]:
        """Write the pages of ``genes`` (default: all); returns their paths."""
        genes = self.genes if genes is None else genes
        unknown = [g for g in genes if g not in self.links]
        if unknown:
            raise CellicaError(f"report: no results for gene(s) {unknown[:5]}; known genes include {self.genes[:5]}")
        features = self._load_features()
        store, store_note = None, ""
        if self.inp.store is not None:
            try:
                from cellica.tilestore import TileStore

                store = TileStore.open(self.inp.store)
            except CellicaError as exc:
                store_note = f"Example tiles are unavailable: {exc}"
        else:
            store_note = "Example tiles are unavailable: this run has no tile store (features were imported)."
        # Grouped once: filtering a genes x features table per gene would be quadratic.
        imps = {v: {str(g): t for g, t in pd.read_parquet(p).groupby("gene", sort=False)}
                for v, p in self.inp.importances.items() if Path(p).is_file()}
        effects = store.ground_truth("effects").set_index("gene") if store is not None and (store.path / "ground_truth").is_dir() else None
        template = self.env.get_template("gene.html")
        # The folder's own entry page (Snakemake's report embeds the folder through it).
        links = [(g, Path(self.links[g]).name) for g in self.genes]
        _write(self.out / "genes" / "index.html",
               self.env.get_template("genes_index.html").render(links=links, prov=self.provenance))
        paths = []
        for gene in genes:
            ctx = self.gene_context(gene, features, imps, store, effects)
            ctx["store_note"] = store_note
            paths.append(_write(self.out / self.links[gene], template.render(**ctx)))
        return paths

    def gene_context(self, gene, features, imps, store, effects) -> dict[str, Any]:
        rows = self.per_gene[self.per_gene["gene"].astype(str) == gene].set_index("variant")
        variants = [v for v in self.variants if v in rows.index]
        first = rows.iloc[0]
        table = [{"variant": v, "auroc": _fmt(rows.loc[v].get("auroc_mean")), "sd": _fmt(rows.loc[v].get("auroc_sd")),
                  "within": _fmt(rows.loc[v].get("auroc_within")), "sparsity": _fmt(rows.loc[v].get("sparsity")),
                  "concentration": _fmt(rows.loc[v].get("concentration")), "folds": _fmt(rows.loc[v].get("n_folds")),
                  "by_guide": rows.loc[v].get("auroc_by_guide", ""), "top": rows.loc[v].get("top_features", ""),
                  "notes": rows.loc[v].get("notes", "")} for v in variants]
        roc = {v: (json.loads(rows.loc[v]["roc_fpr"]), json.loads(rows.loc[v]["roc_tpr"]))
               for v in variants if isinstance(rows.loc[v].get("roc_fpr"), str) and rows.loc[v]["roc_fpr"] != "[]"}
        charts = {
            "auroc": bar_chart(variants, [float(rows.loc[v].get("auroc_mean", np.nan)) for v in variants],
                               "AUROC on held-out batches", vmin=0.4),
            "roc": line_chart(roc, "ROC, held-out folds pooled") if roc else "",
        }
        importance = []
        for v in variants:
            if v in imps and gene in imps[v]:
                vals = imps[v][gene].sort_values("importance", ascending=False)
                if len(vals) and vals["importance"].max() > 0:
                    top = vals.head(20)
                    norm = top["importance"] / vals["importance"].max()
                    importance.append({"variant": v, "sparsity": _fmt(rows.loc[v].get("sparsity")),
                                       "concentration": _fmt(rows.loc[v].get("concentration")),
                                       "svg": bar_chart(top["feature"].astype(str).tolist(), norm.tolist(),
                                                        f"{v}: top-20 importances (of {len(vals)}), max = 1", bar_h=12)})
        embeddings = []
        for v in variants:
            if v in features and gene in imps.get(v, {}):
                embeddings.append({"variant": v, "svg": self._embedding_plot(features[v], imps[v][gene], gene, v)})
        counts = {}
        some = next(iter(features.values()), None)
        if some is not None:
            obs = some.obs
            # Controls that fitted the transforms are not compared with the genes: count the others.
            held = ~obs["transform_fit"].astype(bool) if "transform_fit" in obs else True
            sub = obs[((obs["perturbation"].astype(str) == gene) | obs["is_control"]) & held]
            counts = (sub.assign(kind=np.where(sub["is_control"], "held-back controls", gene))
                      .groupby(["batch", "kind"], observed=True).size().unstack(fill_value=0).reset_index().to_dict("records"))
        truth = None
        if effects is not None and gene in effects.index:
            eff = effects.loc[gene]
            moved = {k: round(float(val), 3) for k, val in eff.items() if k != "effect_class" and float(val) != 0}
            truth = {"class": eff["effect_class"], "moved": moved,
                     "found": [{"variant": v, "factor": rows.loc[v].get("top_feature_factor", ""),
                                "corr": _fmt(rows.loc[v].get("top_feature_factor_corr")),
                                "hit": bool(rows.loc[v].get("top_feature_hits_truth", False))} for v in variants]}
        return {"gene": gene, "table": table, "charts": charts, "importance": importance, "embeddings": embeddings,
                "counts": counts, "guides": first.get("guides", ""), "batches": first.get("batches", ""),
                "n_samples": int(first.get("n_samples", 0)), "skipped": first.get("skipped", ""),
                "thumbs": self._thumbnails(store, gene) if store is not None else {}, "truth": truth,
                "prov": self.provenance, "sources": {v: str(p) for v, p in self.inp.per_gene.items()}}

    def _embedding_plot(self, adata, imps: pd.DataFrame, gene: str, variant: str) -> str:
        """The gene vs (subsampled) controls on the two features its classifier used most."""
        top = imps.nlargest(2, "importance")["feature"].astype(str).tolist()
        if len(top) < 2:
            return ""
        obs = adata.obs
        pert = np.flatnonzero((obs["perturbation"].astype(str) == gene).to_numpy())
        ctrl = np.flatnonzero(obs["is_control"].to_numpy())
        rng = np.random.default_rng(self.seed)
        ctrl = rng.choice(ctrl, min(ctrl.size, self.max_points), replace=False)
        pert = rng.choice(pert, min(pert.size, self.max_points), replace=False)
        cols = [list(adata.var_names).index(t) for t in top]
        x = np.asarray(adata.X[:, cols])
        pts = [(float(x[i, 0]), float(x[i, 1]), f"ctrl {obs['batch'].iloc[i]}") for i in ctrl]
        pts += [(float(x[i, 0]), float(x[i, 1]), gene) for i in pert]
        return scatter(pts, f"{variant}: top-2 features", top[0], top[1], highlight=gene)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path, overwrite=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def build_report(inputs: ReportInputs, out_dir: str | os.PathLike, genes: list[str] | None = None) -> Path:
    """Build ``out_dir/index.html`` and the pages of ``genes`` (default all); returns the index path."""
    t0 = time.perf_counter()
    builder = ReportBuilder(inputs, out_dir)
    index = builder.build_index()
    pages = builder.build_genes(genes)
    log.info("wrote %s and %d gene page(s) in %.1f s", index, len(pages), time.perf_counter() - t0)
    return index
