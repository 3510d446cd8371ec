import json
import logging

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import timm
import torch

from cellica.core.adata import aggregate_wells
from cellica.core.errors import CellicaError
from cellica.embed._checkpoints import load_encoder, read_state_dict
from cellica.embed.extract import embed_store, gather_embeddings, parse_shard
from cellica.embed.params import EmbedParams


class NotATensor:  # a pickled object must never be loaded
    pass


def test_embed_writes_anndata_contract(tiny_store, tiny_model, tmp_path):
    out = tmp_path / "e.h5ad"
    adata = embed_store(tiny_store.path, tiny_model, out, params=EmbedParams(batch_size=7))
    back = ad.read_h5ad(out)
    assert back.shape == (tiny_store.n_tiles, 192) and back.X.dtype == np.float32
    assert back.obs_names.tolist() == tiny_store.metadata["tile_id"].tolist()
    assert set(tiny_store.metadata.columns) <= set(back.obs.columns)
    prov = back.uns["provenance"]
    assert prov["pooling"] == "mean" and prov["format"] == "cellica" and len(prov["checkpoint_sha256"]) == 64
    assert prov["architecture"]["model_name"] == "vit_tiny_patch16_224"
    np.testing.assert_allclose(back.X, adata.X)
    # The same tiles give the same embeddings whatever the batch size.
    again = embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=64))
    np.testing.assert_allclose(again.X, adata.X, rtol=1e-4, atol=1e-5)


def test_loader_workers_give_the_same_embeddings_in_tile_order(tiny_store, tiny_model):
    """Workers' batches arrive interleaved (each worker reads its own shards): every tile goes back
    to its place, and its embedding is the one a single process gives, bit for bit. Before #34,
    any embed.num_workers > 0 stopped with "tiles came back out of order"."""
    one = embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=5, num_workers=0))
    assert tiny_store.n_tiles > 2 * tiny_store.shard_tiles  # several shards, so both workers read
    three = embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=5, num_workers=3))
    assert three.obs_names.tolist() == one.obs_names.tolist() == tiny_store.metadata["tile_id"].tolist()
    np.testing.assert_array_equal(three.X, one.X)
    for params in (EmbedParams(batch_size=5, read_threads=3), EmbedParams(batch_size=5, num_workers=2, read_threads=2)):
        threaded = embed_store(tiny_store.path, tiny_model, params=params)
        assert threaded.obs_names.tolist() == one.obs_names.tolist()
        np.testing.assert_array_equal(threaded.X, one.X)


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("seed", [None, 7])
def test_read_threads_give_the_same_batches_in_the_same_order(tiny_store, raw, seed):
    """Extraction (store order) and training (shuffled, seeded) alike: the batches with read
    threads are those of one thread, index for index and pixel for pixel."""
    from cellica.embed._loader import TileBlocks, make_loader
    from cellica.embed._mae import TileNormalizer

    def batches(threads):
        data = TileBlocks(tiny_store.path, np.arange(3, 70), TileNormalizer("tile"), 6, shuffle_seed=seed,
                          buffer_blocks=2, raw=raw, read_threads=threads)
        return list(make_loader(data))

    one, three = batches(0), batches(3)
    assert len(one) == len(three) > 10
    for (i1, x1), (i3, x3) in zip(one, three, strict=True):
        np.testing.assert_array_equal(i1.numpy(), i3.numpy())
        np.testing.assert_array_equal(x1.numpy(), x3.numpy())
    assert sorted(np.concatenate([i.numpy() for i, _ in one]).tolist()) == list(range(3, 70))


def test_reading_ahead_is_bounded_and_in_order():
    import threading

    from cellica.embed._loader import read_ahead

    started, lock = [], threading.Lock()

    def work(i):
        with lock:
            started.append(i)
        return i * i

    out = read_ahead(work, list(range(50)), threads=2)
    assert next(out) == 0
    assert len(started) <= 2 + 1 + 1  # the one consumed, and never more than threads + 1 ahead of it
    assert list(out) == [i * i for i in range(1, 50)]
    assert list(read_ahead(work, [], threads=2)) == [] and list(read_ahead(work, [3], threads=0)) == [9]


