"""The pool's failure codec and messages: one way a worker's exception becomes the caller's,
typed records on every channel, and the one out-of-resources test."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import pytest
import triton
from triton.compiler.errors import CompilationError

import triton_kiln as kiln
from triton_kiln.errors import JobInfo, RemoteCompileError, RemoteTraceback, is_out_of_resources
from triton_kiln.pool import protocol
from triton_kiln.pool.failures import RemoteError

SRC = Path(kiln.__file__).parent
JOB = JobInfo(kernel="k", constexprs=(("BLOCK", 64),), options=(), key="0" * 64, target="cuda:90")


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_out_of_resources_is_recognised_by_class_and_subclass() -> None:
    oor = triton.runtime.errors.OutOfResources(200000, 232448 // 2, "shared memory")
    assert is_out_of_resources(oor)

    class Narrower(triton.runtime.errors.OutOfResources):
        pass

    assert is_out_of_resources(Narrower(1, 0, "threads"))
    assert not is_out_of_resources(RuntimeError("out of resources"))
    assert is_out_of_resources(triton.runtime.errors.PTXASError("ptxas failed"))  # ptxas refused it


def test_out_of_resources_survives_the_codec() -> None:
    oor = _raised(triton.runtime.errors.OutOfResources(200000, 116224, "shared memory"))
    back = RemoteError.capture(oor).rebuild(JOB, 0.5, ())
    assert type(back) is triton.runtime.errors.OutOfResources
    assert is_out_of_resources(back)
    assert isinstance(back.__cause__, RemoteTraceback)


def test_codec_keeps_an_exception_whose_init_takes_other_arguments() -> None:
    # Triton's CompilationError takes (src, node, error_message): rebuilt without __init__.
    node = ast.parse("x = 1").body[0]
    exc = _raised(CompilationError("x = 1", node, "bad constexpr"))
    error = RemoteError.capture(exc)
    assert error.blob is not None
    assert error.type_name == "triton.compiler.errors.CompilationError"
    back = error.rebuild(JOB, 1.0, ("stderr line",))
    assert type(back) is CompilationError
    assert "bad constexpr" in str(back)
    assert "Traceback" in str(back.__cause__)


def test_codec_text_only_degrades_to_remote_compile_error() -> None:
    exc = _raised(ValueError("the result would not pickle"))
    error = RemoteError.capture(exc, portable=False)
    assert error.blob is None
    back = error.rebuild(JOB, 2.0, ("last line",))
    assert isinstance(back, RemoteCompileError)
    assert back.exc_type == "builtins.ValueError"
    assert back.exc_message == "the result would not pickle"
    assert back.stderr_tail == ("last line",)
    assert "Traceback" in back.remote_traceback
    assert isinstance(pickle.loads(pickle.dumps(back)), RemoteCompileError)


MESSAGES = [
    protocol.ZygoteInit(["/x"], "/", None, ("cuda", 90, 32), ["m"]),
    protocol.Fork(3),
    protocol.Kill(1234),
    protocol.Preload(["m"]),
    protocol.Ready({"pid": 1, "preloaded": {}}),
    protocol.Preloaded({"m": None}),
    protocol.Forked(3, 1234),
    protocol.ForkFailed(3, "threads"),
    protocol.Exited(1234, -6),
    protocol.RunJob(1, b"request"),
    protocol.Hello(1234),
    protocol.JobFailed(1, RemoteError(None, "builtins.ValueError", "x", "tb"), 0.1),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_messages_are_frozen_records_that_survive_the_wire(message: object) -> None:
    assert dataclasses.is_dataclass(message)
    assert type(message).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert protocol.unpack(protocol.pack(message)) == message  # type: ignore[arg-type]


def test_every_message_kind_is_covered_above() -> None:
    kinds = {
        name
        for name, value in vars(protocol).items()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == protocol.__name__
    }
    assert kinds == {type(m).__name__ for m in MESSAGES} | {
        "JobDone"
    }  # JobDone: real artifacts, tested by every compile


@pytest.mark.parametrize("module", ["pool/zygote.py", "pool/worker.py", "pool/workers.py", "pool/manager.py"])
def test_no_positional_tuple_messages_remain(module: str) -> None:
    """Messages are sent as records: no ``send((KIND, ...))``-style tuples, no ``message[0]``."""
    text = (SRC / module).read_text()
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "message"
        ):
            raise AssertionError(f"{module}:{node.lineno} reads a message by position")
