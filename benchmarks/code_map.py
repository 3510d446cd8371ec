"""The package's picture in docs/stages.md ("Code map"), read from the code: each package in
import order with what it imports, each module with its docstring's first sentence.

    python benchmarks/code_map.py          # print it
    python benchmarks/code_map.py --docs   # write it into docs/stages.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _docs import DOCS, write_block

from cellica.core.docs import code_map

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "cellica"

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", action="store_true", help="write the picture into docs/stages.md")
    args = parser.parse_args()
    picture = code_map(PACKAGE)
    if args.docs:
        write_block(DOCS / "stages.md", "code-map", picture)
    else:
        print(picture)
