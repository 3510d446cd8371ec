"""Parameters of the store stage: the synthetic screen and the ingestion of image files."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cellica.core.errors import CellicaError
from cellica.core.params import Params, like, param
from cellica.registry import FORMATS

CHANNELS = ("DNA", "ER", "AGP", "Mito", "RNA", "WGA")
N_FACTORS = 9  # the simulated latent factors (cellica.store.simulate.FACTORS)
# The Blosc compressors a tile store can be written with: name -> (Blosc cname, clevel). Every
# reader decodes either; they differ in size and speed (docs/benchmarks.md, "Tile store").
COMPRESSIONS = {"zstd": ("zstd", 5), "lz4": ("lz4", 9)}


@dataclass(kw_only=True)
class SimulationParams(Params):
    """The synthetic screen (used when source is `simulate`); `cellica simulate --help`.

    With ``seed``, the exact bytes of the store.
    """

    section = "simulate"

    n_genes: int = param(24, "Number of perturbed genes.", ge=1)
    guides_per_gene: int = param(2, "Guides (independent reagents) per gene; each has its own knock-down "
                                 "efficiency.", ge=1)
    n_experiments: int = param(4, "Experiments (the technical batches).", ge=1)
    plates_per_experiment: int = param(2, "Plates per experiment (each with its own small technical offsets).",
                                       ge=1)
    experiments_per_gene: int = param(2, "Experiments each gene is screened in (consecutive experiments overlap, "
                                      "so batch and biology are not confounded).", ge=1)
    control_wells_per_plate: int = param(16, "Non-targeting control wells on each plate.", ge=1)
    tiles_per_well: int = param(8, "Tiles (sites) per well.", ge=1)
    tile_size: int = param(64, "Tile edge in pixels.", ge=16, le=1024)
    n_channels: int = param(5, "Channels: DNA, ER, AGP, Mito, then RNA and WGA.", ge=4, le=len(CHANNELS))
    frac_null_genes: float = param(0.2, "Fraction of genes with no effect at all.", ge=0, le=1)
    frac_weak_genes: float = param(0.3, "Fraction of genes with weak effects (the rest are strong).", ge=0, le=1)
    strong_effect: tuple[float, float] = param((2.0, 3.0), "Range of strong shifts, in standard deviations of "
                                               "the factor.", length=2, ordered="<=")
    weak_effect: tuple[float, float] = param((0.7, 1.2), "Range of weak shifts.", length=2, ordered="<=")
    max_factors_per_gene: int = param(2, "Each affected gene moves 1..this many latent factors.", ge=1,
                                      le=N_FACTORS)
    guide_efficiency: tuple[float, float] = param((0.6, 1.0), "Range of per-guide efficiencies (multiplies the "
                                                  "gene's shift).", length=2, ordered="<=")
    complexes: str | None = param(None, "Name genes after members of real CORUM complexes (from the "
                                  "efaar-benchmarking wheel): shared gives the members of a complex one factor "
                                  "effect, so the gene map has known relationships to recover; independent draws "
                                  "each gene's effect alone (the negative control: recall at the null); null keeps "
                                  "the names GENE001...", choices=("shared", "independent"))
    cell_jitter: float = param(0.25, "Cell-to-cell spread of the factors around the tile's values.", ge=0)
    batch_strength: float = param(1.0, "Scales every technical effect (gains, offsets, gradient, blur, noise); "
                                  "0 removes batch effects.", ge=0)
    intensity_scale: float = param(12000.0, "Rendered intensity 1.0 in uint16 counts.", gt=0)
    shard_tiles: int = param(256, "Tiles per zarr shard file.", ge=1)
    compression: str = param("zstd", "Blosc compressor of the tile store's chunks: `zstd` (smallest files) or `lz4` "
                             "(7-8% larger on Cell Painting tiles, read 1.4-1.7x and written 2.7x as fast: for stores "
                             "a GPU embeds; docs/benchmarks.md). The same pixels either way.",
                             choices=tuple(COMPRESSIONS), same_outputs=True)
    seed: int = param(0, "Random seed; same seed, same bytes.")

    def check(self) -> None:
        """Refuse a screen design that cannot be drawn (one line naming the key)."""
        self.strong_effect, self.weak_effect, self.guide_efficiency = (
            tuple(self.strong_effect), tuple(self.weak_effect), tuple(self.guide_efficiency))
        if self.experiments_per_gene > self.n_experiments:
            raise CellicaError(f"simulate.experiments_per_gene must be in 1..n_experiments ({self.n_experiments}), "
                               f"got {self.experiments_per_gene}")
        if self.frac_null_genes + self.frac_weak_genes > 1:
            raise CellicaError("simulate: frac_null_genes + frac_weak_genes > 1")
        wells = self.control_wells_per_plate + self.genes_per_experiment() * self.guides_per_gene
        if wells > 384:
            raise CellicaError(f"simulate: {wells} wells per plate exceed a 384-well plate")

    def genes_per_experiment(self) -> int:
        """How many genes each experiment holds (rounded up)."""
        return -(-self.n_genes * self.experiments_per_gene // self.n_experiments)

    def to_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (what the provenance records)."""
        return asdict(self)


