"""Safe writes: no partial output, no window without a complete output, one writer per output.

Every output is written to a hidden temporary sibling (``.NAME.tmp-XXXX``) and moved
into place only once complete. Replacing an existing output renames the old one
aside (``.NAME.old-XXXX``), renames the new one in, then deletes the old one, so at
every instant either the old or the new output is complete under ``NAME`` (or beside
it, recovered on the next write). One writer per output: an exclusive lock on
``.NAME.lock`` while it writes; a second writer gets an error naming the path. At the next write
of an output, leftovers of a killed run are cleaned up and logged: temporary
outputs are removed, an aside copy is restored when the output itself is missing.
Outputs written together (a transform's features and model, a table and its
importances, weights and their sidecar) are committed through a journal, so after a
kill between their renames the next write completes the set before anything else.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from cellica.core.errors import CellicaError, is_write_failure, writing_failed
from cellica.core.logs import get_logger

log = get_logger("atomic")
_UMASK = os.umask(0)
os.umask(_UMASK)


def check_can_write(path: str | os.PathLike, overwrite: bool, kind: str | None = None) -> Path:
    """Refuse to replace an existing output unless ``overwrite`` is set, and even then unless
    it is of the output's own kind; refuse any output inside a tile store
    (:func:`cellica.core.paths.check_output`)."""
    from cellica.core.paths import check_output

    path = Path(path)
    if path.exists() and not overwrite:
        raise CellicaError(f"{path} already exists; pass --overwrite to replace it")
    check_output(path, kind)
    return path


def _hidden(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{kind}")


def check_room(path: str | os.PathLike, nbytes: int) -> None:
    """Refuse, before writing, an output of at least ``nbytes`` that cannot fit: larger than the
    process's file-size limit (``ulimit -f``) or than the free space of its file system. Writers
    that crash on a failed write (HDF5: a segfault) call this first; the rest fail cleanly anyway."""
    import resource

    path = Path(path)
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and nbytes > soft:
        raise CellicaError(f"writing {path} failed: File too large (at least {nbytes:,} bytes, over the file size "
                           f"limit of {soft:,}: see `ulimit -f`)")
    parent = next((p for p in [path.parent, *path.parent.parents] if p.exists()), None)
    if parent is not None:
        free = shutil.disk_usage(parent).free
        if nbytes > free:
            raise CellicaError(f"writing {path} failed: No space left on device (at least {nbytes:,} bytes, "
                               f"{free:,} free on its file system: free space or write elsewhere)")


def tmp_sibling(path: Path) -> Path:
    """A fresh temporary name beside ``path``.

    Same directory as the target, so the final rename never crosses file systems.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    return _hidden(path, f"tmp-{uuid.uuid4().hex[:8]}")


def missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, deepest first: what a failed write removes
    again (:func:`remove_if_empty`), so it leaves no trace."""
    return [p for p in Path(path).parents if not p.exists()]


def remove_if_empty(folders: Sequence[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (something else was written there meanwhile), or gone


def _leftovers(path: Path, kind: str) -> list[Path]:
    return sorted(path.parent.glob(glob.escape(f".{path.name}.{kind}-") + "*"))


def remove(path: Path) -> None:
    """Delete a file or a directory tree, if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _size_mb(path: Path) -> float:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
    return path.stat().st_size / 1e6 if path.exists() else 0.0


@contextlib.contextmanager
def output_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (file ``.NAME.lock``), or fail at once naming the path.

    The lock file is removed on release; a writer that locked a file that was removed
    meanwhile notices (the inode changed) and locks the new one instead.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _hidden(path, "lock")
    for _ in range(10):
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CellicaError(f"{path} is being written by another process (lock {lock}); wait for it to "
                               "finish, or write somewhere else") from None
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the file we locked was released and removed meanwhile: lock the current one
    else:  # pragma: no cover - ten lost races in a row
        raise CellicaError(f"{path}: could not lock {lock}")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)  # closing releases the lock


