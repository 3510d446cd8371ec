"""Parameters of the embedding stage: training the MAE, extracting embeddings, importing
a features table. Free of torch, so the CLI and the workflow read them quickly."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.params import Params, like, param
from cellica.core.threads import NUMERIC_THREADS

NORMALIZATIONS = ("store", "tile", "instance")
POOLINGS = ("mean", "cls", "both")
ARCHITECTURES = ("vit", "channel_agnostic")
LAYOUTS = ("cellica", "openphenom")  # of a channel-agnostic encoder (cellica.embed._channel_agnostic)


@dataclass(kw_only=True)
class TrainParams(Params):
    """The masked autoencoder (`cellica train-mae --help`).

    With ``checkpoint`` set in the workflow's config, no training happens and that file is used.
    """

    section = "mae"

    model_name: str = param("vit_tiny_patch16_224", "timm ViT architecture of the encoder "
                            "(vit_tiny/small/base_patch16_224, ...).")
    architecture: str = param("vit", "`vit`: one patch embedding of all channels; `channel_agnostic`: each "
                              "channel's patches embedded apart by one shared projection plus a learned "
                              "per-channel embedding (OpenPhenom's design: one model for any channel count).",
                              choices=ARCHITECTURES)
    max_channels: int = param(11, "Channels a channel-agnostic encoder has embeddings for (OpenPhenom: 11).", ge=1)
    patch_size: int = param(8, "Patch edge in pixels (the tile size must be a multiple).", ge=2)
    depth: int | None = param(6, "Transformer blocks of the encoder (null: the named model's own depth, 12 for "
                              "ViT-Ti/S/B).", ge=1)
    mask_ratio: float = param(0.75, "Fraction of patches hidden from the encoder.", gt=0, lt=1)
    decoder_dim: int = param(128, "Width of the light decoder.", ge=8)
    decoder_depth: int = param(1, "Transformer blocks of the decoder.", ge=1)
    decoder_heads: int = param(4, "Attention heads of the decoder.", ge=1)
    norm_pix_loss: bool = param(False, "Reconstruct each patch normalised to zero mean and unit variance (He et "
                                "al. 2022). Off by default: on the noisy demo tiles it amplified noise and lowered "
                                "the probe R^2 to the true factors (docs/benchmarks.md).")
    normalization: str = param("store", "Per-channel intensity normalisation: `store` (per-channel mean/std of "
                               "the training tiles; keeps absolute intensity, which carries biology such as DNA "
                               "content, and leaves batch gains to the whitening) or `tile` (each tile and channel "
                               "by its own mean/std, robust to intensity drift but blind to intensity "
                               "phenotypes).", choices=NORMALIZATIONS)
    train_on: str = param("all", "Tiles used for pre-training.", choices=("all", "controls"))
    max_tiles: int | None = param(None, "Seeded subsample of the training tiles (null = all).", ge=1)
    epochs: int = param(5, "Passes over the training tiles.", ge=1)
    batch_size: int = param(64, "Tiles per optimisation step.", ge=1)
    lr: float = param(1e-3, "Peak learning rate of AdamW.", gt=0)
    weight_decay: float = param(0.05, "AdamW weight decay.", ge=0)
    warmup_epochs: float = param(1.0, "Linear warm-up before the cosine decay.", ge=0)
    seed: int = param(0, "Seed of initialisation, tile order and masks (same seed, same weights on CPU).")
    device: str = param("auto", "`auto` (CUDA if available), `cpu`, `cuda`, `cuda:1`, ...")
    num_workers: int = param(0, "DataLoader worker processes reading the store.", ge=0)
    threads: int = param(NUMERIC_THREADS, "CPU threads of torch while training. The weights depend on it "
                         "(torch splits reductions by thread count), never on --cores: the same value gives the "
                         "same bits on any machine size, another value differs in the last bits "
                         "(docs/integrity.md).", ge=1)
    resume: bool = param(True, "Continue from the last per-epoch checkpoint of the same set-up.")

    def mae_config(self, in_chans: int, img_size: int):
        """The :class:`cellica.embed._mae.MAEConfig` for a store's channels and tile size."""
        from cellica.embed._mae import MAEConfig

        return MAEConfig(model_name=self.model_name, in_chans=in_chans, img_size=img_size,
                         patch_size=self.patch_size, depth=self.depth, mask_ratio=self.mask_ratio,
                         decoder_dim=self.decoder_dim, decoder_depth=self.decoder_depth,
                         decoder_heads=self.decoder_heads, norm_pix_loss=self.norm_pix_loss,
                         architecture=self.architecture, max_channels=self.max_channels)


