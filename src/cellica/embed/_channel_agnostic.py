"""The channel-agnostic ViT encoder: every channel of a tile is cut into patches on its own,
all channels share one patch projection (a 1-channel convolution), and each token learns where
it is (fixed 2-D sine-cosine positions, the same for every channel) and, in cellica's own
layout, which channel it came from (a learned per-channel embedding). One model then embeds
tiles of any number of channels up to ``max_channels``; the tokens of a C-channel tile are the
class token followed by C blocks of ``(tile / patch)^2`` patch tokens, channel by channel.

Two layouts share this code:

``cellica``
    the named timm ViT's own blocks, plus ``channel_embed`` (one learned vector per channel);
``openphenom``
    the layout of Recursion's OpenPhenom checkpoints (recursionpharma/maes_microscopy):
    timm ``ParallelScalingBlock``s without query/key/value bias, with query/key LayerNorm and
    LayerScale (1e-4), a final norm applied only by the classifier head (``fc_norm``), so the
    embedding is the mean of the last block's patch tokens; no channel embedding. Its
    checkpoints keep the encoder under ``encoder.vit_backbone.``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cellica.core.errors import CellicaError
from cellica.embed.params import LAYOUTS

OPENPHENOM_PREFIX = "encoder.vit_backbone."
# timm's ViT sizes by width: an OpenPhenom-layout checkpoint records its width, not its name.
MODEL_BY_WIDTH = {192: "vit_tiny_patch16_224", 384: "vit_small_patch16_224", 768: "vit_base_patch16_224",
                  1024: "vit_large_patch16_224"}


def sincos_positions(dim: int, grid: int, scale: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sine-cosine positions of a ``grid x grid`` patch raster: ``(grid^2, dim)``, a
    quarter of the dimensions each for sin(row), cos(row), sin(column), cos(column)."""
    if dim % 4:
        raise CellicaError(f"channel-agnostic encoder: width {dim} is not a multiple of 4 (2-D sine-cosine positions)")
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float32), torch.arange(grid, dtype=torch.float32),
                                indexing="ij")
    freq = 1.0 / scale ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4))
    r, c = torch.outer(rows.flatten(), freq), torch.outer(cols.flatten(), freq)
    return torch.cat([r.sin(), r.cos(), c.sin(), c.cos()], dim=1)


def create_channel_agnostic(model_name: str, img_size: int, patch_size: int, depth: int | None,
                            max_channels: int, layout: str) -> nn.Module:
    """A timm ViT turned channel-agnostic: a 1-channel patch projection, fixed positions for
    ``max_channels`` channels (``pos_embed``: class slot + ``max_channels`` x grid^2, not trained)
    and, in the ``cellica`` layout, a learned ``channel_embed``."""
    import timm
    from timm.models.vision_transformer import ParallelScalingBlock

    if layout not in LAYOUTS:
        raise CellicaError(f"channel-agnostic layout must be one of {LAYOUTS}, got {layout!r}")
    extra = {} if depth is None else {"depth": depth}
    if layout == "openphenom":
        extra.update(block_fn=ParallelScalingBlock, qkv_bias=False, qk_norm=True, init_values=1e-4,
                     global_pool="avg", class_token=True)
    try:
        enc = timm.create_model(model_name, pretrained=False, num_classes=0, in_chans=1, img_size=img_size,
                                patch_size=patch_size, **extra)
    except RuntimeError as exc:
        raise CellicaError(f"timm cannot create {model_name!r}: {exc}") from None
    grid = img_size // patch_size
    pos = sincos_positions(enc.embed_dim, grid).repeat(max_channels, 1)
    pos = torch.cat([torch.zeros(1, enc.embed_dim), pos])[None]  # the class token's slot: no position
    enc.pos_embed = nn.Parameter(pos, requires_grad=False)
    if layout == "cellica":
        enc.channel_embed = nn.Parameter(torch.zeros(1, max_channels, enc.embed_dim))
        nn.init.trunc_normal_(enc.channel_embed, std=0.02)
    return enc