@pytest.mark.parametrize("mode", ["store", "tile", "instance"])
def test_normalising_on_the_device_equals_the_loader_s_up_to_rounding(tiny_store, mode):
    """The torch normalisation of integer pixels (uint16 crossing as int16 bytes) against the
    numpy one the loader applies: float32 rounding apart, the same tiles, for every mode."""
    from cellica.embed._loader import TileBlocks, make_loader, pixels_to_float, raw_tensor
    from cellica.embed._mae import TileNormalizer

    tiles = tiny_store.read_range(0, 20)
    assert tiles.dtype == np.uint16
    tiles[0, 0, 0, 0] = 65535  # the top bit: int16's sign, undone by pixels_to_float
    norm = TileNormalizer(mode).fit(tiles) if mode == "store" else TileNormalizer(mode)
    raw = raw_tensor(tiles)
    assert raw.dtype == torch.int16 and pixels_to_float(raw, tiles.dtype).numpy().max() == 65535
    np.testing.assert_allclose(norm.torch(pixels_to_float(raw, tiles.dtype)).numpy(), norm(tiles), rtol=1e-5,
                               atol=1e-5)
    u8 = (tiles >> 8).astype(np.uint8)
    np.testing.assert_array_equal(pixels_to_float(raw_tensor(u8), u8.dtype).numpy(), u8.astype(np.float32))
    batches = list(make_loader(TileBlocks(tiny_store.path, np.arange(20), norm, 7, raw=True)))
    assert {b.dtype for _, b in batches} == {torch.int16} and sum(len(i) for i, _ in batches) == 20


def test_embeddings_normalised_on_the_device_equal_the_loader_s(tiny_store, tiny_model):
    loader = embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=16, normalize_on="loader"))
    device = embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=16, normalize_on="device"))
    assert (
        device.uns["provenance"]["normalized_on"] == "device" and loader.uns["provenance"]["normalized_on"] == "loader"
    )
    assert loader.uns["provenance"]["arithmetic"] == "float32"  # bf16 is CUDA's only (embed.precision)
    np.testing.assert_allclose(device.X, loader.X, rtol=1e-4, atol=1e-4)
    # auto on CPU normalises in the loader: the embeddings of before, bit for bit
    np.testing.assert_array_equal(embed_store(tiny_store.path, tiny_model, params=EmbedParams(batch_size=16)).X,
                                  loader.X)


def test_read_threads_by_default_follow_the_job_s_cpus(monkeypatch):
    from cellica.embed._loader import MAX_AUTO_READ_THREADS, auto_read_threads, job_cpus

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    assert job_cpus() == 6 and auto_read_threads(cuda) == 5 and auto_read_threads(cpu) == 0  # the model needs CPU cores
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "64")
    assert auto_read_threads(cuda) == MAX_AUTO_READ_THREADS
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert auto_read_threads(cuda) == 0
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    import os

    assert job_cpus() == len(os.sched_getaffinity(0))


def test_shards_gather_to_the_whole(tiny_store, tiny_model, tmp_path):
    whole = embed_store(tiny_store.path, tiny_model)
    paths = []
    for i in (2, 0, 1):
        paths.append(tmp_path / f"{i}.h5ad")
        embed_store(tiny_store.path, tiny_model, paths[-1], shard=f"{i}/3")
    merged = gather_embeddings(paths, tmp_path / "all.h5ad")
    assert merged.obs_names.tolist() == whole.obs_names.tolist()
    np.testing.assert_allclose(merged.X, whole.X, rtol=1e-4, atol=1e-5)
    assert merged.uns["provenance"]["shard"]["gathered_from"] == 3
    with pytest.raises(CellicaError, match=r"missing \[1\]"):
        gather_embeddings([paths[0], paths[1]])
    with pytest.raises(CellicaError, match="once each"):
        gather_embeddings([*paths, paths[0]])


