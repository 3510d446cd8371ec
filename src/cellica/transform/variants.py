"""Feature transforms: PCA whitening on controls, ICA, a random rotation, and comparators.

Each variant is a scikit-learn-style estimator on AnnData: ``fit`` on one
features file, ``transform`` any other with the same features, ``save``/``load``
to a small ``.npz`` (arrays plus JSON; never pickle).

=========  ==================================================================
variant    what it does
=========  ==================================================================
base       the features unchanged (the reference row of every table)
pca        PCA whitening fit on the controls (centred on them), eigenvalue floor
pca_ica    pca, then the ICA rotation (fit where the whitening holds)
pca_rand   pca, then a seeded Haar-random rotation (the control for ICA)
sphering   ZCA whitening on the controls (pycytominer / JUMP recipe)
harmony    Harmony (harmonypy) on the control-PCA scores; transductive
combat     ComBat (scanpy) on the features; transductive
=========  ==================================================================

Batches (``batch_key``) are handled in the PCA family by ``batch_correction``:
``null`` (one global fit), ``center`` (subtract each batch's control mean) or
``center_scale`` (also divide by each batch's control standard deviation), at
``batch_stage`` ``before`` the whitening (on the raw features) or ``after`` it (the
"TVN" practice). Per-batch statistics always come from the controls of the data
being transformed, so a new plate is corrected by its own controls. The default,
``center``, removes additive batch offsets while keeping a single global linear
map, which is what the identifiability argument (whitening leaves a rotation,
ICA picks it) needs; centring commutes with the linear map, so its stage does
not matter.
"""

from __future__ import annotations

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform.base import Transform
from cellica.transform.comparators import Combat, Harmony, Sphering
from cellica.transform.params import TransformParams
from cellica.transform.pca import PCAICA, PCARandom, PCAWhitening
from cellica.transform.registry import VARIANTS

log = get_logger("transforms")


# ---------------------------------------------------------------------- helpers


# The estimator classes the registry names (cellica.transform.registry.Variant.estimator).
_ESTIMATORS = {cls.__name__: cls for cls in (Transform, PCAWhitening, PCAICA, PCARandom, Sphering, Harmony, Combat)}


def make_transform(variant: str, params: TransformParams | None = None) -> Transform:
    """The estimator for a variant name (see :data:`cellica.transform.registry.VARIANTS`)."""
    if variant not in VARIANTS:
        raise CellicaError(f"unknown transform variant {variant!r}; choose from {', '.join(VARIANTS)}")
    return _ESTIMATORS[VARIANTS[variant].estimator](params or TransformParams())
