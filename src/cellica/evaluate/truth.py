"""Per-gene alignment with a simulated screen's ground truth: whether a gene's top
features are the ones tracking the factors it truly moves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.scales import constant

log = get_logger("evaluate")


def truth_alignment(per_gene: pd.DataFrame, importances: pd.DataFrame, adata, latents: pd.DataFrame,
                    effects: pd.DataFrame) -> pd.DataFrame:
    """Synthetic screens: does each gene's classifier lean on features that track the factors it moves?

    For the gene's most important feature, the latent factor it correlates with
    most (|Pearson r| over all samples) is compared with the factors the gene
    truly shifts (non-zero entries of the simulator's effect matrix).
    """
    factors = [c for c in effects.columns if c not in ("gene", "effect_class")]
    z = latents.set_index("tile_id").reindex(adata.obs_names)[factors]
    if z.isna().any().any():
        raise CellicaError("truth alignment: the features' samples are not the simulated store's tiles")
    x = pd.DataFrame(np.asarray(adata.X, np.float64), index=adata.obs_names, columns=list(map(str, adata.var_names)))
    sd = x.std()
    xs = (x - x.mean()) / sd.mask(constant(x.mean().to_numpy(), sd.to_numpy()))  # constant on its own scale: NaN
    zs = (z - z.mean()) / z.std()
    corr = (xs.T @ zs) / (len(x) - 1)  # features x factors
    eff = effects.set_index("gene")
    out = per_gene.copy()
    cols = {"true_factors": [], "top_feature_factor": [], "top_feature_factor_corr": [], "top_feature_hits_truth": []}
    for gene in out["gene"]:
        truth = [f for f in factors if gene in eff.index and eff.loc[gene, f] != 0]
        imp = importances[importances["gene"] == gene]
        if imp.empty or imp["importance"].max() <= 0:
            best, r = "", float("nan")
        else:
            top = str(imp.loc[imp["importance"].idxmax(), "feature"])
            row = corr.loc[top].abs()
            best, r = str(row.idxmax()), float(row.max())
        cols["true_factors"].append(",".join(truth))
        cols["top_feature_factor"].append(best)
        cols["top_feature_factor_corr"].append(r)
        cols["top_feature_hits_truth"].append(bool(best) and best in truth)
    for k, v in cols.items():
        out[k] = v
    return out
