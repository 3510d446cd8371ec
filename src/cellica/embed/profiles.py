"""Classical profiles without a model: CellProfiler-style features of every tile measured with
cp_measure (``cellica profile-tiles``), a baseline for users without a GPU or weights.

Per tile: the nuclei are found on one channel (Gaussian smoothing, Otsu threshold, connected
components, objects below ``min_area`` dropped as noise); cp_measure measures the chosen
feature groups on every nucleus over all channels (pixels scaled to [0, 1] by the store's bit
depth, as CellProfiler sees them); the tile's profile is the mean over its nuclei. A tile in
which no nucleus is found is measured as one object covering the whole tile, and a feature
that no object of a tile could measure (NaN) is 0; both are counted in ``.obs``
(``profile_objects``: 0 for the whole-tile fall-back) and the provenance, never dropped. The
output has the contract of :func:`cellica.embed.extract.embed_store` (tiles x features,
sharded and gathered the same way), so every later stage treats it as embeddings.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import asdict

import numpy as np

from cellica import __version__
from cellica.core.adata import make_adata, write_h5ad
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.embed.params import PROFILE_GROUPS, ProfileParams
from cellica.store.tilestore import TileStore

log = get_logger("profiles")


def nuclei_masks(channel: np.ndarray, smoothing: float, min_area: int) -> np.ndarray:
    """Integer labels (0 = background) of the nuclei in a batch of single-channel tiles (B, H, W)."""
    from skimage.filters import gaussian, threshold_otsu
    from skimage.measure import label
    from skimage.morphology import remove_small_objects

    out = np.zeros(channel.shape, np.int32)
    for b, tile in enumerate(channel.astype(np.float64)):
        smooth = gaussian(tile, smoothing) if smoothing > 0 else tile
        if np.ptp(smooth) == 0:  # a flat tile has no threshold and no nucleus
            continue
        fg = remove_small_objects(smooth > threshold_otsu(smooth), max_size=min_area - 1) if min_area > 1 \
            else smooth > threshold_otsu(smooth)
        out[b] = label(fg)
    return out


def featurizer_config(channels: list[str], p: ProfileParams, scale_max: int) -> dict:
    """cp_measure's featurizer configuration for these channels and ``p.features``."""
    from cp_measure.featurizer import make_featurizer_config

    flags = {g: g in p.features for g in PROFILE_GROUPS}
    return make_featurizer_config(channels, objects=["nuclei"], correlation_costes_params={"scale_max": scale_max},
                                  **flags)


def measure_tiles(tiles: np.ndarray, nuclei: int, p: ProfileParams, config: dict,
                  scale_max: int) -> tuple[np.ndarray, list[str], np.ndarray, int]:
    """Profiles of a batch of tiles (B, C, H, W): the mean over each tile's nuclei; also the
    feature names, the nuclei per tile (0: measured whole) and the NaN features set to 0."""
    from cp_measure.featurizer import featurize

    masks = nuclei_masks(tiles[:, nuclei], p.smoothing, p.min_area)
    counts = masks.reshape(len(masks), -1).max(axis=1)
    masks[counts == 0] = 1  # no nucleus: the whole tile is the object
    with warnings.catch_warnings():  # cp_measure warns per empty object; counted here instead
        warnings.simplefilter("ignore")
        data, columns, rows = featurize(tiles.astype(np.float64) / scale_max, masks[:, None], config,
                                        image_ids=list(range(len(tiles))))
    owner = np.fromiter((r[0] for r in rows), int, len(rows))
    sums = np.zeros((len(tiles), data.shape[1]))
    seen = np.zeros((len(tiles), data.shape[1]))
    finite = np.isfinite(data)
    np.add.at(sums, owner, np.where(finite, data, 0.0))
    np.add.at(seen, owner, finite)
    profile = np.divide(sums, seen, out=np.zeros_like(sums), where=seen > 0)
    return profile.astype(np.float32), list(columns), counts.astype(np.int32), int((seen == 0).sum())


