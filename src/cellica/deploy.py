"""A folder of its own that runs this checkout's workflow as a Snakemake module: what
``snakedeploy deploy-workflow`` writes for a catalog workflow on GitHub, for a local clone.

snakedeploy declares a local source's module by a path relative to the source
(``"workflow/Snakefile"``), which Snakemake reads relative to the deploying Snakefile's own
folder: a path that does not exist there. This writes the checkout's absolute path instead,
so the deployed folder runs as written (``tests/test_deploy.py`` runs it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cellica.core.errors import CellicaError

SNAKEFILE = """from snakemake.utils import min_version


min_version("8.0")


configfile: "config/config.yaml"


# cellica, deployed from the local checkout {source}
module {name}:
    snakefile:
        {snakefile!r}
    config:
        config


use rule * from {name} as {name}_*
"""


def deploy_workflow(dest: str | Path, name: str = "cellica", source: str | Path | None = None) -> Path:
    """Write ``dest/workflow/Snakefile`` declaring the checkout's workflow as a module, and copy
    its ``config/`` folder (the demo config, the examples, their README) to ``dest/config``.

    Parameters
    ----------
    dest
        The folder to deploy into: absent or empty (nothing in it is ever replaced).
    name
        The module's name; its rules are ``{name}_*``.
    source
        The checkout (default: the one this cellica is installed from).

    Returns
    -------
    Path
        The deploying Snakefile.
    """
    from cellica._launch import SNAKEFILE as CHECKOUT

    root = Path(source).resolve() if source is not None else CHECKOUT.parent
    module = root / "workflow" / "Snakefile"
    if not module.is_file():
        raise CellicaError(f"deploy: {module} does not exist: deploy from a source checkout of cellica "
                           "(or use snakedeploy with the GitHub URL, docs/deploy.md)")
    if not name.isidentifier():
        raise CellicaError(f"deploy: module name {name!r} is not a Python identifier (letters, digits, _)")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CellicaError(f"deploy: {dest} exists and is not an empty folder; deploy into a new folder")
    if dest.resolve() == root or root in dest.resolve().parents:
        raise CellicaError(f"deploy: {dest} lies inside the checkout {root}; deploy into a folder of its own")
    (dest / "workflow").mkdir(parents=True, exist_ok=True)
    shutil.copytree(root / "config", dest / "config")
    snakefile = dest / "workflow" / "Snakefile"
    snakefile.write_text(SNAKEFILE.format(source=root, name=name, snakefile=str(module)))
    return snakefile
