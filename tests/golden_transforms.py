"""Digests of every transform variant under every combination of the transform stage's
switches, on a small plate-structured screen, through the command's own path (fit, write the
model, re-apply it to another screen's file): a refactor of the transforms proves with it that
every number stayed bit for bit as it was, beyond the one setting the tiny DAG runs.

``python -m tests.golden_transforms OUT.json`` records them; ``tests/test_transforms.py``
compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tests.golden import _sha, digest, versions

# Each case: the TransformParams it sets (the rest default). Together they switch on every step:
# standardisation, position correction, the three batch handlings at both stages, the fit sets,
# the component counts, feature dropping and the ICA's fit set.
CASES: dict[str, dict] = {
    "default": {},
    "no_batch": {"batch_correction": None},
    "center_scale_before": {"batch_correction": "center_scale"},
    "center_scale_after": {"batch_correction": "center_scale", "batch_stage": "after"},
    "center_after": {"batch_stage": "after"},
    "standardize": {"standardize": "controls"},
    "positions": {"position_correction": True},
    "positions_standardize_scale_after": {"position_correction": True, "standardize": "controls",
                                          "batch_correction": "center_scale", "batch_stage": "after"},
    "fit_on_all": {"fit_on": "all", "ica_fit_on": "all"},
    "ica_on_all": {"ica_fit_on": "all"},
    "four_components": {"n_components": 4},
    "variance_fraction": {"n_components": 0.9, "fit_fraction": 1.0},
    "drop_constant": {"drop_constant": True, "outlier_cutoff": 6.0, "constant": True},
    "ica_subsample": {"ica_max_samples": 30, "seed": 3, "rotation_seed": 5},
}


def screen(seed: int, constant: bool = False):
    """6 plates x 12 wells x 2 tiles, 7 features: 8 control wells a plate, each position and
    plate its own offset, batches B0/B1, heavy-tailed (Laplace) sources linearly mixed."""
    import anndata as ad

    rng = np.random.default_rng(seed)
    d = 7
    by_position, mixing = rng.normal(0, 1, (12, d)), rng.normal(0, 1, (d, d))
    rows, xs = [], []
    for k in range(6):
        offset = rng.normal(0, 2, d)
        for w in range(12):
            for t in range(2):
                x = offset + by_position[w] + rng.laplace(0, 1, d) @ mixing.T
                x[0] += 3.0 * (w >= 8) * (w - 7)
                rows.append({"batch": f"B{k % 2}", "plate": f"P{k}", "well": f"W{w}", "is_control": w < 8,
                             "perturbation": "non-targeting" if w < 8 else f"G{w}",
                             "gene": "non-targeting" if w < 8 else f"G{w}", "tile_id": f"s{seed}p{k}w{w}t{t}"})
                xs.append(x)
    x = np.asarray(xs, np.float32)
    if constant:
        x[:, 3] = 1.5
    obs = pd.DataFrame(rows)
    obs.index = obs["tile_id"].to_numpy()
    return ad.AnnData(x, obs=obs, var=pd.DataFrame(index=[f"feat{i}" for i in range(d)]))


def record(tmp: Path) -> dict[str, dict[str, str]]:
    """Per case and variant: the fitted file's matrix and feature names, the model's arrays,
    and (inductive variants) the matrix of the model re-applied to another screen."""
    from cellica.core.adata import write_h5ad
    from cellica.registry import VARIANTS
    from cellica.transform.apply import transform_file
    from cellica.transform.params import TransformParams
    from cellica.transform.steps import step_class

    out: dict[str, dict[str, str]] = {}
    for case, settings in CASES.items():
        settings = dict(settings)
        constant = settings.pop("constant", False)
        train, other = tmp / f"{case}_train.h5ad", tmp / f"{case}_other.h5ad"
        write_h5ad(screen(0, constant), train)
        write_h5ad(screen(1, constant), other)
        params = TransformParams(**settings)
        for name in VARIANTS:
            fitted, model = tmp / f"{case}_{name}.h5ad", tmp / f"{case}_{name}.npz"
            result = transform_file(train, fitted, name, params=params, model_out=model)
            parts = {"X": digest(fitted)["X"], "var_names": _sha("\x1f".join(result.var_names).encode())}
            parts.update({f"model:{k}": v for k, v in digest(model).items()})
            if (
                not result.uns["transform"]["steps"]
                or not step_class(result.uns["transform"]["steps"][-1]).transductive
            ):
                applied = tmp / f"{case}_{name}_applied.h5ad"
                transform_file(other, applied, apply=model)
                parts["applied:X"] = digest(applied)["X"]
            out[f"{case}/{name}"] = parts
    return out


if __name__ == "__main__":
    import tempfile

    target = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        found = record(Path(tmp))
    target.write_text(json.dumps({"versions": versions(), "digests": found}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {target}: {len(found)} case x variant fits")
