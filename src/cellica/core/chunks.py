"""Which names a job of a chunked stage handles (evaluation chunks, chunks of report pages)."""

from __future__ import annotations

from cellica.core.errors import CellicaError


def gene_chunk(genes: list[str], chunk: str | None) -> list[str]:
    """The genes of chunk ``i/n`` (sorted genes, every n-th from i)."""
    if not chunk or chunk == "none":
        return genes
    try:
        i, n = (int(v) for v in chunk.split("/"))
    except ValueError:
        raise CellicaError(f"chunk {chunk!r} is not of the form i/n") from None
    if n < 1 or not 0 <= i < n:
        raise CellicaError(f"chunk {chunk!r} is out of range")
    return genes[i::n]
