"""Parameters of the torch stages, kept free of torch so the CLI can list them quickly.

Each dataclass is one config section (``mae``, ``embed``); its fields are the
keys of that section and the options of the matching ``cellica`` command.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field


@dataclass
class TrainParams:
    """MAE architecture and optimisation (config section ``mae``)."""

    model_name: str = "vit_tiny_patch16_224"
    patch_size: int = 8
    depth: int | None = 6
    mask_ratio: float = 0.75
    decoder_dim: int = 128
    decoder_depth: int = 1
    decoder_heads: int = 4
    norm_pix_loss: bool = False
    normalization: str = "store"
    train_on: str = "all"
    max_tiles: int | None = None
    epochs: int = 5
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 1.0
    seed: int = 0
    device: str = "auto"
    num_workers: int = 0
    threads: int | None = None
    resume: bool = True

    def mae_config(self, in_chans: int, img_size: int):
        """The :class:`cellica.mae.MAEConfig` for a store's channels and tile size."""
        from cellica.mae import MAEConfig

        return MAEConfig(model_name=self.model_name, in_chans=in_chans, img_size=img_size,
                         patch_size=self.patch_size, depth=self.depth, mask_ratio=self.mask_ratio,
                         decoder_dim=self.decoder_dim, decoder_depth=self.decoder_depth,
                         decoder_heads=self.decoder_heads, norm_pix_loss=self.norm_pix_loss)


@dataclass
class EmbedParams:
    """How to extract embeddings (config section ``embed``)."""

    batch_size: int = 128
    pooling: str = "mean"
    device: str = "auto"
    num_workers: int = 0
    threads: int | None = None
    model_name: str | None = None
    adapt_channels: bool = False
    normalization: str = "tile"


@dataclass
class TransformParams:
    """Feature transforms (config section ``transform``; see :mod:`cellica.transforms`)."""

    fit_on: str = "controls"
    fit_fraction: float = 0.5
    standardize: str = "none"
    n_components: float | None = None
    eig_floor: float = 1e-6
    batch_correction: str = "center"
    batch_stage: str = "before"
    batch_key: str = "batch"
    drop_constant: bool = False
    ica_backend: str = "cellica"
    ica_fit_on: str = "controls"
    ica_max_samples: int | None = 100000
    ica_max_iter: int = 1000
    ica_tol: float = 1e-4
    ica_device: str = "auto"
    sphering_epsilon: float = 1e-6
    harmony_theta: float = 2.0
    harmony_max_iter: int = 10
    seed: int = 0
    rotation_seed: int | None = None

    @property
    def random_seed(self) -> int:
        """Seed of the ICA start and subsample, the random rotation and Harmony: ``rotation_seed``
        when set (``evaluate.seeds`` re-seeds these per evaluation seed), else ``seed``. The
        split of the controls into fitting and held-back ones always follows ``seed``."""
        return self.seed if self.rotation_seed is None else self.rotation_seed

    def validate(self) -> None:
        from cellica.errors import CellicaError

        choices = {
            "fit_on": ("controls", "all"),
            "batch_correction": ("none", "center", "center_scale"),
            "standardize": ("none", "controls"),
            "batch_stage": ("before", "after"),
            "ica_backend": ("cellica", "sklearn", "picard"),
            "ica_fit_on": ("controls", "all"),
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise CellicaError(f"transform: {key} must be one of {allowed}, got {getattr(self, key)!r}")
        if not 0.0 < self.fit_fraction <= 1.0:
            raise CellicaError(f"transform: fit_fraction must be in (0, 1], got {self.fit_fraction}")
        if self.n_components is not None and self.n_components > 1 and self.n_components != int(self.n_components):
            raise CellicaError(f"transform: n_components must be a whole count (>= 1) or a variance fraction (< 1), "
                               f"got {self.n_components}")
        if self.n_components is not None and self.n_components <= 0:
            raise CellicaError(f"transform: n_components must be > 0 (a count, or a variance fraction < 1), got {self.n_components}")


BINNINGS = ("lightgbm", "controls")


@dataclass
class EvalParams:
    """Per-gene classifiers and metrics (config section ``evaluate``).

    The classifier defaults are the paper's Table 6 (``is_unbalance``, learning rate
    0.05, 31 leaves, feature fraction 0.6, L1 5, L2 1) with LightGBM's own binning
    of every training set (``binning: lightgbm``, ``max_bin`` 255).
    """

    level: str = "tiles"
    split: str = "batch"
    batch_key: str = "batch"
    n_trees: int = 100
    learning_rate: float = 0.05
    num_leaves: int = 31
    feature_fraction: float = 0.6
    reg_alpha: float = 5.0
    reg_lambda: float = 1.0
    is_unbalance: bool = True
    min_data_in_leaf: int = 20
    max_bin: int = 255
    binning: str = "lightgbm"
    importance_type: str = "gain"
    top_fraction: float = 0.25
    min_samples: int = 4
    max_batch_samples: int = 5000
    map_null_size: int = 10000
    map_threshold: float = 0.05
    seeds: list[int] = field(default_factory=lambda: [0])
    n_boot: int = 2000

    def validate(self) -> None:
        """Refuse values the schema would refuse (for library callers)."""
        from cellica.errors import CellicaError

        if self.binning not in BINNINGS:
            raise CellicaError(f"evaluate: binning must be one of {BINNINGS}, got {self.binning!r}")
        seeds = list(self.seeds or [])
        if not seeds:
            raise CellicaError("evaluate: seeds is empty; give at least one seed, e.g. [0]")
        if any(not isinstance(s, numbers.Integral) or isinstance(s, bool) for s in seeds):
            raise CellicaError(f"evaluate: seeds must be integers, got {seeds}")
        if len(set(seeds)) != len(seeds):
            dup = sorted({s for s in seeds if seeds.count(s) > 1})
            raise CellicaError(f"evaluate: seeds are repeated ({dup}); each seed must appear once")
        if self.n_boot < 100:
            raise CellicaError(f"evaluate: n_boot must be >= 100 for a 95% interval, got {self.n_boot}")

    @property
    def seed(self) -> int:
        """The first seed: subsamples and permutation nulls that are not repeated per seed."""
        return int(self.seeds[0])

