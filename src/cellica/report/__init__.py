"""Stage 5, reports: the HTML index and one page per gene, from the evaluation's files."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "build_report": "cellica.report.build",
    "report_from_files": "cellica.report.build",
    "ReportInputs": "cellica.report.content",
    "ReportParams": "cellica.report.params",
})
