"""Stage 1, the tile store: simulate a screen or ingest image files into a checksummed zarr v3
store (:class:`cellica.store.tilestore.TileStore`). The only package that imports zarr."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "TileStore": "cellica.store.tilestore",
    "export_truth": "cellica.store.truth",
    "write_example_tiles": "cellica.store.examples",
    "simulate_screen": "cellica.store.simulate",
    "ingest_images": "cellica.store.ingest:ingest",
    "SimulationParams": "cellica.store.params",
    "IngestParams": "cellica.store.params",
})