def recover(path: Path) -> None:
    """Clean up after a killed write of ``path`` (the caller holds its lock)."""
    journal = _hidden(path, "journal")
    if journal.is_file():
        _roll_forward(journal)
    for tmp in _leftovers(path, "tmp"):
        log.warning("removing %s: the temporary output (%.1f MB) of an interrupted write of %s", tmp, _size_mb(tmp),
                    path)
        remove(tmp)
    asides = _leftovers(path, "old")
    if asides and not path.exists():
        log.warning("restoring %s from %s: a replace was interrupted after the old output was moved aside", path,
                    asides[-1])
        os.replace(asides.pop(), path)
    for aside in asides:
        log.warning("removing %s: the previous version of %s, left by an interrupted replace", aside, path)
        remove(aside)


def _chmod_like_umask(path: Path) -> None:
    """Files get the permissions the user's umask gives (some writers create 0600 files)."""
    if path.is_file():
        os.chmod(path, 0o666 & ~_UMASK)


def commit(tmp: Path, path: Path, overwrite: bool = True) -> None:
    """Move a finished temporary output onto its final name.

    An old output is renamed aside first and deleted only after the new one is in
    place, so a kill at any moment leaves a complete output (or its aside copy,
    restored by :func:`recover`).
    """
    if not tmp.exists():
        raise CellicaError(f"internal error: nothing was written for {path}")
    _chmod_like_umask(tmp)
    if tmp.is_dir():
        from cellica.core.ownership import mark_folder
        from cellica.core.paths import is_tile_store

        if not is_tile_store(tmp):  # a tile store is recognised by its own attributes
            mark_folder(tmp, path.name)
    if path.exists() or path.is_symlink():
        if not overwrite:  # created since the check: never replace silently
            raise CellicaError(f"{path} appeared while this run was writing it; pass --overwrite to replace it")
        aside = _hidden(path, f"old-{uuid.uuid4().hex[:8]}")
        os.replace(path, aside)
        os.replace(tmp, path)
        remove(aside)
    else:
        os.replace(tmp, path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write to; move it onto ``path`` only on success.

    Works for files and directories (e.g. a zarr store). On any exception the
    temporary output is removed and ``path`` is left untouched. Only one process
    may write ``path`` at a time.
    """
    with atomic_outputs([path], overwrite) as (tmp,):
        yield tmp


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[str | os.PathLike], overwrite: bool = False) -> Iterator[list[Path]]:
    """:func:`atomic_output` for outputs that belong together: all are committed, or none.

    The renames are listed in a journal beside every output first; a kill between
    them is completed (rolled forward) by the next write of any of the outputs.
    """
    from cellica.core.paths import check_output

    finals = [Path(p) for p in paths]
    for p in finals:  # before the lock file and any folder are made beside it
        check_output(p)
    made = sorted({f for p in finals for f in missing_folders(p)}, key=lambda f: -len(f.parts))
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: remove_if_empty([f for f in made if not any(p.exists() for p in finals)]))
        for p in sorted(set(finals), key=str):  # one order: no deadlock between writers
            stack.enter_context(output_lock(p))
        for p in finals:
            recover(p)
            check_can_write(p, overwrite)
        tmps = [tmp_sibling(p) for p in finals]
        try:
            yield tmps
            if len(finals) == 1:
                commit(tmps[0], finals[0], overwrite)
            else:
                _journaled_commit(list(zip(tmps, finals, strict=True)), overwrite)
        except BaseException as exc:
            if not _hidden(finals[0], "journal").exists():  # a journaled commit keeps them to roll forward
                for t in tmps:
                    remove(t)
            if is_write_failure(exc):  # a full disk, a size limit, no permission: name the output, not a temporary
                raise writing_failed(finals, exc) from None
            raise


def _journaled_commit(pairs: list[tuple[Path, Path]], overwrite: bool) -> None:
    for tmp, final in pairs:
        if not tmp.exists():
            raise CellicaError(f"internal error: nothing was written for {final}")
    entries = [[str(t), str(f)] for t, f in pairs]
    journals = [_hidden(f, "journal") for _, f in pairs]
    for j in journals:
        with open(j, "w") as fh:
            json.dump({"overwrite": overwrite, "pairs": entries}, fh)
            fh.flush()
            os.fsync(fh.fileno())
    for tmp, final in pairs:
        commit(tmp, final, overwrite)
    for j in journals:
        j.unlink(missing_ok=True)


def _roll_forward(journal: Path) -> None:
    """Finish a journaled commit that a kill interrupted: every new output goes in."""
    try:
        spec = json.loads(journal.read_text())
        pairs = [(Path(t), Path(f)) for t, f in spec["pairs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CellicaError(f"{journal}: unreadable commit journal ({exc}); remove it and re-run") from None
    done = []
    for tmp, final in pairs:
        if tmp.exists():
            commit(tmp, final, overwrite=True)
            done.append(str(final))
    log.warning("completed an interrupted commit of %s (from %s)", ", ".join(done) or "nothing left", journal)
    for _, final in pairs:
        _hidden(final, "journal").unlink(missing_ok=True)


TABLE_SEAL = "cellica_columns_crc32c"  # attrs of a written table: a crc32c per column, and of the attrs


def table_seal(table) -> dict[str, str]:
    """crc32c of each column's values (pandas' value hashes: the same for a string column read
    back as categorical) and of the other ``attrs``: what :func:`read_parquet` checks."""
    import google_crc32c
    import pandas as pd

    def crc(series) -> str:
        try:
            hashed = pd.util.hash_pandas_object(series, index=False).to_numpy()
        except TypeError:  # unhashable cells (lists): their text
            hashed = pd.util.hash_pandas_object(series.map(repr), index=False).to_numpy()
        return f"{google_crc32c.value(hashed.tobytes()):08x}"

    seal = {str(c): crc(table[c]) for c in table.columns}
    attrs = {k: v for k, v in table.attrs.items() if k != TABLE_SEAL}
    seal["(attrs)"] = f"{google_crc32c.value(json.dumps(attrs, sort_keys=True, default=str).encode()):08x}"
    return seal


def to_parquet(table, path: str | os.PathLike) -> None:
    """Write a DataFrame as parquet with a crc32 per data page and a seal of its values
    (:func:`table_seal`), both checked by :func:`read_parquet`: parquet's own compression does
    not notice every flipped byte, and its statistics and metadata carry no checksum at all."""
    table.attrs[TABLE_SEAL] = json.dumps(table_seal(table))
    table.to_parquet(path, index=False, write_page_checksum=True)


def write_parquet(table, path: str | os.PathLike) -> Path:
    """Write a DataFrame to parquet atomically (its ``attrs`` travel in the file's metadata)."""
    path = Path(path)
    with atomic_output(path, overwrite=True) as tmp:
        to_parquet(table, tmp)
    return path


def write_parquets(tables: Sequence, paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Write tables that belong together (e.g. per-gene metrics and importances): all or none."""
    with atomic_outputs(paths, overwrite=True) as tmps:
        for table, tmp in zip(tables, tmps, strict=True):
            to_parquet(table, tmp)
    return [Path(p) for p in paths]


def read_parquet(path, what: str = "table", columns: list[str] | None = None,
                 filters: list | None = None, label: str | None = None):
    """Read a parquet table (optionally only ``columns``, and only the rows passing pyarrow
    ``filters``, e.g. ``[("gene", "in", genes)]``: neither is read into memory otherwise);
    a missing or corrupt file is a :class:`CellicaError` naming it. ``path`` may also be a
    file object of bytes already read (and checked), with ``label`` naming it in messages."""
    import pandas as pd

    from cellica.core.remote import as_path, redact

    if hasattr(path, "read"):
        source, shown = path, label or "<bytes>"
    else:
        path = as_path(path)  # a local path or an fsspec URL (pandas reads those through fsspec)
        if not path.is_file():
            raise CellicaError(f"{what} {redact(path)} does not exist")
        source, shown = str(path), redact(path)
    try:
        table = pd.read_parquet(source, columns=columns, filters=filters, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise CellicaError(f"{what} {shown} is unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
    recorded = table.attrs.get(TABLE_SEAL)
    if recorded and filters is None:  # a row subset cannot be checked against whole columns
        recorded, found = json.loads(recorded), table_seal(table)
        bad = [k for k in found if k in recorded and recorded[k] != found[k]]
        if bad or (columns is None and set(recorded) != set(found)):
            raise CellicaError(f"{what} {shown} is damaged: {', '.join(bad[:4]) or 'its columns'} differ from what "
                               "was written; re-create it")
    return table
