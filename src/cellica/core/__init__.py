"""The shared core every stage builds on: errors, contracts (column names, the held-back
controls), parameters, atomic writes, AnnData I/O, logging and thread settings. Imports no stage."""

# The core is what the stages share, not a user's entry point: its one public name is the error
# every stage raises (also ``cellica.CellicaError``); everything else is imported by module.
from cellica.core.errors import CellicaError  # noqa: E402

__all__ = ["CellicaError"]
