"""Where the benchmarks write their tables: the docs folder, between markers (see
:mod:`cellica.core.docs`), so no figure is copied by hand."""

from __future__ import annotations

from pathlib import Path

from cellica.core.docs import markdown, write_block

DOCS = Path(__file__).resolve().parents[1] / "docs"
__all__ = ["DOCS", "markdown", "write_block"]
