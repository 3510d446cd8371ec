"""Config validation errors in a few lines: the offending key, the allowed values, the closest key."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any


def config_problem(config: dict[str, Any], schema_path: str | Path) -> str | None:
    """The most relevant violation of the schema as a short message, or None when valid.

    Unknown keys name the closest valid key; enums list the allowed values; every
    message names the key by its dotted path.
    """
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    lines = [_explain(e) for e in errors[:5]]
    if len(errors) > 5:
        lines.append(f"... and {len(errors) - 5} more")
    return "\n".join(lines) or None


def _explain(error) -> str:
    where = ".".join(map(str, error.absolute_path)) or "(top level)"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        lines = []
        for key in extra:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(allowed)}"
            name = f"{where}.{key}" if where != "(top level)" else str(key)
            lines.append(f"unknown config key {name!r}: {hint}")
        return "\n".join(lines)
    if error.validator == "enum":
        return f"config key {where}: {error.instance!r} is not allowed; choose one of {error.validator_value}"
    return f"config key {where}: {error.message}"
