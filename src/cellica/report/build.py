"""Building the report from the evaluation's files: the index and one page per gene.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cellica.core.atomic import atomic_output, read_parquet
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.evaluate.genes import gene_chunk
from cellica.report.content import ReportInputs
from cellica.report.pages import ReportBuilder
from cellica.report.params import ReportParams

log = get_logger("report")


def build_report(inputs: ReportInputs, out_dir: str | os.PathLike, genes: list[str] | None = None,
                 params: ReportParams | None = None, chunk: str | None = None, index_only: bool = False,
                 manifest: str | os.PathLike | None = None) -> Path:
    """Build the report in ``out_dir``; returns the index path (written or not).

    Parameters
    ----------
    inputs
        The evaluation's files.
    out_dir
        The report folder: ``index.html``, ``gene_index/genes-<k>.html``, ``genes/<gene>.html``.
    genes
        Only these genes' pages (default all).
    params
        Page size of the gene index.
    chunk
        ``i/n``: only the pages of the genes of that chunk (:func:`gene_chunk`), no index: a
        genome-wide screen's pages are written by separate jobs.
    index_only
        Only the index and the paged gene index.
    manifest
        With ``chunk``: a table (gene, page) of the pages written, the job's declared output.
    """
    p = params or ReportParams()
    p.validate()
    t0 = time.perf_counter()
    builder = ReportBuilder(inputs, out_dir, page_size=p.page_size)
    index = Path(out_dir) / "index.html"
    if chunk is not None:
        if genes is not None:
            raise CellicaError("report: give genes or a chunk, not both")
        genes = gene_chunk(builder.genes, chunk)
    if chunk is None:
        index = builder.build_index()
    pages = [] if index_only else builder.build_genes(genes)
    if manifest is not None:
        import pandas as pd

        table = pd.DataFrame({"gene": genes if genes is not None else builder.genes,
                              "page": [str(q.relative_to(Path(out_dir))) for q in pages]})
        with atomic_output(manifest, overwrite=True) as tmp:
            table.to_csv(tmp, sep="\t", index=False)
    log.info("wrote %s%d gene page(s) in %.1f s", "" if chunk else f"{index} and ", len(pages),
             time.perf_counter() - t0)
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
                      genes: list[str] | None = None, params: ReportParams | None = None,
                      chunk: str | None = None, index_only: bool = False, manifest=None) -> Path:
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
    return build_report(inputs, out_dir, genes=genes, params=params, chunk=chunk, index_only=index_only,
                        manifest=manifest)
