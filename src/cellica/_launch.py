"""One way to launch the workflow: the Snakemake command line the tests and benchmarks run.

Every launch runs the ``snakemake`` installed next to this Python (so a test never picks
up another environment's), on this checkout's Snakefile, in a working directory of its
own, with an explicit config file and core count or profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from cellica.core.errors import CellicaError

SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with this Python's ``bin`` first on ``PATH`` (and ``extra``)."""
    env = {**os.environ, **(extra or {})}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def snakemake_command(*args: str, directory: Path | str | None = None, configfile: Path | str | None = None,
                      cores: int | None = 2, profile: Path | str | None = None,
                      snakefile: Path | str = SNAKEFILE) -> list[str]:
    """The argument list of one Snakemake run.

    Parameters
    ----------
    *args : str
        Further options and targets, last on the line.
    directory : path, optional
        The working directory (``--directory``): where ``results/`` and ``reports/`` land.
    configfile : path, optional
        The config (``--configfile``); without it the Snakefile runs the demo's.
    cores : int or None, default 2
        ``--cores``; None leaves it to ``profile`` (or to ``args``, when they name it).
    profile : path, optional
        A workflow profile folder (``--workflow-profile``), e.g. the SLURM one.
    snakefile : path
        The Snakefile; this checkout's by default.
    """
    exe = shutil.which("snakemake", path=environment()["PATH"])
    if exe is None:
        raise CellicaError(f"snakemake is not installed next to {sys.executable}")
    if not Path(snakefile).is_file():
        raise CellicaError(f"{snakefile} does not exist: the workflow runs from a source checkout of cellica")
    cmd = [exe, "--snakefile", str(snakefile)]
    cmd += ["--directory", str(directory)] if directory is not None else []
    cmd += ["--configfile", str(configfile)] if configfile is not None else []
    cmd += ["--workflow-profile", str(profile)] if profile is not None else []
    if cores is not None and "--cores" not in args and "-c" not in args:
        cmd += ["--cores", str(cores)]
    return cmd + list(args)


def run_snakemake(*args: str, env: dict[str, str] | None = None, timeout: float | None = None,
                  log: Path | str | None = None, popen: bool = False, **where) -> subprocess.CompletedProcess:
    """Run :func:`snakemake_command` (``where`` are its keywords) and return the finished process.

    Output is captured as text, or appended to ``log`` when given; ``popen`` returns the
    running process instead (stdout and stderr merged), for a caller that stops it midway.
    """
    cmd = snakemake_command(*args, **where)
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=environment(env))
    if log is not None:
        with open(log, "a") as fh:
            return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=environment(env),
                                  timeout=timeout)
    return subprocess.run(cmd, capture_output=True, text=True, env=environment(env), timeout=timeout)
