"""How well two representations of the same samples align, per class of map (the paper's Table 1).

Two embeddings of the same tiles (two MAE training seeds, two models, two checkpoints)
are paired by sample id. On a training split we fit the best map from A to B within
each class, and on the held-out split we report the mean L2 error of the mapped A
against B, divided by the latent diameter of B (the largest distance between two
held-out samples of B):

* ``permutation``: dimensions matched by maximum absolute correlation (Hungarian
  assignment), with sign flips and one global scale;
* ``rigid``: orthogonal Procrustes with centering and one global scale;
* ``linear``: least squares (affine); with no more training samples than dimensions it
  is not estimable and its row says so (error NaN, reason in ``note``);
* ``ica``: each side whitened and rotated by ICA on its own (as the transform stage
  does, so unsupervised), then the components matched by permutation with signs and
  mapped back into B's space.

``ICA efficiency = (permutation - ica) / (permutation - rigid)``, in percent: how much
of the gap between a mere relabelling of axes and the best rotation ICA closes
without seeing the pairing. When the two sides differ in dimensionality, permutation
and rigid maps are defined on the smaller one (B's dimensions that nothing maps to
are predicted by their training mean), and this is stated in the table.

``cellica.evaluate.metrics.mcc`` (mean correlation coefficient) measures recovery of known factors: absolute
correlations between features and true factors, Hungarian-matched, averaged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.evaluate.metrics import cross_correlation
from cellica.stability.params import AlignParams

log = get_logger("align")
MAPS = ("permutation", "rigid", "linear", "ica")


def pair_samples(a, b, names: tuple[str, str] = ("A", "B")) -> tuple[np.ndarray, np.ndarray, dict]:
    """Rows of two AnnData objects matched by sample id (``obs_names``, the tile ids).

    Returns both matrices in A's order restricted to the common ids, and counts of the
    rows only one side has (logged and returned: never dropped silently).
    """
    ia, ib = pd.Index(a.obs_names), pd.Index(b.obs_names)
    for idx, name in zip((ia, ib), names, strict=True):
        if idx.has_duplicates:
            raise CellicaError(f"{name}: duplicated sample ids, e.g. {idx[idx.duplicated()][0]!r}")
    common = ia[ia.isin(ib)]
    if len(common) == 0:
        raise CellicaError(f"{names[0]} and {names[1]} share no sample ids (obs_names): they are not embeddings "
                           f"of the same samples (e.g. {ia[0]!r} vs {ib[0]!r})")
    info = {"n_common": int(len(common)), f"only_in_{names[0]}": int(len(ia) - len(common)),
            f"only_in_{names[1]}": int(len(ib) - len(common))}
    if len(common) < len(ia) or len(common) < len(ib):
        log.warning("aligning on %d common samples; %d only in %s and %d only in %s are left out", len(common),
                    info[f"only_in_{names[0]}"], names[0], info[f"only_in_{names[1]}"], names[1])
    xa = _dense(a[common], names[0])
    xb = _dense(b[common], names[1])
    return xa, xb, info


def _dense(adata, source: str) -> np.ndarray:
    from cellica.core.adata import check_matrix

    x = adata.X.toarray() if hasattr(adata.X, "toarray") else adata.X
    return check_matrix(x, adata.obs_names, source).astype(np.float64)


def _global_scale(pred_c: np.ndarray, yc: np.ndarray) -> float:
    denom = float((pred_c**2).sum())
    return float((pred_c * yc).sum() / denom) if denom > 0 else 1.0


def _permutation_map(xa, xb):
    """Match A's dims to B's by |corr| (Hungarian), with signs and one global scale."""
    from scipy.optimize import linear_sum_assignment

    corr = cross_correlation(xa, xb)
    rows, cols = linear_sum_assignment(-np.abs(corr))
    signs = np.sign(corr[rows, cols])
    ma, mb = xa.mean(0), xb.mean(0)

    def raw(x):
        out = np.zeros((len(x), xb.shape[1]))
        out[:, cols] = (x[:, rows] - ma[rows]) * signs
        return out

    scale = _global_scale(raw(xa), xb - mb)
    return lambda x: raw(x) * scale + mb


def _rigid_map(xa, xb):
    """Orthogonal Procrustes with centering and one global scale (semi-orthogonal if dims differ)."""
    ma, mb = xa.mean(0), xb.mean(0)
    u, _, vt = np.linalg.svd((xa - ma).T @ (xb - mb), full_matrices=False)
    q = u @ vt
    scale = _global_scale((xa - ma) @ q, xb - mb)
    return lambda x: (x - ma) @ q * scale + mb


def _linear_map(xa, xb):
    """Affine least squares (the caller checks there are more samples than dimensions)."""
    design = np.hstack([xa, np.ones((len(xa), 1))])
    coef, *_ = np.linalg.lstsq(design, xb, rcond=None)
    return lambda x: np.hstack([x, np.ones((len(x), 1))]) @ coef


def _unmix(x, p: AlignParams):
    """The transform stage's whitening (``n_components``, ``eig_floor``) and ICA rotation, fit
    on ``x``: returns (mean, unmixing, mixing, diagnostics)."""
    from cellica.transform.ica import fit_rotation
    from cellica.transform.whitening import fit_whitening

    w = fit_whitening(x, p.n_components, p.eig_floor, "align", "align")
    res = fit_rotation(w.apply(x), p.ica, seed=p.seed)
    unmix = res.rotation @ (w.components * w.scale[:, None])  # k x d
    mix = w.mixing @ res.rotation.T  # d x k: x ~= s @ mix.T + mean
    return w.mean, unmix, mix, res.diagnostics


def _ica_map(xa, xb, p: AlignParams):
    from scipy.optimize import linear_sum_assignment

    ma, ua, _, da = _unmix(xa, p)
    mb, ub, mixb, db = _unmix(xb, p)
    sa, sb = (xa - ma) @ ua.T, (xb - mb) @ ub.T
    corr = cross_correlation(sa, sb)
    rows, cols = linear_sum_assignment(-np.abs(corr))
    signs = np.sign(corr[rows, cols])

    def predict(x):
        s_hat = np.zeros((len(x), sb.shape[1]))
        s_hat[:, cols] = ((x - ma) @ ua.T)[:, rows] * signs
        return s_hat @ mixb.T + mb

    diag = {"ica_converged_a": bool(da["converged"]), "ica_converged_b": bool(db["converged"]),
            "ica_components": f"{sa.shape[1]}/{sb.shape[1]}"}
    return predict, diag


def _map_row(kind: str, xa, xb, train, test, diameter: float, note: str, p: AlignParams) -> dict:
    """Fit one class of map on the training samples; its held-out error, as a table row."""
    extra = {}
    if kind == "linear" and len(train) <= xa.shape[1]:
        # Not estimable: stated in the table (NaN + reason) so the other maps still report.
        reason = (f"skipped: {len(train)} training samples for {xa.shape[1]} dimensions of A; the linear map "
                  "needs more samples than dimensions (more samples or a smaller test_fraction)")
        log.warning("alignment linear: %s", reason)
        return {"map": kind, "error": float("nan"), "n_train": len(train), "n_test": len(test),
                "dims": f"{xa.shape[1]}->{xb.shape[1]}", "note": reason}
    if kind == "permutation":
        fn = _permutation_map(xa[train], xb[train])
    elif kind == "rigid":
        fn = _rigid_map(xa[train], xb[train])
    elif kind == "linear":
        fn = _linear_map(xa[train], xb[train])
    else:
        fn, extra = _ica_map(xa[train], xb[train], p)
    err = float(np.linalg.norm(fn(xa[test]) - xb[test], axis=1).mean() / max(diameter, 1e-12))
    log.info("alignment %s: error %.4f (held-out, / diameter %.3g)", kind, err, diameter)
    return {"map": kind, "error": err, "n_train": len(train), "n_test": len(test),
            "dims": f"{xa.shape[1]}->{xb.shape[1]}", "note": note if kind != "linear" else "", **extra}


def latent_diameter(x: np.ndarray, max_samples: int = 4000, seed: int = 0) -> float:
    """Largest Euclidean distance between two rows (on a seeded subsample beyond ``max_samples``)."""
    if len(x) > max_samples:
        x = x[np.random.default_rng(seed).choice(len(x), max_samples, replace=False)]
    sq = (x**2).sum(1)
    d2 = sq[:, None] + sq[None, :] - 2 * x @ x.T
    return float(np.sqrt(max(d2.max(), 0.0)))


def align(a, b, params: AlignParams | None = None, *, maps: tuple[str, ...] = MAPS,
          names: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """Held-out alignment error of A -> B for each class of map, and the ICA efficiency.

    Parameters
    ----------
    a, b
        AnnData embeddings of (largely) the same samples; paired by ``obs_names``.
    params
        The held-out share, the seed, and the whitening and ICA of the ICA map: each side
        keeps ``n_components`` (as the transform stage does; ICA needs many more samples
        than dimensions, and B's dropped components are predicted by their mean, so they
        count as error).
    maps
        Subset of ``permutation``, ``rigid``, ``linear``, ``ica``.
    names : tuple of two str, default ("A", "B")
        How the two embeddings are named in messages and the table.

    Returns
    -------
    pandas.DataFrame
        One row per map: ``error`` (mean L2 / diameter of B), ``n_train``, ``n_test``,
        ``dims``, notes, ``ica_efficiency`` (percent) and the pairing counts (``n_common``,
        ``only_in_a``, ``only_in_b``; also in ``.attrs``, with the diameter).
    """
    unknown = sorted(set(maps) - set(MAPS))
    if unknown:
        raise CellicaError(f"unknown map(s) {unknown}; choose from {MAPS}")
    p = params or AlignParams()
    test_fraction, seed = p.test_fraction, p.seed
    xa, xb, info = pair_samples(a, b, names)
    n = len(xa)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    if len(train) < 3 or len(test) < 2:
        raise CellicaError(f"alignment needs at least 5 common samples, got {n}")
    diameter = latent_diameter(xb[test], seed=seed)
    note = "" if xa.shape[1] == xb.shape[1] else (
        f"dims differ ({xa.shape[1]} vs {xb.shape[1]}): permutation/rigid/ica map into the smaller")
    rows = [_map_row(kind, xa, xb, train, test, diameter, note, p) for kind in maps]
    table = pd.DataFrame(rows)
    table.attrs.update(info)
    table.attrs["diameter"] = diameter
    table.attrs["ica_efficiency"] = ica_efficiency(table)
    # The same run-level figures as columns, so they survive the parquet file.
    table["ica_efficiency"] = table.attrs["ica_efficiency"]
    table["n_common"] = info["n_common"]
    table["only_in_a"], table["only_in_b"] = info[f"only_in_{names[0]}"], info[f"only_in_{names[1]}"]
    return table


def ica_efficiency(table: pd.DataFrame) -> float:
    """(permutation - ica) / (permutation - rigid) in percent; NaN when a term is missing or the gap is 0."""
    e = table.set_index("map")["error"]
    if not {"permutation", "rigid", "ica"} <= set(e.index) or e["permutation"] == e["rigid"]:
        return float("nan")
    return float(100 * (e["permutation"] - e["ica"]) / (e["permutation"] - e["rigid"]))
