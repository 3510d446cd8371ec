"""Feature transforms: PCA whitening on controls, ICA, a random rotation, and comparators.

A variant is a named composition of steps (:mod:`cellica.transform.steps`): the registry
lists each variant's steps (:data:`cellica.registry.VARIANTS`), :func:`compose` builds them
from the stage's parameters, and :class:`~cellica.transform.base.Transform` fits and applies
them as one scikit-learn-style estimator on AnnData: ``fit`` on one features file,
``transform`` any other with the same features, ``save``/``load`` to a small ``.npz``
(arrays plus JSON; never pickle).

Every variant, ``base`` included, may first correct well positions (``position_correction``,
the JUMP recipe's first step) and then standardise on the fitting controls (``standardize``).
Batches (``batch_key``) are handled in the PCA family by ``batch_correction``: ``null`` (one
global fit), ``center`` (subtract each batch's control mean) or ``center_scale`` (also divide
by each batch's control standard deviation), at ``batch_stage`` ``before`` the whitening (on
the raw features) or ``after`` it (the "TVN" practice). Per-batch statistics always come from
the controls of the data being transformed, so a new plate is corrected by its own controls.
The default, ``center``, removes additive batch offsets while keeping a single global linear
map, which is what the identifiability argument (whitening leaves a rotation, ICA picks it)
needs; centring commutes with the linear map, so its stage does not matter.
"""

from __future__ import annotations

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.registry import COMMON_STEPS, VARIANTS
from cellica.transform import _comparators, _pca, positions  # noqa: F401  (their steps are the registry's)
from cellica.transform.base import Transform
from cellica.transform.params import TransformParams
from cellica.transform.steps import Step, step_class

log = get_logger("transforms")


def compose(variant: str, params: TransformParams) -> list[Step]:
    """The steps of ``variant`` as ``params`` configure them, unfitted, in order: the registry's
    common steps, then the variant's (a step the parameters switch off is left out).

    A registry entry names a step ``name`` or ``name:arg`` (e.g. ``centre_batches:after``,
    ``pca:scores``); the step class of that name builds itself (``from_params(params, arg)``).

    Parameters
    ----------
    variant : str
        A name of :data:`cellica.registry.VARIANTS`.
    params : TransformParams
        The transform stage's parameters.

    Returns
    -------
    list of Step
        The unfitted steps, in order.
    """
    if variant not in VARIANTS:
        raise CellicaError(f"unknown transform variant {variant!r}; choose from {', '.join(VARIANTS)}")
    steps = []
    for entry in (*COMMON_STEPS, *VARIANTS[variant].steps):
        name, _, arg = entry.partition(":")
        step = step_class(name).from_params(params, arg or None)
        if step is not None:
            steps.append(step)
    return steps


def make_transform(variant: str, params: TransformParams | None = None) -> Transform:
    """The estimator of a variant name (see :data:`cellica.registry.VARIANTS`).

    Parameters
    ----------
    variant : str
        A name of :data:`cellica.registry.VARIANTS`.
    params : TransformParams, optional
        The transform stage's parameters (defaults otherwise).

    Returns
    -------
    Transform
        The unfitted estimator.
    """
    if variant not in VARIANTS:
        raise CellicaError(f"unknown transform variant {variant!r}; choose from {', '.join(VARIANTS)}")
    return Transform(variant, params or TransformParams())
