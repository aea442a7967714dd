"""The farm pool's batch methods (``compile``, ``compile_many``, ``as_completed``), over its ``submit``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.compile.request import CompileRequest
from triton_kiln.farm.jobs import longest_first
from triton_kiln.pool.interface import gather
from triton_kiln.settings import Settings


class BatchMethods:
    """What :class:`~kiln.farm.RayCompilePool` offers beyond ``submit``: batches are submitted
    longest guessed compile first (the caller's queue orders them the same way)."""

    settings: Settings

    def submit(
        self, request: CompileRequest, *, timeout_s: float | None = None, priority: float | None = None
    ) -> Future[CompiledArtifact]:
        raise NotImplementedError  # the pool's own

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
        """Compile a batch on the cluster, results in input order (see :meth:`CompilePool.compile_many`)."""
        reqs = list(requests)
        futures: list[Future[CompiledArtifact] | None] = [None] * len(reqs)
        for i in longest_first(reqs):
            futures[i] = self.submit(reqs[i])
        show = self.settings.progress if progress is None else progress
        submitted = [f for f in futures if f is not None]
        return gather(submitted, show=show, description=description, return_exceptions=return_exceptions)

    def as_completed(
        self, requests: Iterable[CompileRequest]
    ) -> Iterator[tuple[CompileRequest, Future[CompiledArtifact]]]:
        """Submit ``requests`` (longest guessed first) and yield ``(request, future)`` as each finishes."""
        reqs = list(requests)
        by_future: dict[Future[CompiledArtifact], list[CompileRequest]] = {}
        for i in longest_first(reqs):
            by_future.setdefault(self.submit(reqs[i]), []).append(reqs[i])
        for future in as_completed(by_future):
            for request in by_future[future]:
                yield request, future
