"""Drawing the simulated tiles: cells rendered from their latent factors in 4-6 channels,
then the technical batch effects (gains, offsets, illumination gradient, blur, noise).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import ndimage

from cellica.core.logs import get_logger
from cellica.store.params import CHANNELS, N_FACTORS, SimulationParams

log = get_logger("simulate")

# name, distribution (all standardised to mean 0, variance 1), what it drives.
FACTORS = (
    ("nucleus_size", "laplace", "nucleus radius relative to the cell"),
    ("dna_content", "bimodal", "nuclear DNA intensity (G1/G2-like two peaks)"),
    ("cell_size", "uniform", "cell radius"),
    ("elongation", "gamma", "cell and nucleus aspect ratio"),
    ("er_intensity", "laplace", "ER / cytoplasm intensity and perinuclear gradient"),
    ("mito_density", "uniform", "number of mitochondrial puncta per cell"),
    ("mito_brightness", "gamma", "brightness and size of the puncta"),
    ("actin_fibres", "student_t", "strength of the oriented actin fibre texture"),
    ("cell_count", "uniform", "number of cells in the tile"),
)
FACTOR_NAMES = tuple(f[0] for f in FACTORS)
assert len(FACTORS) == N_FACTORS


# ---------------------------------------------------------------------- rendering
class Renderer:
    """Draws one tile from its factor vector; vectorised over cells with numpy."""

    def __init__(self, p: SimulationParams):
        self.p = p
        t = p.tile_size
        self.yy, self.xx = np.mgrid[0:t, 0:t].astype(np.float32)
        self.scale = t / 64.0  # geometry is defined for 64 px tiles

    def render(self, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Return a float32 (C, T, T) image with intensities roughly in [0, 1.5]."""
        p, t = self.p, self.p.tile_size
        f = dict(zip(FACTOR_NAMES, z, strict=True))
        n_cells = int(np.clip(round(4 + 1.3 * f["cell_count"]), 1, 9))
        zc = z[None, :] + p.cell_jitter * rng.normal(size=(n_cells, len(z)))
        fc = {name: zc[:, i, None, None].astype(np.float32) for i, name in enumerate(FACTOR_NAMES)}
        cy = rng.uniform(0.1 * t, 0.9 * t, (n_cells, 1, 1)).astype(np.float32)
        cx = rng.uniform(0.1 * t, 0.9 * t, (n_cells, 1, 1)).astype(np.float32)
        theta = rng.uniform(0, np.pi, (n_cells, 1, 1)).astype(np.float32)
        dy, dx = self.yy[None] - cy, self.xx[None] - cx
        u = dx * np.cos(theta) + dy * np.sin(theta)  # along the long axis
        v = -dx * np.sin(theta) + dy * np.cos(theta)
        radius = 8.5 * self.scale * np.exp(0.17 * fc["cell_size"])
        aspect = np.exp(0.22 * fc["elongation"])
        r_cell = np.sqrt((u / (radius * np.sqrt(aspect))) ** 2 + (v * np.sqrt(aspect) / radius) ** 2)
        nuc_rel = np.clip(0.45 * np.exp(0.16 * fc["nucleus_size"]), 0.2, 0.8)
        n_aspect = np.sqrt(aspect)
        r_nuc = np.sqrt(
            (u / (radius * nuc_rel * np.sqrt(n_aspect))) ** 2
            + (v * np.sqrt(n_aspect) / (radius * nuc_rel)) ** 2
        )
        cell = _soft_mask(r_cell, 0.08)
        nucleus = _soft_mask(r_nuc, 0.12)
        cyto = np.clip(cell - nucleus, 0.0, 1.0)

        chans = np.zeros((p.n_channels, t, t), dtype=np.float32)
        # DNA: nucleus intensity tracks DNA content; a little chromatin texture.
        dna = 0.55 * np.exp(0.28 * fc["dna_content"])
        chromatin = 1.0 + 0.15 * rng.standard_normal((1, t, t)).astype(np.float32)
        chans[0] = np.max(nucleus * dna, axis=0) * chromatin[0]
        # ER: cytoplasm, brighter near the nucleus.
        er = 0.35 * np.exp(0.3 * fc["er_intensity"])
        perinuclear = np.exp(-np.clip(r_cell - nuc_rel, 0, None) * (1.5 + 0.5 * fc["er_intensity"]))
        chans[1] = np.max(cyto * er * perinuclear, axis=0)
        # AGP: cortical ring plus oriented fibres whose contrast is a factor.
        fibre_amp = 0.5 / (1.0 + np.exp(-1.3 * fc["actin_fibres"]))
        fibres = 0.5 * (1.0 + np.cos(2 * np.pi * v / (2.6 * self.scale)))
        ring = np.exp(-((r_cell - 0.95) ** 2) / 0.01)
        chans[2] = np.max(cell * (0.12 + fibre_amp * fibres) + 0.35 * ring * cell, axis=0)
        # Mito: puncta in the cytoplasm; density and brightness are factors.
        chans[3] = self._puncta(rng, cy, cx, radius, fc)
        chans[3] *= np.max(cyto, axis=0) + 0.1
        if p.n_channels > 4:  # RNA: nucleoli in the nucleus, faint cytoplasm
            chans[4] = np.max(0.12 * cyto + 0.25 * nucleus, axis=0)
            chans[4] += self._nucleoli(rng, cy, cx, radius * nuc_rel) * np.max(nucleus, axis=0)
        if p.n_channels > 5:  # WGA: membrane outline and Golgi-like blob
            chans[5] = np.max(0.5 * ring * cell + 0.2 * _soft_mask(r_nuc - 0.3, 0.2) * cyto, axis=0)
        return chans

    def _puncta(self, rng, cy, cx, radius, fc) -> np.ndarray:
        t = self.p.tile_size
        counts = rng.poisson(np.clip(6.0 * np.exp(0.45 * fc["mito_density"][:, 0, 0]), 0.5, 40))
        total = int(counts.sum())
        if total == 0:
            return np.zeros((t, t), np.float32)
        owner = np.repeat(np.arange(len(counts)), counts)
        ang = rng.uniform(0, 2 * np.pi, total)
        dist = np.sqrt(rng.uniform(0.1, 0.85, total)) * radius[owner, 0, 0]
        py = cy[owner, 0, 0] + dist * np.sin(ang)
        px = cx[owner, 0, 0] + dist * np.cos(ang)
        bright = 0.5 * np.exp(0.35 * fc["mito_brightness"][owner, 0, 0])
        sigma = (0.8 + 0.15 * fc["mito_brightness"][owner, 0, 0].clip(-2, 3)) * self.scale
        gy = np.exp(-((self.yy[:, 0][None, :] - py[:, None]) ** 2) / (2 * sigma[:, None] ** 2))
        gx = np.exp(-((self.xx[0][None, :] - px[:, None]) ** 2) / (2 * sigma[:, None] ** 2))
        # Separable Gaussians: sum_k b_k gy_k(y) gx_k(x) as one matrix product.
        return ((gy * bright[:, None]).T @ gx).astype(np.float32)

    def _nucleoli(self, rng, cy, cx, nuc_radius) -> np.ndarray:
        n = len(cy)
        k = rng.integers(1, 4, n)
        owner = np.repeat(np.arange(n), k)
        off = rng.normal(0, 0.3, (owner.size, 2)) * nuc_radius[owner, 0, 0, None]
        py, px = cy[owner, 0, 0] + off[:, 0], cx[owner, 0, 0] + off[:, 1]
        s = 1.1 * self.scale
        gy = np.exp(-((self.yy[:, 0][None, :] - py[:, None]) ** 2) / (2 * s**2))
        gx = np.exp(-((self.xx[0][None, :] - px[:, None]) ** 2) / (2 * s**2))
        return (0.6 * gy.T @ gx).astype(np.float32)


