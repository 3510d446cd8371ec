"""Which features every table came from, so tables of different runs are never combined.

Each features file is sealed with the crc32c of its matrix (:func:`cellica.core.adata.seal`).
A table computed from features records ``{variant: that seal}`` in its ``attrs["lineage"]``
(parquet keeps ``attrs`` in the file's metadata); a stage that combines tables (gather-eval,
summarize, report) refuses two that name different features for the same variant: a per-gene
table of one run beside the batch metrics of another would otherwise give one summary of two
screens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from cellica.core.errors import CellicaError

KEY = "lineage"


def features_id(path: str | os.PathLike) -> str:
    """The seal of a features file (its matrix's crc32c and shape), read without loading it;
    ``unsealed:<file size>`` for files written before seals or by other tools."""
    from cellica.core.adata import h5_file

    with h5_file(path) as fh:
        return _seal(fh, path)


def _seal(fh, path) -> str:
    from cellica.core.adata import CHECKSUMS_KEY

    node = fh.get(f"uns/{CHECKSUMS_KEY}")
    if node is not None and "X" in node and "shape" in node:
        return f"{node['X'].asstr()[()]}/{node['shape'].asstr()[()]}"
    return f"unsealed:{os.path.getsize(path)}"


SOURCE = "(source)"  # the key naming the untransformed features every variant was made from


def is_source(key: str) -> bool:
    """Whether a lineage key names untransformed features (:data:`SOURCE`, or a baseline's own
    ``(source of <name>)``), not a variant's."""
    return key.startswith("(source")
SOURCE_UNS = "lineage_source"  # .uns of a transformed features file: the seal of its input
# .uns of a baseline's features: the key its source is recorded under (made from other embeddings)
SOURCE_KEY_UNS = "lineage_source_key"


def lineage_for(path: str | os.PathLike, variant: str) -> dict[str, str]:
    """The lineage of a table computed from one features file: the file itself under its
    variant, and the untransformed features it was made from (so variants of two runs differ)."""
    from cellica.core.adata import h5_file

    with h5_file(path) as fh:  # one open for both
        out = {variant: _seal(fh, path)}
        node, key = fh.get(f"uns/{SOURCE_UNS}"), fh.get(f"uns/{SOURCE_KEY_UNS}")
        if node is not None:
            out[SOURCE if key is None else key.asstr()[()]] = node.asstr()[()]
    return out


def tag(table, lineage: Mapping[str, str]):
    """Record ``lineage`` (variant -> features id) on a table (returned)."""
    table.attrs[KEY] = json.dumps(dict(sorted(lineage.items())))
    return table


def lineage_of(table) -> dict[str, str]:
    """The lineage a table records (empty for tables written before lineages existed)."""
    text = table.attrs.get(KEY)
    return json.loads(text) if isinstance(text, str) and text else {}


def merge(named: Iterable[tuple[str, object]], where: str) -> dict[str, str]:
    """The lineages of ``(label, table)`` pairs merged; two that name different features for
    one variant are an error naming both."""
    merged: dict[str, tuple[str, str]] = {}
    for label, table in named:
        for variant, fid in (lineage_of(table) if not isinstance(table, Mapping) else table).items():
            seen = merged.setdefault(variant, (fid, label))
            if seen[0] != fid:
                raise CellicaError(f"{where}: {seen[1]} and {label} were computed from different features of "
                                   f"variant {variant!r} (another run, or features made again since); "
                                   "re-run the stages after the features")
    return {v: fid for v, (fid, _) in merged.items()}
