"""The gene index in pages: a genome-wide screen has 20,000 genes, too many rows for one
page, so ``index.html`` shows the first ``page_size`` and ``gene_index/genes-<k>.html``
hold them all, ``page_size`` per page, sorted by name (each page sortable and filterable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica.report.content import _fmt

INDEX_COLUMNS = ["gene", "seed", "variant", "auroc_mean", "sparsity", "n_samples", "batches", "skipped", "split",
                 "no_split"]
GENE_INDEX = "gene_index"


def gene_rows(per_gene: pd.DataFrame, genes: list[str], variants: list[str], links: dict[str, str]) -> list[dict]:
    """One row per gene of the index's table: samples, batches, split, AUROC and sparsity per
    variant (the best AUROC marked)."""
    auc = per_gene.pivot_table(index="gene", columns="variant", values="auroc_mean")
    sp = per_gene.pivot_table(index="gene", columns="variant", values="sparsity")
    meta = per_gene.drop_duplicates("gene").set_index("gene")
    flags = no_split_sets(per_gene)
    rows = []
    for g in genes:
        a = [auc.loc[g, v] if g in auc.index and v in auc.columns else float("nan") for v in variants]
        top = np.nanmax(a) if np.isfinite(a).any() else np.nan
        rows.append({
            "gene": g, "link": links[g], "n": int(meta.loc[g, "n_samples"]), "batches": meta.loc[g, "batches"],
            "skipped": meta.loc[g, "skipped"], "split": meta.loc[g].get("split", ""),
            "no_split": flags.get(g, ([], [])),
            "auroc": [(_fmt(x), bool(np.isfinite(x) and x == top)) for x in a],
            "sparsity": [_fmt(sp.loc[g, v] if g in sp.index and v in sp.columns else float("nan")) for v in variants],
        })
    return rows


def no_split_sets(per_gene: pd.DataFrame) -> dict[str, tuple[list[str], list[str]]]:
    """Per gene, the feature sets none of whose classifiers made a split (AUROC 0.5 by
    construction): (variants, baselines). A flag names them; only a variant's marks the gene,
    since a baseline (the one-feature cell count) failing says nothing of the gene's variants."""
    from cellica.registry import BASELINES

    if "no_split" not in per_gene or not per_gene["no_split"].astype(bool).any():
        return {}
    hit = per_gene[per_gene["no_split"].astype(bool)]
    out: dict[str, tuple[list[str], list[str]]] = {}
    for gene, sets in hit.groupby(hit["gene"].astype(str))["variant"]:
        names = list(dict.fromkeys(map(str, sets)))
        out[gene] = ([v for v in names if v not in BASELINES], [v for v in names if v in BASELINES])
    return out


def no_split_notes(rows: pd.DataFrame, sets: list[str]) -> list[dict[str, Any]]:
    """A gene page's notes on the feature sets (``rows`` indexed by set) whose classifiers made no
    split: the set, whether it is a baseline, and the evaluation's reason, shown at the top."""
    from cellica.registry import BASELINES

    if "no_split" not in rows:
        return []
    return [{"set": v, "baseline": v in BASELINES, "reason": str(rows.loc[v].get("no_split_reason") or "")}
            for v in sets if bool(rows.loc[v]["no_split"])]


def page_links(n_rows: int, page_size: int, prefix: str, current: int | None = None) -> list[dict[str, Any]]:
    """Links to every page of the gene index (none when one page holds every row)."""
    n_pages = max(1, -(-n_rows // page_size))
    if n_pages == 1:
        return []
    return [{"label": f"{k * page_size + 1}-{min(n_rows, (k + 1) * page_size)}",
             "href": f"{prefix}{GENE_INDEX}/genes-{k + 1}.html", "current": k == current} for k in range(n_pages)]


def write_gene_index(env, rows: list[dict], out: Path, page_size: int, context: dict[str, Any], write) -> list[Path]:
    """Write ``out/gene_index/genes-<k>.html`` (every page, also when there is one) with
    ``write(path, text)``; returns their paths."""
    template = env.get_template("gene_index.html")
    paths = []
    n_pages = max(1, -(-len(rows) // page_size))
    for k in range(n_pages):
        page = rows[k * page_size:(k + 1) * page_size]
        paths.append(write(out / GENE_INDEX / f"genes-{k + 1}.html", template.render(
            gene_rows=page, page=k + 1, n_pages=n_pages, n_rows=len(rows), prefix="../",
            pages=page_links(len(rows), page_size, "../", current=k), **context)))
    return paths
