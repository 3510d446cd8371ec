"""Parameters of the report stage (config section ``report``)."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.params import Params, param


@dataclass(kw_only=True)
class ReportParams(Params):
    """The HTML reports: index.html, the paged gene index and one page per gene
    (`cellica report --help`)."""

    section = "report"

    chunks: int = param(1, "Jobs the gene pages are written by, each the genes of one chunk (as evaluate.chunks "
                        "splits them) into reports/genes/<i>-of-<chunks>/; the index is one more job.", ge=1)
    page_size: int = param(500, "Genes per page of the gene index (reports/gene_index/genes-<k>.html); "
                           "index.html shows the first page.", ge=10)
    entity: str = param("", "What the perturbations are called in the summary's sentences and on the pages "
                        "(gene, compound, MoA, ...); empty: gene for simulated screens, else the name of "
                        "features.column_map's perturbation column (Metadata_moa -> MoA), else perturbation.",
                        cli=False)
