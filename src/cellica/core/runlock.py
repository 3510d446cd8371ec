"""One run per results folder: a run holds ``<results>/.cellica-run.lock`` while it runs.

Snakemake locks its own working directory, but two runs started from different directories
(or two configs) may name the same ``results_dir``; each would then delete and rewrite the
other's finished outputs (Snakemake removes a job's outputs before it runs it). The workflow
takes this lock when it starts (``onstart``, never in a dry run); a second run meets it and
stops before any job runs, naming the run that holds it. The lock is an ``flock`` on an open
file, so it ends with the process that holds it, however that process ends.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from cellica.core.errors import CellicaError

LOCK_NAME = ".cellica-run.lock"
_held: dict[str, int] = {}  # folder -> open descriptor, for the life of the process


def hold_run_lock(results_dir: str | os.PathLike) -> Path:
    """Hold the run lock of ``results_dir`` until this process ends (again in one process: a no-op).

    Parameters
    ----------
    results_dir
        The run's results folder (created if missing).

    Returns
    -------
    Path
        The lock file.

    Raises
    ------
    CellicaError
        Another process holds it: one line naming that run (host, process, start, directory).
    """
    import fcntl

    folder = Path(results_dir).resolve()
    lock = folder / LOCK_NAME
    if str(folder) in _held:
        return lock
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            holder = json.loads(lock.read_text())
            who = (f"process {holder['pid']} on {holder['host']}, started {holder['started']} in "
                   f"{holder['cwd']}")
        except (OSError, ValueError, KeyError, TypeError):
            who = "another process"
        raise CellicaError(f"{folder} is in use by another cellica run ({who}); two runs sharing one "
                           "results_dir would replace each other's outputs: wait for it to finish, or set "
                           "another results_dir") from None
    record = {"pid": os.getpid(), "host": socket.gethostname(), "cwd": os.getcwd(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(record) + "\n").encode())
    _held[str(folder)] = fd
    return lock
