"""Metamorphic transformations of a features table with real-like units, and the comparison of
two runs' results as a user reads them (``tests/test_invariance.py``, ``tests/test_scales.py``).

The table is a small compound screen of well profiles in CellProfiler's style: independent
factors linearly mixed into features whose units span ~1e-4 (Zernike moments) to ~1e4 (areas),
each with its own offset, weekly batches with additive offsets, DMSO controls on every plate.
Each transformation returns a new table and the mapping of renamed labels back to the old ones.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SAMPLE = "Metadata_Sample"  # the samples' own ids (features.id_column), never renamed
META = {"plate": "Metadata_Plate", "well": "Metadata_Well", "batch": "Metadata_Batch",
        "perturbation": "Metadata_Compound", "is_control": "Metadata_is_control"}
_STEMS = ("Cells_AreaShape_Area", "Nuclei_AreaShape_Zernike_3_1", "Cells_Intensity_MeanIntensity_DNA",
          "Cytoplasm_Texture_Contrast_Actin_3", "Nuclei_AreaShape_Eccentricity", "Cells_Granularity_2_Tubulin",
          "Nuclei_Intensity_IntegratedIntensity_DNA", "Cells_RadialDistribution_FracAtD_Actin_2of4")


def screen(seed: int = 0, n_features: int = 24, n_factors: int = 8, batches: int = 3, plates: int = 2,
           controls_per_plate: int = 12, compounds: int = 6, wells_per_batch: int = 3) -> pd.DataFrame:
    """A well-profile table (``META`` columns, then features) with heterogeneous real-like units.

    Every compound sits in two of the batches (so its classifiers hold batches out), three wells
    in each; features span 1e-4 to 1e4 in standard deviation, each around its own offset.
    """
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(n_features, n_factors))
    shifts = {f"cpd{c:02d}": rng.choice(n_factors, 2, replace=False) for c in range(compounds)}
    homes = {c: rng.choice(batches, 2, replace=False) for c in shifts}
    rows, lat = [], []
    for b in range(batches):
        batch = f"Week{b + 1}"
        # wells in plate-interleaved order: the controls first, on every plate, then the compounds
        wells = [(f"{batch}_P{p}", f"{chr(65 + w // 12)}{w % 12 + 1:02d}") for w in range(48) for p in range(plates)]
        at = 0
        for _ in range(controls_per_plate * plates):
            rows.append((*wells[at], batch, "DMSO", True))
            lat.append(rng.laplace(size=n_factors))
            at += 1
        for c, home in homes.items():
            if b not in home:
                continue
            for _ in range(wells_per_batch):
                s = rng.laplace(size=n_factors)
                s[shifts[c]] += rng.uniform(2.0, 3.0, 2)
                rows.append((*wells[at], batch, c, False))
                lat.append(s)
                at += 1
    meta = pd.DataFrame(rows, columns=[META[k] for k in ("plate", "well", "batch", "perturbation", "is_control")])
    meta.insert(0, SAMPLE, [f"s{i:04d}" for i in range(len(meta))])
    batch_offset = rng.normal(0, 0.5, (batches, n_features))
    z = np.asarray(lat) @ mixing.T + batch_offset[meta[META["batch"]].str[4:].astype(int).to_numpy() - 1]
    z += 0.1 * rng.normal(size=z.shape)
    sd = 10.0 ** rng.uniform(-4, 4, n_features)
    sd[:2] = 3e-4, 7e2  # a Zernike-like and an area-like feature at least
    offset = sd * rng.uniform(1, 5, n_features)
    names = [f"{_STEMS[j % len(_STEMS)]}_{j // len(_STEMS)}" for j in range(n_features)]
    # 5 significant digits, as a CSV export writes them: a value then survives float32 storage
    # after any change of unit, so both runs' classifiers see the very same orderings
    feats = pd.DataFrame(offset + sd * z, columns=names).map(lambda v: float(f"{v:.5g}"))
    return pd.concat([meta, feats], axis=1)


def features_of(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if not c.startswith("Metadata_")]


def change_units(table: pd.DataFrame, seed: int = 1, max_shift: float = 10.0) -> pd.DataFrame:
    """Every feature shifted by a constant of up to ``max_shift`` of its standard deviations
    (either sign), then multiplied by 10^k (k from -6 to 6). (A shift of many more sds pushes a
    feature's variation below float32's resolution: a limit of the stored numbers, not of cellica.)"""
    rng = np.random.default_rng(seed)
    out = table.copy()
    for c in features_of(table):
        k = int(rng.integers(-6, 7))
        shift = rng.choice([-1, 1]) * max_shift * rng.uniform(0.1, 1) * float(table[c].std())
        out[c] = (table[c] + shift) * 10.0**k
    return out


def permute_columns(table: pd.DataFrame, seed: int = 2) -> pd.DataFrame:
    """The same table with its columns (metadata and features) in another order."""
    return table[list(np.random.default_rng(seed).permutation(table.columns))]


def permute_rows(table: pd.DataFrame, seed: int = 3) -> pd.DataFrame:
    return table.iloc[np.random.default_rng(seed).permutation(len(table))].reset_index(drop=True)


def rename_labels(table: pd.DataFrame, reverse: bool = True) -> tuple[pd.DataFrame, dict[str, str]]:
    """Batches, plates, wells and compounds renamed consistently: in an order unlike the old one
    (``reverse``: the last name first) or in the same order; returns the table and
    {new name: old name}."""
    out, back = table.copy(), {}
    for key, prefix in (("batch", "run"), ("plate", "plate"), ("well", "w"), ("perturbation", "drug")):
        col = META[key]
        old = sorted(set(table[col]) - ({"DMSO"} if key == "perturbation" else set()))
        code = (lambda i: f"{chr(90 - i // 26)}{chr(90 - i % 26)}") if reverse else (lambda i: f"{i:04d}")
        new = {o: f"{prefix}-{code(i)}" for i, o in enumerate(old)}
        if key == "perturbation":
            new["DMSO"] = "vehicle"
        out[col] = table[col].map(new)
        back.update({v: k for k, v in new.items()})
    return out, back
