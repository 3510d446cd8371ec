"""Stage 1, the tile store: simulate a screen or ingest image files into a checksummed zarr v3
store (:class:`cellica.store.tilestore.TileStore`). The only package that imports zarr."""
