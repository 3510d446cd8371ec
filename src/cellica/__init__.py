"""cellica: MAE embeddings of cell-microscopy screens, PCA whitening + ICA, and evaluation.

Stages (each an importable function or estimator, wrapped by the ``cellica`` CLI):
simulate / ingest -> embed -> transform -> evaluate -> report.
"""

__version__ = "0.1.0"

from cellica.core.errors import CellicaError  # noqa: E402

__all__ = ["CellicaError", "__version__"]
