"""User-supplied names (genes, plates): safe file names, and names that would collide."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from cellica.core.errors import CellicaError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: object, max_len: int = 80) -> str:
    """Return a file-name-safe version of ``name``, distinct for every distinct name.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``, leading dots are removed (no
    hidden files, no ``..``), the rest is cut to ``max_len`` characters, and a short
    hash of the raw name is **always** appended. So no name can become a page the
    report writes itself (``index`` -> ``index-<hash>``), names differing only in
    case never collide on a case-insensitive file system (``TP53`` vs ``tp53``),
    ``a/b`` and ``a_b`` stay apart, and cleaning a cleaned name gives a new name.

    >>> safe_filename("TP53")
    'TP53-455933aa'
    >>> safe_filename("../etc/passwd")
    'etc_passwd-e96c47ea'
    """
    text = str(name)
    cleaned = _UNSAFE.sub("_", text).strip("._") or "unnamed"
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return f"{cleaned[:max_len]}-{digest}"


def natural_key(name: object) -> tuple:
    """Sort key ordering names as a person reads them: runs of digits by their value
    (``f2`` before ``f10``), the rest as text, ties broken by the raw name.

    >>> sorted(["f10", "f2", "Area"], key=natural_key)
    ['Area', 'f2', 'f10']
    """
    text = str(name)
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)
    return parts, text


def check_case_collisions(names: Iterable[object], where: str, what: str = "perturbation names") -> None:
    """Refuse two distinct names that differ only by case (``TP53``, ``tp53``): gene symbols are
    case-sensitive, so the gene maps' pair lists would match them ambiguously. Checked where
    names enter (tile metadata, features), so no later stage meets them after hours of work."""
    seen: dict[str, str] = {}
    for name in dict.fromkeys(map(str, names)):
        other = seen.setdefault(name.upper(), name)
        if other != name:
            raise CellicaError(f"{where}: {what} {other!r} and {name!r} differ only by case; rename one "
                               "(symbols are case-sensitive, so later stages could not tell them apart)")


def missing_columns_message(missing: list[str], columns, what: str) -> str:
    """``what`` names absent columns: say which columns there are and the nearest match of each
    (``Metadata_batch`` -> ``Metadata_Batch``), so the fix is one edit."""
    import difflib

    columns = [str(c) for c in columns]
    hints = []
    for name in missing:
        close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6) or \
            [c for c in columns if c.lower() == name.lower()]
        if close:
            hints.append(f"{name!r} -> did you mean {close[0]!r}?")
    shown = ", ".join(columns[:15]) + (f", ... ({len(columns)} in all)" if len(columns) > 15 else "")
    return f"{what} names missing column(s) {missing}" + (f" ({'; '.join(hints)})" if hints else "") + \
        f"; the columns are: {shown}"
