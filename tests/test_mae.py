import numpy as np
import pytest
import torch

from cellica.core.errors import CellicaError
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer
from cellica.embed.params import TrainParams
from cellica.embed.train import lr_factor, select_tiles, train_mae
from tests.conftest import TINY_MAE


def small_model(**kw):
    torch.manual_seed(0)
    return MaskedAutoencoder(
        MAEConfig(in_chans=2, img_size=16, patch_size=4, depth=1, decoder_dim=16, decoder_heads=2, **kw)
    )


def test_patchify_raster_order():
    m = small_model()
    img = torch.arange(2 * 16 * 16, dtype=torch.float32).reshape(1, 2, 16, 16)
    patches = m.patchify(img)
    assert patches.shape == (1, 16, 4 * 4 * 2)
    # Patch 1 is the second patch of the first row: columns 4..7 of rows 0..3, channels last.
    expected = img[0, :, 0:4, 4:8].permute(1, 2, 0).reshape(-1)
    assert torch.equal(patches[0, 1], expected)


def test_forward_loss_and_encode_shapes():
    m = small_model()
    x = torch.randn(3, 2, 16, 16)
    loss = m(x, generator=torch.Generator().manual_seed(0))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert m.encoder.patch_embed.proj.weight.grad is not None
    assert m.encode(x).shape == (3, m.encoder.embed_dim)
    assert m.encode(x, "cls").shape == (3, m.encoder.embed_dim)
    with pytest.raises(CellicaError, match="not a multiple of the patch size"):
        small_model().cfg.__class__(img_size=18, patch_size=4).validate()


def test_masking_hides_three_quarters():
    m = small_model(mask_ratio=0.75)
    seen = {}

    def spy(module, args, out):
        seen["tokens"] = args[0].shape[1]

    m.encoder.blocks.register_forward_hook(spy)
    m(torch.randn(2, 2, 16, 16))
    assert seen["tokens"] == 1 + 4  # class token + 25% of 16 patches


def test_tile_normaliser_modes():
    tiles = np.stack([np.full((2, 4, 4), 10.0), np.full((2, 4, 4), 30.0)]).astype(np.uint16)
    tiles[:, :, 0, 0] = 0
    per_tile = TileNormalizer("tile")(tiles)
    np.testing.assert_allclose(per_tile.mean(axis=(2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(per_tile.std(axis=(2, 3)), 1, atol=1e-3)
    store = TileNormalizer("store").fit(tiles)
    out = store(tiles)
    assert out[0].mean() < 0 < out[1].mean()  # absolute intensity kept
    with pytest.raises(CellicaError, match="2 channels, tiles have 3"):
        store(np.zeros((1, 3, 4, 4)))
    with pytest.raises(CellicaError, match="normalization must be"):
        TileNormalizer("global")


def test_lr_schedule():
    assert lr_factor(0, 10, 100) == pytest.approx(0.1)
    assert lr_factor(9, 10, 100) == pytest.approx(1.0)
    assert lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(100, 10, 100) == pytest.approx(0.0)


def test_select_tiles(tiny_store):
    ctrl = select_tiles(tiny_store, "controls", None, 0)
    assert tiny_store.metadata["is_control"].to_numpy()[ctrl].all()
    sub = select_tiles(tiny_store, "all", 10, 0)
    assert sub.size == 10 and np.all(np.diff(sub) > 0)
    with pytest.raises(CellicaError, match="train_on"):
        select_tiles(tiny_store, "some", None, 0)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def test_training_is_deterministic_and_resumes_identically(tiny_store, tmp_path, monkeypatch):
    params = TrainParams(**{**TINY_MAE, "epochs": 2})
    a = train_mae(tiny_store.path, tmp_path / "a" / "m.safetensors", params)
    b = train_mae(tiny_store.path, tmp_path / "b" / "m.safetensors", params)
    wa, wb = _weights(tmp_path / "a" / "m.safetensors"), _weights(tmp_path / "b" / "m.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]

    # Interrupt a third run during epoch 2, then resume: same weights as uninterrupted.
    import cellica.embed._loader as loader

    original = loader.TileBlocks.__iter__

    def crash_in_epoch_2(self):
        if self.shuffle_seed == params.seed * 1000 + 1:
            raise KeyboardInterrupt
        yield from original(self)

    monkeypatch.setattr(loader.TileBlocks, "__iter__", crash_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train_mae(tiny_store.path, tmp_path / "c" / "m.safetensors", params)
    assert (tmp_path / "c" / "checkpoints" / "last.pt").is_file()
    assert not (tmp_path / "c" / "m.safetensors").exists()
    monkeypatch.setattr(loader.TileBlocks, "__iter__", original)
    c = train_mae(tiny_store.path, tmp_path / "c" / "m.safetensors", params)
    wc = _weights(tmp_path / "c" / "m.safetensors")
    assert all(torch.equal(wa[k], wc[k]) for k in wa)
    assert [h["loss"] for h in c["history"]] == [h["loss"] for h in a["history"]]
