"""Building the report from the evaluation's files: the index and one page per gene."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cellica.core.adata import stored_variant
from cellica.core.atomic import read_parquet
from cellica.core.errors import CellicaError
from cellica.core.lineage import is_source, lineage_of, merge
from cellica.core.logs import get_logger
from cellica.core.ownership import claim_folder
from cellica.report._pages import ReportBuilder
from cellica.report.content import ReportInputs
from cellica.report.params import ReportParams

log = get_logger("report")


def build_report(inputs: ReportInputs, out_dir: str | os.PathLike, genes: list[str] | None = None,
                 *, params: ReportParams | None = None, part: int | None = None, index_only: bool = False) -> Path:
    """Build the report in ``out_dir``; returns the index path (written or not).

    Parameters
    ----------
    inputs
        The evaluation's files.
    out_dir
        The report folder: ``index.html``, ``gene_index/genes-<k>.html`` and
        ``genes/<i>-of-<n>/<gene>.html`` (``n`` = ``params.chunks``).
    genes
        Only these genes' pages (default all).
    params
        Chunks of the gene pages and page size of the gene index.
    part
        Only the pages of the genes of chunk ``part`` (:func:`gene_chunk`), no index: a
        genome-wide screen's pages are written by separate jobs.
    index_only
        Only the index and the paged gene index.

    Returns
    -------
    pathlib.Path
        The index's path (written unless ``part`` is given).
    """
    p = params or ReportParams()
    p.validate()
    fresh = not os.path.lexists(out_dir)
    if fresh or not os.path.isdir(out_dir) or os.path.islink(out_dir):
        claim_folder(out_dir, "report")  # a stranger's file or link there is refused
    # An existing folder is written into, as the repository's own reports/ (its README.md): a
    # stranger's files there are kept, and each page is checked when written (never replaced
    # unless cellica wrote it: cellica.core.ownership).
    try:
        return _build(inputs, out_dir, genes, p, part, index_only)
    except BaseException:
        if fresh:  # this call made the folder: a failed build leaves nothing behind
            import shutil

            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _build(inputs: ReportInputs, out_dir, genes, p: ReportParams, part: int | None, index_only: bool) -> Path:
    t0 = time.perf_counter()
    builder = ReportBuilder(inputs, out_dir, page_size=p.page_size, chunks=p.chunks)
    index = Path(out_dir) / "index.html"
    if part is not None:
        if genes is not None:
            raise CellicaError("report: give genes or a part, not both")
        if not 0 <= part < p.chunks:
            raise CellicaError(f"report: part {part} is out of range for {p.chunks} chunk(s)")
        genes = builder.part_genes(part)
    else:
        index = builder.build_index()
    pages = [] if index_only else builder.build_genes(genes)
    log.info("wrote %s%d gene page(s) in %.1f s", "" if part is not None else f"{index} and ", len(pages),
             time.perf_counter() - t0)
    return index


def report_from_files(summary: str | os.PathLike, per_gene: list, importances: list, *, out_dir: str | os.PathLike,
                      features: list | None = None, examples: list | None = None, truth_genes=None,
                      benchmarks=None, config=None,
                      config_hash: str = "", alignment=None, entity: str = "gene",
                      genes: list[str] | None = None, params: ReportParams | None = None,
                      part: int | None = None, index_only: bool = False, maps: list | None = None,
                      recall=None, qc: list | None = None, environment=None) -> Path:
    """:func:`build_report` from the evaluation's files: each variant's name is read from its
    per-gene table, its importances' own lineage (or, for tables without one, their order) and
    its features file.

    Parameters
    ----------
    summary : str or PathLike
        The summary (``eval/summary.parquet``).
    per_gene, importances : list of PathLike
        Every variant's and baseline's per-gene and importance tables.
    out_dir : str or PathLike
        The report folder.
    features : list of PathLike, optional
        The variants' features (embedding plots, diagnostics).
    examples : list of PathLike, optional
        The example-tile tables (``cellica example-tiles``).
    truth_genes : PathLike, optional
        A simulated screen's truth per gene (``cellica truth-genes``).
    benchmarks, config, environment : PathLike, optional
        Snakemake's benchmark folder, the config file and the software record, shown on the index.
    config_hash : str, optional
        The run's config hash.
    alignment : PathLike, optional
        The stability table (``cellica align``).
    entity : str, default "gene"
        What the perturbations are called.
    genes : list of str, optional
        Only these genes' pages.
    params : ReportParams, optional
        Chunks and page size.
    part : int, optional
        Only the pages of this chunk of genes.
    index_only : bool, default False
        Only the index and the paged gene index.
    maps, recall, qc : optional
        The variants' gene maps (UMAPs), their recall table, and the qc tables.

    Returns
    -------
    pathlib.Path
        The index's path.
    """
    if len(per_gene) != len(importances):
        raise CellicaError(f"report: {len(per_gene)} per-gene tables but {len(importances)} importance tables; "
                           "give one of each per variant, in the same order")
    names, named = [], [(str(summary), read_parquet(summary, "summary table"))]
    for path in map(Path, per_gene):
        table = read_parquet(path, "per-gene table")
        if table.empty or "variant" not in table:
            raise CellicaError(f"{path}: per-gene table without a variant column or rows")
        names.append(str(table["variant"].iloc[0]))
        named.append((str(path), table))
    imps = [(str(p), read_parquet(p, "importances")) for p in importances]
    merge(named + imps, "report")  # the summary and the tables it draws beside it are of one run
    paired = dict(zip(names, map(Path, importances), strict=True))
    own = {next(v for v in lineage_of(t) if not is_source(v)): Path(p) for p, t in imps
           if any(not is_source(v) for v in lineage_of(t))}
    if set(own) == set(names):  # importances name their variant: their order does not matter
        paired = own
    elif own:
        raise CellicaError(f"report: importance tables of {sorted(own)} for per-gene tables of {sorted(names)}; "
                           "give each variant's importances")
    opt = lambda p: Path(p) if p else None  # noqa: E731
    inputs = ReportInputs(
        summary=Path(summary), per_gene=dict(zip(names, map(Path, per_gene), strict=True)),
        importances=paired,
        features={stored_variant(p, Path(p).stem): Path(p) for p in features or []},
        examples=[Path(p) for p in examples or []], truth_genes=opt(truth_genes),
        benchmarks=opt(benchmarks), config=opt(config), config_hash=config_hash, alignment=opt(alignment),
        entity=entity, maps={stored_variant(p, Path(p).stem): Path(p) for p in maps or []}, recall=opt(recall),
        qc=[Path(p) for p in qc or []], environment=opt(environment))
    return build_report(inputs, out_dir, genes=genes, params=params, part=part, index_only=index_only)
