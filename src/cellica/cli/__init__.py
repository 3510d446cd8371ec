"""The ``cellica`` command line: a thin layer over the stage packages."""

from cellica.cli.app import main, run

__all__ = ["main", "run"]
