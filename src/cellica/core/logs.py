"""Logging set-up shared by the CLI and the library: one line per event, with a timer."""

from __future__ import annotations

import contextlib
import logging
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
