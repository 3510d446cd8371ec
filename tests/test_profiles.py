"""Classical profiles with cp_measure (profiles.enabled / cellica profile-tiles): nuclei, the mean
over a tile's nuclei, the embeddings contract, and the DAG that uses them instead of an MAE."""


import numpy as np
import pytest

from cellica.core.errors import CellicaError
from cellica.embed.params import ProfileParams
from tests.conftest import disks

pytest.importorskip("cp_measure", reason="cp_measure is the profiles extra (pip install -e '.[profiles]')")




def test_nuclei_by_hand():
    from cellica.embed.profiles import nuclei_masks

    batch = np.stack([disks([(8, 8), (22, 22)]), np.full((32, 32), 7.0), disks([(8, 8)], radius=1)])
    masks = nuclei_masks(batch, smoothing=0, min_area=8)
    assert masks[0].max() == 2 and (masks[0] > 0).sum() == 2 * 49  # two disks of radius 4: 49 px each
    assert masks[1].max() == 0  # a flat tile: no threshold, no nucleus
    assert masks[2].max() == 0  # a 5-px spot is below min_area: noise


def test_a_tiles_profile_is_the_mean_over_its_nuclei():
    from cellica.embed.profiles import featurizer_config, measure_tiles

    p = ProfileParams(features=["sizeshape", "intensity"], smoothing=0)
    two = disks([(8, 8), (22, 22)])
    two[22 - 4:22 + 5, 22 - 4:22 + 5] = np.where(two[18:27, 18:27] > 1000, 2000.0, two[18:27, 18:27])  # dimmer
    tiles = np.stack([np.stack([two, two]), np.stack([np.full((32, 32), 50.0)] * 2)]).astype(np.uint16)
    config = featurizer_config(["DNA", "ER"], p, 65535)
    x, columns, objects, nans = measure_tiles(tiles, 0, p, config, 65535)
    area = x[:, columns.index("Area")]
    assert objects.tolist() == [2, 0] and area[0] == pytest.approx(49) and area[1] == pytest.approx(32 * 32)
    mean = x[0, columns.index("Intensity_MeanIntensity__DNA")]
    assert mean == pytest.approx((3000 + 2000) / 2 / 65535, rel=1e-6)  # the mean of the two nuclei's means


def test_profiles_are_embeddings_sharded_gathered_and_transformed(tiny_store, tmp_path):
    from cellica.embed.extract import gather_embeddings
    from cellica.embed.profiles import profile_store
    from cellica.transform.apply import transform_file
    from cellica.transform.params import TransformParams

    p = ProfileParams(features=["intensity", "sizeshape"])
    whole = profile_store(tiny_store.path, params=p)
    parts = [tmp_path / f"{i}.h5ad" for i in range(2)]
    for i, path in enumerate(parts):
        profile_store(tiny_store.path, path, p, shard=f"{i}/2")
    gathered = gather_embeddings(parts[::-1], tmp_path / "emb.h5ad")
    np.testing.assert_array_equal(gathered.X, whole.X)
    assert gathered.obs_names.tolist() == tiny_store.metadata["tile_id"].tolist()
    assert np.isfinite(whole.X).all() and (whole.obs["profile_objects"] >= 0).all()
    assert whole.uns["provenance"]["format"] == "cp_measure" and whole.uns["provenance"]["nuclei_channel"] == "DNA"
    out = transform_file(tmp_path / "emb.h5ad", tmp_path / "pca.h5ad", "pca",
                         params=TransformParams(n_components=4, drop_constant=True))
    assert out.n_vars == 4
    with pytest.raises(CellicaError, match="profiles.nuclei_channel 'Hoechst' is neither a channel"):
        profile_store(tiny_store.path, params=ProfileParams(nuclei_channel="Hoechst"))


def test_the_dag_measures_instead_of_training(tmp_path):
    from tests.test_workflow import TINY, snakemake

    run = snakemake(tmp_path, "--dry-run", "--config", "profiles={enabled: true}", "stability={enabled: false}")
    assert run.returncode == 0, run.stderr[-2000:]
    jobs = run.stdout
    assert "profile_tiles" in jobs and "train_mae" not in jobs and "\nembed " not in jobs
    bad = snakemake(tmp_path, "--dry-run", "--config", "profiles={enabled: true}", configfile=TINY)
    assert bad.returncode != 0 and "cannot go with source: features or stability.enabled" in bad.stdout + bad.stderr
    # Every profile parameter a user may set is an option of the command, parsed into its field.
    from dataclasses import fields

    from cellica.cli.options import dataclass_from_args as params_of
    from cellica.cli.parser import build_parser
    from cellica.embed.params import ProfileParams

    ns = build_parser().parse_args(["profile-tiles", "--store", "s.zarr", "--out", "p.h5ad", "--nuclei-channel",
                                    "Hoechst", "--features", "intensity,texture"])
    p = params_of(ProfileParams, ns)
    assert p.nuclei_channel == "Hoechst" and p.features == ["intensity", "texture"]
    command = build_parser()._subparsers._group_actions[0].choices["profile-tiles"]
    assert {f.name for f in fields(ProfileParams) if f.metadata.get("cli", True)} <= {a.dest for a in command._actions}
