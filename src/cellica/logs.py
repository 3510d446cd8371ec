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


def configure(level: str = "INFO") -> None:
    """Send cellica's log lines to stderr (Snakemake's ``log:`` captures it)."""
    logger = get_logger()
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
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
