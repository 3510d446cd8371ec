"""Composite colour thumbnails of multi-channel tiles, for reports and quick looks."""

from __future__ import annotations

import numpy as np

# One display colour per channel (RGB), cycling for stores with many channels.
_PALETTE = np.array(
    [
        [0.0, 0.35, 1.0],  # blue (DNA)
        [0.0, 1.0, 0.0],  # green
        [1.0, 0.0, 0.0],  # red
        [1.0, 0.0, 1.0],  # magenta
        [1.0, 1.0, 0.0],  # yellow
        [0.0, 1.0, 1.0],  # cyan
    ]
)


def composite(tile: np.ndarray, low_pct: float = 1.0, high_pct: float = 99.5) -> np.ndarray:
    """Blend a (C, H, W) tile into an (H, W, 3) uint8 RGB image.

    Each channel is contrast-stretched between its own percentiles, coloured,
    and the colours are added and clipped.
    """
    tile = np.asarray(tile, dtype=np.float32)
    rgb = np.zeros((*tile.shape[1:], 3), np.float32)
    for c, chan in enumerate(tile):
        lo, hi = np.percentile(chan, [low_pct, high_pct])
        norm = np.clip((chan - lo) / max(hi - lo, 1e-6), 0, 1)
        rgb += norm[..., None] * _PALETTE[c % len(_PALETTE)]
    return (np.clip(rgb, 0, 1) * 255).astype(np.uint8)


def montage(tiles: np.ndarray, ncols: int = 8, pad: int = 2) -> np.ndarray:
    """Lay out composites of (N, C, H, W) tiles in a grid (RGB uint8)."""
    n, _, h, w = tiles.shape
    nrows = -(-n // ncols)
    out = np.full((nrows * (h + pad) + pad, ncols * (w + pad) + pad, 3), 255, np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, ncols)
        y, x = pad + r * (h + pad), pad + c * (w + pad)
        out[y : y + h, x : x + w] = composite(tile)
    return out
