"""The ``cellica`` command line: one sub-command per stage.

Heavy libraries (torch, scanpy, lightgbm) are imported inside the commands, so
``cellica --help`` and light stages start quickly under Snakemake.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from cellica import __version__
from cellica.errors import CellicaError
from cellica.logs import configure, get_logger

log = get_logger("cli")

Command = Callable[[argparse.Namespace], None]


# ---------------------------------------------------------------------- commands
def _cmd_simulate(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.simulate import SimulationParams, simulate_screen

    simulate_screen(ns.out, dataclass_from_args(SimulationParams, ns), overwrite=ns.overwrite)


def _cmd_ingest(ns: argparse.Namespace) -> None:
    from cellica.cli_params import dataclass_from_args
    from cellica.ingest import IngestParams, ingest

    ingest(ns.manifest, ns.out, dataclass_from_args(IngestParams, ns), overwrite=ns.overwrite)


def _cmd_inspect(ns: argparse.Namespace) -> None:
    import pandas as pd

    from cellica.tilestore import TileStore

    info = TileStore.open(ns.store).summary(max_stat_tiles=ns.stat_tiles)
    with pd.option_context("display.max_rows", ns.max_rows, "display.width", 120):
        print(f"store       {info['path']}")
        print(f"tiles       {info['n_tiles']} x {info['tile_shape']} {info['dtype']}")
        print(f"controls    {info['n_controls']}")
        print(f"source      {info['provenance'].get('source', '?')}")
        for title, key in (
            ("tiles per batch", "per_batch"),
            ("tiles per plate", "per_plate"),
            ("tiles per perturbation", "per_perturbation"),
        ):
            print(f"\n{title}:\n{info[key].head(ns.max_rows).to_string()}")
        print(f"\nchannel intensities (sample of {info['stats_tiles']} tiles):")
        print(info["channel_stats"].to_string(index=False, float_format=lambda v: f"{v:.4g}"))


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used to document the CLI)."""
    from cellica.cli_params import add_dataclass_args
    from cellica.ingest import IngestParams
    from cellica.simulate import SimulationParams

    parser = argparse.ArgumentParser(
        prog="cellica",
        description="MAE embeddings of cell-microscopy screens, PCA whitening + ICA, evaluation.",
    )
    parser.add_argument("--version", action="version", version=f"cellica {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", metavar="<stage>", required=True)

    p = sub.add_parser("simulate", help="simulate a screen with known ground truth into a tile store")
    p.add_argument("--out", required=True, help="tile store to write (*.zarr)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    add_dataclass_args(p, SimulationParams)
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("ingest", help="cut per-channel TIFF/PNG images from a manifest into a tile store")
    p.add_argument("--manifest", required=True, help="CSV, one row per image file")
    p.add_argument("--out", required=True, help="tile store to write (*.zarr)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    add_dataclass_args(p, IngestParams)
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("inspect", help="print counts and channel statistics of a tile store")
    p.add_argument("store", help="tile store (*.zarr)")
    p.add_argument("--stat-tiles", type=int, default=2048, help="tiles sampled for intensity stats")
    p.add_argument("--max-rows", type=int, default=30, help="rows shown per table")
    p.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cellica`` console script; returns the exit status."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    configure(ns.log_level)
    try:
        ns.func(ns)
    except CellicaError as exc:
        print(f"cellica {ns.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
