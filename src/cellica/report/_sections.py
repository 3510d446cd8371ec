"""Parts of a gene's page: samples per batch, AUROC per guide, the simulation's ground truth."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.contracts import held_back_mask
from cellica.report.content import _fmt


def sample_counts(features, gene: str) -> list[dict[str, Any]] | dict:
    """Samples of the gene and held-back controls per batch (those the classifiers compare)."""
    counts = {}
    some = next(iter(features.values()), None)
    if some is not None:
        obs = some.obs
        # Controls that fitted the transforms are not compared with the genes: count the others.
        held = held_back_mask(obs)
        sub = obs[((obs["perturbation"].astype(str) == gene) | obs["is_control"]).to_numpy() & held]
        counts = (
            sub.assign(kind=np.where(sub["is_control"], "held-back controls", gene))
            .groupby(["batch", "kind"], observed=True)
            .size()
            .unstack(fill_value=0)
            .reset_index()
            .to_dict("records")
        )
    return counts


def truth_section(truth_genes: pd.DataFrame | None, gene: str, rows: pd.DataFrame,
                  variants: list[str]) -> dict[str, Any] | None:
    """What the simulation says the gene does and the evaluation's verdict on it (``truth_genes``,
    from ``cellica truth-genes``), and whether each variant's top feature found it."""
    if truth_genes is None or gene not in truth_genes.index:
        return None
    t = truth_genes.loc[gene]
    truth = {"class": t["effect_class"], "moved": json.loads(t["moved"]),
             "found": [{"variant": v, "factor": rows.loc[v].get("top_feature_factor", ""),
                        "corr": _fmt(rows.loc[v].get("top_feature_factor_corr")),
                        "hit": bool(rows.loc[v].get("top_feature_hits_truth", False))} for v in variants]}
    if t["missed"]:
        truth["missed"] = t["missed"]
    return truth


def guide_table(rows: pd.DataFrame, variants: list[str]) -> dict[str, Any]:
    """AUROC per guide (columns) and variant (rows), from the per-gene table's JSON."""
    per = {v: json.loads(rows.loc[v]["auroc_by_guide"]) for v in variants
           if isinstance(rows.loc[v].get("auroc_by_guide"), str) and rows.loc[v]["auroc_by_guide"]}
    guides = sorted({g for d in per.values() for g in d})
    if guides == [str(rows["gene"].iloc[0])]:
        guides = []  # no guide column: the "guide" is the perturbation itself
    return {"guides": guides, "rows": [(v, [_fmt(per[v].get(g, float("nan"))) for g in guides]) for v in per]}
