"""What kind of object a path is, read from its first bytes: an input of the wrong kind is
refused before any work, with one line naming the kind expected and the kind found.

The kinds each command's inputs take are declared once, beside the options
(:data:`cellica.cli.parser.INPUT_KINDS`); :func:`check_input` is called by the command line
for every input before the command runs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cellica.core.errors import CellicaError

# The kinds, as sentences name them.
TILE_STORE = "a tile store"
FOLDER = "a folder"
FEATURES = "features (an .h5ad with a row per tile, well or sample, marked is_control or not)"
GENE_MAP = "a gene map (an .h5ad with a row per gene)"
ANNDATA = "an .h5ad file without is_control"
PARQUET = "a parquet table"
ZIP = "a zip archive (.npz, torch checkpoint)"
SAFETENSORS = "safetensors weights"
TEXT = "a text file"
OTHER = "a file"
SPECIAL = {stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
           stat.S_ISSOCK: "a socket"}


def special_kind(path: str | os.PathLike) -> str | None:
    """``"a FIFO (named pipe)"``, a device or a socket (never a file cellica reads or writes), else ``None``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in SPECIAL.items() if test(mode)), None)


def _h5ad_kind(path: Path) -> str:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            level = f.get("uns/provenance/map/level")
            if isinstance(level, h5py.Dataset):
                value = level[()]
                if (value.decode() if isinstance(value, bytes) else str(value)) == "gene":
                    return GENE_MAP
            obs = f.get("obs")
            columns = [str(c) for c in obs.attrs.get("column-order", [])] if obs is not None else []
            return FEATURES if "is_control" in columns else ANNDATA
    except Exception:  # noqa: BLE001 - an unreadable HDF5 file: its reader names the problem
        return ANNDATA


def kind_of(path: str | os.PathLike) -> str | None:
    """The kind of an existing local ``path`` (``None``: it does not exist).

    Parameters
    ----------
    path
        A file or folder.

    Returns
    -------
    str or None
        One of this module's kinds, e.g. :data:`TILE_STORE`, :data:`GENE_MAP`, :data:`PARQUET`.
    """
    from cellica.core.paths import is_tile_store

    path = Path(path)
    special = special_kind(path)
    if special:
        return special
    if path.is_dir():
        return TILE_STORE if is_tile_store(path) else FOLDER
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return OTHER
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return _h5ad_kind(path)
    if head.startswith(b"PAR1"):
        return PARQUET
    if head.startswith(b"PK\x03\x04"):
        return ZIP
    if head[8:9] == b"{":
        return SAFETENSORS
    return OTHER


def check_input(option: str, path: str, accepted: tuple[str, ...]) -> None:
    """Refuse an input of a kind the option does not take (one line: the option, the path, both kinds).

    A missing path and a URL are left to the reader (which names them); a FIFO, a device or a
    socket is refused for every option, since reading one blocks or never ends.
    """
    from cellica.core.remote import is_url

    if is_url(path):
        return
    found = kind_of(path)
    if found is None:
        return
    if found in SPECIAL.values():
        raise CellicaError(f"{option} {path} is {found}, not a file: give a regular file or folder")
    if accepted and found not in accepted:
        raise CellicaError(f"{option} {path} is {found}, where {' or '.join(accepted)} is needed")
