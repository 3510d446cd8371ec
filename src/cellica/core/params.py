"""One definition per parameter: dataclass fields that carry their type, default, bounds,
choices and help text.

Every stage's parameters are one dataclass built from :func:`param` fields and deriving
from :class:`Params`. From those fields alone come:

* validation of a value (:meth:`Params.validate`, run on construction, so library callers
  meet the same rules as the workflow);
* the stage's section of the workflow's JSON schema (:func:`section_schema`; the file
  ``workflow/schemas/config.schema.yaml`` is written by ``cellica schema``);
* the ``cellica`` command's options and their ``--help`` (:mod:`cellica.cli.options`).

Null is written ``null`` everywhere: in YAML, in the schema and on the command line.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import math
import numbers
import types
import typing
from typing import Any, ClassVar

from cellica.core.errors import CellicaError

NULL = "null"
_BOUNDS = {"ge": ("minimum", ">="), "le": ("maximum", "<="), "gt": ("exclusiveMinimum", ">"),
           "lt": ("exclusiveMaximum", "<")}


def param(default: Any = dataclasses.MISSING, help: str = "", *, choices=None, item_choices=None,
          ge=None, le=None, gt=None, lt=None, length: int | None = None, min_items: int | None = None,
          unique: bool = False, ordered: str | None = None, cli: bool = True, config: bool = True,
          same_outputs: bool = False) -> Any:
    """A dataclass field with its schema.

    Parameters
    ----------
    default
        The default (lists and dicts are copied per instance); omitted: required.
    help
        One or two sentences: what it does, its unit, when to change it.
    choices, item_choices
        Allowed values of the field, or of each item of a list field. A registry's dict
        (:mod:`cellica.registry`) is kept, not copied: an entry added to it is allowed at once.
    ge, le, gt, lt
        Bounds of a number (each item's, for a list of numbers).
    length, min_items, unique
        Exact or least length of a list, and whether its items must differ.
    ordered
        For a (low, high) pair: ``"<="`` (low may equal high) or ``"<"`` (strictly below).
    cli
        False for a key of the workflow's config that is not an option of the stage's command.
    config
        False for an option the workflow sets itself (``threads`` from the rule's threads,
        ``rotation_seed`` from the seed wildcard): a CLI option, not a config key.
    same_outputs
        True for a setting under which every output is the same, bit for bit, whatever its
        value (loader workers; the store's compressor: the same pixels). The workflow passes it
        to the command only when it is set to another value than the default, so a key added
        with such a default leaves finished results up to date (Snakemake re-runs a job whose
        command's options changed).
    """
    def kept(values):
        return values if values is None or isinstance(values, dict) else tuple(values)

    meta = {"help": help, "choices": kept(choices), "item_choices": kept(item_choices),
            "ge": ge, "le": le, "gt": gt, "lt": lt, "length": length, "min_items": min_items,
            "unique": unique, "ordered": ordered, "cli": cli, "config": config, "same_outputs": same_outputs}
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=functools.partial(copy.deepcopy, default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def like(cls: type, name: str, **changes: Any) -> Any:
    """A field defined as ``cls``'s field ``name`` (one definition shared by two classes),
    optionally with changed metadata (e.g. ``cli=False``)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    meta = {**f.metadata, **changes}
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return param(default, **{k: v for k, v in meta.items()})


@dataclasses.dataclass(frozen=True)
class Kind:
    """A field's type reduced to what the schema and the CLI need."""

    name: str  # int, float, str, bool, list, tuple, dict
    nullable: bool
    item: str | None = None  # items of a list or tuple, values of a dict ("any": str, number or bool)

    @classmethod
    def of(cls, hint: Any) -> Kind:
        """The kind of a field from its type hint (``X | None`` marks it optional)."""
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (types.UnionType, typing.Union) and type(None) in args:
            inner = next(a for a in args if a is not type(None))
            return dataclasses.replace(cls.of(inner), nullable=True)
        origin = typing.get_origin(hint) or hint
        if origin in (list, tuple, dict):
            item = args[-1] if args else Any
            return cls(origin.__name__, False, cls._scalar(item))
        return cls(cls._scalar(hint), False)

    @staticmethod
    def _scalar(tp: Any) -> str:
        if tp in (bool, int, float, str):
            return tp.__name__
        if typing.get_origin(tp) in (types.UnionType, typing.Union):
            return "str|int" if set(typing.get_args(tp)) == {str, int} else "any"
        return "any"


_JSON = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "list": "array",
         "tuple": "array", "dict": "object"}
_ITEM_JSON = {"int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"},
              "bool": {"type": "boolean"}, "str|int": {"type": ["string", "integer"]},
              "any": {"type": ["string", "number", "boolean"]}}


class Params:
    """Base of every stage's parameter dataclass: validation from the fields' metadata.

    Subclasses set ``section`` (their config section) and may add cross-field rules in
    :meth:`check`.
    """

    section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Validate the fields as soon as the parameters are made."""
        self.validate()

    @classmethod
    def kinds(cls) -> dict[str, Kind]:
        """Each field's kind, by field name."""
        hints = typing.get_type_hints(cls)
        return {f.name: Kind.of(hints[f.name]) for f in dataclasses.fields(cls)}

    def validate(self) -> None:
        """Raise :class:`CellicaError` naming ``section.key`` for a value the schema refuses."""
        kinds = self.kinds()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple) and kinds[f.name].name == "list":
                value = list(value)
                setattr(self, f.name, value)
            check_value(f"{self.section}.{f.name}", value, kinds[f.name], f.metadata)
        self.check()

    def check(self) -> None:
        """Rules between fields (none by default)."""

    @classmethod
    def help_text(cls) -> str:
        """The class docstring's first paragraph, on one line (the section's description)."""
        return " ".join(inspect.getdoc(cls).split("\n\n")[0].split())


