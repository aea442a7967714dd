"""The names of kiln's keys in Redis: a namespace, a format version, and kiln's own keys.

::

    kiln:r1:artifact:a2:<compile key>        hash {file name: bytes}: one artifact-store entry
    kiln:r1:tuning:s<schema>:<sha256>        string (JSON): one finished tuning run
    kiln:r1:program:p<format>:<sha256>       string (JSON): one program's record (its name hashed)
    kiln:r1:inductor-timings:t1:<sha256>     string (JSON): Inductor's template timings for a key
    kiln:r1:inductor-best-config:b1:<sha256> string (JSON): Inductor's best config of a kernel

``r1`` is this layout's version (:data:`REMOTE_FORMAT`); ``a2`` the artifact entry's format
(:data:`~triton_kiln.artifacts.artifact.ARTIFACT_FORMAT`); ``s<schema>`` the tuning database's schema
version. A kiln that changes any of them reads and writes other names, so two kilns never
misread each other's entries. Everything that decides what a binary is (Triton's version and
key, the target, the options, the kernel's source) is already inside the compile key
(:attr:`CompileRequest.key <triton_kiln.compile.request.CompileRequest.key>`), and everything that
identifies a tuning run (kernel, configs, key values, device, capability, Triton's version)
inside the run's identity, hashed here. One Redis database can hold several teams' kilns
apart with ``KILN_REMOTE_CACHE``'s database number (``redis://host:6379/3``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from triton_kiln.artifacts.artifact import ARTIFACT_FORMAT
from triton_kiln.tuning.schema import SCHEMA_VERSION

NAMESPACE = "kiln"
REMOTE_FORMAT = 1


def artifact_name(key: str) -> str:
    return f"{NAMESPACE}:r{REMOTE_FORMAT}:artifact:a{ARTIFACT_FORMAT}:{key}"


def tuning_name(identity: Mapping[str, str]) -> str:
    """The name of the finished run for ``identity`` (the arguments of ``TuningDatabase.lookup``)."""
    digest = hashlib.sha256(json.dumps(dict(identity), sort_keys=True).encode()).hexdigest()
    return f"{NAMESPACE}:r{REMOTE_FORMAT}:tuning:s{SCHEMA_VERSION}:{digest}"


def program_name(program: str, record_format: int) -> str:
    """The name of ``program``'s record (:mod:`triton_kiln.program.record_file`, ``record_format``)."""
    digest = hashlib.sha256(program.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{NAMESPACE}:r{REMOTE_FORMAT}:program:p{record_format}:{digest}"


def inductor_timings_name(key: str) -> str:
    """The name of Inductor's template timings for ``key`` (:mod:`triton_kiln.remote.inductor_timings`)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{NAMESPACE}:r{REMOTE_FORMAT}:inductor-timings:t1:{digest}"


def inductor_best_config_name(key: str) -> str:
    """The name of Inductor's best config for ``key``, its autotune cache's full key
    (:mod:`triton_kiln.remote.inductor_best_configs`)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{NAMESPACE}:r{REMOTE_FORMAT}:inductor-best-config:b1:{digest}"
