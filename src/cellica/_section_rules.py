"""The rules between config sections that no single parameter class can state (which stages can go
together, and a setting of one stage that another's job would refuse), checked with the rest of
:func:`cellica.config.config_rules` before any job runs."""

from __future__ import annotations

from typing import Any


def between_sections(config: dict[str, Any]) -> list[str]:
    """One line per broken rule of the validated config (defaults filled); empty when none is.

    Parameters
    ----------
    config
        The workflow's config, validated against the schema with its defaults filled.

    Returns
    -------
    list of str
        What is wrong, naming the keys.
    """
    problems = []
    if config["profiles"]["enabled"] and (config["source"] == "features" or config["stability"]["enabled"]):
        problems.append("profiles.enabled measures the tiles of an image source (simulate or ingest) instead of "
                        "training an MAE: it cannot go with source: features or stability.enabled")
    if config["stability"]["enabled"] and config["source"] == "features":
        problems.append("stability.enabled needs an image source (simulate or ingest): there is no MAE to train "
                        "twice when source is 'features'")
    tile = (config.get(config["source"]) or {}).get("tile_size") if config["source"] != "features" else None
    trains = not (config["mae"]["checkpoint"] or config["profiles"]["enabled"])  # a checkpoint brings its own
    if tile and trains and tile % config["mae"]["patch_size"]:
        problems.append(f"config keys {config['source']}.tile_size and mae.patch_size: the tile size {tile} is not a "
                        f"multiple of the patch size {config['mae']['patch_size']} (the MAE's rule, MAEConfig)")
    if config["stability"]["enabled"] and config["mae"]["checkpoint"]:
        problems.append("stability.enabled trains the MAE with two seeds: it cannot use mae.checkpoint")
    from cellica.estimates import shard_problem

    return problems + [p for p in (shard_problem(config),) if p]