def check_value(name: str, value: Any, kind: Kind, meta: typing.Mapping[str, Any]) -> None:
    """Refuse a value of the wrong type, outside its bounds or not among its choices."""
    if value is None:
        if kind.nullable:
            return
        raise CellicaError(f"{name}: null is not allowed here")
    if kind.name in ("list", "tuple"):
        if not isinstance(value, list | tuple):
            raise CellicaError(f"{name}: expected a list, got {value!r}")
        if meta.get("length") is not None and len(value) != meta["length"]:
            raise CellicaError(f"{name}: expected {meta['length']} values, got {len(value)}")
        if meta.get("min_items") is not None and len(value) < meta["min_items"]:
            raise CellicaError(f"{name}: give at least {meta['min_items']} value(s), got {list(value)}")
        if meta.get("unique") and len(set(value)) != len(value):
            raise CellicaError(f"{name}: values are repeated in {list(value)}; each must appear once")
        for item in value:
            _check_scalar(name, item, kind.item or "any", {**meta, "choices": meta.get("item_choices")})
        order = meta.get("ordered")
        if order and not (value[0] < value[1] if order == "<" else value[0] <= value[1]):
            raise CellicaError(f"{name}: {list(value)} is not a (low, high) pair: the first value must be "
                               f"{'below' if order == '<' else 'at most'} the second")
        return
    if kind.name == "dict":
        if not isinstance(value, dict):
            raise CellicaError(f"{name}: expected a mapping, got {value!r}")
        return
    _check_scalar(name, value, kind.name, meta)


def _check_scalar(name: str, value: Any, kind: str, meta: typing.Mapping[str, Any]) -> None:
    ok = {"bool": isinstance(value, bool),
          "int": isinstance(value, numbers.Integral) and not isinstance(value, bool),
          "float": isinstance(value, numbers.Real) and not isinstance(value, bool),
          "str": isinstance(value, str),
          "str|int": isinstance(value, str | numbers.Integral) and not isinstance(value, bool)}.get(kind, True)
    if not ok:
        raise CellicaError(f"{name}: expected {_JSON.get(kind, kind)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise CellicaError(f"{name}: must be a finite number, got {value!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise CellicaError(f"{name}: {value!r} is not allowed; choose one of {', '.join(map(show, choices))}")
    for key, (_, op) in _BOUNDS.items():
        bound = meta.get(key)
        if bound is None or not isinstance(value, numbers.Real):
            continue
        if not {"ge": value >= bound, "le": value <= bound, "gt": value > bound, "lt": value < bound}[key]:
            raise CellicaError(f"{name}: must be {op} {bound}, got {value!r}")


def show(value: Any) -> str:
    """A value as a user writes it (null, true, 0.5, text)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def field_schema(f: dataclasses.Field, kind: Kind) -> dict[str, Any]:
    """The JSON schema of one field (type, enum, bounds, default, description)."""
    meta = f.metadata
    out: dict[str, Any] = {"type": [_JSON[kind.name], "null"] if kind.nullable else _JSON[kind.name]}
    if kind.name in ("list", "tuple"):
        items = dict(_ITEM_JSON[kind.item or "any"])
        if meta.get("item_choices"):
            items["enum"] = list(meta["item_choices"])
        items.update({js: meta[k] for k, (js, _) in _BOUNDS.items() if meta.get(k) is not None})
        out["items"] = items
        if meta.get("length") is not None:
            out["minItems"] = out["maxItems"] = meta["length"]
        if meta.get("min_items") is not None:
            out["minItems"] = meta["min_items"]
        if meta.get("unique"):
            out["uniqueItems"] = True
    elif kind.name == "dict":
        out["additionalProperties"] = _ITEM_JSON[kind.item or "any"]
    else:
        if meta.get("choices") is not None:
            out["enum"] = list(meta["choices"]) + ([None] if kind.nullable and None not in meta["choices"] else [])
        out.update({js: meta[k] for k, (js, _) in _BOUNDS.items() if meta.get(k) is not None})
    if f.default is not dataclasses.MISSING:
        out["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
    elif f.default_factory is not dataclasses.MISSING:
        out["default"] = f.default_factory()
    out["description"] = meta.get("help", "")
    return out


def section_schema(classes: typing.Sequence[type[Params]], help: str | None = None) -> dict[str, Any]:
    """The schema of one config section: the fields of ``classes`` (the stage's parameters,
    then any workflow-only parameters of that section)."""
    props: dict[str, Any] = {}
    for cls in classes:
        kinds = cls.kinds()
        for f in dataclasses.fields(cls):
            if f.metadata.get("config", True):
                props[f.name] = field_schema(f, kinds[f.name])
    return {"type": "object", "additionalProperties": False, "default": {},
            "description": help or classes[0].help_text(), "properties": props}
