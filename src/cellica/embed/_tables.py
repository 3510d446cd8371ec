"""Reading a features table without copying it whole: the feature matrix is filled as float32
(the AnnData contract) a group of columns at a time, read from parquet column chunk by
column chunk (parquet's unit: a row group can be the whole file) or taken from the CSV.

A table's feature columns are converted through float64, as ``DataFrame.to_numpy(float64)``
then ``float32`` did, so the matrix is the same to the last bit; the peak memory is the
matrix plus one block, not a float64 copy of the whole table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError

GROUP_COLUMNS = 32
ROW_BLOCK = 65536  # rows hashed at a time when looking for repeated rows


class Table:
    """A features table on disk: its columns (``header``: dtypes, no rows), any columns in
    full, and the feature columns a group at a time."""

    def __init__(self, path: Path):
        self.path = path
        self.parquet = path.name.lower().endswith(".parquet")
        try:
            if self.parquet:
                import pyarrow.parquet as pq

                self._file = pq.ParquetFile(path)
                self.header = self._file.schema_arrow.empty_table().to_pandas()
                self.n_rows = self._file.metadata.num_rows
            else:
                sep = "\t" if path.name.lower().endswith((".tsv", ".tsv.gz", ".txt", ".txt.gz")) else ","
                names = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str).iloc[0].tolist()
                self._frame = pd.read_csv(path, sep=sep)
                self._frame.attrs["header"] = names  # pandas renames a repeated name (f1 -> f1.1): the file's own
                self.header, self.n_rows = self._frame.iloc[:0], len(self._frame)
        except Exception as exc:
            raise CellicaError(f"features table {path}: cannot read ({type(exc).__name__}: {exc})") from None
        names = self._frame.attrs["header"] if not self.parquet else self._file.schema_arrow.names
        dup = sorted({str(n) for n in pd.Index(names)[pd.Index(names).duplicated()]})
        if dup:  # two columns of one name: which one a step reads would be a silent choice
            raise CellicaError(f"features table {path}: column name(s) {dup[:5]} appear more than once; give each "
                               "column its own name")

    def columns(self, names: list[str]) -> pd.DataFrame:
        """Columns ``names`` (metadata) in full."""
        if not self.parquet:
            return self._frame[names]
        return pd.read_parquet(self.path, columns=names) if names else pd.DataFrame(index=range(self.n_rows))

    def groups(self, names: list[str]) -> Iterator[tuple[slice, pd.DataFrame]]:
        """Columns ``names`` in consecutive groups: (their positions in ``names``, all their rows)."""
        for start in range(0, len(names), GROUP_COLUMNS):
            group = names[start: start + GROUP_COLUMNS]
            frame = self._file.read(columns=group).to_pandas() if self.parquet else self._frame[group]
            yield slice(start, start + len(group)), frame

    def rows(self, positions: np.ndarray) -> pd.DataFrame:
        """Whole rows at ``positions`` (to check the few a hash flagged)."""
        if not self.parquet:
            return self._frame.iloc[positions]
        return pd.read_parquet(self.path).iloc[positions]


def row_hashes(frame: pd.DataFrame) -> np.ndarray:
    """A 64-bit hash of every row (``-0.0`` hashed as ``0.0``, as ``duplicated`` compares them)."""
    floats = frame.select_dtypes("floating").columns
    if len(floats):
        frame = frame.assign(**{c: frame[c] + 0.0 for c in floats})
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def fill_matrix(table: Table, names: list[str], hashes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """The float32 matrix of the feature columns ``names``; also which columns hold NaN/Inf and
    in how many rows. With ``hashes`` (one per row, of the metadata), each row's features are
    hashed into it in place."""
    x = np.empty((table.n_rows, len(names)), np.float32)
    bad_cols, bad_rows = np.zeros(len(names), bool), np.zeros(table.n_rows, bool)
    for cols, frame in table.groups(names):
        if len(frame) != table.n_rows:
            raise CellicaError(f"features table {table.path}: columns {names[cols][:3]} hold {len(frame)} rows, "
                               f"the table {table.n_rows}")
        values = frame.to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        bad_cols[cols] = ~finite.all(axis=0)
        bad_rows |= ~finite.all(axis=1)
        x[:, cols] = values
        if hashes is not None:
            both = pd.DataFrame({"before": hashes, "these": row_hashes(frame)})
            hashes[:] = pd.util.hash_pandas_object(both, index=False).to_numpy()
    return x, bad_cols, int(bad_rows.sum())


def first_duplicate(table: Table, hashes: np.ndarray) -> tuple[int, int]:
    """(count, first position) of rows that repeat an earlier row exactly; rows whose hash
    repeats are compared in full, so a hash collision never counts."""
    candidates = np.flatnonzero(pd.Series(hashes).duplicated(keep=False).to_numpy())
    if candidates.size == 0:
        return 0, -1
    dup = table.rows(candidates).duplicated(keep="first").to_numpy()
    return int(dup.sum()), int(candidates[dup][0]) if dup.any() else -1


def feature_twins(x: np.ndarray, chance: float = 1e-3) -> tuple[int, int, int]:
    """Rows of ``x`` equal in every feature to an earlier row although a match by chance is
    improbable: (how many, the first such row, the earlier row it repeats); ``(0, -1, -1)`` when none.

    Rows are compared exactly (their bytes; ``-0.0`` is ``0.0``). A repeat counts only when the
    number of rows expected to match it by chance, ``(n - 1) * prod_j (c_j - 1) / (n - 1)`` with
    ``c_j`` the rows sharing its value of feature ``j`` (features taken as independent), is below
    ``chance``: in a one-feature table of cell counts, or a few coarse integer features, equal rows
    are expected and never count; in profiles or embeddings with continuous features a repeat is
    a copied row."""
    x = np.asarray(x)
    if len(x) < 2:
        return 0, -1, -1
    zero = np.zeros((), x.dtype)
    # A hash per row, a block of rows at a time (no copy of the whole matrix); only rows whose
    # hash repeats are compared byte for byte.
    hashes = np.concatenate([pd.util.hash_pandas_object(pd.DataFrame(x[i: i + ROW_BLOCK] + zero), index=False)
                             .to_numpy() for i in range(0, len(x), ROW_BLOCK)])
    candidates = np.flatnonzero(pd.Series(hashes).duplicated(keep=False).to_numpy())
    if candidates.size == 0:
        return 0, -1, -1
    rows = np.ascontiguousarray(x[candidates] + zero)  # -0.0 -> 0.0
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first_of, inverse = np.unique(keys, return_index=True, return_inverse=True)
    earlier = candidates[first_of[inverse.ravel()]]
    repeats = candidates[earlier != candidates]
    earlier = earlier[earlier != candidates]
    if repeats.size == 0:
        return 0, -1, -1
    n = len(x)
    log_expected = np.full(repeats.size, np.log(n - 1.0))
    for j in range(x.shape[1]):  # only the repeats' values are counted: cheap unless most rows repeat
        column = np.sort(x[:, j] + zero)
        values = x[repeats, j] + zero
        same = np.searchsorted(column, values, "right") - np.searchsorted(column, values, "left")
        log_expected += np.log((same - 1) / (n - 1.0))
    copy = log_expected < np.log(chance)
    if not copy.any():
        return 0, -1, -1
    first = int(np.argmax(copy))
    return int(copy.sum()), int(repeats[first]), int(earlier[first])


def sha256(path: Path, block: int = 1 << 20) -> str:
    """The file's SHA-256, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()
