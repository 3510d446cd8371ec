"""Digests of a run's numbers: every table, features file, map and transform of ``results/``,
reduced to what the science produced (values, keys and row order; no timings, paths or
sentences), so a refactor can prove that it left every number bit for bit as it was.

``python -m tests.golden RESULTS OUT.json`` records them (with the versions of the numeric
libraries, which decide the last bits); ``tests/test_workflow.py`` compares the tiny run's.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

# Free text and where-it-ran columns: wording may change, numbers may not.
TEXT_COLUMNS = {"detail", "notes", "no_split_reason", "note", "a", "b"}
LIBRARIES = ("numpy", "scipy", "scikit-learn", "lightgbm", "torch", "timm", "anndata", "pandas", "scanpy")


def _frame(df: pd.DataFrame, h) -> None:
    for name in df.columns:
        if name in TEXT_COLUMNS:
            continue
        values = df[name]
        h.update(str(name).encode() + b"\0")
        kind = values.dtype.kind if not isinstance(values.dtype, pd.CategoricalDtype) else "O"
        if kind in "biuf":
            h.update(np.ascontiguousarray(values.to_numpy()).tobytes())
        else:
            h.update("\x1f".join(map(str, values.tolist())).encode())


def digest(path: Path) -> str:
    """sha256 of one file's numbers (parquet, h5ad, npz)."""
    h = hashlib.sha256()
    if path.suffix == ".parquet":
        _frame(pd.read_parquet(path), h)
    elif path.suffix == ".h5ad":
        import anndata as ad

        a = ad.read_h5ad(path)
        h.update(np.ascontiguousarray(np.asarray(a.X)).tobytes())
        for frame in (a.obs, a.var):
            h.update("\x1f".join(map(str, frame.index)).encode())
            _frame(frame, h)
    elif path.suffix == ".npz":
        with np.load(path) as z:
            for name in sorted(z.files):
                if name != "__meta__":  # provenance and fit seconds
                    h.update(name.encode() + b"\0" + np.ascontiguousarray(z[name]).tobytes())
    return h.hexdigest()


def digests(results: Path) -> dict[str, str]:
    """Every table, features file, map and transform under ``results`` (the tile store's tiles
    are covered by its own manifest digest, ``zarr.json``'s generation)."""
    out = {}
    for path in sorted(results.rglob("*")):
        if path.suffix in (".parquet", ".h5ad", ".npz") and path.is_file():
            out[path.relative_to(results).as_posix()] = digest(path)
    store = results / "tiles.zarr" / "zarr.json"
    if store.is_file():
        out["tiles.zarr/content_sha256"] = json.loads(store.read_text())["attributes"]["content_sha256"]
    return out


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in LIBRARIES}


if __name__ == "__main__":
    results, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text(json.dumps({"versions": versions(), "digests": digests(results)}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(digests(results))} files")
