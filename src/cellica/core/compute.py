"""The ``compute`` section of the workflow's config: what the jobs run on (GPUs) and in
(the container image of ``--software-deployment-method apptainer``)."""

from __future__ import annotations

import dataclasses
import re

from cellica import __version__
from cellica.core.errors import CellicaError
from cellica.core.params import Params, param

# The image CI's lock builds (workflow/envs/Dockerfile), tagged with the package's version.
DEFAULT_CONTAINER = f"docker://ghcr.io/cellica/cellica:{__version__}"
# An image URI Apptainer pulls, or a local .sif: no spaces, quotes or shell characters, since
# Snakemake passes it on to the apptainer command line.
_IMAGE = re.compile(r"^(?:(?:docker|oras|library|shub)://[A-Za-z0-9][A-Za-z0-9._/:@+-]*|[A-Za-z0-9._/+-]+\.sif)$")


@dataclasses.dataclass
class ComputeKeys(Params):
    """Hardware requests of the rules, and the container every job runs in on a cluster."""

    section = "compute"
    gpus: int = param(0, "GPUs requested by train_mae and embed (the only rules that use one); 0 runs them on the "
                      "CPU. A SLURM run sends those two rules to a GPU partition: see docs/hpc.md.", ge=0)
    container: str = param(DEFAULT_CONTAINER, "The image every job runs in with `--software-deployment-method "
                           "apptainer`: a docker://, oras:// or library:// URI, or a local .sif built from "
                           "workflow/envs/cellica.def (docs/deploy.md). Unused otherwise.")

    def check(self) -> None:
        """Refuse a container that is not an image URI or a ``.sif`` path."""
        if not _IMAGE.match(self.container):
            raise CellicaError(f"compute.container: {self.container!r} is not an image URI (docker://, oras://, "
                               "library://, shub://) or a path ending in .sif, without spaces or quotes")
