"""The registry of feature-transform variants: names, what each does, which parameters its
result depends on, and whether it is re-fit per evaluation seed.

The schema's choices, the CLI, the DAG (each variant's rule receives only the parameters
it uses), the report's order and the tests all read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every variant splits the controls into fitting and held-back ones, and may standardise and
# correct well positions first (cellica.transform.files).
_SPLIT = ("fit_fraction", "seed", "batch_key", "standardize", "position_correction", "position_table")
_PCA = _SPLIT + ("fit_on", "n_components", "eig_floor", "batch_correction", "batch_stage", "drop_constant",
                 "outlier_cutoff")
_ICA = ("ica_backend", "ica_fit_on", "ica_max_samples", "ica_max_iter", "ica_tol", "ica_device")


@dataclass(frozen=True)
class Variant:
    """One transform variant."""

    name: str
    help: str
    estimator: str  # class name in cellica.transform.variants
    uses: tuple[str, ...]  # TransformParams fields its result depends on
    seeded: bool = False  # depends on rotation_seed: re-fit per evaluation seed
    role: str = "paper"  # paper (the paper's four) or comparator


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("base", "the features unchanged (after the optional standardisation)", "Transform", _SPLIT),
    Variant("pca", "PCA whitening on the fitting controls", "PCAWhitening", _PCA),
    Variant("pca_ica", "PCA whitening, then the ICA rotation", "PCAICA", _PCA + _ICA, seeded=True),
    Variant("pca_rand", "PCA whitening, then a Haar-random rotation (the control for ICA's rotation)",
            "PCARandom", _PCA, seeded=True),
    Variant("sphering", "ZCA whitening on the controls (pycytominer Spherize)", "Sphering",
            _SPLIT + ("drop_constant", "outlier_cutoff", "sphering_epsilon"), role="comparator"),
    Variant("harmony", "Harmony on the control-PCA scores", "Harmony",
            _PCA + ("harmony_theta", "harmony_max_iter"), seeded=True, role="comparator"),
    Variant("combat", "ComBat (scanpy) on the features", "Combat", _SPLIT + ("drop_constant", "outlier_cutoff"),
            role="comparator"),
)}
VARIANT_NAMES = tuple(VARIANTS)


def seeded_variants() -> list[str]:
    """Variants whose result depends on the random seed (re-fit per evaluation seed)."""
    return [name for name, v in VARIANTS.items() if v.seeded]


def variant_order(names) -> list[str]:
    """Names in the registry's order (unknown names last, alphabetically)."""
    order = list(VARIANTS)
    return sorted(names, key=lambda v: (order.index(v) if v in order else len(order), v))
