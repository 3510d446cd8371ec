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

import os
import string
import time
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.store._render import FACTOR_NAMES, FACTORS, Renderer, apply_batch
from cellica.store.params import CHANNELS, SimulationParams
from cellica.store.tilestore import TileStore

log = get_logger("simulate")

CONTROL_LABEL = "non-targeting"



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


def complex_genes(n_genes: int, seed: int) -> pd.DataFrame:
    """``n_genes`` genes from disjoint CORUM complexes of 3-6 members (seeded choice): columns
    ``gene`` and ``complex``. The last complex is cut short to fit, and a single gene left over
    comes from one more complex on its own."""
    from cellica.core.relationships import complexes

    table = complexes()
    rng = np.random.default_rng([seed, 18])  # its own stream: the screen's draws stay as they were
    taken: list[tuple[str, str]] = []
    used: set[str] = set()
    for k in rng.permutation(len(table)):
        name, members = table.iloc[k]["complex"], sorted(set(table.iloc[k]["members"]))
        left = n_genes - len(taken)
        if left == 0:
            break
        if len(members) < 3 or len(members) > 6 or used & set(members) or any("," in m for m in members):
            continue
        members = members[:left] if left >= 2 or len(members) <= left else members[:1]
        taken += [(m, name) for m in members]
        used |= set(members)
    if len(taken) < n_genes:
        raise CellicaError(f"simulate.complexes: CORUM has too few disjoint complexes for {n_genes} genes")
    return pd.DataFrame(taken, columns=["gene", "complex"])


def make_effects(p: SimulationParams, rng: np.random.Generator, genes: list[str],
                 groups: np.ndarray | None = None) -> pd.DataFrame:
    """Gene x factor effect matrix: sparse, signed, in factor standard deviations.

    With ``groups`` (a group number per gene), the effects are drawn per group and every gene
    of a group shares its group's effect (the members of one complex)."""
    if groups is not None:
        table = make_effects(p, rng, [f"group{g}" for g in range(int(groups.max()) + 1)])
        table = table.iloc[groups].reset_index(drop=True)
        table["gene"] = genes
        return table
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


# ---------------------------------------------------------------------- the screen
def _plate_tiles(p: SimulationParams, wells: pd.DataFrame, b, renderer, effects, latents_rows: list, bar):
    """The tiles and metadata rows of one plate; each tile's latent factors are appended to
    ``latents_rows`` (whose length numbers the tiles: one seeded child stream per tile)."""
    effect_of, efficiency = effects
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
    return tiles, meta


def sample_tiles(p: SimulationParams, n: int) -> np.ndarray:
    """``n`` control tiles rendered with the settings of ``p`` (one plate per experiment, the
    experiments' technical effects drawn as the screen draws them): what the pixels of the screen
    look like, without writing it (:mod:`cellica.estimates` measures its saturation).

    Returns
    -------
    numpy.ndarray
        ``n`` x channels x tile x tile, uint16.
    """
    rng = np.random.default_rng(p.seed)
    plates = pd.DataFrame({"batch": [f"EXP{e + 1}" for e in range(p.n_experiments)],
                           "plate": [f"EXP{e + 1}-P1" for e in range(p.n_experiments)]})
    batches, renderer, tiles = make_batches(p, rng, plates), Renderer(p), []
    for k in range(n):
        trng = np.random.default_rng([p.seed, k])
        tiles.append(apply_batch(renderer.render(sample_factors(trng, 1)[0], trng), batches.iloc[k % len(batches)],
                                 p, trng))
    return np.stack(tiles)


def simulate_screen(
    path: str | os.PathLike, params: SimulationParams | None = None, *, overwrite: bool = False
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
    start = time.perf_counter()
    rng = np.random.default_rng(p.seed)
    named = complex_genes(p.n_genes, p.seed) if p.complexes else None
    genes = [f"GENE{g + 1:03d}" for g in range(p.n_genes)] if named is None else named["gene"].tolist()
    groups = pd.factorize(named["complex"])[0] if p.complexes == "shared" else None
    effects = make_effects(p, rng, genes, groups)
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
        path, channels, (p.tile_size, p.tile_size), "uint16", provenance, p.shard_tiles, overwrite,
        compression=p.compression,
    )
    latents_rows: list[list] = []
    with writer:
        bar = progress(total=len(layout) * p.tiles_per_well, desc="simulate", unit="tile")
        for plate, wells in layout.groupby("plate", sort=False):
            tiles, meta = _plate_tiles(p, wells, batches.set_index("plate").loc[plate], renderer,
                                       (effect_of, efficiency), latents_rows, bar)
            writer.append(np.stack(tiles), pd.DataFrame(meta))
        bar.close()
        writer.add_table("latents", pd.DataFrame(latents_rows, columns=["tile_id", *FACTOR_NAMES]))
        writer.add_table("effects", effects)
        if named is not None:
            writer.add_table("complexes", named)
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
