"""What a compile pool offers its callers, as a :class:`typing.Protocol`.

Both :class:`kiln.pool.CompilePool` (processes forked on this machine) and
:class:`kiln.farm.RayCompilePool` (Ray tasks on a cluster) satisfy :class:`CompileService`, so
code that only submits requests and reads futures (the ``kiln compile`` command, a benchmark)
takes either.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest


@runtime_checkable
class CompileService(Protocol):
    """A pool of compile workers: submit requests, get futures of artifacts, shut down."""

    def submit(
        self, request: CompileRequest, *, timeout_s: float | None = None, priority: float | None = None
    ) -> Future[CompiledArtifact]: ...

    def compile(self, request: CompileRequest, *, timeout_s: float | None = None) -> CompiledArtifact: ...

    def compile_many(
        self,
        requests: Iterable[CompileRequest],
        *,
        return_exceptions: bool = True,
        progress: bool | None = None,
        description: str = "compiling",
    ) -> list[CompiledArtifact | BaseException]: ...

    def as_completed(
        self, requests: Iterable[CompileRequest]
    ) -> Iterator[tuple[CompileRequest, Future[CompiledArtifact]]]: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


def gather(
    futures: list[Future[CompiledArtifact]], *, show: bool | None, description: str, return_exceptions: bool
) -> list[CompiledArtifact | BaseException]:
    """Wait for ``futures`` (one per request; identical requests may share one), with a progress
    bar when ``show`` (``None``: on a terminal); their results in input order, a failed job's
    exception in its place. With ``return_exceptions`` false, the first failure is raised once
    every job has finished."""
    from triton_kiln.progress import progress_bar  # tqdm, imported when a batch shows a bar

    positions: dict[Future[CompiledArtifact], list[int]] = {}
    for i, future in enumerate(futures):
        positions.setdefault(future, []).append(i)
    results: list[CompiledArtifact | BaseException | None] = [None] * len(futures)
    with progress_bar(total=len(futures), description=description, enabled=show) as bar:
        for done in as_completed(positions):
            exc = done.exception()
            for i in positions[done]:
                results[i] = exc if exc is not None else done.result()
                bar.advance(failed=exc is not None)
    if not return_exceptions:
        for item in results:
            if isinstance(item, BaseException):
                raise item
    return [r for r in results if r is not None]


if TYPE_CHECKING:
    from triton_kiln.pool.pool import CompilePool

    def _is_a_compile_service(pool: CompilePool) -> CompileService:
        return pool  # mypy checks that CompilePool satisfies the protocol
