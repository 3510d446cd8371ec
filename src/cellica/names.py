"""Turning user-supplied names (genes, plates) into safe file names."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: object, max_len: int = 80) -> str:
    """Return a file-name-safe version of ``name`` that is unique per input.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``, leading dots are removed
    (no hidden files, no ``..``), and when anything was changed a short hash of
    the original is appended so that two different names never collide.

    >>> safe_filename("TP53")
    'TP53'
    >>> safe_filename("../etc/passwd")
    'etc_passwd-e96c47ea'
    """
    text = str(name)
    cleaned = _UNSAFE.sub("_", text).lstrip(".").strip("_") or "unnamed"
    cleaned = cleaned[:max_len]
    if cleaned != text:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
        cleaned = f"{cleaned}-{digest}"
    return cleaned
