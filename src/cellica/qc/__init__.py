"""Quality control of the plate layout, as tables the report draws: tiles per well, the
controls' offset and pixel intensity per plate position, and each variant's wells in 2-D."""

from cellica.qc.files import qc_paths, qc_tables, read_qc
from cellica.qc.layout import control_intensity, plate_wells, position_offsets, well_layouts

__all__ = ["control_intensity", "plate_wells", "position_offsets", "qc_paths", "qc_tables", "read_qc", "well_layouts"]
