"""The one exception type users see: a clear message, a non-zero exit from the CLI."""


class CellicaError(Exception):
    """Bad input or an impossible request, explained in words a user can act on.

    The CLI prints the message (which names the file, column or value at fault)
    and exits with status 2; no partial output is left behind.
    """


def describe(exc: BaseException) -> str:
    """One line for an error a user can meet: the file (when known) and the cause."""
    import errno
    import os

    if isinstance(exc, CellicaError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f"{exc.filename}: " if exc.filename else ""
        hint = {errno.ENOSPC: " (the disk is full: free space or write elsewhere)",
                errno.EACCES: " (no permission)", errno.EROFS: " (read-only file system)",
                errno.EDQUOT: " (disk quota exceeded)"}.get(exc.errno, "")
        return f"{where}{os.strerror(exc.errno)}{hint}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
