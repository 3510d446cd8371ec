"""Stage 3, transforms: PCA whitening on controls, ICA, a random rotation and comparators
(:data:`cellica.registry.VARIANTS`), each a named composition of steps and one estimator on AnnData."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "make_transform": "cellica.transform.variants",
    "compose": "cellica.transform.variants",
    "Step": "cellica.transform.steps",
    "transform_file": "cellica.transform.apply",
    "baseline_file": "cellica.transform.apply",
    "Transform": "cellica.transform.base",
    "TransformParams": "cellica.transform.params",
})
