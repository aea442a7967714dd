"""What a compile pool offers its callers, as a :class:`typing.Protocol`, and the batch methods
both pools build on their own ``submit``.

Both :class:`triton_kiln.pool.CompilePool` (processes forked on this machine) and
:class:`triton_kiln.farm.RayCompilePool` (Ray tasks on a cluster) satisfy :class:`CompileService`, so
code that only submits requests and reads futures (the ``kiln compile`` command, a benchmark)
takes either. Their ``compile``, ``compile_many`` and ``as_completed`` are one code,
:class:`BatchMethods`; only the order a batch is submitted in differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest

if TYPE_CHECKING:
    from triton_kiln.settings import Settings


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


class BatchMethods:
    """``compile``, ``compile_many`` and ``as_completed`` over a pool's own ``submit``."""

    settings: Settings

    def submit(
        self, request: CompileRequest, *, timeout_s: float | None = None, priority: float | None = None
    ) -> Future[CompiledArtifact]:
        raise NotImplementedError  # the pool's own

    def submit_order(self, requests: list[CompileRequest]) -> Iterable[int]:
        """The order a batch's requests are submitted in (indices): as given. The local pool's
        queue orders its jobs itself; the farm submits the longest guessed compiles first."""
        return range(len(requests))

    def compile(self, request: CompileRequest, *, timeout_s: float | None = None) -> CompiledArtifact:
        """Compile one request and wait for it (raises what the job raised)."""
        return self.submit(request, timeout_s=timeout_s).result()

    def compile_many(
        self,
        requests: Iterable[CompileRequest],
        *,
        return_exceptions: bool = True,
        progress: bool | None = None,
        description: str = "compiling",
    ) -> list[CompiledArtifact | BaseException]:
        """Compile a batch in parallel, in input order, with a progress bar on a terminal.

        With ``return_exceptions`` (the default) a failed job's exception takes its place in
        the list; otherwise the first failure is raised once every job has finished.
        """
        reqs = list(requests)
        futures: list[Future[CompiledArtifact] | None] = [None] * len(reqs)
        for i in self.submit_order(reqs):
            futures[i] = self.submit(reqs[i])
        show = self.settings.progress if progress is None else progress
        submitted = [f for f in futures if f is not None]
        return gather(submitted, show=show, description=description, return_exceptions=return_exceptions)

    def as_completed(
        self, requests: Iterable[CompileRequest]
    ) -> Iterator[tuple[CompileRequest, Future[CompiledArtifact]]]:
        """Submit ``requests`` and yield ``(request, future)`` pairs as each finishes."""
        reqs = list(requests)
        by_future: dict[Future[CompiledArtifact], list[CompileRequest]] = {}
        for i in self.submit_order(reqs):
            by_future.setdefault(self.submit(reqs[i]), []).append(reqs[i])
        for future in as_completed(by_future):
            for request in by_future[future]:
                yield request, future


def gather(
    futures: list[Future[CompiledArtifact]], *, show: bool | None, description: str, return_exceptions: bool
) -> list[CompiledArtifact | BaseException]:
    """Wait for ``futures`` (one per request; identical requests may share one), with a progress
    bar when ``show`` (``None``: on a terminal); their results in input order, a failed job's
    exception in its place. With ``return_exceptions`` false, the first failure is raised once
    every job has finished."""
    from triton_kiln.progress_bar import progress_bar  # tqdm, imported when a batch shows a bar

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
