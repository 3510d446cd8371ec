"""Parameters of ``cellica align``: the held-out split, and the whitening and ICA settings,
defined once with the transform stage's (the ICA map whitens and rotates as it does)."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.params import Params, like, param
from cellica.transform.params import IcaParams, TransformParams


@dataclass(kw_only=True)
class AlignParams(Params):
    """How two embeddings of the same samples are aligned (`cellica align --help`)."""

    section = "stability"

    test_fraction: float = param(0.5, "Share of the common samples held out to measure the maps (the rest fit "
                                 "them).", gt=0, lt=1)
    seed: int = like(TransformParams, "seed", help="Seed of the held-out split and of the ICA.", config=False)
    n_components: float | None = like(TransformParams, "n_components", config=False)
    eig_floor: float = like(TransformParams, "eig_floor", config=False)
    ica_backend: str = like(IcaParams, "backend", config=False)
    ica_max_iter: int = like(IcaParams, "max_iter", config=False)
    ica_tol: float = like(IcaParams, "tol", config=False)
    ica_device: str = like(IcaParams, "device", config=False)

    @property
    def ica(self) -> IcaParams:
        """The ICA parameters each run's rotation is fitted with."""
        return IcaParams(backend=self.ica_backend, max_iter=self.ica_max_iter, tol=self.ica_tol,
                         device=self.ica_device)
