"""What ``cellica qc`` writes: the plate-layout tables of a run, all or none (read back by
:mod:`cellica.qc.read`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cellica.core.atomic import write_parquets
from cellica.core.contracts import empty_table
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.qc.layout import (
    INTENSITY,
    control_intensity,
    plate_wells,
    position_offsets,
    well_layouts,
)
from cellica.qc.read import TABLES, qc_paths
from cellica.registry import REFERENCE_VARIANT

if TYPE_CHECKING:
    pass

log = get_logger("qc")


def qc_tables(features: dict[str, str | os.PathLike], out_dir: str | os.PathLike,
              store: str | os.PathLike | None = None, *, seed: int = 0) -> dict[str, Path]:
    """Write the plate-layout tables of a run (:mod:`cellica.qc.layout`) into ``out_dir``.

    Parameters
    ----------
    features : dict of str to path
        Each variant's features (``.h5ad``); the layout tables come from ``base`` (or the
        first), the well layouts from every variant.
    out_dir : path
        The folder of the tables (``results/qc``).
    store : path, optional
        The tile store: the controls' pixel intensity per position (no rows without one).
    seed : int
        Seeds the sampled tiles and wells and the UMAP.

    Returns
    -------
    dict of str to pathlib.Path
        Each table written, by name.
    """
    from cellica.core.adata import check_obs, read_sealed

    if not features:
        raise CellicaError("qc: no features files given")
    missing = [str(p) for p in features.values() if not Path(p).is_file()]
    if missing:
        raise CellicaError(f"qc: features file(s) {missing} do not exist (run the transform stage first)")
    base = Path(features.get(REFERENCE_VARIANT) or next(iter(features.values())))
    a = read_sealed(base, backed=True)  # checked against its seal, block by block
    try:
        obs = check_obs(a.obs.copy(), str(base))
        ctrl = np.flatnonzero(obs["is_control"].to_numpy(bool))
        x_controls = np.asarray(a.X[ctrl], np.float64)  # only the controls are read
    finally:
        a.file.close()
    tables = {"plate_wells": plate_wells(obs), "position_offsets": position_offsets(x_controls, obs.iloc[ctrl]),
              "control_intensity": control_intensity(store, seed=seed) if store is not None else
              empty_table(INTENSITY, "this run has no tile store (features were imported)"),
              "well_layouts": well_layouts({v: Path(p) for v, p in features.items()}, seed=seed)}
    for name, table in tables.items():
        table.attrs["source"] = str(base) if name != "control_intensity" else str(store or "")
        log.info("%s: %d rows%s", name, len(table), f" ({table.attrs['note']})" if "note" in table.attrs else "")
    paths = qc_paths(out_dir)
    write_parquets([tables[n] for n in TABLES], [paths[n] for n in TABLES])
    return paths
