"""The ``cellica`` command line: one sub-command per stage (see :mod:`cellica.cli.parser`)."""

from __future__ import annotations

import os
import sys

from cellica.cli._commands import ReaderGone
from cellica.cli.parser import INPUT_KINDS, WRITTEN_INTO, build_parser, paths_by_role
from cellica.core.errors import CellicaError
from cellica.core.kinds import check_input
from cellica.core.logs import configure
from cellica.core.ownership import check_owned_output
from cellica.core.paths import check_disjoint


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cellica`` console script; returns the exit status.

    Every error a user can cause or meet (bad input, a missing or damaged file, a full
    disk, no permission, a checksum mismatch) is one line naming the file and the
    cause, exit status 2. Anything else is an internal error: one line and exit 1.
    ``--debug`` (or ``CELLICA_DEBUG=1``) shows the traceback instead. Output into a
    closed pipe (``cellica inspect ... | head``) ends quietly.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: the command line's).

    Returns
    -------
    int
        The exit status: 0, 2 for a user's error, 1 for an internal one.
    """
    parser = build_parser()
    ns = parser.parse_args(argv)
    configure(ns.log_level)
    debug = ns.debug or os.environ.get("CELLICA_DEBUG", "") not in ("", "0")
    try:
        inputs, outputs = paths_by_role(ns)
        check_disjoint(inputs, outputs)  # before anything is read or written
        for option, path in inputs:  # every input of the kind its option takes
            check_input(option, path, INPUT_KINDS.get(option.lstrip("-").replace("-", "_"), ()))
        for option, path in outputs:  # and no output may replace what cellica did not write
            if not ((ns.command, option) in WRITTEN_INTO and os.path.isdir(path)):
                check_owned_output(path)
        ns.func(ns)
    except (BrokenPipeError, ReaderGone) as exc:
        # The reader went away (e.g. `| head`): nothing more to say, and nothing to flush. After
        # the work (the final print) that is success; during it (a closed stderr while logging),
        # the work is unfinished and its outputs unwritten: never report that as success.
        for stream in (sys.stdout, sys.stderr):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        return 0 if isinstance(exc, ReaderGone) else 141
    except KeyboardInterrupt:
        print(f"cellica {ns.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        from cellica.core.errors import describe

        user_error = isinstance(exc, CellicaError | OSError | MemoryError | RecursionError)
        hint = "" if user_error else " (internal error: please report it; --debug shows the traceback)"
        if isinstance(exc, MemoryError):  # an input or a setting too large for this machine's memory
            hint = (" (not enough memory: give the job more (resources: mem_mb), or a smaller input or setting; "
                    "the command's log says what it was doing)")
        elif isinstance(exc, RecursionError):  # a file nested deeper than its parser goes (JSON, YAML)
            hint = " (an input is nested too deeply to read: is it the file you meant?)"
        print(f"cellica {ns.command}: error: {describe(exc)}{hint}", file=sys.stderr)
        return 2 if user_error else 1
    return 0


def run() -> None:  # pragma: no cover - the console script
    """Console entry point: run :func:`main`, then leave without interpreter teardown.

    Native thread pools (pyarrow, LightGBM/OpenMP) occasionally abort the process
    while Python shuts down ("terminate called without an active exception"), which
    turned finished Snakemake jobs into failures. Every output is written and
    closed (and renamed into place) before ``main`` returns, so exiting directly is safe.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
