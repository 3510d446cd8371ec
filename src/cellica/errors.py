"""The one exception type users see: a clear message, a non-zero exit from the CLI."""


class CellicaError(Exception):
    """Bad input or an impossible request, explained in words a user can act on.

    The CLI prints the message (which names the file, column or value at fault)
    and exits with status 2; no partial output is left behind.
    """
