"""A compile request that stays pickled until a kiln worker opens it: :class:`SealedRequest`.

A process that compiles nothing itself but hands requests to its pool (the compile farm's node
actor, :mod:`triton_kiln.farm.node_actor`) must not unpickle them: a request's pickle runs code (a
constexpr value's ``__reduce__``, the kernel module's import), and a crash there would take that
long-lived process down with every job it holds. The caller seals the request once::

    caller: CompileRequest --SealedRequest.of--> key, JobInfo (plain values), module, cost, payload
    node:   CompilePool.submit(sealed) --RunJob(payload)--> kiln worker: pickle.loads, compile

so the request is unpickled only in a forked kiln worker, where a crash fails that job alone
(:class:`~triton_kiln.errors.WorkerCrashedError`), as in the caller's own pool.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from triton_kiln.compile.request import CompileRequest, guess_compile_cost
from triton_kiln.errors import JobInfo

_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class SealedRequest:
    """What a pool needs of a request (key, description, module, cost) and its pickle, unopened."""

    key: str
    job: JobInfo  # plain values only: a value of another type is given as its repr
    module: str | None  # the module a worker imports for the kernel (None: rebuilt from source)
    cost: float  # guess_compile_cost(request): the pool's default priority
    payload: bytes  # pickle of the CompileRequest

    @classmethod
    def of(cls, request: CompileRequest) -> SealedRequest:
        """Seal ``request`` (in the caller; raises if it cannot be shipped to another process)."""
        request.spec.check_shippable()
        info = request.info()
        job = JobInfo(
            kernel=info.kernel,
            constexprs=tuple((k, _plain(v)) for k, v in info.constexprs),
            options=tuple((k, _plain(v)) for k, v in info.options),
            key=info.key,
            target=info.target,
        )
        return cls(
            key=request.key,
            job=job,
            module=None if request.spec.by_source else request.spec.module,
            cost=guess_compile_cost(request),
            payload=pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL),
        )

    def info(self) -> JobInfo:
        return self.job

    def label(self) -> str:
        return self.job.label()


def _plain(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else repr(value)
