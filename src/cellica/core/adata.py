"""AnnData in and out: the contract of embeddings and transformed features.

Every features file (``.h5ad``) holds ``.X`` float32 (samples x features),
``.obs`` indexed by a unique sample id with at least the columns in
:data:`OBS_REQUIRED`, and provenance in ``.uns``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.atomic import atomic_output
from cellica.core.contracts import as_bool, check_labels
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.names import check_case_collisions

log = get_logger("adata")

OBS_REQUIRED = ("plate", "well", "batch", "perturbation", "is_control")
WELL_KEYS = ("batch", "plate", "well")
# Rows per block of the whole-matrix passes below: no copy of the matrix, only of a block.
BLOCK_ROWS = 65536


def check_obs(obs: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check the required metadata columns; return obs with string ids and boolean is_control."""
    missing = [c for c in OBS_REQUIRED if c not in obs.columns]
    if missing:
        raise CellicaError(
            f"{source}: missing metadata column(s) {missing}; features need {list(OBS_REQUIRED)}"
        )
    obs = obs.copy()
    # A column named like a DataFrame attribute ("dtype", "shape", ...) breaks AnnData's writer.
    clashes = {c: f"meta_{c}" for c in obs.columns if isinstance(c, str) and (c == "dtype" or hasattr(pd.DataFrame, c))}
    if clashes:
        log.warning("%s: renamed metadata column(s) that clash with DataFrame attributes: %s", source, clashes)
        obs = obs.rename(columns=clashes)
    for col in ("plate", "well", "batch", "perturbation"):
        if obs[col].isna().any():
            raise CellicaError(f"{source}: column {col!r} has {int(obs[col].isna().sum())} empty value(s)")
        obs[col] = obs[col].astype(str)
    obs["is_control"] = as_bool(obs["is_control"], source)
    check_labels(obs, source)
    check_case_collisions(obs["perturbation"].unique(), source)
    if not obs.index.is_unique:
        dup = obs.index[obs.index.duplicated()][:5].tolist()
        raise CellicaError(f"{source}: sample ids are not unique, e.g. {dup}")
    return obs


def check_matrix(x: np.ndarray, obs_names: pd.Index, source: str) -> np.ndarray:
    """Float32 copy of the feature matrix; NaN or Inf is an error naming the samples."""
    x = np.asarray(x, dtype=np.float32)
    bad = np.zeros(x.shape[0], bool)
    for start in range(0, x.shape[0], BLOCK_ROWS):
        bad[start: start + BLOCK_ROWS] = ~np.isfinite(x[start: start + BLOCK_ROWS]).all(axis=1)
    if bad.any():
        raise CellicaError(
            f"{source}: {int(bad.sum())} sample(s) have NaN/Inf features, e.g. "
            f"{obs_names[bad][:5].tolist()}"
        )
    return x


