"""``python -m kiln`` is the ``kiln`` command."""

from kiln.cli import main

main()
