"""The command registry as rows for generated tests: each command's argparse parser, and a command
line whose every required value is a fresh path except the one option a row is about."""

from __future__ import annotations

import argparse
from pathlib import Path

from cellica.cli.parser import OUTPUT_OPTIONS, build_parser


def subparsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's own argparse parser, by name."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def command_line(command: str, target_opt: str, target: Path, w: Path) -> list[str]:
    """A command line whose every required value is a fresh path in ``w``, and ``target_opt`` is ``target``."""
    argv = [command]
    for action in subparsers()[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        given = action.option_strings[0] if action.option_strings else None
        if given == target_opt:
            argv += [given, str(target)]
        elif not action.option_strings:  # a positional: an input file
            argv.append(str(w / f"in_{action.dest}.h5ad"))
        elif action.required:
            if action.dest in OUTPUT_OPTIONS:
                value = str(w / f"out_{action.dest}")
            elif action.dest == "name":
                value = "untrained"
            else:
                value = str(w / f"in_{action.dest}.h5ad")
            argv += [given, value]
    return argv
