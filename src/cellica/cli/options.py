"""Command-line options generated from a parameter dataclass, so each key is defined once.

Every field ``some_name`` becomes ``--some-name`` with the field's help text, allowed
values and default in ``--help``. Values are written the way the Snakemake rules write
them (see ``workflow/rules/common.smk``): lists and tuples comma-separated
(``--channels 1,2,3``), mappings as ``key=value`` pairs (``--column-map
batch=experiment,perturbation=sirna``), ``null`` for null.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from cellica.core.errors import CellicaError
from cellica.core.params import NULL, Kind, show


def parse_value(text: str, kind: str, name: str, nullable: bool = True) -> Any:
    """Parse one command-line value of the given kind (``null`` is None for a nullable option)."""
    if nullable and text == NULL:
        return None
    try:
        if kind == "dict":
            pairs = [item.split("=", 1) for item in text.split(",") if item]
            if any(len(p) != 2 for p in pairs):
                raise ValueError("expected key=value pairs")
            return {k.strip(): v.strip() for k, v in pairs}
        if kind in ("list", "tuple"):
            items = [item.strip() for item in text.split(",") if item.strip()]
            return tuple(float(item) for item in items) if kind == "tuple" else items
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError("expected true or false")
            return text.lower() in ("true", "1", "yes")
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError as exc:
        hint = f"; write {NULL} for none" if nullable else ""
        raise CellicaError(f"--{name.replace('_', '-')}: cannot parse {text!r} ({exc}{hint})") from None
    return text


def option_help(f: dataclasses.Field, kind: Kind) -> str:
    """The ``--help`` line of a field: its description, allowed values and default."""
    parts = [f.metadata.get("help", "").replace("%", "%%")]
    choices = f.metadata.get("choices") or f.metadata.get("item_choices")
    if choices:
        allowed = [*choices, None] if kind.nullable and None not in choices else list(choices)
        parts.append(f"{{{', '.join(map(show, allowed))}}}")
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return " ".join(parts + ["(required)"])
    if isinstance(default, list | tuple):
        default = ",".join(map(str, default))
    elif isinstance(default, dict):
        default = ",".join(f"{k}={v}" for k, v in default.items())
    return " ".join(parts + [f"(default: {show(default)})"])


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add one option per field of ``cls`` that is a command-line option."""
    kinds = cls.kinds()
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.metadata.get("cli", True):
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, metavar=kinds[f.name].name.upper(),
                            required=required, default=argparse.SUPPRESS, help=option_help(f, kinds[f.name]))


def dataclass_from_args(cls: type, ns: argparse.Namespace) -> Any:
    """Build ``cls`` from parsed options; unspecified fields keep their defaults."""
    kinds = cls.kinds()
    kwargs = {}
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            kind = kinds[f.name]
            value = parse_value(getattr(ns, f.name), kind.name, f.name, kind.nullable)
            if isinstance(value, list) and kind.item == "int":
                value = [parse_value(v, "int", f.name, False) for v in value]
            kwargs[f.name] = value
    return cls(**kwargs)
