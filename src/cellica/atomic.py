"""Write-then-rename helpers, so a failed stage never leaves a partial output behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from cellica.errors import CellicaError


def check_can_write(path: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse to replace an existing output unless ``overwrite`` is set."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise CellicaError(f"{path} already exists; pass --overwrite to replace it")
    return path


def tmp_sibling(path: Path) -> Path:
    """A fresh temporary name beside ``path``.

    Same directory as the target, so the final rename never crosses file systems.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


def remove(path: Path) -> None:
    """Delete a file or a directory tree, if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def commit(tmp: Path, path: Path) -> None:
    """Move a finished temporary output onto its final name (replacing any old one)."""
    if not tmp.exists():
        raise CellicaError(f"internal error: nothing was written for {path}")
    if path.exists():
        remove(path)
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write to; rename it onto ``path`` only on success.

    Works for files and directories (e.g. a zarr store). On any exception the
    temporary output is removed and ``path`` is left untouched.
    """
    path = check_can_write(path, overwrite)
    tmp = tmp_sibling(path)
    try:
        yield tmp
        commit(tmp, path)
    except BaseException:
        remove(tmp)
        raise


def write_parquet(table, path: str | os.PathLike) -> Path:
    """Write a DataFrame to parquet atomically (its ``attrs`` travel in the file's metadata)."""
    path = Path(path)
    with atomic_output(path, overwrite=True) as tmp:
        table.to_parquet(tmp, index=False)
    return path
