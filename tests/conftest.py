"""Shared fixtures: tiny synthetic stores, paths to the real data in ../shared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared(name: str) -> Path:
    """Path of a real data set in ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real data {path} is absent (only on developer machines and CI)")
    return path


TINY_SIM = dict(
    n_genes=4,
    guides_per_gene=2,
    n_experiments=2,
    plates_per_experiment=1,
    experiments_per_gene=2,
    control_wells_per_plate=4,
    tiles_per_well=3,
    tile_size=32,
    n_channels=4,
    shard_tiles=16,
)


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory):
    """A 72-tile simulated store (4 genes x 2 guides x 2 experiments + controls)."""
    from cellica.store.params import SimulationParams
    from cellica.store.simulate import simulate_screen

    path = tmp_path_factory.mktemp("sim") / "tiny.zarr"
    return simulate_screen(path, SimulationParams(**TINY_SIM, seed=1))


TINY_MAE = dict(depth=1, epochs=1, batch_size=16, patch_size=8, decoder_dim=32, decoder_heads=2, threads=1)


@pytest.fixture(scope="session")
def tiny_model(tiny_store, tmp_path_factory):
    """A one-epoch, one-block MAE trained on the tiny store (cellica safetensors + json)."""
    from cellica.embed.params import TrainParams
    from cellica.embed.train import train_mae

    out = tmp_path_factory.mktemp("mae") / "model.safetensors"
    train_mae(tiny_store.path, out, TrainParams(**TINY_MAE))
    return out


def disks(centres, radius=4, size=32, value=3000.0, background=100.0):
    """A tile of bright disks (nuclei) of ``radius`` px at ``centres`` on a flat background."""
    import numpy as np

    yy, xx = np.mgrid[:size, :size]
    tile = np.full((size, size), background)
    for cy, cx in centres:
        tile[(yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2] = value
    return tile
