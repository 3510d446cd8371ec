"""Per-variant means of a summary (``cellica.run(...).summary``) as the docs' table cells.

The recipe itself runs in the library: :func:`cellica.run` (transforms, classifiers, batch
metrics and the summary of one embedding in this process)."""

from __future__ import annotations

import pandas as pd

from cellica.registry import VARIANTS


def variant_text(s: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per-variant means as 'value [low, high]' strings, one column per metric."""
    m = s[(s["table"] == "per_variant") & (s["row"] == "mean") & s["metric"].isin(metrics)].copy()
    ci = m["ci_low"].notna()
    m["text"] = m["value"].map(lambda v: f"{v:.3f}")
    m.loc[ci, "text"] += " [" + m.loc[ci, "ci_low"].map(lambda v: f"{v:.3f}") + ", " + \
        m.loc[ci, "ci_high"].map(lambda v: f"{v:.3f}") + "]"
    wide = m.pivot(index="variant", columns="metric", values="text")
    wide = wide.reindex(index=[v for v in VARIANTS if v in wide.index])
    return wide.reindex(columns=[c for c in metrics if c in wide.columns]).fillna("n/a").reset_index()
