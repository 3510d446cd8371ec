"""Reading YAML in which a key means one thing: a mapping that gives a key twice is an error.

YAML parsers (PyYAML, and so Snakemake's ``--configfile``) keep the last of two equal keys
without a word, so ``n_components: 8`` followed later by ``n_components: 50`` silently runs
with 50. :func:`load_unique` refuses it, naming the file, the key and both lines.
"""

from __future__ import annotations

import os
from typing import Any

from cellica.core.errors import CellicaError


def _unique_loader():
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise CellicaError(f"{self.name}: key {key!r} is given twice in one mapping (lines {seen[key]} and "
                                       f"{line}); YAML would keep the second without a word: keep one")
                seen[key] = line
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def load_unique(path: str | os.PathLike) -> Any:
    """The YAML document in ``path``, refusing a key given twice in any mapping.

    Parameters
    ----------
    path
        A YAML file (a workflow config).

    Returns
    -------
    Any
        What ``yaml.safe_load`` returns.

    Raises
    ------
    CellicaError
        A key given twice, naming the file, the key and both lines.
    """
    import yaml

    with open(path) as fh:
        loader = _unique_loader()(fh)
        loader.name = str(path)
        try:
            return loader.get_single_data()
        except yaml.YAMLError as exc:
            raise CellicaError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        finally:
            loader.dispose()
