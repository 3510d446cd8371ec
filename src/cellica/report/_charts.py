"""The report's charts of numbers the evaluation wrote: a metric's row of the per-variant table,
its chart of means with intervals, and a gene's AUROC, ROC and importance charts. Each feature
set keeps its colour (:func:`cellica.report._svg.set_colour`); every estimate is drawn with its
interval and its chance or null."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from cellica.registry import METRICS, sentence
from cellica.report._svg import bar_chart, line_chart, set_colour
from cellica.report.content import FEATURE_COLOR, _fmt, _with_ci


def metric_row(metric, label, higher, means, variants, n_features, ref) -> dict[str, Any]:
    """One row of the per-variant table: value [95% CI], every best value in bold (ties
    alike), sparsity of variants with another feature count marked not comparable."""
    vals, cells = {}, []
    for v in variants:
        if (metric, v) not in means.index:
            cells.append({"text": "n/a", "best": False, "title": ""})
            continue
        r = means.loc[(metric, v)]
        comparable = not (METRICS[metric].per_feature_count and ref is not None and n_features.get(v) != ref)
        if comparable:
            vals[v] = round(float(r["value"]), 3)
        note = "" if comparable else f"not comparable: {int(n_features.get(v, 0))} features vs {int(ref)}"
        cells.append({"text": _with_ci(r["value"], r["ci_low"], r["ci_high"]) + (" †" if note else ""),
                      "best": v, "title": note or str(r.get("detail", ""))})
    finite = [x for x in vals.values() if x == x]
    target = METRICS[metric].target
    if target is not None:  # closest to its target is best (a silhouette of 0: batches mixed)
        vals = {v: abs(x - target) for v, x in vals.items()}
        finite, higher = [abs(x - target) for x in finite], False
    best = (max(finite) if higher else min(finite)) if finite and higher is not None else None
    for c in cells:
        c["best"] = best is not None and c["best"] in vals and vals[c["best"]] == best
    return {"metric": metric, "label": label, "direction": METRICS[metric].direction, "cells": cells}

def ci_chart(metric, means, variants, entity: str) -> str:
    """A metric's mean per feature set with its 95% interval, against its chance or null."""
    vs = [v for v in variants if (metric, v) in means.index]
    vals = [float(means.loc[(metric, v), "value"]) for v in vs]
    intervals = [(float(means.loc[(metric, v)].get("ci_low", np.nan)),
                  float(means.loc[(metric, v)].get("ci_high", np.nan))) for v in vs]
    finite = [x for x in vals + [b for pair in intervals for b in pair] if x == x] or [1.0]
    lo = min(0.0, min(finite))  # bars start at 0: their lengths compare as the values do
    m = METRICS[metric]
    note = f"; {m.reference[2]}" if m.reference and m.reference[2] else ""
    title = m.text(entity).split(" (")[0] + f" (mean over {entity}s, 95% interval{note})"
    reference = {"reference": m.reference[0], "reference_label": m.reference[1]} if m.reference else {}
    if m.chart_title:
        title = sentence(m.chart_title.format(entity=entity))
    if m.null_metric:  # e.g. known pairs of the maps, with what chance alone recalls
        null = [float(means.loc[(m.null_metric, v), "value"]) for v in vs if (m.null_metric, v) in means.index]
        reference = {"reference": null[0], "reference_label": "null"} if null else {}
    return bar_chart(vs, vals, title, vmin=lo, vmax=max(m.axis_max, max(finite)),
                     colors=[set_colour(v) for v in vs], intervals=intervals, **reference)


def gene_charts(rows: pd.DataFrame, variants: list[str], auroc_title: str) -> dict[str, str]:
    """The gene's AUROC bars and its per-fold ROC curves with their vertical mean."""
    curves = {v: json.loads(rows.loc[v]["roc_folds"]) for v in variants
              if isinstance(rows.loc[v].get("roc_folds"), str) and rows.loc[v]["roc_folds"] != "[]"}
    mean_curves, folds, colours = {}, [], []
    for v, cs in curves.items():
        # the vertical mean over folds, as the evaluation stored it (roc_mean)
        stored = rows.loc[v].get("roc_mean")
        fpr, tpr = (np.asarray(c, float) for c in json.loads(stored if isinstance(stored, str) else "[[], []]"))
        if tpr.size and np.isfinite(tpr).all():
            mean_curves[f"{v} ({_fmt(rows.loc[v].get('auroc_mean'))})"] = (fpr.tolist(), tpr.tolist())
            colours.append(set_colour(v))
            folds += [(f, t, set_colour(v)) for f, t in cs if len(f) > 1]
    means = [float(rows.loc[v].get("auroc_mean", np.nan)) for v in variants]
    sds = [float(rows.loc[v].get("auroc_sd", np.nan)) for v in variants]
    charts = {
        "auroc": bar_chart(variants, means, auroc_title, reference=0.5, reference_label="chance",
                           colors=[set_colour(v) for v in variants],
                           intervals=[(m - sd, m + sd) if sd == sd else (np.nan, np.nan)
                                      for m, sd in zip(means, sds, strict=True)],
                           interval_label="\u00b11 SD over folds"),
        "roc": line_chart(mean_curves, "ROC per fold (thin) and their vertical mean (bold)", background=folds,
                          colors=colours) if mean_curves else "",
    }
    return charts

def importance_bars(rows: pd.DataFrame, variants: list[str], imps, gene: str) -> list[dict[str, Any]]:
    """The top-20 importances of the gene's classifiers, per variant."""
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
                                                    f"{v}: top-20 importances (of {len(vals)}), max = 1", bar_h=12,
                                                    color=FEATURE_COLOR)})
    return importance
