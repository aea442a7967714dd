"""What crosses Ray's object store between a node actor and the caller, and its checks.

A node actor answers with plain data only, built here and read back here::

    node actor (node_actor.py)                            caller (pool.py)
    artifact --artifact_reply--> {"ok": True, key, name,  --read_reply--> CompiledArtifact, verified:
                                  binary, metadata_json,     the key is the one asked for, the
                                  asm, compile_s, sha256}    binary's sha256 matches, the launch
                                                             metadata is complete (CompiledArtifact)
    exception --error_reply----> {"ok": False, error:    --read_reply--> the job's exception
                                  RemoteError}               (triton_kiln.pool.failures' one codec)

The artifact is never pickled as an object: a verified reply is rebuilt field by field, so a
actor can send back nothing but bytes, strings and numbers the caller checks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from triton_kiln.artifacts.artifact import CompiledArtifact
from triton_kiln.errors import ArtifactError, JobFailure, JobInfo, RemoteCompileError
from triton_kiln.pool.failures import RemoteError

Reply = dict[str, Any]


def artifact_reply(artifact: CompiledArtifact, node: str) -> Reply:
    """The reply of a call whose compile succeeded (in the node actor)."""
    return {
        "ok": True,
        "node": node,
        "key": artifact.key,
        "name": artifact.name,
        "binary": artifact.binary,
        "binary_ext": artifact.binary_ext,
        "binary_sha256": artifact.binary_sha256,
        "metadata_json": artifact.metadata_json(),
        "asm": dict(artifact.asm),
        "compile_s": artifact.compile_s,
    }


def error_reply(exc: BaseException, seconds: float, node: str) -> Reply:
    """The reply of a call whose compile failed (kiln's typed error or the job's own exception)."""
    return {"ok": False, "node": node, "error": RemoteError.capture(exc), "seconds": seconds}


def read_reply(reply: object, key: str, job: JobInfo) -> CompiledArtifact | BaseException:
    """The artifact (verified) or exception a node actor's ``reply`` stands for (in the caller).

    A reply that fails a check is an :class:`~triton_kiln.errors.ArtifactError` saying which: it is
    never stored nor returned as an artifact.
    """
    if not isinstance(reply, Mapping) or not isinstance(reply.get("ok"), bool):
        return ArtifactError(f"{job.label()}: the node actor sent back {type(reply).__name__}, not a reply")
    if not reply["ok"]:
        error = reply.get("error")
        if not isinstance(error, RemoteError):
            return ArtifactError(f"{job.label()}: the node actor's error reply holds no error")
        exc = error.rebuild(job, float(reply.get("seconds", 0.0)), ())
        if isinstance(exc, JobFailure):
            # kiln's failure, told by the node about the sealed request: told again about the
            # caller's own (its constexprs as they are, not as their reprs)
            cls, args = exc.__reduce__()[:2]
            exc = cls(job, *args[1:])
        if isinstance(exc, RemoteCompileError):
            return exc
        if exc.__cause__ is not None and type(exc).__module__ == "triton_kiln.errors":
            exc.__cause__ = None  # kiln's own failure: its message says everything; no farm traceback
        return exc
    try:
        return _artifact(reply, key)
    except (ArtifactError, KeyError, TypeError, ValueError) as exc:
        return ArtifactError(
            f"{job.label()}: the artifact sent back by Ray node {reply.get('node', '?')} was rejected "
            f"({type(exc).__name__}: {exc}); nothing was stored"
        )


def _artifact(reply: Mapping[str, Any], key: str) -> CompiledArtifact:
    if reply["key"] != key:
        raise ArtifactError(f"it is for key {str(reply['key'])[:12]}..., not {key[:12]}...")
    binary = reply["binary"]
    if not isinstance(binary, bytes):
        raise ArtifactError("its binary is not bytes")
    if hashlib.sha256(binary).hexdigest() != reply["binary_sha256"]:
        raise ArtifactError("binary checksum mismatch")
    metadata = json.loads(reply["metadata_json"])
    if not isinstance(metadata, dict):
        raise ArtifactError("its metadata is not a JSON object")
    asm = reply["asm"]
    if not isinstance(asm, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in asm.items()
    ):
        raise ArtifactError("its text IRs are not a mapping of strings")
    for field_name in ("name", "binary_ext"):
        if not isinstance(reply[field_name], str):
            raise ArtifactError(f"its {field_name} is not a string")
    return CompiledArtifact(  # checks every launch field and the entry name
        key=key,
        name=reply["name"],
        binary=binary,
        binary_ext=reply["binary_ext"],
        metadata=metadata,
        asm=asm,
        compile_s=float(reply["compile_s"]),
    )
