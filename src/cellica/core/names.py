"""Turning user-supplied names (genes, plates) into safe file names."""

from __future__ import annotations

import hashlib
import re

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
