"""How many embedding jobs a store needs, and how long each runs, from a measured rate.

The rate is the one an ``embed`` job logs at its end ("... tiles/s"), or what
``benchmarks/gpu.py`` measures on the same GPU, model and tile size: an embed job is one
GPU (``compute.gpus: 1``) reading one contiguous, shard-aligned range of the store, so
the jobs of ``embed.shards`` run side by side as one SLURM array and the screen's time is
its largest job's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cellica.core.errors import CellicaError
from cellica.embed.extract import parse_shard

# Added to each job's runtime request: start-up (imports, the model, the store opened and
# verified) and the AnnData write, which the rate of the forward pass does not include.
STARTUP_MINUTES = 5


@dataclass(frozen=True)
class EmbedSizing:
    """What :func:`size_embed` found (``text()`` says it as a user sets it)."""

    tiles: int
    tiles_per_second: float
    shards: int
    largest_job_tiles: int
    runtime_minutes: int
    gpu_hours: float

    @property
    def hours_per_million(self) -> float:
        """GPU-hours (one job's device) per million tiles at this rate."""
        return 1e6 / self.tiles_per_second / 3600

    def text(self) -> str:
        """The estimate as ``cellica inspect --embed-rate`` prints it (what to set, and where)."""
        return (
            f"{self.tiles:,} tiles at {self.tiles_per_second:,.4g} tiles/s per GPU: {self.gpu_hours:,.2f} GPU-hours "
            f"({self.hours_per_million:,.3f} per million tiles). Set embed.shards: {self.shards} (the largest job "
            f"embeds {self.largest_job_tiles:,} tiles) and, in the SLURM profile, set-resources: embed: runtime: "
            f"{self.runtime_minutes} (minutes, with the margin)."
        )


def size_embed(n_tiles: int, shard_tiles: int, tiles_per_second: float, job_hours: float = 2.0,
               margin: float = 1.5) -> EmbedSizing:
    """The number of embedding jobs (``embed.shards``) and each job's runtime request.

    Parameters
    ----------
    n_tiles, shard_tiles
        The store's tiles and tiles per shard file (jobs split the store at shard files).
    tiles_per_second
        The measured rate of one job (one GPU, or one CPU job) on this model and tile size.
    job_hours
        The longest a job should run (queues favour short jobs; a lost job costs less).
    margin
        The runtime requested per job over its expected time (> 1: a slower node, a busy
        file system).

    Returns
    -------
    EmbedSizing
        The fewest jobs each under ``job_hours`` (at most one per shard file), the tiles of
        the largest, its runtime request in minutes and the GPU-hours of the whole store.
    """
    if n_tiles < 1 or shard_tiles < 1:
        raise CellicaError(f"sizing needs a store with tiles (got {n_tiles} tiles, {shard_tiles} per shard)")
    if not (math.isfinite(tiles_per_second) and tiles_per_second > 0):
        raise CellicaError(f"the embedding rate must be a positive number of tiles/s, got {tiles_per_second}")
    if not (math.isfinite(job_hours) and job_hours > 0):
        raise CellicaError(f"the hours per embedding job must be positive, got {job_hours}")
    if not (math.isfinite(margin) and margin >= 1):
        raise CellicaError(f"the runtime margin must be at least 1, got {margin}")
    files = -(-n_tiles // shard_tiles)
    shards = min(files, max(1, math.ceil(n_tiles / tiles_per_second / (job_hours * 3600))))
    while True:  # the split is by shard files, so the largest job may exceed the mean: check it
        largest = max(stop - start for *_, start, stop in
                      (parse_shard(f"{i}/{shards}", n_tiles, shard_tiles) for i in range(shards)))
        if largest / tiles_per_second <= job_hours * 3600 or shards == files:
            break
        shards += 1
    runtime = math.ceil(margin * largest / tiles_per_second / 60) + STARTUP_MINUTES
    return EmbedSizing(n_tiles, float(tiles_per_second), shards, largest, runtime, n_tiles / tiles_per_second / 3600)
