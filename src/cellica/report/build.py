"""Building the report from the evaluation's files: the index and one page per gene.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cellica.core.atomic import read_parquet
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.report.content import ReportInputs
from cellica.report.pages import ReportBuilder

log = get_logger("report")


def build_report(inputs: ReportInputs, out_dir: str | os.PathLike, genes: list[str] | None = None) -> Path:
    """Build ``out_dir/index.html`` and the pages of ``genes`` (default all); returns the index path."""
    t0 = time.perf_counter()
    builder = ReportBuilder(inputs, out_dir)
    index = builder.build_index()
    pages = builder.build_genes(genes)
    log.info("wrote %s and %d gene page(s) in %.1f s", index, len(pages), time.perf_counter() - t0)
    return index


def _h5ad_variant(path: Path) -> str:
    """The variant a features file was made by (``.uns['transform']['variant']``), read without
    loading the matrix; the file's stem when it records none (imported features)."""
    import h5py

    with h5py.File(path, "r") as fh:
        node = fh.get("uns/transform/variant")
        if node is None:
            return path.stem
        value = node[()]
    return value.decode() if isinstance(value, bytes) else str(value)


def report_from_files(summary: str | os.PathLike, per_gene: list, importances: list, out_dir: str | os.PathLike,
                      features: list | None = None, store=None, benchmarks=None, config=None,
                      config_hash: str = "", alignment=None, entity: str = "gene",
                      genes: list[str] | None = None) -> Path:
    """:func:`build_report` from the evaluation's files: each variant's name is read from its
    per-gene table (its importances given in the same order) and from its features file."""
    if len(per_gene) != len(importances):
        raise CellicaError(f"report: {len(per_gene)} per-gene tables but {len(importances)} importance tables; "
                           "give one of each per variant, in the same order")
    names = []
    for path in map(Path, per_gene):
        table = read_parquet(path, "per-gene table")
        if table.empty or "variant" not in table:
            raise CellicaError(f"{path}: per-gene table without a variant column or rows")
        names.append(str(table["variant"].iloc[0]))
    opt = lambda p: Path(p) if p else None  # noqa: E731
    inputs = ReportInputs(
        summary=Path(summary), per_gene=dict(zip(names, map(Path, per_gene), strict=True)),
        importances=dict(zip(names, map(Path, importances), strict=True)),
        features={_h5ad_variant(Path(p)): Path(p) for p in features or []}, store=opt(store),
        benchmarks=opt(benchmarks), config=opt(config), config_hash=config_hash, alignment=opt(alignment),
        entity=entity)
    return build_report(inputs, out_dir, genes=genes)
