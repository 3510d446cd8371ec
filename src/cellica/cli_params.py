"""Command-line options generated from a parameter dataclass, so each key is defined once.

Every field ``some_name`` becomes ``--some-name``. Values are written the way the
Snakemake rules write them (see ``workflow/rules/common.smk``): lists and tuples
comma-separated (``--channels 1,2,3``), mappings as ``key=value`` pairs
(``--column-map batch=experiment,perturbation=sirna``), ``none`` for null.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

from cellica.errors import CellicaError


def _kind(tp: Any) -> str:
    """Reduce a type hint to one of dict, list, tuple, bool, int, float, str."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return _kind(next(a for a in typing.get_args(tp) if a is not type(None)))
    for container in (dict, list, tuple):
        if origin is container or tp is container:
            return container.__name__
    return tp.__name__ if tp in (bool, int, float, str) else "str"


def parse_value(text: str, kind: str, name: str, nullable: bool = True) -> Any:
    """Parse one command-line value of the given kind; ``none`` means null for a ``nullable``
    option (for a string option that cannot be null, such as ``batch_correction``, it is the
    word ``none``)."""
    if nullable and text.lower() in ("none", "null"):
        return None
    try:
        if kind == "dict":
            pairs = [item.split("=", 1) for item in text.split(",") if item]
            if any(len(p) != 2 for p in pairs):
                raise ValueError("expected key=value pairs")
            return {k.strip(): v.strip() for k, v in pairs}
        if kind in ("list", "tuple"):
            items = [item.strip() for item in text.split(",") if item.strip()]
            if kind == "tuple":
                return tuple(float(item) for item in items)
            return items
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError("expected true or false")
            return text.lower() in ("true", "1", "yes")
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError as exc:
        raise CellicaError(f"--{name.replace('_', '-')}: cannot parse {text!r} ({exc})") from None
    return text


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add one option per field of ``cls`` (defaults shown in ``--help``)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        parser.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            metavar=_kind(hints[f.name]).upper(),
            required=required,
            default=argparse.SUPPRESS,
            help=f"(default: {default!r})" if not required else "(required)",
        )


def dataclass_from_args(cls: type, ns: argparse.Namespace) -> Any:
    """Build ``cls`` from parsed options; unspecified fields keep their defaults."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            nullable = type(None) in typing.get_args(hints[f.name])
            value = parse_value(getattr(ns, f.name), _kind(hints[f.name]), f.name, nullable)
            if isinstance(value, list) and typing.get_args(hints[f.name])[:1] == (int,):
                value = [parse_value(v, "int", f.name) for v in value]
            kwargs[f.name] = value
    return cls(**kwargs)
