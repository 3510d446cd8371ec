import hashlib

import numpy as np
import pytest
from scipy import stats

from cellica.core.errors import CellicaError
from cellica.store._render import FACTOR_NAMES
from cellica.store.params import SimulationParams
from cellica.store.simulate import CONTROL_LABEL, sample_factors, simulate_screen
from cellica.store.tilestore import TileStore
from tests.conftest import TINY_SIM


def _digest(path):
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = simulate_screen(tmp_path / "a.zarr", SimulationParams(**TINY_SIM, seed=3))
    b = simulate_screen(tmp_path / "b.zarr", SimulationParams(**TINY_SIM, seed=3))
    c = simulate_screen(tmp_path / "c.zarr", SimulationParams(**TINY_SIM, seed=4))
    assert _digest(a.path) == _digest(b.path)
    assert _digest(a.path) != _digest(c.path)


def test_layout_and_ground_truth(tiny_store: TileStore):
    md = tiny_store.metadata
    p = SimulationParams(**TINY_SIM)
    n_wells_per_plate = (
        p.control_wells_per_plate + p.n_genes * p.experiments_per_gene // p.n_experiments * p.guides_per_gene
    )
    assert tiny_store.n_tiles == n_wells_per_plate * p.n_experiments * p.plates_per_experiment * p.tiles_per_well
    assert tiny_store.tile_shape == (32, 32) and tiny_store.n_channels == 4
    # All controls share one label; every gene spans several batches (not confounded).
    assert set(md.loc[md.is_control, "perturbation"]) == {CONTROL_LABEL}
    assert (md[~md.is_control].groupby("perturbation")["batch"].nunique() == 2).all()
    latents = tiny_store.ground_truth("latents")
    assert latents["tile_id"].tolist() == md["tile_id"].tolist()
    assert list(latents.columns[1:]) == list(FACTOR_NAMES)
    effects = tiny_store.ground_truth("effects").set_index("gene")
    assert set(effects["effect_class"]) <= {"none", "weak", "strong"}
    nonzero = (effects[list(FACTOR_NAMES)] != 0).sum(axis=1)
    assert (nonzero[effects.effect_class == "none"] == 0).all()
    assert (nonzero[effects.effect_class != "none"].between(1, p.max_factors_per_gene)).all()
    batches = tiny_store.ground_truth("batches")
    assert len(batches) == md["plate"].nunique()
    assert {"gain_DNA", "offset_Mito", "blur_sigma", "noise_sigma", "gradient"} <= set(batches.columns)
    guides = tiny_store.ground_truth("guides")
    assert set(guides["guide"]) == set(md.loc[~md.is_control, "guide"])


def test_genes_shift_their_factors_only(tmp_path):
    store = simulate_screen(tmp_path / "s.zarr", SimulationParams(**{**TINY_SIM, "tiles_per_well": 20}, seed=5))
    latents = store.ground_truth("latents").set_index("tile_id")[list(FACTOR_NAMES)]
    md = store.metadata.set_index("tile_id")
    effects = store.ground_truth("effects").set_index("gene")[list(FACTOR_NAMES)]
    guides = store.ground_truth("guides").set_index("guide")
    ctrl_mean = latents[md.is_control].mean()
    for gene, row in effects.iterrows():
        tiles = md.index[md.perturbation == gene]
        eff = guides.loc[md.loc[tiles, "guide"], "efficiency"].mean()
        shift = latents.loc[tiles].mean() - ctrl_mean
        np.testing.assert_allclose(shift, row * eff, atol=0.45)


def test_factors_are_independent_and_non_gaussian():
    z = sample_factors(np.random.default_rng(0), 20000)
    assert np.allclose(z.mean(0), 0, atol=0.05) and np.allclose(z.std(0), 1, atol=0.05)
    corr = np.corrcoef(z.T) - np.eye(z.shape[1])
    assert np.abs(corr).max() < 0.05
    # Every factor departs from a Gaussian (excess kurtosis or skew), as ICA needs.
    departure = np.abs(stats.kurtosis(z, axis=0)) + np.abs(stats.skew(z, axis=0))
    assert (departure > 0.3).all()


def test_rendering_reflects_factors():
    from cellica.store._render import Renderer

    p = SimulationParams(tile_size=64)
    r = Renderer(p)
    z = np.zeros(len(FACTOR_NAMES))
    dim, bright = z.copy(), z.copy()
    dna = FACTOR_NAMES.index("dna_content")
    dim[dna], bright[dna] = -1.5, 1.5
    mean_dna = lambda zz: np.mean([r.render(zz, np.random.default_rng(i))[0].sum() for i in range(20)])  # noqa: E731
    assert mean_dna(bright) > 1.5 * mean_dna(dim)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"control_wells_per_plate": 0}, "control_wells_per_plate: must be >= 1"),
        ({"experiments_per_gene": 9}, "experiments_per_gene"),
        ({"n_channels": 3}, "n_channels"),
    ],
)
def test_bad_params(tmp_path, bad, match):
    with pytest.raises(CellicaError, match=match):
        simulate_screen(tmp_path / "x.zarr", SimulationParams(**{**TINY_SIM, **bad}))
    assert not (tmp_path / "x.zarr").exists()


@pytest.mark.parametrize("mode", ["shared", "independent"])
def test_complexes_name_genes_after_corum_members_and_share_effects_only_when_asked(tmp_path, mode):
    from cellica.maps.annotations import load_sources

    p = SimulationParams(**{**TINY_SIM, "n_genes": 8, "complexes": mode}, seed=2)
    store = simulate_screen(tmp_path / "s.zarr", p)
    named = store.ground_truth("complexes")
    assert len(named) == 8 and named["gene"].is_unique
    assert set(store.metadata.loc[~store.metadata.is_control, "perturbation"]) == set(named["gene"])
    corum = load_sources(["CORUM"])
    known = set(zip(corum["gene_a"], corum["gene_b"], strict=False))
    for _, members in named.groupby("complex"):  # members of one complex are CORUM pairs
        genes = sorted(members["gene"])
        assert all((a, b) in known for i, a in enumerate(genes) for b in genes[i + 1:])
    effects = store.ground_truth("effects").set_index("gene")[list(FACTOR_NAMES)]
    same = [effects.loc[m["gene"]].nunique().max() == 1 for _, m in named.groupby("complex") if len(m) > 1]
    assert all(same) if mode == "shared" else not any(same)
