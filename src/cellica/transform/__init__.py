"""Stage 3, transforms: PCA whitening on controls, ICA, a random rotation and comparators
(:data:`cellica.registry.VARIANTS`), each an estimator on AnnData."""

from cellica.core.lazy import lazy_exports

# The stage's public functions and parameter classes, each imported when first used.
_PUBLIC = {
    "make_transform": "cellica.transform.variants",
    "transform_file": "cellica.transform.files",
    "Transform": "cellica.transform.base",
    "TransformParams": "cellica.transform.params",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