def profile_store(store_path: str | os.PathLike, out: str | os.PathLike | None = None,
                  params: ProfileParams | None = None, *, shard: str | None = None):
    """cp_measure profiles of a store's tiles (or one shard of them) as embeddings.

    Parameters
    ----------
    store_path
        Tile store (local or an fsspec URL).
    out
        Where to write the ``.h5ad`` (optional).
    params
        Nuclei channel, feature groups, segmentation.
    shard
        ``"i/n"``: only that part of the store (gathered by ``cellica gather-embeddings``).

    Returns
    -------
    anndata.AnnData
        Tiles x features; ``.obs`` the store's metadata plus ``profile_objects``.
    """
    try:
        import cp_measure  # noqa: F401
    except ImportError:
        raise CellicaError("profiles need cp_measure: pip install 'cellica[profiles]' (or pip install cp_measure)") \
            from None
    from importlib.metadata import version

    cp_version = version("cp_measure")
    p, store, nuclei, (i, n, start, stop) = open_shard(store_path, params, shard)
    names = store.channel_names
    scale_max = int(np.iinfo(store.dtype).max)
    config = featurizer_config(names, p, scale_max)
    t0 = time.perf_counter()
    parts, counts, nan_cells, columns = [], [], 0, None
    bar = progress(total=stop - start, desc=f"profiles {i}/{n}", unit="tile")
    for lo in range(start, stop, p.batch_size):
        hi = min(lo + p.batch_size, stop)
        x, cols, c, nans = measure_tiles(store.read_range(lo, hi), nuclei, p, config, scale_max)
        if columns is not None and cols != columns:
            raise CellicaError(f"internal error: cp_measure's features changed between tiles {start} and {lo}")
        columns = cols
        parts.append(x)
        counts.append(c)
        nan_cells += nans
        bar.update(hi - lo)
    bar.close()
    store.check_unchanged()
    x = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    objects = np.concatenate(counts) if counts else np.zeros(0, np.int32)
    seconds = time.perf_counter() - t0
    obs = store.metadata.iloc[start:stop].set_index("tile_id", drop=False).assign(profile_objects=objects)
    whole = int((objects == 0).sum())
    if whole or nan_cells:  # counted in the provenance too
        log.warning("%d of %d tile(s) had no nucleus on %s and were measured whole; %d feature value(s) no object "
                    "could measure were set to 0", whole, len(objects), names[nuclei], nan_cells)
    provenance = {"format": "cp_measure", "checkpoint": f"cp_measure {cp_version}",
                  "checkpoint_sha256": f"cp_measure-{cp_version}", "store": store.label,
                  "store_generation": store.generation,
                  "pooling": "mean over nuclei", "params": asdict(p), "nuclei_channel": names[nuclei],
                  "tiles_without_nuclei": whole, "nan_set_to_zero": nan_cells, "cellica_version": __version__,
                  "n_tiles": int(stop - start), "shard": {"index": i, "count": n, "start": start, "stop": stop},
                  "seconds": round(seconds, 3)}
    adata = make_adata(x, obs, columns or [], {"provenance": provenance}, f"cp_measure profiles of {store.label}")
    log.info("measured %d features of %d tiles (shard %d/%d) with cp_measure %s: %.1f s, %.1f tiles/s",
             x.shape[1], stop - start, i, n, cp_version, seconds, (stop - start) / max(seconds, 1e-9))
    if out is not None:
        write_h5ad(adata, out)
    return adata


def open_shard(store_path, params: ProfileParams | None, shard: str | None):
    """The checked parameters, the opened store, the nuclei channel's index and the shard's
    ``(i, n, start, stop)``: what measuring and counting nuclei both start from."""
    from cellica.embed.extract import parse_shard

    p = params or ProfileParams()
    p.validate()
    store = TileStore.open(store_path)
    nuclei = _channel_index(p.nuclei_channel, store.channel_names, store.label)
    return p, store, nuclei, parse_shard(shard, store.n_tiles, store.shard_tiles)


def _channel_index(channel: str, names: list[str], store: str) -> int:
    if channel in names:
        return names.index(channel)
    if str(channel).isdigit() and int(channel) < len(names):
        return int(channel)
    raise CellicaError(f"profiles.nuclei_channel {channel!r} is neither a channel of {store} ({names}) nor an "
                       f"index below {len(names)}")
