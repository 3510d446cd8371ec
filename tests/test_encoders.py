"""The channel-agnostic encoder (cellica's layout and OpenPhenom's), and the choice of block and
pooling of an embedding."""

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from cellica.core.errors import CellicaError
from cellica.embed._channel_agnostic import positions_per_channel, sincos_positions
from cellica.embed._checkpoints import load_encoder
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams, TrainParams
from cellica.embed.train import train_mae
from tests.conftest import TINY_MAE

SMALL = dict(model_name="vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, decoder_dim=32,
             decoder_heads=2, decoder_depth=1)


def openphenom_like(seed=0, **kw):
    """A randomly initialised encoder in OpenPhenom's layout and the state dict its checkpoint
    holds: the encoder under encoder.vit_backbone., a decoder beside it, all in {"state_dict": ...}."""
    torch.manual_seed(seed)
    ref = MaskedAutoencoder(MAEConfig(**{**SMALL, "in_chans": 11, "architecture": "channel_agnostic",
                                         "layout": "openphenom", **kw})).eval()
    state = {f"encoder.vit_backbone.{k}": v.clone() for k, v in ref.encoder.state_dict().items()}
    state.update({"decoder.mask_token": torch.zeros(1, 1, 16), "encoder_decoder_proj.weight": torch.zeros(16, 192)})
    return ref, state


def test_sincos_positions_by_hand():
    pos = sincos_positions(4, 2)  # 4 dims: sin(row), cos(row), sin(col), cos(col) at frequency 1
    rows, cols = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    expected = np.stack([np.sin(rows), np.cos(rows), np.sin(cols), np.cos(cols)], axis=1)
    np.testing.assert_allclose(pos.numpy(), expected, atol=1e-7)
    repeated = torch.cat([torch.zeros(1, 4), pos.repeat(3, 1)])[None]
    assert positions_per_channel(repeated, "x") == 4
    with pytest.raises(CellicaError, match="does not repeat one square block"):
        positions_per_channel(torch.randn(1, 1 + 12, 4), "x")


@pytest.mark.parametrize("layout", ["cellica", "openphenom"])
def test_channel_agnostic_mae_trains_and_embeds_any_channel_count(layout):
    torch.manual_seed(0)
    model = MaskedAutoencoder(MAEConfig(**SMALL, in_chans=3, architecture="channel_agnostic", layout=layout))
    x = torch.randn(2, 3, 32, 32)
    assert model.patchify(x).shape == (2, 3 * 16, 64)  # one channel's 8 x 8 patch per token
    torch.testing.assert_close(model.patchify(x)[0, 16], x[0, 1, :8, :8].reshape(-1))  # channel 1's first patch
    loss = model(x)
    loss.backward()
    assert torch.isfinite(loss) and model.encoder.patch_embed.proj.weight.grad.abs().sum() > 0
    assert model.encoder.pos_embed.grad is None  # fixed positions
    assert (getattr(model.encoder, "channel_embed", None) is not None) == (layout == "cellica")
    model.eval()
    with torch.no_grad():
        assert model.encode(x).shape == model.encode(x[:, :1]).shape == (2, 192)
        assert model.encode(torch.randn(1, 11, 32, 32)).shape == (1, 192)
        with pytest.raises(CellicaError, match="at most 11 channels; the tiles have 12"):
            model.encode(torch.randn(1, 12, 32, 32))


def test_channel_agnostic_tokens_are_per_channel_projections():
    """Token k of channel c is the shared projection of channel c's k-th patch plus its position
    (identical for every channel) plus channel c's embedding."""
    torch.manual_seed(0)
    model = MaskedAutoencoder(MAEConfig(**SMALL, in_chans=2, architecture="channel_agnostic")).eval()
    enc, x = model.encoder, torch.randn(1, 2, 32, 32)
    with torch.no_grad():
        tokens = model._tokens(x)
        proj = enc.patch_embed.proj
        patch = x[:, 1:2, 8:16, :8]  # channel 1, patch row 1, column 0: token 4 of that channel
        by_hand = proj(patch).flatten() + enc.pos_embed[0, 1 + 4] + enc.channel_embed[0, 1]
    assert tokens.shape == (1, 1 + 2 * 16, 192)
    torch.testing.assert_close(tokens[0, 1 + 16 + 4], by_hand)
    torch.testing.assert_close(enc.pos_embed[0, 1 + 4], enc.pos_embed[0, 1 + 16 + 4])


def test_instance_normalisation_is_openphenoms():
    tiles = np.random.default_rng(0).integers(0, 255, (2, 3, 16, 16)).astype(np.uint8)
    ours = TileNormalizer(mode="instance")(tiles)
    theirs = torch.nn.functional.instance_norm(torch.from_numpy(tiles).float() / 255, eps=1e-5)
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


