"""``python -m triton_kiln`` is the ``kiln`` command."""

from triton_kiln.cli import main

main()