def channel_tokens(enc: nn.Module, imgs: torch.Tensor, max_channels: int) -> torch.Tensor:
    """Tokens of a batch of C-channel tiles: the class token, then each channel's patches (one
    shared projection), each token plus its position (and its channel's embedding)."""
    b, c, h, w = imgs.shape
    if c > max_channels:
        raise CellicaError(f"the channel-agnostic encoder takes at most {max_channels} channels; the tiles have {c}")
    x = enc.patch_embed(imgs.reshape(b * c, 1, h, w))  # (b*c, L, D): every channel on its own
    n = x.shape[1]
    x = x.reshape(b, c * n, -1) + enc.pos_embed[:, 1: 1 + c * n]
    if getattr(enc, "channel_embed", None) is not None:
        x = x + enc.channel_embed[:, :c].repeat_interleave(n, dim=1)
    cls = enc.cls_token.expand(b, -1, -1) + enc.pos_embed[:, :1]
    return enc.norm_pre(torch.cat([cls, x], dim=1))


def patchify_channels(imgs: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, C*L, P*P): each channel's patches in raster order, channel by channel
    (the token order of :func:`channel_tokens`)."""
    b, c, h, w = imgs.shape
    x = imgs.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 1, 2, 4, 3, 5).reshape(b, c * (h // patch) * (w // patch), patch * patch)


def openphenom_encoder_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's tensors of an OpenPhenom-layout state dict, without their prefix."""
    return {k[len(OPENPHENOM_PREFIX):]: v for k, v in state.items() if k.startswith(OPENPHENOM_PREFIX)}


def is_openphenom(state: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith(OPENPHENOM_PREFIX) for k in state)


def positions_per_channel(pos: torch.Tensor, source: str) -> int:
    """How many positions each channel has in a channel-agnostic ``pos_embed`` (1, 1 + M x L, D):
    the shortest square L whose blocks repeat (the same positions for every channel)."""
    body = pos[0, 1:]
    for g in range(1, math.isqrt(body.shape[0]) + 1):
        n = g * g
        if body.shape[0] % n == 0 and torch.allclose(body.reshape(-1, n, body.shape[1]), body[:n][None], atol=1e-6):
            return n
    raise CellicaError(f"checkpoint {source}: pos_embed {tuple(pos.shape)} does not repeat one square block of "
                       "positions per channel: not a channel-agnostic (OpenPhenom-layout) encoder")


def openphenom_architecture(enc_state: dict[str, torch.Tensor], tile_size: int, model_name: str | None,
                            source: str) -> dict:
    """The architecture of an OpenPhenom-layout encoder from its tensors, checked against the
    store's tiles: patch size, width, depth, channels and positions per channel."""
    for key in ("patch_embed.proj.weight", "pos_embed", "cls_token"):
        if key not in enc_state:
            raise CellicaError(f"checkpoint {source} has no {OPENPHENOM_PREFIX}{key}: not an OpenPhenom-layout encoder")
    w, pos = enc_state["patch_embed.proj.weight"], enc_state["pos_embed"]
    patch, width = int(w.shape[-1]), int(w.shape[0])
    if w.shape[1] != 1:
        raise CellicaError(f"checkpoint {source}: patch projection takes {w.shape[1]} channels; a channel-agnostic "
                           "encoder projects one channel at a time")
    per_channel = positions_per_channel(pos, source)
    grid = math.isqrt(per_channel)
    if tile_size % patch or tile_size // patch != grid:
        raise CellicaError(f"checkpoint {source} has patch size {patch} and {grid} x {grid} positions per channel "
                           f"({grid * patch} px tiles), but the store's tiles are {tile_size} px: ingest with "
                           f"tile_size {grid * patch}")
    name = model_name or MODEL_BY_WIDTH.get(width)
    if name is None:
        raise CellicaError(f"checkpoint {source}: width {width} is not a standard ViT's; name its timm "
                           "architecture (embed.model_name)")
    depth = len({k.split(".")[1] for k in enc_state if k.startswith("blocks.")})
    return {"architecture": "channel_agnostic", "layout": "openphenom", "model_name": name, "patch_size": patch,
            "depth": depth or None, "max_channels": (pos.shape[1] - 1) // per_channel}
