"""The workflow's configuration: its sections are the stages' parameter classes.

Each section of ``config/config.yaml`` is the fields of one stage's parameter dataclass
(the options of its ``cellica`` command) plus the few keys only the DAG reads
(:class:`WorkflowKeys` and friends below). From these classes come the JSON schema
(``workflow/schemas/config.schema.yaml``, written by ``cellica schema``), the
configuration reference in ``docs/configuration.md``, the short messages for a bad
config (:func:`config_problem`) and the typed reading of ``--config`` overrides
(:func:`apply_overrides`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from typing import Any

from cellica.core.compute import ComputeKeys
from cellica.core.errors import CellicaError
from cellica.core.params import Kind, Params, param, section_schema, show
from cellica.embed.params import EmbedParams, FeatureTableParams, ProfileParams, TrainParams
from cellica.evaluate.params import BaselineParams, EvalParams
from cellica.maps.params import MapParams
from cellica.registry import VARIANT_NAMES, VARIANTS
from cellica.report.params import ReportParams
from cellica.stability.params import AlignParams
from cellica.store.params import IngestParams, SimulationParams
from cellica.transform.params import TransformParams

SOURCES = ("simulate", "ingest", "features")


@dataclasses.dataclass
class WorkflowKeys(Params):
    """cellica workflow configuration: where outputs go and where the data comes from."""

    results_dir: str = param("results", "Folder for every output of the DAG (relative to the working directory).")
    reports_dir: str = param("reports", "Folder of the generated HTML reports (index.html and genes/).")
    source: str = param("simulate", "Where the data comes from. `simulate` builds the synthetic demo screen; "
                        "`ingest` reads image files listed in a manifest (section `ingest`); `features` starts "
                        "from an existing embeddings or profiles table (section `features`) and skips the image "
                        "stages.", choices=SOURCES)


def _keys(section: str, help: str = "", **fields: tuple[Any, Any]) -> type[Params]:
    """A parameter class of the keys only the DAG reads in a section (no command's options)."""
    cls = dataclasses.make_dataclass(f"{section.title()}Keys", [(k, tp, f) for k, (tp, f) in fields.items()],
                                     bases=(Params,), namespace={"section": section, "__doc__": help})
    return cls


IngestKeys = _keys("ingest", manifest=(str, param(
    "", "CSV with one row per image file: path, plate, well, site, channel, batch, perturbation, and is_control or "
    "a control_label.")))
MaeKeys = _keys("mae", checkpoint=(str | None, param(
    None, "Pretrained weights to use instead of training: cellica .safetensors (with its .json) or a timm-format "
    "ViT/MAE state dict (.pth/.bin/.safetensors; set embed.model_name).")))
EmbedKeys = _keys("embed", shards=(int, param(
    1, "Separate embedding jobs, each a contiguous, shard-aligned range of tiles; gathered afterwards.", ge=1)))
FeaturesKeys = _keys("features", path=(str, param("", "The table.")), truth=(str | None, param(
    None, "Optional table of true factors (.parquet/.csv/.tsv) with a sample_id column matching the sample ids and "
    "one numeric column per factor (embedding-level simulations): adds MCC, probe R^2 and InfoM/InfoE/InfoC per "
    "variant.")))
TransformKeys = _keys("transform", variants=(list[str], param(
    list(VARIANT_NAMES), "Which variants to compute: " + ", ".join(VARIANT_NAMES) + " (docs/stages.md says what "
    "each does).", item_choices=VARIANTS, min_items=1, unique=True)), level=(str, param(
        "tiles", "Transform tile embeddings or well means (image sources; imported features are used as they are).",
        choices=("tiles", "wells"))))
EvaluateKeys = _keys("evaluate", chunks=(int, param(
    1, "Jobs the genes are spread over (each a chunk of genes), merged per variant.", ge=1)))
ProfilesKeys = _keys("profiles", enabled=(bool, param(
    False, "Embed the tiles with cp_measure's CellProfiler-style features instead of an MAE (no training, no "
    "GPU): a classical baseline through the same transforms and evaluation (docs/models.md).")))
MapsKeys = _keys("maps", enabled=(bool, param(
    True, "Build a gene-level map per variant (results/maps/) and score its guide consistency and its recall of "
    "known relationships.")))


@dataclasses.dataclass
class StabilityKeys(Params):
    """Optional `snakemake stability` target (image sources): train the MAE twice with different
    seeds, embed the tiles with both, and align the runs per class of map (`cellica align`);
    with enabled, the table joins the summary report."""

    section = "stability"
    enabled: bool = param(False, "Add the alignment table to the report (and so to the default target); costs "
                          "two more MAE trainings and embeddings.")
    seeds: list[int] = param([1, 2], "Seeds of the two MAE trainings (the rest of `mae` is shared).", length=2,
                             unique=True)


# section -> (the stage's parameters: the options of its command, then the DAG's own keys)
SECTIONS: dict[str, tuple[type[Params], ...]] = {
    "compute": (ComputeKeys,),
    "simulate": (SimulationParams,),
    "ingest": (IngestKeys, IngestParams),
    "mae": (MaeKeys, TrainParams),
    "embed": (EmbedKeys, EmbedParams),
    "features": (FeaturesKeys, FeatureTableParams),
    "transform": (TransformKeys, TransformParams),
    "stability": (StabilityKeys, AlignParams),
    "evaluate": (EvaluateKeys, EvalParams),
    "baselines": (BaselineParams,),
    "maps": (MapsKeys, MapParams),
    "profiles": (ProfilesKeys, ProfileParams),
    "report": (ReportParams,),
}


def config_schema() -> dict[str, Any]:
    """The JSON schema of the workflow's config, generated from the parameter classes."""
    top = section_schema([WorkflowKeys])
    props = dict(top["properties"])
    for name, classes in SECTIONS.items():
        props[name] = section_schema(classes, classes[-1].help_text() if name != "stability"
                                     else StabilityKeys.help_text())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "cellica workflow configuration",
            "description": "Generated by `cellica schema` from cellica's parameter classes (do not edit: edit "
                           "the class). Every key with its meaning and default; unknown keys are errors.",
            "type": "object", "additionalProperties": False, "properties": props}