def test_parse_shard():
    # 100 tiles in 7 store shards of 16: split 4 + 3 shards, never inside a shard.
    assert parse_shard("0/2", 100, 16) == (0, 2, 0, 64)
    assert parse_shard("1/2", 100, 16) == (1, 2, 64, 100)
    assert parse_shard(None, 100, 16) == (0, 1, 0, 100)
    for bad, match in [("2/2", "out of range"), ("a/b", "form i/n"), ("0/9", "only 7 shard")]:
        with pytest.raises(CellicaError, match=match):
            parse_shard(bad, 100, 16)


def test_nan_embeddings_name_the_tiles(tiny_store, tiny_model, monkeypatch):
    from cellica.embed._mae import MaskedAutoencoder

    def broken(self, x, pooling="mean", block=-1):
        z = torch.zeros(x.shape[0], 192)
        z[0] = float("nan")
        return z

    monkeypatch.setattr(MaskedAutoencoder, "encode", broken)
    first = tiny_store.metadata["tile_id"].iloc[0]
    with pytest.raises(CellicaError, match=f"NaN/Inf embeddings for .* tile.*{first}"):
        embed_store(tiny_store.path, tiny_model)


def test_aggregate_wells_by_hand():
    obs = pd.DataFrame({"batch": ["b"] * 3, "plate": ["p"] * 3, "well": ["A01", "A01", "A02"],
                        "perturbation": ["g", "g", "c"], "is_control": [False, False, True], "site": [1, 2, 1]},
                       index=["t1", "t2", "t3"])
    adata = ad.AnnData(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32), obs=obs)
    wells = aggregate_wells(adata)
    assert wells.obs_names.tolist() == ["b/p/A01", "b/p/A02"]
    np.testing.assert_allclose(wells.X, [[2.0, 3.0], [5.0, 6.0]])
    assert wells.obs["n_tiles"].tolist() == [2, 1]
    assert "site" not in wells.obs  # varies within a well


# ---------------------------------------------------------------------- checkpoints
def _timm_state(in_chans=3, name="vit_tiny_patch16_224", **kw):
    torch.manual_seed(0)
    model = timm.create_model(
        name, pretrained=False, num_classes=0, in_chans=in_chans, img_size=32, patch_size=8, depth=1, **kw
    )
    return model.state_dict()


def test_timm_checkpoint_with_channel_adaptation(tiny_store, tmp_path, caplog):
    path = tmp_path / "vit.pth"
    torch.save(_timm_state(3), path)
    with pytest.raises(CellicaError, match="has 3 input channels but .* has 4"):
        embed_store(tiny_store.path, path, params=EmbedParams(model_name="vit_tiny_patch16_224"))
    with caplog.at_level(logging.WARNING, logger="cellica"):
        adata = embed_store(
            tiny_store.path, path, params=EmbedParams(model_name="vit_tiny_patch16_224", adapt_channels=True)
        )
    assert "adapted the patch embedding from 3 to 4 channels" in caplog.text
    assert adata.uns["provenance"]["format"] == "timm"
    with pytest.raises(CellicaError, match="name its timm architecture"):
        embed_store(tiny_store.path, path)


def test_mae_style_checkpoint_with_decoder_and_other_tile_size(tmp_path, caplog):
    state = {f"{k}": v for k, v in _timm_state(4).items()}
    state["decoder_embed.weight"] = torch.zeros(8, 192)
    state["mask_token"] = torch.zeros(1, 1, 8)
    path = tmp_path / "mae.pth"
    torch.save({"model": state, "epoch": 3}, path)
    with caplog.at_level(logging.WARNING, logger="cellica"):
        model, norm, info = load_encoder(path, 4, 64, model_name="vit_tiny_patch16_224")
    assert "resampled position embeddings from 16 to 64 patches" in caplog.text
    assert model.encode(torch.randn(2, 4, 64, 64)).shape == (2, 192)
    with pytest.raises(
        CellicaError, match="tile size 60 of the tile store is not a multiple of the checkpoint's patch size 8"
    ):
        load_encoder(path, 4, 60, model_name="vit_tiny_patch16_224")


