"""The cell-count baseline: one feature per tile, the number of nuclei in it.

Many perturbation readouts are explained by how many cells a well holds, so every result is
read against a classifier that sees only that number (docs/evaluation.md, "Baselines"). The
nuclei are found exactly as the profiles path finds them (:func:`cellica.embed.profiles.nuclei_masks`:
Gaussian smoothing, Otsu threshold, connected components, objects below ``min_area``
dropped) on ``profiles.nuclei_channel``, so one definition of a nucleus serves both. A tile
with no nucleus counts 0 (a flat tile has no threshold and no nucleus). The output has the
contract of embeddings (tiles x 1, sharded and gathered like :func:`cellica.embed.extract.embed_store`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict

import numpy as np

from cellica import __version__
from cellica.core.adata import make_adata, write_h5ad
from cellica.core.logs import get_logger, progress
from cellica.embed.params import ProfileParams

log = get_logger("cell_count")

FEATURE = "nuclei_count"
# The profile parameters a count depends on (the rule passes only these: changing the
# measured feature groups leaves the counts up to date).
USES = ("nuclei_channel", "smoothing", "min_area", "batch_size")


def count_nuclei(store_path: str | os.PathLike, out: str | os.PathLike | None = None,
                 params: ProfileParams | None = None, *, shard: str | None = None):
    """Nuclei per tile of a store, or of its ``shard`` ``"i/n"`` (gathered by ``cellica
    gather-embeddings``), as a one-feature embedding, written to ``out`` when given.

    Parameters
    ----------
    store_path, out, shard
        As :func:`cellica.embed.profiles.profile_store` takes them.
    params
        The nuclei channel and segmentation (``profiles`` section; only :data:`USES` are read).

    Returns
    -------
    anndata.AnnData
        Tiles x 1 (``nuclei_count``, float32); ``.obs`` the store's metadata.
    """
    from cellica.embed.profiles import nuclei_masks, open_shard

    p, store, nuclei, (i, n, start, stop) = open_shard(store_path, params, shard)
    names = store.channel_names
    t0 = time.perf_counter()
    counts = np.zeros(stop - start, np.float32)
    bar = progress(total=stop - start, desc=f"nuclei {i}/{n}", unit="tile")
    for lo in range(start, stop, p.batch_size):
        hi = min(lo + p.batch_size, stop)
        masks = nuclei_masks(store.read_range(lo, hi)[:, nuclei], p.smoothing, p.min_area)
        counts[lo - start:hi - start] = masks.reshape(hi - lo, -1).max(axis=1)  # labels run 1..k
        bar.update(hi - lo)
    bar.close()
    store.check_unchanged()
    seconds = time.perf_counter() - t0
    obs = store.metadata.iloc[start:stop].set_index("tile_id", drop=False)
    settings = {k: v for k, v in asdict(p).items() if k in USES}
    provenance = {"format": "cell_count", "checkpoint": "nuclei count (Otsu)",
                  "checkpoint_sha256": "nuclei-count-" + "-".join(f"{k}={settings[k]}" for k in USES),
                  "store": store.label, "store_generation": store.generation, "pooling": "count of nuclei",
                  "params": settings, "nuclei_channel": names[nuclei], "tiles_without_nuclei": int((counts == 0).sum()),
                  "cellica_version": __version__, "n_tiles": int(stop - start),
                  "shard": {"index": i, "count": n, "start": start, "stop": stop}, "seconds": round(seconds, 3)}
    adata = make_adata(counts[:, None], obs, [FEATURE], {"provenance": provenance},
                       f"nuclei per tile of {store.label}")
    log.info("counted nuclei on %s in %d tiles (shard %d/%d): mean %.2f per tile, %d tile(s) without one, %.1f s",
             names[nuclei], stop - start, i, n, float(counts.mean()) if counts.size else float("nan"),
             provenance["tiles_without_nuclei"], seconds)
    if out is not None:
        write_h5ad(adata, out)
    return adata
