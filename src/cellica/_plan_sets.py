"""Which feature sets a run makes, from its checked config: the ``{model}`` its images are
embedded with and the baselines that apply, each decided by its registry entry
(:data:`cellica.registry.MODELS`, :data:`cellica.registry.BASELINES`)."""

from __future__ import annotations

from typing import Any

from cellica.registry import BASELINES, MODELS


def model_tag(config: dict[str, Any]) -> str:
    """The ``{model}`` a run embeds with (:data:`cellica.registry.MODELS`): ``seed<N>`` (an MAE
    trained with that seed), ``checkpoint`` (``mae.checkpoint``) or ``cp_measure`` (profiles
    instead of an MAE)."""
    if config["profiles"]["enabled"]:
        return MODELS["cp_measure"].name
    if config["mae"]["checkpoint"]:
        return MODELS["checkpoint"].name
    return f"{MODELS['seed'].name}{config['mae']['seed']}"


def _setting(config: dict[str, Any], dotted: str):
    section, key = dotted.split(".")
    return config[section][key]


def applicable_baselines(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The baselines a checked config asks for that apply to its run, and why each other one
    does not (one line each; the run log shows them): ``baselines.names`` in its order, each
    judged by its registry entry (:class:`cellica.registry.Baseline`: its sources, the settings
    that rule it out, the column imported features must name)."""
    keep, notes = [], []
    for name in config["baselines"]["names"]:
        b, why = BASELINES[name], None
        if config["source"] not in b.sources:
            why = f"it needs images, and source is {config['source']!r}"
        else:
            why = next((reason for setting, reason in b.not_with if _setting(config, setting)), None)
        if why is None and b.column and config["source"] == "features" and not config["baselines"][b.column]:
            why = f"imported features need baselines.{b.column} to name the count"
        if why:
            notes.append(f"baseline {name} left out: {why}")
        else:
            keep.append(name)
    return keep, notes