def _soft_mask(r: np.ndarray, width: float) -> np.ndarray:
    """1 inside radius 1, 0 outside, with a smooth edge of the given width."""
    return 1.0 / (1.0 + np.exp(np.clip((r - 1.0) / width, -50.0, 50.0)))


def apply_batch(img: np.ndarray, b: pd.Series, p: SimulationParams, rng: np.random.Generator) -> np.ndarray:
    """Apply one plate's technical effects to a float image, return uint16 counts."""
    t = p.tile_size
    channels = CHANNELS[: p.n_channels]
    gain = np.array([b[f"gain_{c}"] for c in channels], np.float32)[:, None, None]
    offset = np.array([b[f"offset_{c}"] for c in channels], np.float32)[:, None, None]
    if b["blur_sigma"] > 0.05:
        img = ndimage.gaussian_filter(img, sigma=(0, b["blur_sigma"], b["blur_sigma"]))
    # The gradient's phase depends on where the tile sits in the field (random here).
    y0, x0 = rng.uniform(0, 1, 2)
    yy = (np.arange(t, dtype=np.float32)[:, None] / t * 0.25 + y0) - 0.5
    xx = (np.arange(t, dtype=np.float32)[None, :] / t * 0.25 + x0) - 0.5
    ang = b["gradient_angle"]
    illum = 1.0 + b["gradient"] * (np.cos(ang) * xx + np.sin(ang) * yy)
    img = img * gain * illum[None] + offset
    img = img + b["noise_sigma"] * rng.standard_normal(img.shape).astype(np.float32)
    img = img + 0.02 * np.sqrt(np.clip(img, 0, None)) * rng.standard_normal(img.shape).astype(np.float32)
    return np.clip(img * p.intensity_scale, 0, 65535).astype(np.uint16)