def clean_uns(value: Any) -> Any:
    """Make provenance storable in .h5ad: None -> "null", tuples -> lists, lists of anything but
    numbers or strings -> mappings by position, recursively."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return {str(k): clean_uns(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value) and value:
            return list(value)
        if all(isinstance(v, str) for v in value):
            return list(value)
        # h5ad stores arrays of one scalar type only: a list of records (e.g. the ICA's warm-start
        # stages) becomes a mapping by position, "0", "1", ...
        return {str(i): clean_uns(v) for i, v in enumerate(value)}
    return value


def make_adata(x: np.ndarray, obs: pd.DataFrame, var_names: list[str] | None, uns: dict[str, Any], source: str):
    """Build a validated AnnData (float32 X, checked obs, string var names)."""
    import anndata as ad

    obs = check_obs(obs, source)
    obs.index = obs.index.astype(str)
    x = check_matrix(x, obs.index, source)
    var = pd.DataFrame(
        index=pd.Index(var_names if var_names is not None else [f"f{i}" for i in range(x.shape[1])], dtype=str)
    )
    return ad.AnnData(X=x, obs=obs, var=var, uns=clean_uns(uns))


CHECKSUMS_KEY = "cellica_checksums"  # .uns: crc32c of X, obs and var names, checked on every read


def content_checksums(adata) -> dict[str, str]:
    """crc32c of the matrix (as float32, in row blocks: a backed file is never read whole),
    of ``obs`` (pandas' value hashes, the same for strings and categoricals) and of the
    feature names. HDF5 keeps no checksums of its own: a flipped byte would change numbers."""
    import google_crc32c

    x = google_crc32c.Checksum()
    for start in range(0, adata.n_obs, BLOCK_ROWS):
        block = adata.X[start: start + BLOCK_ROWS]
        block = block.toarray() if hasattr(block, "toarray") else block
        x.update(np.ascontiguousarray(block, dtype=np.float32).tobytes())
    obs = pd.util.hash_pandas_object(adata.obs, index=True).to_numpy()
    var = pd.util.hash_pandas_object(pd.Series(np.asarray(adata.var_names, dtype=str)), index=False).to_numpy()
    return {"X": x.hexdigest().decode(), "obs": f"{google_crc32c.value(obs.tobytes()):08x}",
            "var": f"{google_crc32c.value(var.tobytes()):08x}", "shape": f"{adata.n_obs}x{adata.n_vars}"}


def seal(adata):
    """Record :func:`content_checksums` in ``adata.uns`` (every cellica .h5ad is written sealed)."""
    adata.uns[CHECKSUMS_KEY] = content_checksums(adata)
    return adata


def verify_sealed(adata, path: str | os.PathLike) -> None:
    """Raise when a sealed AnnData (in memory or backed) differs from what was written; files
    written before seals existed, or by other tools, pass unchecked."""
    recorded = adata.uns.get(CHECKSUMS_KEY)
    if not recorded:
        return
    recorded = {k: str(v) for k, v in dict(recorded).items()}
    found = content_checksums(adata)
    bad = [k for k in ("shape", "X", "obs", "var") if recorded.get(k) != found[k]]
    if bad:
        raise CellicaError(
            f"{path}: its {', '.join(bad)} {'differs' if len(bad) == 1 else 'differ'} from what was written "
            "(the file is damaged or "
            "was edited); re-create it"
        )


def read_sealed(path: str | os.PathLike, backed: bool = False):
    """An .h5ad (any layout: gene maps too) read and checked against its seal; a missing or
    unreadable file is a one-line error naming it. ``backed``: opened read-only, checked by blocks."""
    import anndata as ad

    path = Path(path)
    if not path.is_file():
        raise CellicaError(f"{path} does not exist")
    try:
        adata = ad.read_h5ad(path, backed="r" if backed else None)
    except Exception as exc:
        raise CellicaError(f"{path}: cannot read as AnnData .h5ad ({type(exc).__name__}: {exc})") from None
    verify_sealed(adata, path)
    return adata


def write_h5ad(adata, path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Write an AnnData atomically (temporary file, then rename), sealed with its checksums."""
    from cellica.core.atomic import check_room

    path = Path(path)
    seal(adata)
    # HDF5 crashes the process (a segfault) when a write fails for room: refuse first, naming the file.
    check_room(path, h5ad_size_floor(adata))
    with atomic_output(path, overwrite=overwrite) as tmp:
        adata.write_h5ad(tmp)
    return path


def h5ad_size_floor(adata) -> int:
    """Bytes an ``.h5ad`` of ``adata`` takes at least: its matrix, its ``obs`` and AnnData's own
    structure (17 KB for an empty file)."""
    x = adata.X
    nbytes = int(getattr(x, "nbytes", 0) or (x.data.nbytes if hasattr(x, "data") else 0))
    return nbytes + int(adata.obs.memory_usage(index=True, deep=False).sum()) + 16_000


def read_h5ad(path: str | os.PathLike, rows: Callable[[pd.DataFrame], np.ndarray] | None = None):
    """Read a features file and check it against the contract.

    ``rows``, a function of the ``obs`` returning a boolean mask, loads only those rows: the
    file is opened backed and the others are never read into memory.
    """
    import anndata as ad

    path = Path(path)
    if not path.is_file():
        raise CellicaError(f"features file {path} does not exist")
    try:
        adata = _load_rows(ad.read_h5ad(path, backed="r"), rows, path) if rows is not None else None
        if adata is None:
            adata = ad.read_h5ad(path)
            verify_sealed(adata, path)
    except CellicaError:
        raise
    except Exception as exc:
        raise CellicaError(f"{path}: cannot read as AnnData .h5ad ({type(exc).__name__}: {exc})") from None
    adata.obs = check_obs(adata.obs, str(path))
    x = adata.X.toarray() if hasattr(adata.X, "toarray") else adata.X
    adata.X = check_matrix(x, adata.obs_names, str(path))
    return adata


def _load_rows(backed, rows: Callable[[pd.DataFrame], np.ndarray], path):
    """The rows of a backed AnnData that ``rows(obs)`` selects, in memory (None when it selects
    them all: the file is then read the ordinary way); the file is checked and closed."""
    try:
        mask = np.asarray(rows(backed.obs), dtype=bool)
        if not mask.all():
            verify_sealed(backed, path)
        return None if mask.all() else backed[mask].to_memory()
    finally:
        backed.file.close()


def aggregate_wells(adata, keys: tuple[str, ...] = WELL_KEYS):
    """Mean embedding per well; ``obs`` keeps columns constant within each well plus ``n_tiles``.

    A well that holds several perturbations (pooled screens) is split by perturbation
    (and control status): one profile per well and perturbation, named ``batch/plate/well/perturbation``.
    """
    obs = adata.obs
    missing = [k for k in keys if k not in obs.columns]
    if missing:
        raise CellicaError(f"aggregate_wells: missing column(s) {missing}")
    extra = [k for k in ("perturbation", "is_control") if k in obs.columns and k not in keys]
    if extra and (obs.groupby(list(keys), observed=True)[extra].nunique(dropna=False) > 1).any().any():
        keys = (*keys, *extra)
        log.info("aggregate_wells: wells hold several perturbations: one profile per well and perturbation")
    codes = obs.groupby(list(keys), sort=False, observed=True).ngroup().to_numpy()
    n_groups = int(codes.max()) + 1 if codes.size else 0
    sums = np.zeros((n_groups, adata.n_vars), np.float64)
    # Row blocks in order: the same additions in the same order as one call (same bits).
    for start in range(0, len(codes), BLOCK_ROWS):
        block = slice(start, start + BLOCK_ROWS)
        np.add.at(sums, codes[block], np.asarray(adata.X[block], np.float64))
    counts = np.bincount(codes, minlength=n_groups)
    constant = [c for c in obs.columns
                if (obs.groupby(codes, observed=True)[c].nunique(dropna=False) <= 1).all()]
    well_obs = obs[constant].groupby(codes, observed=True).first()
    well_obs["n_tiles"] = counts
    name_keys = [k for k in keys if k != "is_control"]
    well_obs.index = pd.Index(
        ["/".join(map(str, row)) for row in well_obs[name_keys].itertuples(index=False)], dtype=str
    )
    uns = {"provenance": {**adata.uns.get("provenance", {}), "aggregated": {"level": "well", "keys": list(keys)}}}
    return make_adata((sums / counts[:, None]).astype(np.float32), well_obs, list(adata.var_names), uns,
                      "well aggregation")


def stored_variant(path: str | os.PathLike, default: str) -> str:
    """The variant a features file was made by (``.uns['transform']['variant']``), read without
    loading the matrix; ``default`` when it records none (imported features)."""
    value = uns_text(path, "transform/variant")
    return default if value is None else value


def uns_text(path: str | os.PathLike, key: str) -> str | dict[str, str] | None:
    """The text an .h5ad stores at ``.uns[key]`` (``"a/b"`` for a nested key), read with h5py
    without loading the file: a string, a dict of strings for a group of them, or None when absent."""

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    with h5_file(path) as fh:
        node = fh.get(f"uns/{key}")
        if node is None:
            return None
        if hasattr(node, "keys"):
            return {k: text(v[()]) for k, v in node.items()}
        return text(node[()])


@contextlib.contextmanager
def h5_file(path: str | os.PathLike):
    """An .h5ad opened read-only with h5py; a missing, empty, truncated or foreign file is a
    one-line error naming it (h5py's own message names no file)."""
    import h5py

    if not Path(path).is_file():
        raise CellicaError(f"{path} does not exist")
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise CellicaError(f"{path}: cannot read as AnnData .h5ad ({str(exc).splitlines()[0][:200]})") from None
    with fh:
        yield fh
