"""What ``cellica inspect`` prints about a tile store: counts per batch, plate and perturbation,
channel intensities from a seeded sample of tiles, or the result of a full verification."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import progress
from cellica.store._shards import MANIFEST_KEY, content_digest

if TYPE_CHECKING:
    from cellica.store.tilestore import TileStore


def describe(store: TileStore, verify: bool = False, max_stat_tiles: int = 2048, max_rows: int = 30) -> str:
    """A readable account of the store (``cellica inspect``): counts per batch, plate and
    perturbation and channel intensities; with ``verify``, the result of :meth:`verify`."""
    if verify:
        r = store.verify()
        return (f"{store.label}: OK: {r['tiles']} tiles in {r['shards']} shard(s) read back; chunk checksums "
                f"{'verified' if r['chunk_checksums'] else 'absent (a store written before crc32c)'}; content "
                f"digest {'matches' if r['content_digest'] else 'not recorded (an older store)'}")
    info = store.summary(max_stat_tiles=max_stat_tiles)
    lines = [f"store       {info['path']}", f"tiles       {info['n_tiles']} x {info['tile_shape']} {info['dtype']}",
             f"controls    {info['n_controls']}", f"source      {info['provenance'].get('source', '?')}"]
    with pd.option_context("display.max_rows", max_rows, "display.width", 120):
        for title, key in (("tiles per batch", "per_batch"), ("tiles per plate", "per_plate"),
                           ("tiles per perturbation", "per_perturbation")):
            lines.append(f"\n{title}:\n{info[key].head(max_rows).to_string()}")
        lines.append(f"\nchannel intensities (sample of {info['stats_tiles']} tiles):")
        lines.append(info["channel_stats"].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return "\n".join(lines)


def summary(store: TileStore, max_stat_tiles: int = 2048, seed: int = 0) -> dict[str, Any]:
    """Counts per batch / plate / perturbation, controls, and channel intensity stats.

    Intensity statistics use a seeded random sample of at most ``max_stat_tiles``
    tiles so that inspecting a million-tile store stays quick.
    """
    md = store.metadata
    n_sample = min(store.n_tiles, max_stat_tiles)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(store.n_tiles, size=n_sample, replace=False))
    tiles = store.read(sample).astype(np.float64)
    per_channel = tiles.transpose(1, 0, 2, 3).reshape(store.n_channels, -1)
    stats = pd.DataFrame(
        {
            "channel": store.channel_names,
            "mean": per_channel.mean(axis=1),
            "std": per_channel.std(axis=1),
            "p01": np.percentile(per_channel, 1, axis=1),
            "p99": np.percentile(per_channel, 99, axis=1),
            "max": per_channel.max(axis=1),
            "saturated_frac": (per_channel >= np.iinfo(store.dtype).max).mean(axis=1),
        }
    )
    return {
        "path": str(store.path),
        "n_tiles": store.n_tiles,
        "tile_shape": [store.n_channels, *store.tile_shape],
        "dtype": str(store.dtype),
        "n_controls": int(md["is_control"].sum()),
        "per_batch": md.groupby("batch").size(),
        "per_plate": md.groupby(["batch", "plate"]).size(),
        "per_perturbation": md.groupby("perturbation").size().sort_values(ascending=False),
        "channel_stats": stats,
        "stats_tiles": n_sample,
        "provenance": store.attrs.get("provenance", {}),
    }


def verify(store: TileStore) -> dict[str, Any]:
    """Read every tile and table back (``cellica inspect --verify``): every shard file present and
    equal to the manifest (size, crc32c), every chunk's checksum, every table's sha256, the
    content digest, the same generation at the end; raises :class:`CellicaError` naming what is
    damaged."""
    n_shards = -(-store.n_tiles // store.shard_tiles)
    for shard in progress(range(n_shards), desc=f"verify {store.path.name}", unit="shard"):
        store.read_range(shard * store.shard_tiles, min((shard + 1) * store.shard_tiles, store.n_tiles),
                         check_chunks=True)
    for name in (store.attrs.get(MANIFEST_KEY, {}).get("files") or {}):
        store.read_table(name, "table")
    recorded = store.attrs.get("content_sha256")
    if recorded and content_digest(store.path, store.n_tiles, store.shard_tiles) != recorded:
        raise CellicaError(f"{store.label}: contents differ from the digest recorded when the store was written "
                           "(a shard or the metadata was changed); re-create it")
    store.check_unchanged()
    return {"shards": n_shards, "tiles": store.n_tiles, "chunk_checksums": store.attrs.get("checksums") == "crc32c",
            "content_digest": bool(recorded), "manifest": bool(store.attrs.get(MANIFEST_KEY))}
