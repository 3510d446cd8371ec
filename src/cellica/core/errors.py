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


def writing_failed(paths, exc: OSError) -> CellicaError:
    """A failed write (a full disk, no permission, a quota) as one line naming the output being
    written: libraries such as h5py and pyarrow raise it without a file name, or name only the
    hidden temporary file."""
    import errno

    text = str(exc)
    code = exc.errno
    if code is None:  # h5py and pyarrow put the cause in the text only
        for number, words in ((errno.ENOSPC, "No space left"), (errno.EDQUOT, "quota exceeded"),
                              (errno.EACCES, "Permission denied"), (errno.EROFS, "Read-only file system")):
            if words.lower() in text.lower():
                code = number
                break
    cause = describe(OSError(code, __import__("os").strerror(code))) if code else (text.splitlines() or [""])[0][:200]
    names = ", ".join(str(p) for p in paths)
    return CellicaError(f"writing {names} failed: {cause}")
