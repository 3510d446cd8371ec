"""Logging set-up shared by the CLI and the library: one line per event, with a timer."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator

LOGGER_NAME = "cellica"


def get_logger(name: str | None = None) -> logging.Logger:
    """Return the ``cellica`` logger or one of its children."""
    return logging.getLogger(LOGGER_NAME if name is None else f"{LOGGER_NAME}.{name}")


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (not the one at set-up:
    a replaced stream, e.g. by a test's capture, may be closed by then)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(level: str = "INFO") -> None:
    """Send cellica's log lines to stderr (Snakemake's ``log:`` captures it)."""
    logger = get_logger()
    if not logger.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        )
        logger.addHandler(handler)
    logger.setLevel(level)


@contextlib.contextmanager
def timed(logger: logging.Logger, what: str) -> Iterator[None]:
    """Log how long ``what`` took."""
    start = time.perf_counter()
    yield
    logger.info("%s took %.2f s", what, time.perf_counter() - start)


class _LogLines:
    """A file for tqdm in a log file: each refresh becomes its own line (tqdm's carriage
    returns would pile up on one line that ``tail -f`` shows only when it ends)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it", interval: float = 30.0):
    """A progress bar with rate and ETA (tqdm) on stderr.

    On a terminal it is tqdm's live bar. In a log file (every Snakemake job's ``log:``),
    where tqdm would otherwise switch itself off, it writes one line every ``interval``
    seconds (``CELLICA_PROGRESS_SECONDS`` overrides it), so ``tail -f`` on a job's log
    shows how far it is and when it will end.
    """
    from tqdm.auto import tqdm

    stream = sys.stderr
    # Read now: tqdm reads TQDM_DISABLE once, when it is first imported.
    off = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true")
    if stream.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=off)
    seconds = float(os.environ.get("CELLICA_PROGRESS_SECONDS", interval))
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=_LogLines(stream), mininterval=seconds,
                maxinterval=max(seconds, 1.0), ascii=True, ncols=100, disable=off)


def failed_jobs(snakemake_log) -> list[tuple[str, str, str]]:
    """(rule, log file, the job's own last error line) of every failed job of a Snakemake run,
    read from the run's log: what Snakemake itself shows is only ``CalledProcessError``.

    The error line is the last ``cellica ...: error: ...`` line of the job's log, else its
    last non-empty line.
    """
    import re

    paths = [snakemake_log] if isinstance(snakemake_log, str | os.PathLike) else list(snakemake_log or [])
    text = ""
    for path in paths:  # Snakemake hands its handler one log file or a list of them
        try:
            text += open(path, encoding="utf-8", errors="replace").read()
        except OSError:
            pass
    out = []
    for block in text.split("Error in rule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        match = re.search(r"^\s*log: (.+?)(?: \(check log file\(s\) for error details\))?$", block, re.MULTILINE)
        if not match:
            continue
        path = match.group(1).split(", ")[0].strip()
        try:
            lines = [line.strip() for line in open(path, encoding="utf-8", errors="replace") if line.strip()]
        except OSError:
            lines = []
        errors = [line for line in lines if line.startswith("cellica ") and ": error: " in line]
        out.append((rule, path, (errors or lines or ["(the log is empty)"])[-1]))
    return list(dict.fromkeys(out))
