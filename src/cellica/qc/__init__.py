"""Quality control of the plate layout, as tables the report draws: tiles per well, the
controls' offset and pixel intensity per plate position, and each variant's wells in 2-D."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "qc_tables": "cellica.qc.files",
    "qc_paths": "cellica.qc.files",
    "read_qc": "cellica.qc.files",
    "control_intensity": "cellica.qc.layout",
    "plate_wells": "cellica.qc.layout",
    "position_offsets": "cellica.qc.layout",
    "well_layouts": "cellica.qc.layout",
})
