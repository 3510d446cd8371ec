"""Feature transforms: PCA whitening on controls, ICA, a random rotation, and comparators.

Each variant is a scikit-learn-style estimator on AnnData: ``fit`` on one
features file, ``transform`` any other with the same features, ``save``/``load``
to a small ``.npz`` (arrays plus JSON; never pickle). What each variant does, and which
class computes it, is in the registry (:data:`cellica.registry.VARIANTS`).

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
from cellica.registry import VARIANTS
from cellica.transform import comparators, pca  # noqa: F401  (their classes are the registry's estimators)
from cellica.transform.base import Transform
from cellica.transform.params import TransformParams

log = get_logger("transforms")


# ---------------------------------------------------------------------- helpers


def estimator_class(name: str) -> type[Transform]:
    """The :class:`Transform` subclass called ``name`` (a registry entry's ``estimator``): no
    second list of classes to keep in step with the registry."""
    found, todo = {}, [Transform]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    if name not in found:
        raise CellicaError(f"the registry names estimator {name!r}, but no Transform subclass has that name")
    return found[name]


def make_transform(variant: str, params: TransformParams | None = None) -> Transform:
    """The estimator for a variant name (see :data:`cellica.registry.VARIANTS`)."""
    if variant not in VARIANTS:
        raise CellicaError(f"unknown transform variant {variant!r}; choose from {', '.join(VARIANTS)}")
    return estimator_class(VARIANTS[variant].estimator)(params or TransformParams())
