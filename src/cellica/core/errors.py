"""The one exception type users see: a clear message, a non-zero exit from the CLI."""


class CellicaError(Exception):
    """Bad input or an impossible request, explained in words a user can act on.

    The CLI prints the message (which names the file, column or value at fault)
    and exits with status 2; no partial output is left behind.
    """


class NotComputable(CellicaError):
    """An optional product the data cannot make (a gene map of a batch without controls): the
    stage writes it as "not computed" with this reason, and the run goes on to the report."""


def describe(exc: BaseException) -> str:
    """One line for an error a user can meet: the file (when known) and the cause."""
    import errno
    import os

    if isinstance(exc, CellicaError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f"{exc.filename}: " if exc.filename else ""
        hint = {
            errno.ENOSPC: " (the disk is full: free space or write elsewhere)",
            errno.EACCES: " (no permission)",
            errno.EROFS: " (read-only file system)",
            errno.EDQUOT: " (disk quota exceeded)",
            errno.EFBIG: " (the file size limit: see `ulimit -f`, or the file system's largest file)",
        }.get(exc.errno, "")
        return f"{where}{os.strerror(exc.errno)}{hint}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_write_failure(exc: BaseException) -> bool:
    """An OSError, or a library's error that carries an OS error number in its text (h5py reports a
    full disk or a file-size limit as a RuntimeError "... errno = 27 ...")."""
    import re

    return isinstance(exc, OSError) or (
        isinstance(exc, RuntimeError) and re.search(r"errno = \d+", str(exc)) is not None
    )


def writing_failed(paths, exc: BaseException) -> CellicaError:
    """A failed write (a full disk, no permission, a quota) as one line naming the output being
    written: libraries such as h5py and pyarrow raise it without a file name, or name only the
    hidden temporary file."""
    import errno
    import re

    text = str(exc)
    code = getattr(exc, "errno", None)
    found = re.search(r"errno = (\d+)", text)  # h5py: "... errno = 27, error message = 'File too large'"
    if code is None and found:
        code = int(found.group(1))
    if code is None:  # h5py and pyarrow put the cause in the text only
        for number, words in ((errno.ENOSPC, "No space left"), (errno.EDQUOT, "quota exceeded"),
                              (errno.EACCES, "Permission denied"), (errno.EROFS, "Read-only file system"),
                              (errno.EFBIG, "File too large")):
            if words.lower() in text.lower():
                code = number
                break
    cause = describe(OSError(code, __import__("os").strerror(code))) if code else (text.splitlines() or [""])[0][:200]
    names = ", ".join(str(p) for p in paths)
    return CellicaError(f"writing {names} failed: {cause}")
