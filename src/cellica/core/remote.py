"""Paths that may be fsspec URLs (``s3://``, ``gs://``, ``https://``, ``memory://``, ...).

Credentials never pass through cellica: fsspec's back-ends find them where their SDKs look
(environment variables such as ``AWS_ACCESS_KEY_ID``, ``~/.aws``, ``GOOGLE_APPLICATION_CREDENTIALS``,
instance roles). A URL that carries a secret itself (``https://user:token@host/...``, a signed
URL's query) is shown only through :func:`redact`, in messages, logs and provenance alike.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import IO

from cellica.core.errors import CellicaError

URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
USERINFO = re.compile(r"(://)[^/@\s]+@")


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an fsspec URL rather than a local path (``file://`` counts as a URL)."""
    return bool(URL.match(str(path)))


def redact(text: str | os.PathLike) -> str:
    """``text`` without the user/password part of any URL in it or a URL's query string."""
    text = USERINFO.sub(r"\1***@", str(text))
    return re.sub(r"(://[^\s?]*)\?\S*", r"\1?***", text)


def join(base: str | os.PathLike, relative: str) -> str:
    """``relative`` resolved against the folder ``base``: a URL stays a URL, an absolute path or
    a URL in ``relative`` is kept as it is."""
    if is_url(relative) or Path(relative).is_absolute():
        return str(relative)
    if is_url(base):
        return posixpath.join(str(base).rstrip("/"), relative)
    return str(Path(base) / relative)


def parent(path: str | os.PathLike) -> str:
    """The folder of ``path`` (a URL's parent stays a URL)."""
    return posixpath.dirname(str(path).rstrip("/")) if is_url(path) else str(Path(path).parent)


def as_path(path: str | os.PathLike):
    """A ``pathlib.Path``, or for an fsspec URL a ``upath.UPath`` (the same API over fsspec)."""
    if is_url(path):
        from upath import UPath

        return UPath(str(path))
    return Path(path)


def open_binary(path: str | os.PathLike, what: str = "file") -> IO[bytes]:
    """``path`` opened for reading, local or remote; an unreachable or missing one is a
    :class:`CellicaError` naming it (redacted)."""
    if not is_url(path):
        if not os.path.isfile(path):
            raise CellicaError(f"{what} {path} does not exist")
        return open(path, "rb")
    import fsspec

    try:
        return fsspec.open(str(path), "rb").open()
    except Exception as exc:  # no such file, no network, no credentials, unknown protocol
        raise CellicaError(f"{what} {redact(path)} is unreachable ({type(exc).__name__}: "
                           f"{redact(str(exc))[:200]})") from None


def read_bytes(path: str | os.PathLike, what: str = "file") -> bytes:
    """The whole of a local or remote file."""
    with open_binary(path, what) as fh:
        try:
            return fh.read()
        except Exception as exc:
            raise CellicaError(f"{what} {redact(path)}: reading failed ({type(exc).__name__}: "
                               f"{redact(str(exc))[:200]})") from None