@dataclass(kw_only=True)
class IngestParams(Params):
    """Image files to tiles (used when source is `ingest`); `cellica ingest --help`.

    Rows of the manifest sharing (batch, plate, well, site) form a field; its channel
    files are stacked in ``channels`` order and cut into tiles.
    """

    section = "ingest"

    channels: list[str | int] = param(
        help="Channel values as in the manifest, in stacking order (OME-Zarr: "
        "channel labels from the plate's omero metadata, or indices).",
        min_items=1,
        unique=True,
    )
    format: str = param("files", "`files`: the manifest lists one image file (TIFF/PNG) per field and channel; "
                        "`ome_zarr`: it lists one row per well whose path is an OME-Zarr HCS plate, and every "
                        "field (image) of that well is read from the plate (docs/formats.md).",
                        choices=FORMATS)
    level: int = param(0, "OME-Zarr: the resolution level read (0: full resolution; the multiscales' datasets "
                       "in order).", ge=0)
    channel_names: list[str] | None = param(None, "Names stored for the channels (default: the channel values).")
    tile_size: int = param(256, "Tile edge in pixels.", ge=8)
    stride: int | None = param(None, "Step between tiles (null = tile_size, no overlap). Partial edge tiles are "
                               "dropped and counted.", ge=1)
    column_map: dict[str, str] = param({}, "Our column -> the manifest's column, e.g. {batch: experiment}.")
    constants: dict[str, Any] = param({}, "Values for columns the manifest lacks, e.g. {is_control: true}.")
    control_label: str | None = param(None, "Perturbation value of control wells (when the manifest has no "
                                      "is_control column).")
    normalize: str | None = param(None, "`percentile`: per-plate, per-channel rescaling of [low, high] "
                                  "percentiles to the full output range (recorded in the store).",
                                  choices=("percentile",))
    percentiles: tuple[float, float] = param((0.1, 99.9), "Low and high percentiles for normalize.", length=2,
                                             ordered="<", ge=0, le=100)
    dtype: str = param("uint16", "Pixel type of the store.", choices=("uint8", "uint16"))
    incomplete_fields: str = param("error", "A field lacking a declared channel: stop with an error, or skip it "
                                   "(counted, logged and listed in the store's provenance).",
                                   choices=("error", "skip"))
    shard_tiles: int = param(64, "Tiles per zarr shard file.", ge=1)
    compression: str = like(SimulationParams, "compression")
    sample_pixels: int = param(20000, "Pixels sampled per field to estimate the normalisation percentiles.",
                               ge=100)
    seed: int = param(0, "Seed of the pixel sampling.")
