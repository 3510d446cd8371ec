"""The software a run used: every installed package and its version, set against the lock
file (``requirements.lock``: the exact versions CI passed with, which the README's install,
the container and ``workflow/envs/cellica.yaml`` install).

The *software digest* is the SHA-256 of the sorted ``name==version`` lines. The lock's
digest and the environment's are computed the same way, so an environment installed from
the lock alone has the lock's digest. A container built from the lock holds only the
runtime packages (no pytest), so a subset of the lock at the lock's versions also counts as
matching it.

``cellica environment --out results/environment.json`` records it for a run; the report's
index shows it; ``cellica environment --write-lock requirements.lock`` writes a new lock from the
environment it runs in.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from cellica import __version__
from cellica.core.errors import CellicaError

LOCK_NAME = "requirements.lock"
# Shown on the report's index; every package is in results/environment.json.
KEY_PACKAGES = ("torch", "timm", "numpy", "scipy", "scikit-learn", "lightgbm", "anndata", "scanpy", "zarr",
                "pandas", "snakemake")
# The installer itself, as pip freeze leaves it out: a fresh venv's own pip is not the science's
# software (setuptools is: torch requires it at run time, so the lock pins it).
TOOLING = frozenset({"pip"})
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*(?:#.*)?$")


def normalise(name: str) -> str:
    """A distribution's canonical name (PEP 503): lower case, runs of ``-_.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Every distribution installed in this interpreter (cellica itself and pip left out), by name."""
    from importlib.metadata import distributions

    out = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name and normalise(name) != "cellica" and normalise(name) not in TOOLING:
            out[normalise(name)] = dist.version
    return dict(sorted(out.items()))


def digest(packages: dict[str, str]) -> str:
    """SHA-256 of the sorted ``name==version`` lines of ``packages``."""
    text = "".join(f"{normalise(n)}=={v}\n" for n, v in sorted(packages.items(), key=lambda kv: normalise(kv[0])))
    return hashlib.sha256(text.encode()).hexdigest()


def read_lock(path: str | os.PathLike) -> dict[str, str]:
    """The pins of a lock file (``name==version`` per line; comments and blank lines ignored).

    Raises
    ------
    CellicaError
        The file is missing or pins nothing, or a line is not an exact pin or pins a package
        twice (naming the line).
    """
    path = Path(path)
    if not path.is_file():
        raise CellicaError(f"lock file {path} does not exist")
    pins: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if not match:
            raise CellicaError(f"{path}, line {number}: {line!r} is not an exact pin (name==version)")
        name = normalise(match.group(1))
        if name in pins:
            raise CellicaError(f"{path}, line {number}: {name} is pinned twice")
        pins[name] = match.group(2)
    if not pins:
        raise CellicaError(f"lock file {path} pins no package")
    return pins


def lock_text(packages: dict[str, str]) -> str:
    """A lock file of ``packages``: a header saying how it was made, then sorted pins."""
    header = (f"# The exact versions cellica's CI passed with (Python {platform.python_version()}, "
              f"{sys.platform}); digest {digest(packages)}.\n"
              "# Installed by the README's commands (pip install -c requirements.lock), the container "
              "(workflow/envs/Dockerfile)\n# and the conda environment. Rewritten by: "
              "cellica environment --write-lock requirements.lock\n")
    return header + "".join(f"{n}=={v}\n" for n, v in sorted(packages.items()))


def find_lock() -> Path | None:
    """The lock this installation came from: ``$CELLICA_LOCK`` (the container sets it), else
    ``requirements.lock`` at the root of a source checkout, else none."""
    env = os.environ.get("CELLICA_LOCK")
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parents[3] / LOCK_NAME
    return candidate if candidate.is_file() else None


def compare(packages: dict[str, str], lock: dict[str, str]) -> list[str]:
    """How ``packages`` departs from ``lock``, one line each: a version that differs, or a
    package the lock does not name. Packages of the lock that are not installed are fine."""
    out = []
    for name, version in packages.items():
        if name not in lock:
            out.append(f"{name} {version} is not in the lock")
        elif lock[name] != version:
            out.append(f"{name} {version} (the lock has {lock[name]})")
    return out


def environment(lock: str | os.PathLike | None = None) -> dict[str, Any]:
    """The software of this process, against its lock.

    Parameters
    ----------
    lock
        A lock file; default :func:`find_lock`.

    Returns
    -------
    dict
        ``python``, ``platform``, ``cellica``, ``packages`` (name -> version),
        ``software_digest``, ``lock`` (path or None), ``lock_digest``, ``matches_lock``
        (None without a lock) and ``differences`` (lines of :func:`compare`).
    """
    packages = installed()
    path = Path(lock) if lock else find_lock()
    pins = read_lock(path) if path else None
    differences = compare(packages, pins) if pins is not None else []
    return {"python": platform.python_version(), "platform": platform.platform(), "cellica": __version__,
            "software_digest": digest(packages), "lock": str(path) if path else None,
            "lock_digest": digest(pins) if pins is not None else None,
            "matches_lock": (not differences) if pins is not None else None, "differences": differences,
            "packages": packages}


def write_environment(out: str | os.PathLike, lock: str | os.PathLike | None = None) -> dict[str, Any]:
    """:func:`environment`, written as JSON to ``out`` (atomically)."""
    from cellica.core.atomic import atomic_output

    record = environment(lock)
    with atomic_output(out, overwrite=True) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
    return record


def write_lock(out: str | os.PathLike) -> dict[str, str]:
    """Write the environment this runs in as a lock file (what CI passed with)."""
    from cellica.core.atomic import atomic_output

    packages = installed()
    with atomic_output(out, overwrite=True) as tmp:
        Path(tmp).write_text(lock_text(packages))
    return packages


def summary_lines(record: dict[str, Any]) -> list[str]:
    """The record in a few sentences (the command's output and the report's index)."""
    if record["matches_lock"] is None:
        verdict = "no lock file found: the versions below are what ran"
    elif record["matches_lock"]:
        verdict = f"every package at the version of the lock ({record['lock']})"
    else:
        verdict = f"{len(record['differences'])} package(s) differ from the lock ({record['lock']})"
    return [f"cellica {record['cellica']}, Python {record['python']} on {record['platform']}",
            f"{len(record['packages'])} packages, software digest {record['software_digest'][:16]}; {verdict}"]
