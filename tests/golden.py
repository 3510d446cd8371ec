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
TEXT_COLUMNS = {"detail", "notes", "no_split_reason", "note", "a", "b", "sentence", "decides"}
LIBRARIES = ("numpy", "scipy", "scikit-learn", "lightgbm", "torch", "timm", "anndata", "pandas", "scanpy")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _column(values: pd.Series) -> str:
    kind = values.dtype.kind if not isinstance(values.dtype, pd.CategoricalDtype) else "O"
    if kind in "biuf":
        return _sha(np.ascontiguousarray(values.to_numpy()).tobytes())
    return _sha("\x1f".join(map(str, values.tolist())).encode())


def _frame(df: pd.DataFrame, prefix: str = "") -> dict[str, str]:
    """One digest per column (free text left out), and the columns' order."""
    kept = [c for c in df.columns if c not in TEXT_COLUMNS]
    out = {f"{prefix}{c}": _column(df[c]) for c in kept}
    out[f"{prefix}(columns)"] = "\x1f".join(map(str, kept))
    return out


def digest(path: Path) -> dict[str, str]:
    """The numbers of one file (parquet, h5ad, npz), a digest per part: a parquet's columns;
    an .h5ad's matrix, row and feature names and each obs/var column; an .npz's arrays. A part
    added later (a new column) shows as an addition, not as every number changed."""
    if path.suffix == ".parquet":
        return _frame(pd.read_parquet(path))
    if path.suffix == ".h5ad":
        import anndata as ad

        a = ad.read_h5ad(path)
        out = {"X": _sha(np.ascontiguousarray(np.asarray(a.X)).tobytes())}
        for name, frame in (("obs", a.obs), ("var", a.var)):
            out[f"{name}_names"] = _sha("\x1f".join(map(str, frame.index)).encode())
            out.update(_frame(frame, f"{name}:"))
        return out
    with np.load(path) as z:  # .npz
        return {name: _sha(np.ascontiguousarray(z[name]).tobytes()) for name in sorted(z.files)
                if name != "__meta__"}  # provenance and fit seconds


def digests(results: Path) -> dict[str, dict[str, str]]:
    """Every table, features file, map and transform under ``results`` (the tile store's tiles
    are covered by its own manifest digest, ``zarr.json``'s generation)."""
    out = {}
    for path in sorted(results.rglob("*")):
        if path.suffix in (".parquet", ".h5ad", ".npz") and path.is_file():
            out[path.relative_to(results).as_posix()] = digest(path)
    store = results / "tiles.zarr" / "zarr.json"
    if store.is_file():
        out["tiles.zarr"] = {"content_sha256": json.loads(store.read_text())["attributes"]["content_sha256"]}
    return out


def compare(found: dict[str, dict[str, str]], recorded: dict[str, dict[str, str]],
            additions: dict[str, set[str]]) -> list[str]:
    """What differs between two :func:`digests`, one line each. ``additions`` names, per file
    pattern (fnmatch), the parts a later version adds on purpose ("*": a whole new file); those
    may appear, nothing else may, and every recorded part must be as recorded."""
    from fnmatch import fnmatch

    def added(file: str, part: str) -> bool:
        return any(fnmatch(file, pattern) and (part in parts or "*" in parts) for pattern, parts in additions.items())

    problems = [f"{f}: missing" for f in sorted(set(recorded) - set(found))]
    for file, parts in sorted(found.items()):
        old = recorded.get(file)
        if old is None:
            problems += [] if added(file, "*") else [f"{file}: a new file"]
            continue
        for part, value in parts.items():
            if part.endswith("(columns)"):
                kept = "\x1f".join(c for c in value.split("\x1f") if not added(file, c.split(":")[-1]))
                if kept != old.get(part):
                    problems.append(
                        f"{file}: columns {kept.split(chr(31))} recorded as {old.get(part, '').split(chr(31))}"
                    )
            elif part not in old:
                problems += [] if added(file, part.split(":")[-1]) else [f"{file}: a new part {part}"]
            elif old[part] != value:
                problems.append(f"{file}: {part} changed")
        problems += [f"{file}: {part} missing" for part in old if part not in parts]
    return problems


def versions() -> dict[str, str]:
    """The numeric libraries' versions and the machine's kernels: the last bits of a float
    depend on both (OpenBLAS picks its kernels by processor, and numpy's and torch's vectorised
    loops by the CPU's instruction sets), so digests recorded on another kind of processor
    are not compared (the tests say so and skip)."""
    from importlib.metadata import version

    out = {name: version(name) for name in LIBRARIES}
    out["machine:cpu"] = _cpu_model()
    out["machine:blas"] = _blas_kernels()
    return out


def _cpu_model() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas_kernels() -> str:
    """numpy's own BLAS and the kernels it picked on this processor (whatever else is loaded)."""
    import numpy  # noqa: F401  (loads its BLAS)
    from threadpoolctl import threadpool_info

    return ",".join(sorted({f"{i.get('internal_api')}:{i.get('architecture', '?')}" for i in threadpool_info()
                            if i.get("user_api") == "blas" and "numpy" in i.get("filepath", "")}))


if __name__ == "__main__":
    results, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text(json.dumps({"versions": versions(), "digests": digests(results)}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(json.loads(out.read_text())['digests'])} files")