@dataclass(kw_only=True)
class EmbedParams(Params):
    """Extraction of embeddings (`cellica embed --help`)."""

    section = "embed"

    batch_size: int | None = param(None, "Tiles per forward pass. null: sized to the device: on a GPU the largest "
                                   "power of two up to 512 whose forward pass fits in half its free memory "
                                   "(measured by a probe), on CPU 128 (where the embeddings do not depend on it).",
                                   ge=1)
    pooling: str = param("mean", "Token pooling: mean of the patch tokens, the class token, or both "
                         "concatenated (mean first; twice the dims).", choices=POOLINGS)
    block: int = param(-1, "Transformer block whose output is the embedding: -1 the last (then the final "
                       "norm), 0 the first, -2 the one before the last, ... (intermediate blocks often embed "
                       "biology better: docs/models.md).")
    device: str = like(TrainParams, "device", help="`auto` (CUDA with bf16 autocast if available, else CPU "
                       "float32), or a device name (as mae.device).")
    read_threads: int | None = param(None, "Threads reading, decoding and normalising the store's tiles ahead of "
                                     "the model, in the embedding process. null: on a GPU every CPU of the job but "
                                     "one (SLURM_CPUS_PER_TASK, else the CPUs this process may use; at most 16), on "
                                     "CPU none (the model needs the cores). The embeddings do not depend on it.",
                                     ge=0, same_outputs=True)
    num_workers: int = param(0, "DataLoader worker processes reading the store (each with its own read_threads). "
                             "Threads read faster: a process copies every batch to the main one "
                             "(docs/benchmarks.md). The embeddings do not depend on it.", ge=0, same_outputs=True)
    precision: str = param("bf16", "Arithmetic of the forward pass on CUDA: `bf16` (autocast, the fast path) or "
                           "`fp32` (full float32: slower, for checking bf16's effect). On CPU always float32.",
                           choices=("bf16", "fp32"))
    normalize_on: str = param("auto", "Where tiles are normalised: `loader` (in the loader, numpy float32, "
                              "before the copy to the device), `device` (the pixels cross in their stored "
                              "integer type, half the bytes of float32, and are normalised there in torch: equal "
                              "up to float32 rounding), `auto` (device on CUDA, loader on CPU, where it is the "
                              "same work).", choices=("auto", "loader", "device"))
    threads: int = like(TrainParams, "threads", help="CPU threads of torch while embedding; fixed, like "
                        "mae.threads, so the embeddings never depend on --cores.")
    model_name: str | None = param(None, "timm architecture of a plain timm-format checkpoint (cellica "
                                   "checkpoints record their own).")
    adapt_channels: bool = param(False, "Allow adapting a checkpoint trained on another channel count (timm "
                                 "adapt_input_conv; logged).")
    normalization: str | None = param(None, "Tile normalisation for checkpoints that do not record theirs "
                                      "(cellica checkpoints do): null picks `instance` (pixels / 255, then "
                                      "per tile and channel standardised) for OpenPhenom-layout checkpoints, as "
                                      "their model card says, and `tile` for timm ones.", choices=NORMALIZATIONS)


@dataclass(kw_only=True)
class FeatureTableParams(Params):
    """Bring-your-own features (source: features): embeddings or profiles as .h5ad, parquet,
    CSV or TSV (`cellica import-features --help`)."""

    section = "features"

    column_map: dict[str, str] = param({}, "Our metadata column -> the table's: plate, well, batch, "
                                       "perturbation, is_control are required.")
    metadata_regex: str = param("^Metadata_", "Columns matching this are metadata (kept in .obs); all others "
                                "must be numeric features.")
    extra_metadata: list[str] = param([], "Further non-feature columns (e.g. n_images).")
    columns: list[str] = param([], "The feature columns, by name or shell-style pattern (`Cells_*`); every "
                               "other column is metadata. Empty: every column that is not metadata is a "
                               "feature, and identifier-like names (`Unnamed: 0`, `index`, `id`, `TableNumber`, "
                               "`*_id`) are refused unless declared here or in extra_metadata.")
    id_column: str | None = param(None, "Unique sample id column, always metadata (default: plate/well, "
                                  "numbered when repeated).")
    duplicate_features: str = param("refuse", "Rows whose features all equal another row's under other metadata "
                                    "(a copied row given a new well or id): refuse (an error naming both) or keep "
                                    "(logged, e.g. empty wells profiled as all zeros).", choices=("refuse", "keep"))


# cp_measure's feature groups (cp_measure.featurizer.make_featurizer_config's flags)
PROFILE_GROUPS = ("intensity", "texture", "granularity", "radial_distribution", "radial_zernikes", "sizeshape",
                  "zernike", "feret", "correlation_pearson", "correlation_costes", "correlation_manders_fold",
                  "correlation_rwc")


@dataclass(kw_only=True)
class ProfileParams(Params):
    """Classical CellProfiler-style profiles per tile with cp_measure, instead of an MAE
    (`cellica profile-tiles --help`; docs/models.md)."""

    section = "profiles"

    nuclei_channel: str = param("0", "Channel whose Otsu threshold finds the nuclei (its name in the store, or "
                                "its 0-based index).")
    features: list[str] = param(["intensity", "granularity", "radial_distribution", "sizeshape", "zernike",
                                 "correlation_pearson"],
                                "cp_measure feature groups measured on every nucleus (texture is the slowest: "
                                "about 10x intensity).", item_choices=PROFILE_GROUPS, unique=True, min_items=1)
    smoothing: float = param(1.0, "Gaussian sigma (px) applied before the Otsu threshold.", ge=0)
    min_area: int = param(8, "Objects smaller than this (px) are noise, not nuclei.", ge=1)
    batch_size: int = param(64, "Tiles measured per cp_measure call.", ge=1)
