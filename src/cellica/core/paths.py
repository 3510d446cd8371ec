"""Where an output may go: never onto, into or around an input, never inside a tile store,
and over an existing object only when cellica wrote it (:mod:`cellica.core.ownership`) and it
is of the output's own kind.

These checks are the one gate every write passes (:func:`cellica.core.atomic.check_can_write`
calls :func:`check_output`; the CLI calls :func:`check_disjoint` with each command's inputs and
outputs, declared once in :mod:`cellica.cli.parser`), so a new stage or output inherits them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from cellica.core.errors import CellicaError

# Top-level entries of a tile store (cellica.store.tilestore); anything else is a stranger's.
STORE_ENTRIES = frozenset({"zarr.json", "tiles", "metadata.parquet", "ground_truth"})

# What an existing file must start with to be replaced by an output of that suffix.
_MAGIC = {
    ".h5ad": (b"\x89HDF\r\n\x1a\n", "an HDF5 (.h5ad) file"),
    ".parquet": (b"PAR1", "a parquet table"),
    ".npz": (b"PK\x03\x04", "a numpy .npz archive"),
    ".pt": (b"PK\x03\x04", "a torch checkpoint"),
}


def is_tile_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a cellica tile store (a zarr group with cellica's store attributes)."""
    marker = Path(path) / "zarr.json"
    if not marker.is_file():
        return False
    try:
        attrs = json.loads(marker.read_bytes()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(attrs, dict) and "schema_version" in attrs and "channel_names" in attrs


def enclosing_store(path: str | os.PathLike) -> Path | None:
    """The tile store that ``path`` lies inside, if any."""
    for parent in Path(os.path.abspath(path)).parents:
        if is_tile_store(parent):
            return parent
    return None


def _kind_problem(path: Path, kind: str | None) -> str | None:
    """Why the existing ``path`` is not of the output's kind (``None``: it may be replaced)."""
    if kind == "store":
        if not path.is_dir() or not is_tile_store(path):
            return "is not a tile store"
        strangers = sorted(e.name for e in path.iterdir() if e.name not in STORE_ENTRIES)
        if strangers:
            return f"is a tile store holding other files too ({', '.join(strangers[:4])})"
        return None
    if kind == "folder":
        return None if path.is_dir() else "is a file, not a folder"
    if path.is_dir():
        return "is a folder"
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        try:
            with open(path, "rb") as fh:
                head = fh.read(9)
        except OSError:
            head = b""
        # safetensors: an 8-byte header length, then the JSON header; cellica also accepts torch zips
        return None if head[8:9] == b"{" or head.startswith(b"PK\x03\x04") else "is not a safetensors file"
    if suffix in _MAGIC:
        magic, what = _MAGIC[suffix]
        try:
            with open(path, "rb") as fh:
                ok = fh.read(len(magic)) == magic
        except OSError:
            ok = False
        return None if ok else f"is not {what}"
    return None


def check_output(path: str | os.PathLike, kind: str | None = None) -> None:
    """Refuse an output inside a tile store, or over an existing object cellica did not write
    (:func:`cellica.core.ownership.check_owned`) or of another kind.

    Parameters
    ----------
    path
        The output's final path.
    kind
        ``"store"`` (a tile store), ``"folder"`` (a report folder), or ``None``: a file whose
        kind is read from its suffix (``.h5ad``, ``.parquet``, ``.npz``, ``.safetensors``, ...).
    """
    path = Path(path)
    store = enclosing_store(path)
    if store is not None:
        raise CellicaError(f"{path}: outputs are never written inside a tile store ({store}), which is "
                           "replaced whole when it is written again; choose a path outside it")
    if path.exists() or path.is_symlink():
        from cellica.core.ownership import check_owned

        check_owned(path)  # cellica's own output, or nothing at all
        problem = _kind_problem(path, kind)
        if problem:
            raise CellicaError(f"{path} exists and {problem}: cellica replaces only its own kind of output "
                               "there; move it away or choose another output path")


def _resolved(path: str) -> Path | None:
    from cellica.core.remote import is_url

    return None if is_url(path) else Path(os.path.realpath(path))


def check_disjoint(inputs: Iterable[tuple[str, str]], outputs: Iterable[tuple[str, str]]) -> None:
    """Refuse an output equal to, inside, or containing any input (or another output).

    ``inputs`` and ``outputs`` are ``(option, path)`` pairs; paths are compared after
    resolving symbolic links, so a link cannot hide the overlap.
    """
    ins = [(opt, p, _resolved(p)) for opt, p in inputs]
    outs = [(opt, p, _resolved(p)) for opt, p in outputs]
    for k, (o_opt, o_raw, o) in enumerate(outs):
        if o is None:
            continue
        for i_opt, i_raw, i in ins:
            if i is None:
                continue
            if o == i:
                why = "is also an input"
            elif i in o.parents:
                why = f"lies inside the input {i_raw} ({i_opt})"
            elif o in i.parents:
                why = f"contains the input {i_raw} ({i_opt}): writing it would destroy that input"
            else:
                continue
            if o == i:
                why += f" ({i_opt})"
            raise CellicaError(f"{o_opt} {o_raw} {why}; write the output somewhere else")
        for p_opt, p_raw, other in outs[k + 1:]:
            if other is not None and (other == o or o in other.parents or other in o.parents):
                raise CellicaError(f"{o_opt} {o_raw} and {p_opt} {p_raw} overlap; give each output its own path")
    for o_opt, o_raw, o in outs:  # before any work, not only when the output is written
        store = enclosing_store(o) if o is not None else None
        if store is not None:
            raise CellicaError(f"{o_opt} {o_raw}: outputs are never written inside a tile store ({store}), which "
                               "is replaced whole when it is written again; choose a path outside it")
