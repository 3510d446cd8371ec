"""A package's public names, imported on first use (PEP 562).

``from cellica.transform import make_transform`` then costs what that module costs, and
``import cellica.transform.params`` (which every CLI call and the run plan make) never
pulls in torch, LightGBM or scanpy through a package ``__init__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]],
                                                                list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``: each of ``names``
    (name -> ``module`` or ``module:attribute``) is imported from its module when first asked
    for. A public name never equals a submodule's (once imported, the submodule would shadow
    it): ``ingest_images`` is ``cellica.store.ingest:ingest``."""

    def __getattr__(name: str) -> object:
        if name in names:
            module, _, attribute = names[name].partition(":")
            return getattr(importlib.import_module(module), attribute or name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__, sorted(names)