def schema_yaml() -> str:
    """The schema as the YAML text of ``workflow/schemas/config.schema.yaml``."""
    import yaml

    return "# Generated by `cellica schema --out workflow/schemas/config.schema.yaml`: do not edit.\n" + yaml.safe_dump(
        config_schema(), sort_keys=False, width=110, allow_unicode=True)


def defaults() -> dict[str, Any]:
    """The config every key of which has its default (what a run without a config file uses)."""
    props = config_schema()["properties"]
    out = {k: v["default"] for k, v in props.items() if "default" in v}
    for name, sec in props.items():
        if sec.get("type") == "object":
            out[name] = {k: v["default"] for k, v in sec["properties"].items() if "default" in v}
    return out


def config_problem(config: dict[str, Any], schema: dict[str, Any] | None = None) -> str | None:
    """The violations of the schema as a few short lines, or None when the config is valid.

    Unknown keys name the closest valid key; enums list the allowed values; every
    message names the key by its dotted path.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema or config_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    lines = [_explain(e) for e in errors[:5]]
    if len(errors) > 5:
        lines.append(f"... and {len(errors) - 5} more")
    return "\n".join(lines) or None


def _explain(error) -> str:
    where = ".".join(map(str, error.absolute_path)) or "(top level)"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        lines = []
        for key in (k for k in error.instance if k not in allowed):
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(allowed)}"
            name = f"{where}.{key}" if where != "(top level)" else str(key)
            lines.append(f"unknown config key {name!r}: {hint}")
        return "\n".join(lines)
    if error.validator == "enum":
        return (f"config key {where}: {show(error.instance)!r} is not allowed; choose one of "
                f"{', '.join(map(show, error.validator_value))}")
    return f"config key {where}: {error.message}"


MAX_CONFIG_VALUES = 100_000  # a real config has a few hundred; YAML aliases can make billions


def check_config_size(config: Any, limit: int = MAX_CONFIG_VALUES) -> None:
    """Refuse a config that expands to more than ``limit`` values (a YAML alias bomb), counted
    without expanding it: each node's size is computed once, however often it is referenced."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key], total = limit + 1, 1  # a cycle counts as too big
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list | tuple) else ()
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[key] = total
        return total

    if size(config) > limit:
        raise CellicaError(f"the configuration expands to more than {limit:,} values (YAML aliases and anchors "
                           "repeated within each other?); write the values out")


