"""Static HTML reports: ``reports/index.html`` (the run at a glance) and one page per gene.

Pages are self-contained (inline CSS, inline SVG charts, thumbnails as data
URIs, a few lines of inline JavaScript for sorting, filtering and paging: no
CDN, no fonts), every text from user files is escaped by Jinja2's autoescape,
and gene names become file names only through :func:`cellica.core.names.safe_filename`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.core.atomic import atomic_output, read_parquet
from cellica.core.chunks import gene_chunk
from cellica.core.errors import CellicaError
from cellica.core.jobtimes import stage_times
from cellica.core.logs import get_logger, progress
from cellica.core.names import safe_filename
from cellica.registry import CLAIMED_ORDER, METRICS, VARIANTS, sentence
from cellica.report._charts import ci_chart, gene_charts, importance_bars, metric_row
from cellica.report._paging import (
    INDEX_COLUMNS,
    gene_rows,
    no_split_notes,
    page_links,
    write_gene_index,
)
from cellica.report._sections import guide_table, sample_counts, truth_section
from cellica.report._svg import scatter
from cellica.report.content import (
    CLAIM_COLUMNS,
    ReportInputs,
    _env,
    _fmt,
    _ordered,
    _with_ci,
    software_context,
    split_words,
    transform_diagnostics,
)

log = get_logger("report")


class ReportBuilder:
    """Builds the index and per-gene pages from the evaluation outputs."""

    def __init__(self, inputs: ReportInputs, out_dir: str | os.PathLike, max_points: int = 400, seed: int = 0,
                 page_size: int = 500, chunks: int = 1):
        self.inp = inputs
        self.out = Path(out_dir)
        self.max_points, self.seed = max_points, seed
        if page_size < 1:
            raise CellicaError(f"report: page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        for label, path in [
            ("summary", inputs.summary),
            *[(f"per-gene table of {v}", p) for v, p in inputs.per_gene.items()],
        ]:
            if not Path(path).is_file():
                raise CellicaError(f"report: {label} {path} does not exist (run the evaluate stage first)")
        self.summary = read_parquet(inputs.summary, "summary")
        # Only the columns and genes a job shows are read: memory does not grow with the genes
        # outside a chunk of pages (a genome-wide screen has 20,000).
        per_gene = self._read_per_gene(INDEX_COLUMNS)
        # Pages show the first evaluation seed's classifiers; means, intervals and seed noise
        # over all seeds are in the summary.
        self.seeds = sorted(per_gene["seed"].unique()) if "seed" in per_gene else [0]
        self.per_gene = self._first_seed(per_gene)
        self.variants = _ordered(self.per_gene["variant"].unique())
        self.genes = sorted(self.per_gene["gene"].astype(str).unique())
        # A gene's page lives in the folder of its chunk (one job of pages each): genes/<i>-of-<n>/.
        self.parts = {g: i for i in range(chunks) for g in gene_chunk(self.genes, f"{i}/{chunks}")}
        self.chunks = chunks
        self.links = {g: f"{self.part_dir(self.parts[g])}/{safe_filename(g)}.html" for g in self.genes}
        self.env = _env()
        self.provenance = {"config_hash": inputs.config_hash, "cellica_version": __version__,
                           "built": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": str(inputs.summary)}

    # ------------------------------------------------------------------ index
    def index_context(self) -> dict[str, Any]:
        s = self.summary
        entity = self.inp.entity
        means = s[(s["table"] == "per_variant") & (s["row"] == "mean")].set_index(["metric", "variant"])
        variants = [v for v in self.variants if v in set(s.loc[s["table"] == "per_variant", "variant"])]
        counts = s[(s["table"] == "per_variant") & (s["row"] == "count")].pivot(index="metric", columns="variant",
                                                                                values="value")
        n_features = counts.loc["n_features"].to_dict() if "n_features" in counts.index else {}
        # Sparsity compares at the whitened feature count: the first whitened variant in the claims' order.
        ref = next((n_features[v] for v in CLAIMED_ORDER if v in n_features and "pca" in VARIANTS[v].steps), None)
        shown = set(means.index.get_level_values(0))
        metric_rows = [metric_row(name, m.text(entity), m.higher_is_better, means, variants, n_features, ref)
                       for name, m in METRICS.items() if m.kind != "count" and name in shown]
        count_rows = [{"label": sentence(m.label.format(entity=entity)),
                       "cells": [_fmt(int(counts.loc[name, v])) if v in counts.columns
                                 and counts.loc[name, v] == counts.loc[name, v] else "n/a" for v in variants]}
                      for name, m in METRICS.items() if m.kind == "count" and name in counts.index]
        rows = gene_rows(self.per_gene, self.genes, self.variants, self.links)
        # A chart per metric with a value to draw (no held-out AUROC: the random split's instead).
        drawn = set(means["value"].dropna().index.get_level_values(0))
        charts = [ci_chart(name, means, variants, entity) for name, m in METRICS.items()
                  if m.chart and name in drawn and m.fallback_for not in drawn]
        return {
            "variants": variants,
            "gene_variants": self.variants,
            "metric_rows": metric_rows,
            "count_rows": count_rows,
            "gene_rows": rows[: self.page_size],
            "charts": charts,
            "entity": entity,
            "all_rows": rows,
            "n_rows": len(rows),
            "prefix": "",
            "page": None,
            "pages": page_links(len(rows), self.page_size, ""),
            "claims": s[s["table"] == "claim"][[c for c in CLAIM_COLUMNS if c in s]].to_dict("records"),
            "comparisons": self._comparisons(),
            "seeds": [int(x) for x in self.seeds],
            "diagnostics": transform_diagnostics(self.inp.features) if self.inp.features else [],
            "times": stage_times(self.inp.benchmarks).to_dict("records"),
            "config_text": Path(self.inp.config).read_text()
            if self.inp.config and Path(self.inp.config).is_file()
            else "",
            "prov": self.provenance,
            "n_genes": len(self.genes),
            "alignment": self._alignment(),
            "gene_maps": self._gene_maps(),
            "software": software_context(self.inp.environment),
        }

    def _comparisons(self) -> list[dict[str, Any]]:
        c = self.summary[self.summary["table"] == "comparison"]
        return [{"metric": r.metric, "pair": r.row, "n": int(r.n), "diff": _with_ci(r.value, r.ci_low, r.ci_high),
                 "p": _fmt(r.p_value), "p_holm": _fmt(r.p_holm), "seed_sd": _fmt(r.seed_sd), "verdict": r.verdict,
                 "detail": r.detail} for r in c.itertuples()]

    def _gene_maps(self) -> dict[str, Any]:
        """Pictures of the variants' gene maps (their stored layouts), of their wells and of the
        plate layout (the qc tables): drawn here, computed by the stages that wrote them."""
        from cellica.qc.read import read_qc
        from cellica.report._maps import (
            borrowed_controls_note,
            control_intensity,
            map_umaps,
            not_computed_note,
            plate_heatmaps,
            recall_bars,
            well_umaps,
        )

        maps = {v: self.inp.maps[v] for v in _ordered(self.inp.maps)}
        recall, recall_note = recall_bars(self.inp.recall, self.variants) if self.inp.recall else ([], "")
        qc = read_qc(self.inp.qc) if self.inp.qc else {}
        layouts = qc.get("well_layouts")
        if layouts is not None:  # in the report's order of variants (a stable sort keeps the table's attrs)
            rank = {v: i for i, v in enumerate(_ordered(list(dict.fromkeys(layouts["variant"]))))}
            layouts = layouts.sort_values("variant", key=lambda v: v.map(rank), kind="stable")
        truth = self._truth_genes()
        complexes = {} if truth is None else {g: c for g, c in truth["complex"].items() if c}
        return {"umaps": map_umaps(maps, complexes, entity=self.inp.entity) if maps else [], "recall": recall,
                "recall_note": recall_note, "wells": well_umaps(layouts) if layouts is not None else [],
                "controls_note": borrowed_controls_note(maps), "maps_note": not_computed_note(maps) if maps else "",
                "layout": plate_heatmaps(qc["plate_wells"], qc["position_offsets"]) if "plate_wells" in qc else None,
                "intensity": control_intensity(qc["control_intensity"]) if "control_intensity" in qc else None}

    def _alignment(self) -> dict[str, Any] | None:
        """The stability table (two MAE seeds aligned per class of map), when it was computed."""
        if not self.inp.alignment:
            return None
        if not Path(self.inp.alignment).is_file():
            raise CellicaError(f"report: alignment table {self.inp.alignment} does not exist")
        t = read_parquet(self.inp.alignment, "alignment table")
        return {
            "rows": [(r.map, _fmt(r.error), r.dims, r.note) for r in t.itertuples()],
            "efficiency": f"{float(t['ica_efficiency'].iloc[0]):.1f}",
            "ica_components": int(t["n_components"].iloc[0]) if "n_components" in t else 0,
            "n_train": int(t["n_train"].iloc[0]),
            "n_test": int(t["n_test"].iloc[0]),
            "a": str(t["a"].iloc[0]),
            "b": str(t["b"].iloc[0]),
            "source": str(self.inp.alignment),
        }

    def build_index(self) -> Path:
        """Write ``index.html`` and the paged gene index (``gene_index/genes-<k>.html``)."""
        ctx = self.index_context()
        html = self.env.get_template("index.html").render(**ctx)
        keep = ("gene_variants", "entity", "seeds", "prov")
        write_gene_index(self.env, ctx["all_rows"], self.out, self.page_size, {k: ctx[k] for k in keep}, _write)
        return _write(self.out / "index.html", html)

    def part_dir(self, part: int) -> str:
        """The folder of one chunk's pages, relative to the report folder."""
        return f"genes/{part}-of-{self.chunks}"

    def part_genes(self, part: int) -> list[str]:
        """The genes whose pages chunk ``part`` writes."""
        return [g for g in self.genes if self.parts[g] == part]

    def _read_per_gene(self, columns: list[str] | None = None, genes: list[str] | None = None) -> pd.DataFrame:
        """The per-gene tables of every variant: only ``columns`` (those present), only ``genes``."""
        import pyarrow.parquet as pq

        tables = []
        for p in self.inp.per_gene.values():
            cols = None if columns is None else [c for c in columns if c in pq.read_schema(p).names]
            tables.append(read_parquet(p, "per-gene table", columns=cols,
                                       filters=None if genes is None else [("gene", "in", list(genes))]))
        return pd.concat(tables, ignore_index=True)

    # ------------------------------------------------------------------ genes
    def _load_features(self) -> dict[str, Any]:
        import anndata as ad

        data = {}
        for v, path in self.inp.features.items():
            if Path(path).is_file():
                data[v] = ad.read_h5ad(path, backed="r")  # only the rows a plot shows are read
        return data

    def _examples(self, genes: list[str]) -> dict[str, dict[str, str]]:
        """The example montages of ``genes`` (the example-tile tables, only these genes' rows read)."""
        import base64

        out: dict[str, dict[str, str]] = {}
        for path in self.inp.examples:
            table = read_parquet(path, "example tiles", filters=[("gene", "in", list(genes))])
            for r in table.itertuples():
                out.setdefault(str(r.gene), {})[str(r.label)] = ("data:image/png;base64,"
                                                                 + base64.b64encode(r.png).decode())
        return out

    def _truth_genes(self) -> pd.DataFrame | None:
        """The simulated truth per gene and the evaluation's verdict on it, when the run has one."""
        if self.inp.truth_genes is None:
            return None
        return read_parquet(self.inp.truth_genes, "truth per gene").assign(
            gene=lambda t: t["gene"].astype(str)).set_index("gene")

    def build_genes(self, genes: list[str] | None = None) -> list[Path]:
        """Write the pages of ``genes`` (default: all); returns their paths."""
        genes = self.genes if genes is None else genes
        unknown = [g for g in genes if g not in self.links]
        if unknown:
            raise CellicaError(f"report: no results for gene(s) {unknown[:5]}; known genes include {self.genes[:5]}")
        self.per_gene = self._first_seed(self._read_per_gene(genes=genes))
        features = self._load_features()
        thumbs, store_note = self._examples(genes), ""
        if not self.inp.examples:
            store_note = "Example tiles are unavailable: this run has no tile store (features were imported)."
        # Grouped once: filtering a genes x features table per gene would be quadratic.
        imps = {v: {str(g): t for g, t in self._first_seed(read_parquet(p, "importances", filters=[
                    ("gene", "in", list(genes))])).groupby("gene", sort=False)}
                for v, p in self.inp.importances.items() if Path(p).is_file()}
        truth = self._truth_genes()
        template = self.env.get_template("gene.html")
        # Each chunk's folder gets its own entry page (Snakemake's report embeds the folder through it).
        index = self.env.get_template("genes_index.html")
        for part in sorted({self.parts[g] for g in genes}):
            links = [(g, Path(self.links[g]).name) for g in self.part_genes(part)]
            _write(self.out / self.part_dir(part) / "index.html",
                   index.render(links=links, prov=self.provenance, entity=self.inp.entity, part=part,
                                chunks=self.chunks))
        paths = []
        for gene in progress(genes, desc="gene pages", unit="page"):
            ctx = self.gene_context(gene, features, imps, thumbs.get(gene, {}), truth)
            ctx["store_note"] = store_note
            paths.append(_write(self.out / self.links[gene], template.render(**ctx)))
        return paths

    def gene_context(self, gene, features, imps, thumbs, truth_genes) -> dict[str, Any]:
        rows = self.per_gene[self.per_gene["gene"].astype(str) == gene].set_index("variant")
        variants = [v for v in self.variants if v in rows.index]
        first = rows.iloc[0]
        table = [{"variant": v, "auroc": _fmt(rows.loc[v].get("auroc_mean")), "sd": _fmt(rows.loc[v].get("auroc_sd")),
                  "within": _fmt(rows.loc[v].get("auroc_within")), "sparsity": _fmt(rows.loc[v].get("sparsity")),
                  "concentration": _fmt(rows.loc[v].get("concentration")), "folds": _fmt(rows.loc[v].get("n_folds")),
                  "split": rows.loc[v].get("split", ""), "top": rows.loc[v].get("top_features", ""),
                  "notes": "; ".join(x for x in (rows.loc[v].get("notes", ""), rows.loc[v].get("no_split_reason", ""))
                                     if isinstance(x, str) and x)} for v in variants]
        guides = guide_table(rows, variants)
        split = split_words(str(first.get("split", "batch")), self.inp.entity)
        charts = gene_charts(rows, variants, split["auroc"])
        importance = importance_bars(rows, variants, imps, gene)
        embeddings = [{"variant": v, "svg": self._embedding_plot(features[v], imps[v][gene], gene, v)}
                      for v in variants if v in features and gene in imps.get(v, {})]
        counts = sample_counts(features, gene)
        truth = truth_section(truth_genes, gene, rows, variants)
        return {
            "gene": gene,
            "table": table,
            "guides_table": guides,
            "entity": self.inp.entity,
            "split": split,
            "no_split": no_split_notes(rows, variants),
            "seed": int(self.seeds[0]),
            "n_seeds": len(self.seeds),
            "charts": charts,
            "importance": importance,
            "embeddings": embeddings,
            "counts": counts,
            "guides": first.get("guides", ""),
            "batches": first.get("batches", ""),
            "n_samples": int(first.get("n_samples", 0)),
            "skipped": first.get("skipped", ""),
            "thumbs": thumbs,
            "truth": truth,
            "prov": self.provenance,
            "sources": {v: str(p) for v, p in self.inp.per_gene.items()},
        }

    def _first_seed(self, table: pd.DataFrame) -> pd.DataFrame:
        """The rows of the seed the pages show (tables without seeds are one seed)."""
        return table[table["seed"] == self.seeds[0]] if "seed" in table else table

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
        rows = np.unique(np.concatenate([ctrl, pert]))
        x = np.zeros((adata.n_obs, 2), np.float32)
        x[rows] = np.asarray(adata.X[rows])[:, cols]  # rows read in order: backed files read only these
        pts = [(float(x[i, 0]), float(x[i, 1]), f"ctrl {obs['batch'].iloc[i]}") for i in ctrl]
        pts += [(float(x[i, 0]), float(x[i, 1]), gene) for i in pert]
        return scatter(pts, f"{variant}: top-2 features", top[0], top[1], highlight=gene)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path, overwrite=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


