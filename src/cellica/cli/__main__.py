"""``python -m cellica.cli``: the ``cellica`` command."""

from cellica.cli.app import run

run()
