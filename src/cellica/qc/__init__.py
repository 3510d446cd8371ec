"""Quality control of the plate layout, as tables the report draws: tiles per well, the
controls' offset and pixel intensity per plate position, and each variant's wells in 2-D."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "qc_tables": "cellica.qc.write",
    "qc_paths": "cellica.qc.read",
    "read_qc": "cellica.qc.read",
    "control_intensity": "cellica.qc.layout",
    "plate_wells": "cellica.qc.layout",
    "position_offsets": "cellica.qc.layout",
    "well_layouts": "cellica.qc.layout",
})
