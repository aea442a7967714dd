"""``kiln demo``: real kernels compiled through the pool, one of them aborting and one hanging,
so a newcomer sees in half a minute, without a GPU, that a compiler crash costs one config."""

from __future__ import annotations

import sys

import click


@click.command("demo", short_help="Compile real kernels; one aborts, one hangs, the rest go on.")
@click.option(
    "--arch",
    type=int,
    default=90,
    show_default=True,
    help="CUDA compute capability to compile for (no GPU needed), e.g. 80 or 90.",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Compile worker processes [default: KILN_WORKERS, else at most 8].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Seconds before the hanging job is killed [default: KILN_JOB_TIMEOUT_S, else 5]; "
    "the good kernels get kiln's usual limit, at least as long.",
)
def demo_command(arch: int, workers: int | None, timeout_s: float | None) -> None:
    """Compile real kernels through the pool; one aborts, one hangs. Exits 0 when all end as expected."""
    from triton_kiln.demo.run import run_demo
    from triton_kiln.triton_compat import GPUTarget

    ok = run_demo(target=GPUTarget("cuda", arch, 32), workers=workers, timeout_s=timeout_s, echo=click.echo)
    sys.exit(0 if ok else 1)