def test_mismatched_shapes_are_named(tmp_path):
    path = tmp_path / "small.pth"
    torch.save(_timm_state(4, "vit_small_patch16_224"), path)
    with pytest.raises(
        CellicaError, match=r"does not fit vit_tiny_patch16_224: .*checkpoint \(1, 17, 384\) vs model \(1, 17, 192\)"
    ):
        load_encoder(path, 4, 32, model_name="vit_tiny_patch16_224")


def test_pickled_truncated_and_missing_checkpoints(tmp_path, tiny_model):
    pickled = tmp_path / "evil.pth"
    torch.save({"model": NotATensor()}, pickled)
    with pytest.raises(CellicaError, match="pickled Python objects, which cellica never loads"):
        read_state_dict(pickled)
    data = tiny_model.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CellicaError, match="truncated"):
        read_state_dict(cut)
    cut_pth = tmp_path / "cut.pth"
    torch.save(_timm_state(4), cut_pth)
    cut_pth.write_bytes(cut_pth.read_bytes()[:5000])
    with pytest.raises(CellicaError, match="truncated or corrupt"):
        read_state_dict(cut_pth)
    with pytest.raises(CellicaError, match="does not exist"):
        read_state_dict(tmp_path / "nope.safetensors")


def test_own_checkpoint_on_a_store_with_other_channels(tiny_model, tmp_path):
    meta = json.loads(tiny_model.with_suffix(".json").read_text())
    assert meta["format"] == "cellica-mae-v1" and meta["training"]["history"]
    assert meta["normalization"]["mode"] == "store" and len(meta["normalization"]["mean"]) == 4
    with pytest.raises(CellicaError, match="store statistics of 4 channels; the store has 6"):
        load_encoder(tiny_model, 6, 32, store_label="the store")
    # With per-tile normalisation only the patch embedding must change, and only if allowed.
    from cellica.embed._checkpoints import save_model
    from cellica.embed._mae import TileNormalizer

    trained, _, _ = load_encoder(tiny_model, 4, 32)
    other = save_model(trained, TileNormalizer(mode="tile"), tmp_path / "tile.safetensors")
    # Editing the sidecar instead is caught: the header of the weights records the normalisation.
    edited = json.loads(tiny_model.with_suffix(".json").read_text())
    edited["normalization"] = {"mode": "tile", "mean": [], "std": [], "eps": 1e-6}
    (tmp_path / "edited.safetensors").write_bytes(tiny_model.read_bytes())
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    with pytest.raises(CellicaError, match="normalization differs from the one stored with the weights"):
        load_encoder(tmp_path / "edited.safetensors", 4, 32)
    with pytest.raises(CellicaError, match="has 4 input channels but the store has 6"):
        load_encoder(other, 6, 32, store_label="the store")
    model, _, _ = load_encoder(other, 6, 32, adapt_channels=True)
    assert model.encoder.patch_embed.proj.weight.shape[1] == 6


def test_metadata_columns_named_like_dataframe_attributes_are_renamed(tmp_path):
    from cellica.core.adata import make_adata, read_h5ad, write_h5ad

    obs = pd.DataFrame({"plate": ["p"], "well": ["w"], "batch": ["b"], "perturbation": ["c"], "is_control": [True],
                        "dtype": ["uint8"], "shape": ["512x512"]}, index=["t0"])
    adata = make_adata(np.ones((1, 2)), obs, None, {}, "test")
    write_h5ad(adata, tmp_path / "a.h5ad")
    assert {"meta_dtype", "meta_shape"} <= set(read_h5ad(tmp_path / "a.h5ad").obs.columns)