def _input_file_readers() -> dict[tuple[str, str], Any]:
    """Config keys that name input files, each with the reader its job uses for small tables
    (``None``: the file must exist; the job reads it): all checked before any job runs."""
    from cellica.maps.annotations import load_pair_file
    from cellica.maps.arms import read_gene_table
    from cellica.transform.positions import read_positions

    return {("ingest", "manifest"): None, ("features", "path"): None, ("features", "truth"): None,
            ("mae", "checkpoint"): None, ("transform", "position_table"): read_positions,
            ("maps", "arm_table"): lambda p: read_gene_table(p, ("gene", "arm")),
            ("maps", "unexpressed_genes"): lambda p: read_gene_table(p, ("gene",)),
            ("maps", "annotation_file"): load_pair_file}


def config_rules(config: dict[str, Any]) -> str | None:
    """Every rule the schema cannot state, checked on the validated config (defaults filled)
    before any job runs: each section's parameters built as its command will build them (their
    bounds and cross-key checks), and the rules between sections. One line per problem."""
    problems = []
    unused = {name for name in ("simulate", "ingest", "features") if name != config["source"]}
    for section, classes in SECTIONS.items():
        if section in unused:  # its required keys may be unset, and no job reads it
            continue
        values = config.get(section) or {}
        for cls in classes:
            names = {f.name for f in dataclasses.fields(cls)}
            try:
                cls(**{k: v for k, v in values.items() if k in names})
            except CellicaError as exc:
                problems.append(f"config key {exc}")
            except TypeError:  # a required key without a value
                missing = [f.name for f in dataclasses.fields(cls) if f.name not in values
                           and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
                problems.append(f"config key {section}.{missing[0] if missing else '?'}: required when source is "
                                f"{config['source']!r}")
    from cellica.core.remote import is_url

    for (section, key), reader in _input_file_readers().items():
        path = (config.get(section) or {}).get(key)
        if section in unused or not path or is_url(str(path)):
            continue
        if not os.path.exists(path):
            problems.append(f"config key {section}.{key}: {path} does not exist (relative paths are read from "
                            f"{os.getcwd()})")
        elif reader is not None:
            try:
                reader(path)
            except CellicaError as exc:
                problems.append(f"config key {section}.{key}: {exc}")
    from cellica._section_rules import between_sections

    problems += between_sections(config)
    return "\n".join(dict.fromkeys(problems)) or None


def apply_overrides(config: dict[str, Any]) -> dict[str, Any]:
    """Retype the values Snakemake's ``--config section='{key: value}'`` delivers as text, by
    the type of the key's parameter field (``'8'`` -> 8, ``'null'`` -> None).

    Returns the config (changed in place). A key that does not exist is left for
    :func:`config_problem` to name with its closest valid key.
    """
    kinds = _kinds()
    for (section, name), kind in kinds.items():
        sec = config.get(section) if section else config
        text = sec.get(name) if isinstance(sec, dict) else None
        if isinstance(text, str) and (kind.name != "str" or (kind.nullable and text == "null")):
            sec[name] = _typed(sec[name], kind)
        elif isinstance(text, list) and kind.item in ("int", "float", "bool"):
            # Snakemake reads `--config s='{key: [0, 1]}'` with YAML's base loader: items are text too
            sec[name] = [_typed(v, Kind(kind.item, False)) if isinstance(v, str) else v for v in text]
    return config


def _kinds() -> dict[tuple[str, str], Kind]:
    out = {("", k): v for k, v in WorkflowKeys.kinds().items()}
    for section, classes in SECTIONS.items():
        for cls in classes:
            out.update({(section, k): v for k, v in cls.kinds().items()})
    return out


def _typed(text: str, kind: Kind | None) -> Any:
    """A command-line value as YAML would read it (``8`` -> 8, ``null`` -> None, ``[0, 1]``)."""
    import yaml

    if kind is not None and kind.name == "str" and text != "null":
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def provenance(config: dict[str, Any], sources: dict[str, str]) -> list[str]:
    """One line per key that differs from its default: ``section.key = value  (from where)``."""
    base = defaults()
    lines = []
    for section, value in config.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for key, v in items:
            d = base.get(section, {}).get(key) if key else base.get(section)
            if v != d:
                name = f"{section}.{key}" if key else section
                lines.append(f"{name} = {json.dumps(v, default=str)}  ({sources.get(name, 'config file')})")
    return lines


def _cli_value(value: Any) -> str:
    """One config value in the syntax of cellica's generated CLI options."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return show(value)


def command_args(config: dict[str, Any], section: str, cls: type[Params], only=None) -> str:
    """``config[section]`` as the ``--key value`` options of ``cls``'s command (shell-quoted): the
    keys that are its options (and in ``only``), less ``same_outputs`` ones at their defaults."""
    import shlex

    values = config.get(section, {})
    names = [f.name for f in dataclasses.fields(cls) if f.metadata.get("cli", True) and f.name in values
             and (only is None or f.name in only)
             and not (f.metadata.get("same_outputs") and values[f.name] == f.default)]
    return " ".join(f"--{n.replace('_', '-')} {shlex.quote(_cli_value(values[n]))}" for n in names)


def config_sources(configfiles: list, overrides: dict[str, Any] | None) -> dict[str, str]:
    """Where each set key came from: the last config file that sets it, or ``--config``."""
    import yaml

    out: dict[str, str] = {}

    def mark(node: dict, origin: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": origin for k in value})
            else:
                out[key] = origin

    for path in configfiles:
        with open(path) as fh:
            mark(yaml.safe_load(fh) or {}, str(path))
    mark(overrides or {}, "--config")
    return out


def reference_markdown() -> str:
    """The configuration reference of ``docs/configuration.md``: every section and key with its
    type, default, allowed values and meaning, from the schema."""
    schema = config_schema()["properties"]
    top = {k: v for k, v in schema.items() if v.get("type") != "object"}
    parts = ["#### Top level", "", *_key_table(top)]
    for name, sec in schema.items():
        if sec.get("type") == "object":
            parts += ["", f"#### `{name}`", "", sec["description"], "", *_key_table(sec["properties"])]
    return "\n".join(parts)


def _key_table(props: dict[str, Any]) -> list[str]:
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for key, p in props.items():
        types = p["type"] if isinstance(p["type"], list) else [p["type"]]
        allowed = p.get("enum") or (p.get("items") or {}).get("enum")
        bounds = [f"{op} {p[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                                                ("exclusiveMaximum", "<")) if k in p]
        allowed_text = ", ".join(f"`{show(v)}`" for v in allowed) if allowed else " ".join(bounds)
        default = f"`{json.dumps(p['default'])}`" if "default" in p else "(required)"
        meaning = p["description"].replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{key}` | {' or '.join(types)} | {default} | {allowed_text} | {meaning} |")
    return rows
