"""kiln's command line (``kiln --help``)."""

from __future__ import annotations

import os
import sys

import click


@click.group()
@click.version_option(package_name="kiln")
def main() -> None:
    """kiln: crash-proof, parallel compilation of Triton kernels."""


@main.command()
@click.option(
    "--arch", default=90, show_default=True, help="CUDA compute capability to compile for (no GPU needed)."
)
@click.option(
    "--workers", default=min(8, os.cpu_count() or 1), show_default=True, help="Compile worker processes."
)
@click.option(
    "--timeout", "timeout_s", default=5.0, show_default=True, help="Seconds before a compile counts as hung."
)
def demo(arch: int, workers: int, timeout_s: float) -> None:
    """Compile real kernels through the pool; one aborts, one hangs. Exits 0 when all end as expected."""
    from kiln.demo.run import run_demo
    from kiln.triton_compat import GPUTarget

    ok = run_demo(target=GPUTarget("cuda", arch, 32), workers=workers, timeout_s=timeout_s, echo=click.echo)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":  # pragma: no cover
    main()
