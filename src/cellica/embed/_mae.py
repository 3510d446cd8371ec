"""A masked autoencoder whose encoder is a timm Vision Transformer.

The encoder is ``timm.create_model(model_name, in_chans=C, img_size=S, patch_size=P)``
(any timm ViT: ``vit_tiny_patch16_224``, ``vit_small_patch16_224``,
``vit_base_patch16_224``, ...). Pre-training follows He et al. (2022): a random
``mask_ratio`` of the patches is dropped, the encoder sees the rest, and a light
decoder of timm ``Block``s predicts the pixels of the masked patches, each patch
normalised to zero mean and unit variance (``norm_pix_loss``).

``architecture="channel_agnostic"`` swaps in the encoder of
:mod:`cellica.embed._channel_agnostic`: every channel's patches are tokens of their own, so
masking hides and the decoder predicts one channel's patch at a time.

Tiles are normalised per channel before the model sees them (:class:`TileNormalizer`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from cellica.core.errors import CellicaError
from cellica.embed.params import ARCHITECTURES, NORMALIZATIONS, POOLINGS


@dataclass
class MAEConfig:
    """Architecture of the MAE (stored in the checkpoint's JSON sidecar)."""

    model_name: str = "vit_tiny_patch16_224"
    in_chans: int = 5
    img_size: int = 64
    patch_size: int = 8
    depth: int | None = None
    mask_ratio: float = 0.75
    decoder_dim: int = 128
    decoder_depth: int = 2
    decoder_heads: int = 4
    norm_pix_loss: bool = True
    architecture: str = "vit"
    max_channels: int = 11
    layout: str = "cellica"

    @property
    def channel_agnostic(self) -> bool:
        return self.architecture == "channel_agnostic"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> None:
        if self.img_size % self.patch_size:
            raise CellicaError(
                f"tile size {self.img_size} is not a multiple of the patch size {self.patch_size}"
            )
        if not 0.0 < self.mask_ratio < 1.0:
            raise CellicaError(f"mask_ratio must be in (0, 1), got {self.mask_ratio}")
        if self.architecture not in ARCHITECTURES:
            raise CellicaError(f"architecture must be one of {ARCHITECTURES}, got {self.architecture!r}")
        if self.channel_agnostic and self.in_chans > self.max_channels:
            raise CellicaError(f"the channel-agnostic encoder takes at most max_channels={self.max_channels} "
                               f"channels; the tiles have {self.in_chans}")


@dataclass
class TileNormalizer:
    """Per-channel intensity normalisation of raw tiles to float32.

    ``mode="tile"`` standardises each channel of each tile by its own mean and
    standard deviation (the usual choice for microscopy MAEs: robust to plate
    intensity drift); ``mode="store"`` uses per-channel statistics of the store
    (``mean``/``std``, fitted with :meth:`fit`), which keeps absolute intensity;
    ``mode="instance"`` is OpenPhenom's input normalisation: pixels / 255, then each
    tile and channel standardised as ``torch.nn.InstanceNorm2d`` does (biased variance,
    epsilon 1e-5 inside the square root).
    """

    mode: str = "tile"
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.mode not in NORMALIZATIONS:
            raise CellicaError(f"normalization must be one of {NORMALIZATIONS}, got {self.mode!r}")

    def fit(self, tiles: np.ndarray) -> TileNormalizer:
        """Fit per-channel statistics on a sample of tiles (N, C, H, W)."""
        x = np.asarray(tiles, dtype=np.float64).transpose(1, 0, 2, 3).reshape(tiles.shape[1], -1)
        self.mean = x.mean(axis=1).tolist()
        self.std = x.std(axis=1).tolist()
        return self

    def __call__(self, tiles: np.ndarray) -> np.ndarray:
        x = np.asarray(tiles, dtype=np.float32)
        if self.mode == "instance":
            x = x / np.float32(255.0)
            mean = x.mean(axis=(2, 3), keepdims=True)
            return (x - mean) / np.sqrt(x.var(axis=(2, 3), keepdims=True) + np.float32(1e-5))
        if self.mode == "tile":
            mean = x.mean(axis=(2, 3), keepdims=True)
            std = x.std(axis=(2, 3), keepdims=True)
        else:
            if len(self.mean) != x.shape[1]:
                raise CellicaError(
                    f"store normalisation has {len(self.mean)} channels, tiles have {x.shape[1]}"
                )
            mean = np.asarray(self.mean, np.float32)[None, :, None, None]
            std = np.asarray(self.std, np.float32)[None, :, None, None]
        return (x - mean) / (std + self.eps)

    def torch(self, x: torch.Tensor) -> torch.Tensor:
        """The same normalisation in torch, on ``x``'s device (float pixels, N x C x H x W): for
        tiles that cross to a GPU in their stored integer type. Equal to :meth:`__call__` up to
        float32 rounding (torch and numpy sum in another order; tests/test_embed.py bounds it)."""
        x = x.float()
        if self.mode == "instance":
            x = x / 255.0
            mean = x.mean(dim=(2, 3), keepdim=True)
            return (x - mean) / torch.sqrt(x.var(dim=(2, 3), unbiased=False, keepdim=True) + 1e-5)
        if self.mode == "tile":
            mean = x.mean(dim=(2, 3), keepdim=True)
            std = x.std(dim=(2, 3), unbiased=False, keepdim=True)
        else:
            if len(self.mean) != x.shape[1]:
                raise CellicaError(f"store normalisation has {len(self.mean)} channels, tiles have {x.shape[1]}")
            mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device)[None, :, None, None]
            std = torch.tensor(self.std, dtype=torch.float32, device=x.device)[None, :, None, None]
        return (x - mean) / (std + self.eps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def create_encoder(cfg: MAEConfig) -> nn.Module:
    """A timm ViT with the store's channels and tile size, without a classifier head.

    ``cfg.depth`` (when set) overrides the number of transformer blocks of the
    named model, e.g. a 6-block ViT-Ti for quick CPU training. A channel-agnostic encoder comes
    from :func:`cellica.embed._channel_agnostic.create_channel_agnostic`.
    """
    import timm

    cfg.validate()
    if cfg.channel_agnostic:
        from cellica.embed._channel_agnostic import create_channel_agnostic

        return create_channel_agnostic(cfg.model_name, cfg.img_size, cfg.patch_size, cfg.depth, cfg.max_channels,
                                       cfg.layout)
    extra = {} if cfg.depth is None else {"depth": cfg.depth}
    try:
        return timm.create_model(
            cfg.model_name,
            pretrained=False,
            num_classes=0,
            in_chans=cfg.in_chans,
            img_size=cfg.img_size,
            patch_size=cfg.patch_size,
            **extra,
        )
    except RuntimeError as exc:
        raise CellicaError(f"timm cannot create {cfg.model_name!r}: {exc}") from None


class MaskedAutoencoder(nn.Module):
    """Encoder (timm ViT) + light decoder, with random patch masking.

    Parameters
    ----------
    cfg
        Architecture and masking.
    """

    def __init__(self, cfg: MAEConfig):
        super().__init__()
        from timm.layers import trunc_normal_
        from timm.models.vision_transformer import Block

        self.cfg = cfg
        self.encoder = create_encoder(cfg)
        enc = self.encoder
        self.n_prefix = int(getattr(enc, "num_prefix_tokens", 1))
        # tokens the decoder predicts: every channel's patches apart in a channel-agnostic model
        self.n_patches = (cfg.img_size // cfg.patch_size) ** 2 * (cfg.in_chans if cfg.channel_agnostic else 1)
        dim = enc.embed_dim
        self.decoder_embed = nn.Linear(dim, cfg.decoder_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, cfg.decoder_dim))
        self.decoder_pos_embed = nn.Parameter(torch.zeros(1, self.n_patches, cfg.decoder_dim))
        self.decoder_blocks = nn.Sequential(
            *[Block(cfg.decoder_dim, cfg.decoder_heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(cfg.decoder_depth)]
        )
        self.decoder_norm = nn.LayerNorm(cfg.decoder_dim)
        self.decoder_pred = nn.Linear(
            cfg.decoder_dim, cfg.patch_size**2 * (1 if cfg.channel_agnostic else cfg.in_chans)
        )
        trunc_normal_(self.mask_token, std=0.02)
        trunc_normal_(self.decoder_pos_embed, std=0.02)

    # ------------------------------------------------------------------ helpers
    def patchify(self, imgs: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, L, P*P*C), patches in raster order; channel-agnostic:
        (B, C*L, P*P), channel by channel."""
        p = self.cfg.patch_size
        if self.cfg.channel_agnostic:
            from cellica.embed._channel_agnostic import patchify_channels

            return patchify_channels(imgs, p)
        b, c, h, w = imgs.shape
        x = imgs.reshape(b, c, h // p, p, w // p, p)
        return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)

    def _tokens(self, imgs: torch.Tensor) -> torch.Tensor:
        """Patch embedding plus positions; prefix (class) tokens first."""
        enc = self.encoder
        if self.cfg.channel_agnostic:
            from cellica.embed._channel_agnostic import channel_tokens

            return channel_tokens(enc, imgs, self.cfg.max_channels)
        x = enc.patch_embed(imgs)
        return enc.norm_pre(enc._pos_embed(x))

    def block_index(self, block: int) -> int:
        """``block`` (negative counts from the last) as an index into the encoder's blocks."""
        n = len(self.encoder.blocks)
        if not -n <= block < n:
            raise CellicaError(f"embed.block {block} is out of range for a {n}-block encoder: use {-n}..{n - 1} "
                               "(-1: the last)")
        return block % n

    def encode(self, imgs: torch.Tensor, pooling: str = "mean", block: int = -1) -> torch.Tensor:
        """Embed whole tiles (no masking) at the output of ``block`` (the last by default, then
        the encoder's final norm; an earlier block's tokens as they leave it): the mean of the
        patch tokens, the class token, or both concatenated (mean first)."""
        if pooling not in POOLINGS:
            raise CellicaError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if pooling != "mean" and self.n_prefix == 0:
            raise CellicaError(f"{self.cfg.model_name} has no class token; use pooling: mean")
        last = self.block_index(block)
        x = self._tokens(imgs)
        for blk in self.encoder.blocks[: last + 1]:
            x = blk(x)
        if last == len(self.encoder.blocks) - 1:
            x = self.encoder.norm(x)
        if pooling == "cls":
            return x[:, 0]
        mean = x[:, self.n_prefix :].mean(dim=1)
        return mean if pooling == "mean" else torch.cat([mean, x[:, 0]], dim=1)

    # ------------------------------------------------------------------ training
    def forward(self, imgs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Masked-patch reconstruction loss for a batch of normalised tiles."""
        tokens = self._tokens(imgs)
        prefix, patches = tokens[:, : self.n_prefix], tokens[:, self.n_prefix :]
        b, n, d = patches.shape
        n_keep = max(1, int(round(n * (1 - self.cfg.mask_ratio))))
        noise = torch.rand(b, n, device=imgs.device, generator=generator)
        shuffle = noise.argsort(dim=1)
        restore = shuffle.argsort(dim=1)
        keep = shuffle[:, :n_keep]
        visible = torch.gather(patches, 1, keep[..., None].expand(-1, -1, d))
        latent = self.encoder.norm(self.encoder.blocks(torch.cat([prefix, visible], dim=1)))
        # Decoder: visible tokens + mask tokens, unshuffled back to raster order.
        y = self.decoder_embed(latent[:, self.n_prefix :])
        y = torch.cat([y, self.mask_token.expand(b, n - n_keep, -1)], dim=1)
        y = torch.gather(y, 1, restore[..., None].expand(-1, -1, y.shape[-1]))
        y = self.decoder_pred(self.decoder_norm(self.decoder_blocks(y + self.decoder_pos_embed)))
        target = self.patchify(imgs)
        if self.cfg.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        mask = torch.ones(b, n, device=imgs.device)
        mask[:, :n_keep] = 0
        mask = torch.gather(mask, 1, restore)
        per_patch = ((y.float() - target.float()) ** 2).mean(dim=-1)
        return (per_patch * mask).sum() / mask.sum()
