"""A synthetic screen with known ground truth: the demo data and the test bed for the science.

Every tile shows several cells rendered in 4-6 channels. Their appearance is
driven by a vector of independent, non-Gaussian latent factors per tile (plus a
little cell-to-cell jitter). Genes shift a known, sparse subset of the factors
(each guide with its own knock-down efficiency); one large control population
shares the label ``non-targeting``. Technical batch effects (per-experiment and
per-plate channel gains and offsets, an illumination gradient, blur, noise) are
drawn independently of biology, and every gene is screened in several
experiments so that batch and biology are not confounded.

The ground truth is stored with the tiles (``ground_truth/`` in the store):
``latents`` (factor values per tile), ``effects`` (gene x factor shifts),
``guides`` (efficiency per guide), ``batches`` (technical parameters per plate)
and ``factors`` (what each factor does).
"""

from __future__ import annotations

import dataclasses
import os
import string
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import ndimage
from tqdm.auto import tqdm

from cellica.errors import CellicaError
from cellica.logs import get_logger
from cellica.tilestore import TileStore

log = get_logger("simulate")

CHANNELS = ("DNA", "ER", "AGP", "Mito", "RNA", "WGA")
CONTROL_LABEL = "non-targeting"

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


@dataclass
class SimulationParams:
    """Everything that defines a synthetic screen (with ``seed``, the exact bytes)."""

    n_genes: int = 24
    guides_per_gene: int = 2
    n_experiments: int = 4
    plates_per_experiment: int = 2
    experiments_per_gene: int = 2
    control_wells_per_plate: int = 16
    tiles_per_well: int = 8
    tile_size: int = 64
    n_channels: int = 5
    frac_null_genes: float = 0.2
    frac_weak_genes: float = 0.3
    strong_effect: tuple[float, float] = (2.0, 3.0)
    weak_effect: tuple[float, float] = (0.7, 1.2)
    max_factors_per_gene: int = 2
    guide_efficiency: tuple[float, float] = (0.6, 1.0)
    cell_jitter: float = 0.25
    batch_strength: float = 1.0
    intensity_scale: float = 12000.0
    shard_tiles: int = 256
    seed: int = 0

    def validate(self) -> None:
        """Raise :class:`CellicaError` for values that cannot make a screen."""
        checks = [
            (self.n_genes >= 1, "n_genes must be >= 1"),
            (self.guides_per_gene >= 1, "guides_per_gene must be >= 1"),
            (self.n_experiments >= 1, "n_experiments must be >= 1"),
            (self.plates_per_experiment >= 1, "plates_per_experiment must be >= 1"),
            (
                1 <= self.experiments_per_gene <= self.n_experiments,
                f"experiments_per_gene must be in 1..n_experiments ({self.n_experiments})",
            ),
            (self.control_wells_per_plate >= 1, "control_wells_per_plate must be >= 1 (no controls)"),
            (self.tiles_per_well >= 1, "tiles_per_well must be >= 1"),
            (16 <= self.tile_size <= 1024, "tile_size must be in 16..1024"),
            (4 <= self.n_channels <= len(CHANNELS), f"n_channels must be in 4..{len(CHANNELS)}"),
            (0 <= self.frac_null_genes + self.frac_weak_genes <= 1, "frac_null + frac_weak > 1"),
            (1 <= self.max_factors_per_gene <= len(FACTORS), "max_factors_per_gene out of range"),
            (self.batch_strength >= 0, "batch_strength must be >= 0"),
        ]
        wells = self.control_wells_per_plate + self._genes_per_experiment() * self.guides_per_gene
        checks.append((wells <= 384, f"{wells} wells per plate exceed a 384-well plate"))
        for ok, msg in checks:
            if not ok:
                raise CellicaError(f"simulate: {msg}")

    def _genes_per_experiment(self) -> int:
        return -(-self.n_genes * self.experiments_per_gene // self.n_experiments)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------- biology
def sample_factors(rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw ``n`` x n_factors independent, non-Gaussian, standardised factor values."""
    cols = []
    for _, dist, _ in FACTORS:
        if dist == "laplace":
            x = rng.laplace(0.0, 1.0 / np.sqrt(2.0), n)
        elif dist == "uniform":
            x = rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), n)
        elif dist == "gamma":  # shape 2: skewed to the right
            x = (rng.gamma(2.0, 1.0, n) - 2.0) / np.sqrt(2.0)
        elif dist == "bimodal":  # two populations, 70/30, separated peaks
            upper = rng.random(n) < 0.3
            x = np.where(upper, 1.6, -0.686) + rng.normal(0.0, 0.45, n)
            x = x / np.sqrt(0.45**2 + 0.3 * 0.7 * (1.6 + 0.686) ** 2)
        elif dist == "student_t":  # heavy tails, 5 degrees of freedom
            x = rng.standard_t(5, n) / np.sqrt(5.0 / 3.0)
        else:  # pragma: no cover - the table above is fixed
            raise AssertionError(dist)
        cols.append(x)
    return np.stack(cols, axis=1)


def make_effects(p: SimulationParams, rng: np.random.Generator, genes: list[str]) -> pd.DataFrame:
    """Gene x factor effect matrix: sparse, signed, in factor standard deviations."""
    n = len(genes)
    kinds = np.array(["strong"] * n, dtype=object)
    order = rng.permutation(n)
    n_null = int(round(p.frac_null_genes * n))
    n_weak = int(round(p.frac_weak_genes * n))
    kinds[order[:n_null]] = "none"
    kinds[order[n_null : n_null + n_weak]] = "weak"
    effects = np.zeros((n, len(FACTORS)))
    for g in range(n):
        if kinds[g] == "none":
            continue
        k = rng.integers(1, p.max_factors_per_gene + 1)
        chosen = rng.choice(len(FACTORS), size=k, replace=False)
        lo, hi = p.strong_effect if kinds[g] == "strong" else p.weak_effect
        effects[g, chosen] = rng.uniform(lo, hi, k) * rng.choice([-1.0, 1.0], k)
    table = pd.DataFrame(effects, columns=list(FACTOR_NAMES))
    table.insert(0, "effect_class", kinds.astype(str))
    table.insert(0, "gene", genes)
    return table


# ---------------------------------------------------------------------- layout
def well_names(n: int) -> list[str]:
    """The first ``n`` wells of a 384-well plate, row-major (A01, A02, ...)."""
    rows = string.ascii_uppercase[:16]
    return [f"{r}{c:02d}" for r in rows for c in range(1, 25)][:n]


def make_layout(p: SimulationParams, rng: np.random.Generator, genes: list[str]) -> pd.DataFrame:
    """One row per well: batch, plate, well, perturbation, guide."""
    per_exp: list[list[str]] = [[] for _ in range(p.n_experiments)]
    for g, gene in enumerate(genes):
        # Consecutive experiments overlap in genes, so every batch pair is bridged.
        for k in range(p.experiments_per_gene):
            per_exp[(g + k) % p.n_experiments].append(gene)
    rows = []
    for e in range(p.n_experiments):
        for q in range(p.plates_per_experiment):
            entries = [(gene, f"{gene}_g{k + 1}") for gene in per_exp[e] for k in range(p.guides_per_gene)]
            entries += [(CONTROL_LABEL, f"NTC_{k + 1}") for k in range(p.control_wells_per_plate)]
            # A random plate map, so well position never stands in for a gene.
            wells = well_names(len(entries))
            for i in rng.permutation(len(entries)):
                gene, guide = entries[i]
                rows.append(
                    {
                        "batch": f"EXP{e + 1}",
                        "plate": f"EXP{e + 1}-P{q + 1}",
                        "well": wells.pop(0),
                        "perturbation": gene,
                        "guide": guide,
                        "is_control": gene == CONTROL_LABEL,
                    }
                )
    return pd.DataFrame(rows)


def make_batches(p: SimulationParams, rng: np.random.Generator, plates: pd.DataFrame) -> pd.DataFrame:
    """Technical parameters per plate: experiment-level effects times plate-level ones."""
    s = p.batch_strength
    channels = CHANNELS[: p.n_channels]
    exp_params = {}
    for batch in plates["batch"].unique():
        exp_params[batch] = {
            "gain": np.exp(rng.normal(0.0, 0.30 * s, p.n_channels)),
            "offset": rng.uniform(0.01, 0.08, p.n_channels) * s,
            "gradient": rng.uniform(0.0, 0.35) * s,
            "gradient_angle": rng.uniform(0.0, 2 * np.pi),
            "blur_sigma": rng.uniform(0.0, 1.2) * s,
            "noise_sigma": rng.uniform(0.005, 0.03) * s,
        }
    rows = []
    for batch, plate in plates[["batch", "plate"]].itertuples(index=False):
        e = exp_params[batch]
        plate_gain = np.exp(rng.normal(0.0, 0.08 * s, p.n_channels))
        row: dict[str, Any] = {"batch": batch, "plate": plate}
        for c, name in enumerate(channels):
            row[f"gain_{name}"] = float(e["gain"][c] * plate_gain[c])
        for c, name in enumerate(channels):
            row[f"offset_{name}"] = float(e["offset"][c])
        for key in ("gradient", "gradient_angle", "blur_sigma", "noise_sigma"):
            row[key] = float(e[key])
        rows.append(row)
    return pd.DataFrame(rows)


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


# ---------------------------------------------------------------------- the screen
def simulate_screen(
    path: str | os.PathLike, params: SimulationParams | None = None, overwrite: bool = False
) -> TileStore:
    """Simulate a screen and write it as a tile store with its ground truth.

    Parameters
    ----------
    path
        Where to write the store (``*.zarr``).
    params
        The screen's design; defaults give the demo (2,560 tiles of 5 x 64 x 64).
    overwrite
        Replace an existing store.

    Returns
    -------
    TileStore
        The finished store, opened for reading.
    """
    p = params or SimulationParams()
    p.validate()
    start = time.perf_counter()
    rng = np.random.default_rng(p.seed)
    genes = [f"GENE{g + 1:03d}" for g in range(p.n_genes)]
    effects = make_effects(p, rng, genes)
    guides = pd.DataFrame(
        [
            {"guide": f"{gene}_g{k + 1}", "gene": gene, "efficiency": rng.uniform(*p.guide_efficiency)}
            for gene in genes
            for k in range(p.guides_per_gene)
        ]
    )
    layout = make_layout(p, rng, genes)
    batches = make_batches(p, rng, layout[["batch", "plate"]].drop_duplicates())
    effect_of = effects.set_index("gene")[list(FACTOR_NAMES)]
    efficiency = guides.set_index("guide")["efficiency"]
    renderer = Renderer(p)
    channels = list(CHANNELS[: p.n_channels])
    provenance = {"source": "simulate", "params": p.to_dict()}
    writer = TileStore.create(
        path, channels, (p.tile_size, p.tile_size), "uint16", provenance, p.shard_tiles, overwrite
    )
    latents_rows = []
    with writer:
        n_tiles = len(layout) * p.tiles_per_well
        bar = tqdm(total=n_tiles, desc="simulate", unit="tile", disable=None)
        for plate, wells in layout.groupby("plate", sort=False):
            b = batches.set_index("plate").loc[plate]
            tiles, meta = [], []
            for w in wells.itertuples(index=False):
                shift = np.zeros(len(FACTORS))
                if not w.is_control:
                    shift = effect_of.loc[w.perturbation].to_numpy() * efficiency[w.guide]
                for site in range(1, p.tiles_per_well + 1):
                    tile_id = f"{w.plate}-{w.well}-s{site}"
                    # One child stream per tile: reproducible and order-independent.
                    trng = np.random.default_rng([p.seed, len(latents_rows)])
                    z = sample_factors(trng, 1)[0] + shift
                    tiles.append(apply_batch(renderer.render(z, trng), b, p, trng))
                    meta.append({"tile_id": tile_id, **w._asdict(), "site": site})
                    latents_rows.append([tile_id, *z])
                    bar.update(1)
            writer.append(np.stack(tiles), pd.DataFrame(meta))
        bar.close()
        writer.add_table("latents", pd.DataFrame(latents_rows, columns=["tile_id", *FACTOR_NAMES]))
        writer.add_table("effects", effects)
        writer.add_table("guides", guides)
        writer.add_table("batches", batches)
        writer.add_table(
            "factors", pd.DataFrame(FACTORS, columns=["factor", "distribution", "drives"])
        )
        store = writer.close()
    log.info(
        "simulated %d tiles (%d genes x %d guides, %d experiments, %d plates, %d control tiles) "
        "in %.1f s",
        store.n_tiles, p.n_genes, p.guides_per_gene, p.n_experiments,
        layout["plate"].nunique(), int(store.metadata["is_control"].sum()),
        time.perf_counter() - start,
    )
    return store
