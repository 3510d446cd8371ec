"""cellica: MAE embeddings of cell-microscopy screens, PCA whitening + ICA, and evaluation.

Stages (each an importable function or estimator, wrapped by the ``cellica`` CLI):
simulate / ingest -> embed -> transform -> evaluate -> report.
"""

__version__ = "0.1.0"

from cellica.core.errors import CellicaError  # noqa: E402
from cellica.core.lazy import lazy_exports  # noqa: E402

# cellica.run: the whole recipe in memory (cellica.pipeline), imported when first used.
__getattr__, _dir, _lazy = lazy_exports(__name__, {"run": "cellica.pipeline", "RunResult": "cellica.pipeline"})
__all__ = ["CellicaError", "__version__", *_lazy]
