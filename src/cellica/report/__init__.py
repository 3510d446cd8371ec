"""Stage 5, reports: the HTML index and one page per gene, from the evaluation's files."""

from cellica.core.lazy import lazy_exports

# The stage's public functions and parameter classes, each imported when first used.
_PUBLIC = {
    "build_report": "cellica.report.build",
    "report_from_files": "cellica.report.build",
    "ReportInputs": "cellica.report.content",
    "ReportParams": "cellica.report.params",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
