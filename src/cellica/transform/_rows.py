"""Row blocks and per-batch corrections: what lets a transform be applied block by block.

A transform holds the stored (float32) matrix once and converts rows to float64 only a
block at a time, so its peak memory is the input, the output and a few blocks, not
several float64 copies of the whole matrix. The blocks are large on purpose: BLAS
multiplies a handful of rows with other kernels than many (the last bits differ), and
a block of thousands of rows comes out exactly as the same rows of the whole matrix do
(``tests/test_transform_rows.py`` checks it), so the numbers do not depend on the block size.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.scales import constant, moments

BLOCK_ROWS = 16384  # rows per block: 16384 x 384 float64 is 50 MB


def row_blocks(n: int, size: int | None = None) -> list[slice]:
    """Consecutive slices covering ``n`` rows, ``size`` (default :data:`BLOCK_ROWS`) each; a tail
    shorter than half a block joins the block before it, so no block is small unless the data are."""
    size = size or BLOCK_ROWS
    starts = list(range(0, n, size)) or [0]
    if len(starts) > 1 and n - starts[-1] < size // 2:
        starts.pop()
    return [slice(s, e) for s, e in zip(starts, [*starts[1:], n], strict=True)]


def batch_stats(x_ctrl: np.ndarray, keys_ctrl: np.ndarray, batches, scale: bool, source: str,
                names: list[str] | None = None) -> dict:
    """Per-batch (mean, std) of the controls ``x_ctrl`` (rows in data order, batch ``keys_ctrl``);
    every batch in ``batches`` (all of the data's, in order of appearance) must have controls,
    and with ``scale`` every feature must vary on each batch's controls, judged on its own
    magnitude (:func:`cellica.core.scales.constant`): there is nothing to divide by otherwise
    (the whitening's drop_features step drops such features first under ``drop_constant``)."""
    stats = {}
    for batch in batches:
        rows = keys_ctrl == batch
        if not rows.any():
            raise CellicaError(
                f"{source}: batch {batch!r} has no control samples, but per-batch correction "
                "uses each batch's controls; set batch_correction: none or add controls"
            )
        if scale and rows.sum() < 2:
            raise CellicaError(f"{source}: batch {batch!r} has one control sample; center_scale needs >= 2")
        sub = x_ctrl[rows]
        mean = sub.mean(axis=0)
        sd = sub.std(axis=0) if scale else None
        if scale:
            const = constant(mean, sd)
            if const.any():
                listed = [names[i] if names else int(i) for i in np.flatnonzero(const)[:5]]
                raise CellicaError(
                    f"{source}: batch {batch!r}: {int(const.sum())} feature(s) do not vary on its controls, e.g. "
                    f"{listed}; center_scale cannot scale them: set drop_constant: true to drop them (recorded)")
        stats[batch] = (mean, sd)
    return stats


def constant_in_batches(x_ctrl: np.ndarray, keys_ctrl: np.ndarray) -> np.ndarray:
    """Features constant on the controls of at least one batch (each judged on its own
    magnitude): those per-batch scaling cannot divide by."""
    out = np.zeros(x_ctrl.shape[1], bool)
    for batch in pd.unique(keys_ctrl):
        out |= constant(*moments(x_ctrl[keys_ctrl == batch]))
    return out


def correct(x: np.ndarray, keys: np.ndarray, stats: dict, scale: bool) -> np.ndarray:
    """Centre (and scale) the rows of ``x`` by their batch's statistics (a new array; every
    scale was checked non-constant by :func:`batch_stats`)."""
    out = np.empty_like(x)
    for batch, (mean, std) in stats.items():
        rows = keys == batch
        if not rows.any():
            continue
        out[rows] = x[rows] - mean
        if scale:
            out[rows] /= std
    return out


def batch_keys(obs: pd.DataFrame, key: str, source: str) -> np.ndarray:
    """The batch of every row; the column must exist."""
    if key not in obs.columns:
        raise CellicaError(f"{source}: batch_key {key!r} is not a metadata column")
    return obs[key].to_numpy()


def covariance(centred: np.ndarray) -> np.ndarray:
    """``np.cov(centred, rowvar=False)`` without its private copy: ``centred`` (rows x features,
    a fresh array) is re-centred in place. Same operations as numpy's, so the same bits."""
    x = centred.T
    avg = np.average(x, axis=1)
    x -= avg[:, None]
    c = np.dot(x, x.T)
    c *= np.true_divide(1, x.shape[1] - 1)
    return c.reshape(x.shape[0], x.shape[0])


def column_means(blocks, fn) -> np.ndarray:
    """Column means of ``fn(block)`` stacked over ``blocks``, summed row after row as numpy's
    ``mean(axis=0)`` does on the whole, so the result is the same to the last bit."""
    total, n = None, 0
    for b in blocks:
        part = fn(b)
        n += part.shape[0]
        total = part.sum(axis=0) if total is None else np.vstack([total[None], part]).sum(axis=0)
    return total / n
