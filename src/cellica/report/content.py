"""What the report pages show, apart from their layout: the metric rows and their
labels, number formats, transform diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.registry import BASELINES, variant_order
from cellica.report._svg import number

log = get_logger("report")


# Per-variant metrics (cellica.registry): (label, higher is better? None: no direction).
# Means over genes carry a 95% bootstrap interval; the batch classifiers one over controls.


FEATURE_COLOR = "#555b6e"  # importance bars: features, not variants, so not a variant colour


CLAIM_COLUMNS = (
    "row",
    "verdict",
    "baselines",
    "sentence",
    "decides",
    "detail",
)  # the index's claims table (baselines: when run)


@dataclass(kw_only=True)
class ReportInputs:
    """Everything a report is built from (paths are cited on the pages)."""

    summary: Path
    per_gene: dict[str, Path]
    importances: dict[str, Path]
    features: dict[str, Path] = field(default_factory=dict)
    examples: list[Path] = field(default_factory=list)  # example-tile tables (cellica example-tiles)
    truth_genes: Path | None = None  # a simulated screen's truth per gene (cellica truth-genes)
    benchmarks: Path | None = None
    config: Path | None = None
    config_hash: str = ""
    alignment: Path | None = None
    entity: str = "gene"
    maps: dict[str, Path] = field(default_factory=dict)
    recall: Path | None = None
    qc: list[Path] = field(default_factory=list)
    environment: Path | None = None


def software_context(path: Path | None) -> dict[str, Any] | None:
    """The run's software record (``cellica environment --out``) as the index shows it: the
    summary sentences, the key packages' versions and any departure from the lock."""
    if path is None:
        return None
    import json

    from cellica.core.environment import KEY_PACKAGES, summary_lines

    try:
        record = json.loads(Path(path).read_text())
        lines = summary_lines(record)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
        raise CellicaError(f"report: {path} is not a software record of cellica environment "
                           f"({type(err).__name__}: {str(err)[:120]})") from None
    return {"lines": lines, "differences": record["differences"], "path": str(path),
            "packages": [(n, record["packages"][n]) for n in KEY_PACKAGES if n in record["packages"]],
            "lock_digest": record.get("lock_digest")}


def _env():
    from jinja2 import Environment, PackageLoader, select_autoescape

    from cellica.registry import sentence

    env = Environment(loader=PackageLoader("cellica.report", "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["sentence"] = sentence  # first letter up, the rest as written: "MoA", not "Moa"
    env.globals["baselines"] = BASELINES  # their columns are marked as baselines
    return env


def _ordered(variants) -> list[str]:
    return variant_order(variants)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, float | np.floating):
        return number(float(v))
    return str(v)


def _with_ci(value: float, lo: float, hi: float) -> str:
    text = _fmt(value)
    return f"{text} [{_fmt(lo)}, {_fmt(hi)}]" if np.isfinite(lo) and np.isfinite(hi) else text


def transform_diagnostics(features: dict[str, Path]) -> list[dict[str, Any]]:
    """What each transform did, from ``.uns['transform']`` (read without loading ``.X``)."""
    import anndata as ad

    rows = []
    for variant in _ordered(features):
        a = ad.read_h5ad(features[variant], backed="r")
        tr = a.uns.get("transform", {})
        diag = dict(tr.get("diagnostics", {}))
        ica = diag.pop("ica", None)
        rows.append(
            {
                "variant": variant,
                "dims": int(a.n_vars),
                "details": ", ".join(
                    f"{k}={_fmt(v)}" for k, v in diag.items() if not isinstance(v, list | dict | np.ndarray)
                ),
                "ica": None
                if ica is None
                else {k: _fmt(v) for k, v in ica.items() if not isinstance(v, list | dict | np.ndarray)},
            }
        )
        a.file.close()
    return rows


def split_words(split: str, entity: str) -> dict[str, str]:
    """What a gene page says of the split its classifiers used (the table's ``split``)."""
    if split == "batch":
        return {
            "auroc": "AUROC on held-out batches",
            "caption": "Held-out-batch AUROC per variant: mean over folds, whiskers "
            "\u00b11 SD over folds; dashed: chance (0.5).",
            "fold": "each held-out batch's fold",
        }
    return {"auroc": "AUROC on a stratified random split",
            "caption": f"AUROC per variant on a stratified random split (this {entity} was seen in one batch, so no "
                       "batch could be held out): mean over folds, whiskers \u00b11 SD over folds; dashed: chance "
                       "(0.5).", "fold": "each random fold"}