@pytest.mark.parametrize("fmt", ["torch archive named .safetensors", "safetensors", "pth"])
def test_openphenom_layout_checkpoint_loads_and_embeds_as_the_original(tmp_path, fmt, caplog):
    ref, state = openphenom_like()
    if fmt == "safetensors":
        path = tmp_path / "model.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        path = tmp_path / ("model.safetensors" if fmt.startswith("torch") else "model.pth")
        torch.save({"state_dict": state}, path)
    model, normalizer, info = load_encoder(path, n_channels=5, tile_size=32)
    assert info["format"] == "openphenom" and normalizer.mode == "instance"
    assert info["architecture"]["max_channels"] == 11 and info["architecture"]["depth"] == 2
    assert info["architecture"]["model_name"] == "vit_tiny_patch16_224"  # from its width, 192
    tiles = np.random.default_rng(1).integers(0, 255, (3, 5, 32, 32)).astype(np.uint8)
    x = torch.from_numpy(normalizer(tiles))
    with torch.no_grad():
        torch.testing.assert_close(model.encode(x), ref.encode(x), rtol=0, atol=0)
        # the embedding is the mean of the last block's patch tokens, without a final norm (fc_norm is the head's)
        t = ref.encoder.blocks(ref._tokens(x))
        torch.testing.assert_close(model.encode(x), t[:, 1:].mean(dim=1))
    assert ("torch.save archive despite its name" in caplog.text) == fmt.startswith("torch")


def test_openphenom_layout_bad_checkpoints(tmp_path):
    _, state = openphenom_like()
    path = tmp_path / "model.pth"
    torch.save({"state_dict": state}, path)
    with pytest.raises(CellicaError, match=r"patch size 8 and 4 x 4 positions per channel \(32 px tiles\), but the "
                                           r"store's tiles are 64 px: ingest with tile_size 32"):
        load_encoder(path, 5, 64)
    bad = dict(state)
    bad["encoder.vit_backbone.blocks.1.in_proj.weight"] = torch.zeros(8, 192)
    torch.save(bad, path)
    with pytest.raises(CellicaError, match="first differing tensor blocks.1.in_proj.weight"):
        load_encoder(path, 5, 32)
    del bad["encoder.vit_backbone.blocks.0.ls.gamma"]
    torch.save(bad, path)
    with pytest.raises(
        CellicaError, match=r"first differing tensor blocks.0.ls.gamma; missing \['blocks.0.ls.gamma'\]"
    ):
        load_encoder(path, 5, 32)
    _, wide = openphenom_like(patch_size=16, img_size=32)  # patch 16: 2 x 2 positions per channel
    torch.save(wide, path)
    with pytest.raises(CellicaError, match="has patch size 16 and 2 x 2 positions per channel"):
        load_encoder(path, 5, 64)
    _, state = openphenom_like()
    torch.save(state, path)
    with pytest.raises(CellicaError, match="model.pth embeds at most 11 channels; the tile store has 12"):
        load_encoder(path, 12, 32)


def test_own_channel_agnostic_mae_round_trip(tiny_store, tmp_path):
    out = tmp_path / "ca.safetensors"
    train_mae(tiny_store.path, out, TrainParams(**TINY_MAE, architecture="channel_agnostic", max_channels=6))
    adata = embed_store(tiny_store.path, out, params=EmbedParams(batch_size=16))
    prov = adata.uns["provenance"]
    assert prov["architecture"]["architecture"] == "channel_agnostic" and prov["architecture"]["max_channels"] == 6
    assert adata.shape == (tiny_store.n_tiles, 192) and np.isfinite(adata.X).all()
    with pytest.raises(CellicaError, match="patch size 8 and 16 positions per channel, which do not fit"):
        load_encoder(out, tiny_store.n_channels, 64)


def test_block_and_pooling(tiny_store, tiny_model, tmp_path):
    last = embed_store(tiny_store.path, tiny_model)
    again = embed_store(tiny_store.path, tiny_model, params=EmbedParams(block=0))  # TINY_MAE: one block
    np.testing.assert_array_equal(again.X, last.X)  # block 0 of a 1-block encoder is the last
    assert last.uns["provenance"]["block"] == 0 and last.uns["provenance"]["n_blocks"] == 1
    both = embed_store(tiny_store.path, tiny_model, params=EmbedParams(pooling="both"))
    cls = embed_store(tiny_store.path, tiny_model, params=EmbedParams(pooling="cls"))
    np.testing.assert_array_equal(both.X, np.hstack([last.X, cls.X]))
    with pytest.raises(CellicaError, match=r"embed.block 1 is out of range for a 1-block encoder: use -1..0"):
        embed_store(tiny_store.path, tiny_model, tmp_path / "x.h5ad", params=EmbedParams(block=1))
    assert not (tmp_path / "x.h5ad").exists()


def test_intermediate_block_by_hand():
    torch.manual_seed(0)
    model = MaskedAutoencoder(MAEConfig(**SMALL, in_chans=3)).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.encoder.blocks[0](model._tokens(x))  # block 0's output, no final norm
        torch.testing.assert_close(model.encode(x, "mean", 0), tokens[:, 1:].mean(dim=1))
        torch.testing.assert_close(model.encode(x, "cls", -2), tokens[:, 0])
        full = model.encoder.norm(model.encoder.blocks(model._tokens(x)))
        torch.testing.assert_close(model.encode(x), full[:, 1:].mean(dim=1), rtol=0, atol=0)
