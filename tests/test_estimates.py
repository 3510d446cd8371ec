"""Settings refused or warned with their estimate before any job starts (cellica.estimates): the
dry run refuses the shard counts the embed job would refuse, and warns of shard files, pixel
scales and tree counts out of proportion, naming the key and the estimate."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from cellica import estimates
from cellica.core.errors import CellicaError
from cellica.plan import RunPlan, checked_config
from cellica.store.params import SimulationParams
from cellica.store.simulate import make_layout

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"


def _config(**sections):
    cfg = yaml.safe_load(TINY.read_text())
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


@pytest.mark.parametrize("design", [{}, {"n_genes": 7, "experiments_per_gene": 3, "n_experiments": 5},
                                    {"guides_per_gene": 1, "plates_per_experiment": 3, "tiles_per_well": 2},
                                    {"control_wells_per_plate": 1, "n_genes": 1, "n_experiments": 1,
                                     "experiments_per_gene": 1}])
def test_the_simulated_tile_count_is_the_layouts(design):
    """The count the dry run uses is the number of tiles simulate_screen writes (its layout's wells
    times the tiles per well), for designs where genes fall unevenly on experiments."""
    p = SimulationParams(**design)
    genes = [f"G{g}" for g in range(p.n_genes)]
    wells = make_layout(p, np.random.default_rng(0), genes)
    assert estimates.simulated_tiles(p.to_dict()) == len(wells) * p.tiles_per_well


def test_the_dry_run_refuses_exactly_the_shard_counts_the_embed_job_refuses():
    from cellica.embed.extract import parse_shard

    cfg = checked_config(_config())
    sim = cfg["simulate"]
    tiles = estimates.simulated_tiles(sim)
    files = -(-tiles // sim["shard_tiles"])
    assert files >= 2  # the tiny config's store spans several shard files
    for n in range(1, files + 3):
        try:
            parse_shard(f"0/{n}", tiles, sim["shard_tiles"])
            job_refuses = False
        except CellicaError:
            job_refuses = True
        cfg = _config(embed={"shards": n})
        if job_refuses:
            with pytest.raises(CellicaError, match=rf"embed.shards: {n} embedding jobs, but the simulated store holds "
                                                   rf"{tiles:,} tiles in {files} shard file\(s\)"):
                RunPlan(cfg)
        else:
            RunPlan(cfg)
        assert job_refuses == (n > files)


def test_a_shard_file_above_a_gib_is_warned_with_its_size():
    # 4096 tiles x 4 channels (the tiny config) x 256 x 256 px x 2 bytes = 2.0 GiB; 1024 tiles = 0.5 GiB.
    cfg = checked_config(_config(simulate={"shard_tiles": 4096, "tile_size": 256}, embed={"shards": 1}))
    assert estimates.shard_warning(cfg) == (
        "simulate.shard_tiles 4096: each shard file holds 2.0 GiB of pixels (4 channels of 256 px), and a read "
        "holds a whole shard in memory, per reading thread; a few hundred MiB per shard is the usual size "
        "(docs/hpc.md)")
    assert estimates.shard_warning(checked_config(_config(simulate={"shard_tiles": 1024, "tile_size": 256},
                                                              embed={"shards": 1}))) is None


@pytest.mark.parametrize("scale, says", [(12000, None), (100000, r"% of the pixels \(the brightest structures\) are "
                                                                 r"clipped at 65535"),
                                         (100, r"99% of the pixels are below \d+ counts")])
def test_a_pixel_scale_that_clips_or_darkens_the_screen_is_warned(scale, says):
    cfg = checked_config(_config(simulate={"intensity_scale": scale}))
    got = estimates.saturation_warning(cfg)
    if says is None:
        assert got is None
    else:
        assert got.startswith(f"simulate.intensity_scale {scale}: ") and __import__("re").search(says, got), got


def test_the_classifier_time_estimate_by_hand():
    """The tiny config's fits, counted by hand: genes x feature sets x seeds x (batches - 1) folds,
    each over all controls plus one gene's tiles, times trees and features at 20 ns."""
    cfg = checked_config(_config(evaluate={"n_trees": 100}))
    sim, ev = cfg["simulate"], cfg["evaluate"]
    controls = sim["n_experiments"] * sim["plates_per_experiment"] * sim["control_wells_per_plate"] * \
        sim["tiles_per_well"]
    gene = sim["experiments_per_gene"] * sim["plates_per_experiment"] * sim["guides_per_gene"] * sim["tiles_per_well"]
    sets = len(cfg["transform"]["variants"]) + len(cfg["baselines"]["names"])
    fits = sim["n_genes"] * sets * len(ev["seeds"]) * (sim["n_experiments"] - 1)
    want = fits * 100 * (controls + gene) * cfg["transform"]["n_components"] * 20e-9
    assert estimates.classifier_seconds(cfg) == pytest.approx(want, rel=1e-12)
    assert estimates.trees_warning(cfg) is None
    # Enough trees for more than a day of one core: warned with the hours and the ratio to 100.
    trees = int(np.ceil(100 * 24 * 3600 / want)) * 2
    cfg = checked_config(_config(evaluate={"n_trees": trees}))
    hours = estimates.classifier_seconds(cfg) / 3600
    assert 47 < hours < 49
    assert estimates.trees_warning(cfg).startswith(f"evaluate.n_trees {trees}: the classifiers would take about "
                                                   f"{hours:,.0f} hours of one core ({trees / 100:,.4g}x the paper's")


def test_the_plan_carries_the_warnings_and_the_demo_has_none():
    assert RunPlan(_config(simulate={"intensity_scale": 100000})).warnings[0].startswith(
        "simulate.intensity_scale 100000")
    demo = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert RunPlan(demo).warnings == []
