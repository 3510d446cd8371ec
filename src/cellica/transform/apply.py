"""The transform stage on files: fit a variant on a features file (or re-apply a saved
transform) and write the transformed features with the estimator that made them."""

from __future__ import annotations

import os

from cellica.core.adata import h5ad_size_floor, read_h5ad, seal, write_h5ad
from cellica.core.atomic import atomic_outputs, check_room
from cellica.core.errors import CellicaError
from cellica.core.lineage import SOURCE_KEY_UNS, SOURCE_UNS, features_id
from cellica.core.logs import get_logger
from cellica.registry import REFERENCE_VARIANT
from cellica.transform.params import TransformParams

log = get_logger("transforms")
PathLike = str | os.PathLike


def transform_file(input: PathLike, out: PathLike, variant: str | None = None,
                   *, params: TransformParams | None = None, model_out: PathLike | None = None,
                   apply: PathLike | None = None):
    """Fit ``variant`` on ``input`` and write the features (and, with ``model_out``, the fitted
    transform: both committed together, or neither); or, with ``apply``, re-apply a saved
    transform to ``input``. Returns the transformed AnnData.

    Parameters
    ----------
    input : PathLike
        The embeddings or features (``.h5ad``).
    out : PathLike
        The transformed features to write.
    variant : str, optional
        The variant to fit (not with ``apply``).
    params : TransformParams, optional
        The transform stage's parameters.
    model_out : PathLike, optional
        Where to write the fitted transform (``.npz``).
    apply : PathLike, optional
        A saved transform to re-apply instead of fitting one.

    Returns
    -------
    anndata.AnnData
        The transformed features.
    """
    from cellica.transform.base import Transform
    from cellica.transform.variants import make_transform

    adata = read_h5ad(input)
    source = features_id(input)  # every variant of this input records it (cellica.core.lineage)
    if apply:
        model = Transform.load(apply)
        log.info("applying the saved %s transform %s to %s", model.variant, apply, input)
        try:  # new data: its own controls give the per-batch and per-position statistics
            result = model.transform(adata)
        except (ValueError, IndexError, KeyError) as exc:  # shapes of the model against these features
            raise CellicaError(f"transform model {apply} cannot be applied to {input} ({type(exc).__name__}: "
                               f"{str(exc)[:200]}); fit it on features like these") from None
        result.uns[SOURCE_UNS] = source
        write_h5ad(result, out)
        return result
    if not variant:
        raise CellicaError("transform: give a variant (to fit) or a saved transform to apply")
    model = make_transform(variant, params or TransformParams())
    result = model.fit_transform(adata)
    result.uns[SOURCE_UNS] = source
    if not model_out:
        write_h5ad(result, out)
        return result
    check_room(out, h5ad_size_floor(result))  # HDF5 crashes on a failed write: refuse first
    with atomic_outputs([out, model_out], overwrite=True) as (tmp_out, tmp_model):
        seal(result).write_h5ad(tmp_out)
        model.write(tmp_model)
    return result


def baseline_file(name: str, input: PathLike, out: PathLike, *, params: TransformParams | None = None,
                  column: str | None = None):
    """The features of baseline ``name`` (:data:`cellica.registry.BASELINES`): ``input`` (its
    embeddings), or only its ``column`` (a column of ``.obs`` or a feature: a cell count of
    imported features), through the ``base`` variant, as the reference row is made. The file
    records ``name`` as its variant, so every later stage tables it under that name; its
    lineage names its own source (a baseline is made from other embeddings than the variants).

    Parameters
    ----------
    name : str
        The baseline, a name of :data:`cellica.registry.BASELINES`.
    input : PathLike
        Its embeddings (``.h5ad``).
    out : PathLike
        The features to write (``features/<name>.h5ad``).
    params : TransformParams, optional
        The ``base`` variant's parameters.
    column : str, optional
        Only this column of ``.obs`` or feature (a cell count of imported features).

    Returns
    -------
    anndata.AnnData
        The baseline's features.

    Raises
    ------
    CellicaError
        An unknown name, a column ``input`` lacks, or a column with a missing or non-numeric value.
    """
    import numpy as np
    import pandas as pd

    from cellica.core.adata import make_adata
    from cellica.registry import BASELINES
    from cellica.transform.variants import make_transform

    if name not in BASELINES:
        raise CellicaError(f"baseline: unknown name {name!r}; one of {', '.join(BASELINES)}")
    adata = read_h5ad(input)
    source = features_id(input)
    if column:
        if column in adata.obs:
            values = pd.to_numeric(adata.obs[column], errors="coerce").to_numpy(float)
        elif column in adata.var_names:
            values = adata[:, [column]].X.ravel().astype(float)
        else:
            raise CellicaError(f"baseline {name}: {input} has no column {column!r} in .obs or its features")
        bad = ~np.isfinite(values)
        if bad.any():
            raise CellicaError(f"baseline {name}: column {column!r} of {input} is missing or not a number in "
                               f"{int(bad.sum())} sample(s), e.g. {adata.obs_names[bad][:3].tolist()}")
        adata = make_adata(values[:, None], adata.obs.copy(), [str(column)], dict(adata.uns), str(input))
    result = make_transform(REFERENCE_VARIANT, params or TransformParams()).fit_transform(adata)
    result.uns["transform"] = {**result.uns["transform"], "variant": name, "baseline": name,
                               "as_variant": REFERENCE_VARIANT}
    result.uns[SOURCE_UNS] = source
    result.uns[SOURCE_KEY_UNS] = f"(source of {name})"
    write_h5ad(result, out)
    log.info("baseline %s: %d samples x %d feature(s) from %s", name, result.n_obs, result.n_vars, input)
    return result
