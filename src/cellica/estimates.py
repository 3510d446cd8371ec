"""What a config will cost, estimated before any job starts: the settings whose time or memory
is absurd for the screen they describe are warned with the estimate (the dry run prints them),
and the ones a job would refuse are refused (:func:`shard_problem`).

The estimates are orders of magnitude from the settings alone (no file is read):

- a tile store shard is read whole, so its uncompressed size is the least memory of a read;
- a simulated screen's saturation is measured on a few tiles rendered with its settings;
- LightGBM's time grows with the boosting rounds times the rows and features of each fit: about
  20 ns per row, feature and tree on one core (measured on this project's 2-core machines with
  LightGBM 4, 4,000 x 64 to 4,000 x 384 rows x features; small fits cost more per row).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHARD_BYTES_WARNED = 1 << 30  # a shard file above 1 GiB uncompressed
TREE_NS = 20e-9  # seconds per row, feature and tree (module docstring)
TREE_SECONDS_WARNED = 24 * 3600.0  # a day of one core for the classifiers
SATURATED_WARNED = 1e-4  # pixels clipped: the brightest structures (puncta, nucleoli) lose their intensity
DARK_LEVELS = 256  # a 99th percentile under this many counts: the image lives in a few grey levels
ASSUMED_FEATURES = 192  # an MAE's width when the transform keeps every component (ViT-Ti)


def _dtype_bytes(config: dict[str, Any]) -> int:
    source = config["source"]
    return 1 if source == "ingest" and config["ingest"].get("dtype") == "uint8" else 2


def simulated_tiles(sim: dict[str, Any]) -> int:
    """Tiles of the simulated screen ``sim`` (the ``simulate`` section, defaults filled): every plate of
    every experiment holds its control wells and two guides' wells of each gene it screens."""
    plates = sim["n_experiments"] * sim["plates_per_experiment"]
    gene_wells = sim["n_genes"] * sim["experiments_per_gene"] * sim["guides_per_gene"] * sim["plates_per_experiment"]
    return (plates * sim["control_wells_per_plate"] + gene_wells) * sim["tiles_per_well"]


def shard_problem(config: dict[str, Any]) -> str | None:
    """Why ``embed.shards`` cannot split the simulated store (more jobs than shard files), or None.

    Each embedding job takes a range of whole shard files, so a job needs at least one (the
    embed job would refuse the split). Only a simulated screen's tile count is known before
    the store is written; for an ingested one the embed job refuses it, naming the count.
    """
    if config["source"] != "simulate":
        return None
    sim = config["simulate"]
    tiles = simulated_tiles(sim)
    files = -(-tiles // sim["shard_tiles"])
    if config["embed"]["shards"] > files:
        return (f"config key embed.shards: {config['embed']['shards']} embedding jobs, but the simulated store holds "
                f"{tiles:,} tiles in {files} shard file(s) of simulate.shard_tiles {sim['shard_tiles']}: each job "
                f"takes whole shard files; set embed.shards to at most {files} or lower simulate.shard_tiles")
    return None


def shard_warning(config: dict[str, Any]) -> str | None:
    """A tile store shard too large to read comfortably (each read holds a whole shard), or None."""
    source = config["source"]
    if source not in ("simulate", "ingest"):
        return None
    section = config[source]
    channels = section["n_channels"] if source == "simulate" else len(section["channels"])
    size = section["shard_tiles"] * channels * section["tile_size"] ** 2 * _dtype_bytes(config)
    if size <= SHARD_BYTES_WARNED:
        return None
    return (f"{source}.shard_tiles {section['shard_tiles']}: each shard file holds {size / 2**30:,.1f} GiB of pixels "
            f"({channels} channels of {section['tile_size']} px), and a read holds a whole shard in memory, per "
            "reading thread; a few hundred MiB per shard is the usual size (docs/hpc.md)")


def saturation_warning(config: dict[str, Any], n_tiles: int = 8) -> str | None:
    """``simulate.intensity_scale`` that clips the rendered pixels at 65535, or leaves them in a few
    grey levels, measured on ``n_tiles`` tiles rendered with the config's settings; or None."""
    if config["source"] != "simulate":
        return None
    from cellica.store.params import SimulationParams
    from cellica.store.simulate import sample_tiles

    p = SimulationParams(**config["simulate"])
    tiles = sample_tiles(p, max(1, min(n_tiles, (1 << 18) // p.tile_size**2)))
    saturated = float((tiles == 65535).mean())
    top = float(np.percentile(tiles, 99))
    if saturated > SATURATED_WARNED:
        return (
            f"simulate.intensity_scale {p.intensity_scale:g}: {saturated:.2%} of the pixels "
            "(the brightest structures) are "
            f"clipped at 65535, measured on {len(tiles)} rendered tiles: their intensities are lost; lower it "
            "(default 12000)"
        )
    if top < DARK_LEVELS:
        return (f"simulate.intensity_scale {p.intensity_scale:g}: 99% of the pixels are below {top:.0f} counts "
                f"(measured on {len(tiles)} rendered tiles): the cells live in a few grey levels; raise it "
                "(default 12000)")
    return None


def classifier_seconds(config: dict[str, Any]) -> float | None:
    """One core's seconds for the LightGBM fits of a simulated screen (module docstring), or None
    where the rows are not known before the data are read."""
    if config["source"] != "simulate":
        return None
    sim, ev = config["simulate"], config["evaluate"]
    per_well = 1 if ev["level"] == "wells" else sim["tiles_per_well"]
    controls = sim["n_experiments"] * sim["plates_per_experiment"] * sim["control_wells_per_plate"] * per_well
    gene = sim["experiments_per_gene"] * sim["plates_per_experiment"] * sim["guides_per_gene"] * per_well
    rows = min(controls, ev["max_controls"] or controls) + gene
    n = config["transform"]["n_components"]
    features = int(n) if n and n >= 1 else ASSUMED_FEATURES
    sets = len(config["transform"]["variants"]) + len(config["baselines"]["names"])
    folds = max(sim["n_experiments"] - 1, 1) if ev["split"] == "batch" else 1
    fits = sim["n_genes"] * sets * len(ev["seeds"]) * folds
    return fits * ev["n_trees"] * rows * features * TREE_NS


def trees_warning(config: dict[str, Any]) -> str | None:
    """``evaluate.n_trees`` whose classifiers would take more than a day of one core, or None."""
    seconds = classifier_seconds(config)
    if seconds is None or seconds <= TREE_SECONDS_WARNED:
        return None
    trees = config["evaluate"]["n_trees"]
    return (f"evaluate.n_trees {trees}: the classifiers would take about {seconds / 3600:,.0f} hours of one core "
            f"({trees / 100:,.4g}x the paper's 100 trees; estimated at 20 ns per row, feature and tree); spread over "
            "evaluate.chunks jobs, or fewer trees, seeds or feature sets")


def cost_warnings(config: dict[str, Any]) -> list[str]:
    """Every estimate of the validated config (defaults filled) worth a warning before any job
    starts, one line each naming the key and the estimate.

    Parameters
    ----------
    config
        The workflow's config, checked by :func:`cellica.plan.checked_config`.

    Returns
    -------
    list of str
        Empty when nothing is out of proportion.
    """
    found = (shard_warning(config), saturation_warning(config), trees_warning(config))
    return [line for line in found if line]
