"""Two coordinates per row for a picture: a seeded UMAP, or the first two PCs of a small set."""

from __future__ import annotations

import numpy as np

# UMAP's 15 neighbours need more points than that; fewer are placed on their first two PCs.
MIN_UMAP_POINTS = 16


def coords_2d(x: np.ndarray, metric: str = "euclidean", seed: int = 0) -> tuple[np.ndarray, str]:
    """Two coordinates per row: scanpy's UMAP (seeded kNN graph of ``metric``), or the first two
    principal components below :data:`MIN_UMAP_POINTS` rows. Returns them and the method's name."""
    x = np.asarray(x, np.float32)
    if len(x) < MIN_UMAP_POINTS:
        u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
        xy = np.zeros((len(x), 2))
        k = min(2, s.size)
        xy[:, :k] = u[:, :k] * s[:k]
        return xy, "PC"
    import anndata as ad
    import scanpy as sc

    a = ad.AnnData(X=x)
    sc.pp.neighbors(a, n_neighbors=MIN_UMAP_POINTS - 1, use_rep="X", metric=metric, random_state=seed)
    sc.tl.umap(a, random_state=seed)
    return a.obsm["X_umap"], "UMAP"
