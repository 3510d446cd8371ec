"""The independent reference of the recipe (benchmarks/reference_recipe.py) stays independent,
and its metric helpers agree with cellica's on hand-checkable arrays."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_the_reference_runs_without_importing_cellica():
    """The reference's whole recipe on a small simulated screen, in a fresh interpreter: cellica
    is never imported, and the numbers are real (AUROC above chance, sparsity in (0, 1])."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import reference_recipe as r\n"
        "x, meta = r.simulated_screen(genes=3, per_gene=24)\n"
        "t = r.reference_recipe(x, meta, 'pca_ica', 0, 0.5, None, 'center', 3, {})\n"
        "assert not any(m == 'cellica' or m.startswith('cellica.') for m in sys.modules), 'cellica imported'\n"
        "print(t.to_json())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import pandas as pd

    table = pd.read_json(out.stdout.strip().splitlines()[-1])
    assert (
        len(table) == 3
        and (table["auroc"] > 0.5).all()
        and table["auroc"].mean() > 0.65
        and table["sparsity"].between(0, 1).all()
    )


def test_the_reference_s_metrics_by_hand_and_against_cellica_s():
    import reference_recipe as r

    from cellica.evaluate.metrics import concentration, hoyer_sparsity

    assert r.hoyer(np.array([0.0, 0.0, 3.0, 0.0])) == pytest.approx(1.0)
    assert r.hoyer(np.ones(4)) == pytest.approx(0.0)
    # n = 8, k = 2: one feature above the cut, three tied at 0 share the one place left (1/3 each)
    imp = np.array([5.0, 0, 0, 0, -1, -1, -1, -1])
    bio = np.array([4.0, 3, 0, 0, 1, 0, 0, 0])  # S = (4 + 3/3) / 8 = 0.625, f = 0.25
    assert r.top_quarter_share(imp, bio) == pytest.approx((0.625 - 0.25) / 0.75)
    rng = np.random.default_rng(0)
    for _ in range(20):
        imp = rng.integers(0, 3, 12).astype(float)
        bio = rng.random(12)
        assert r.top_quarter_share(imp, bio) == pytest.approx(concentration(imp, bio))
        assert r.hoyer(imp) == pytest.approx(hoyer_sparsity(imp), nan_ok=True)


def test_the_reference_s_folds_follow_the_documented_rules():
    import pandas as pd
    import reference_recipe as r

    batch = np.array(["A"] * 4 + ["B"] * 4 + ["C"] * 2)
    ctrl = np.array([1, 1, 0, 0, 1, 1, 0, 0, 0, 0], bool)
    pert = np.array([0, 0, 1, 1, 0, 0, 1, 1, 1, 1], bool)
    folds = r.folds(pert, ctrl, batch, 0)
    # C has no controls: no fold holds it out; A and B each leave >= 2 perturbed training rows
    assert [sorted(set(batch[test])) for _, test in folds] == [["A"], ["B"]]
    assert all(not (set(train) & set(test)) for train, test in folds)
    meta = pd.DataFrame({"is_control": ctrl, "batch": batch})
    fit = r.split_controls(meta, 0.5, 0)
    assert fit.sum() == 2 and not fit[~ctrl].any() and {batch[i] for i in np.flatnonzero(fit)} == {"A", "B"}
