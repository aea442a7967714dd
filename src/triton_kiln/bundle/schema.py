"""The manifest's schema: every field of ``manifest.json`` checked for type and range at load.

:func:`parse_manifest` turns the manifest's bytes into validated JSON data or raises a
:class:`~triton_kiln.bundle.errors.BundleError` subclass whose message names the field by its path
(``kernels[0].entries[1].config.num_warps: expected a positive integer, got the string 'four'``).
Later code (``format.py``'s records, the runtime, the launcher) relies on these checks and
never sees a ``KeyError``, ``TypeError`` or ``RecursionError`` from a hostile manifest.

What is checked is listed in docs/BUNDLES.md ("Checks on load").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from triton_kiln.artifacts.artifact import LAUNCH_FIELDS
from triton_kiln.bundle.errors import BundleMemberError, BundleMetadataError, BundleSchemaError

BUNDLE_FORMAT = 1
MAX_DEPTH = 32
"""Deepest nesting of objects and lists anywhere in a manifest (kiln writes at most 8)."""

_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"[0-9a-f]{1,128}")
BINARY_PATH = re.compile(r"binaries/[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
FLAGS = ("c", "k", "s", "n", "a")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _fail(path: str, expected: str, value: Any) -> BundleSchemaError:
    return BundleSchemaError(f"{path}: expected {expected}, got {_kind(value)}")


def _obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    return value


def _list(value: Any, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, "a list", value)
    if non_empty and not value:
        raise BundleSchemaError(f"{path}: expected a non-empty list, got an empty one")
    return value


def _field(data: dict[str, Any], name: str, path: str) -> Any:
    if name not in data:
        raise BundleSchemaError(f"{path}: the field {name!r} is missing")
    return data[name]


def _str(value: Any, path: str, pattern: re.Pattern[str] | None = None, what: str = "a string") -> str:
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise _fail(path, what, value)
    return value


def _identifier(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise _fail(path, "a Python identifier", value)
    return value


def _int(value: Any, path: str, minimum: int = 0, *, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise _fail(path, what + (" or null" if nullable else ""), value)
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, "true or false", value)
    return value


def _scalar(value: Any, path: str) -> Any:
    if value is not None and not isinstance(value, bool | int | float | str):
        raise _fail(path, "a string, number, boolean or null", value)
    return value


def _scalar_map(value: Any, path: str) -> dict[str, Any]:
    for name, item in _obj(value, path).items():
        _scalar(item, f"{path}.{name}")
    return value  # type: ignore[no-any-return]


def _depth_ok(data: Any) -> bool:
    """Whether ``data`` nests no deeper than :data:`MAX_DEPTH` (iterative: no recursion limit)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                return False
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return True


def _no_constants(name: str) -> Any:
    raise BundleSchemaError(f"{name} is not a JSON number; kiln writes finite numbers only")


def parse_manifest(raw: bytes) -> dict[str, Any]:
    """Decode and validate ``manifest.json``; returns the data, every field checked."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleSchemaError(f"manifest.json is not valid JSON ({exc})") from None
    except RecursionError:
        raise BundleSchemaError(f"manifest.json nests deeper than {MAX_DEPTH} levels") from None
    if not _depth_ok(data):
        raise BundleSchemaError(f"manifest.json nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict) or "format" not in data:
        raise BundleSchemaError("manifest.json is not a kiln bundle manifest (no 'format' field)")
    version = data["format"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise _fail("format", f"the integer {BUNDLE_FORMAT}", version)
    if version != BUNDLE_FORMAT:
        raise BundleSchemaError(
            f"this is a bundle of format {version!r}; this kiln reads format {BUNDLE_FORMAT}. "
            f"Save the bundle again with this kiln version."
        )
    for name in ("created", "kiln_version", "triton_version"):
        if name in data:
            _str(data[name], name)
    kernels = _list(_field(data, "kernels", "manifest"), "kernels", non_empty=True)
    for i, kernel in enumerate(kernels):
        _kernel(kernel, f"kernels[{i}]")
    return data


def _kernel(value: Any, path: str) -> None:
    kernel = _obj(value, path)
    name = _identifier(_field(kernel, "name", path), f"{path}.name")
    _str(_field(kernel, "kernel_hash", path), f"{path}.kernel_hash")
    params = _list(_field(kernel, "params", path), f"{path}.params")
    names: list[str] = []
    for j, param in enumerate(params):
        where = f"{path}.params[{j}]"
        _obj(param, where)
        names.append(_identifier(_field(param, "name", where), f"{where}.name"))
        if _field(param, "flag", where) not in FLAGS:
            raise _fail(f"{where}.flag", f"one of {', '.join(FLAGS)}", param["flag"])
        if "default" in param:
            _scalar(param["default"], f"{where}.default")
    keys = {p["name"] for p in params if p["flag"] == "k"}
    for j, entry in enumerate(_list(_field(kernel, "entries", path), f"{path}.entries")):
        _entry(entry, f"{path}.entries[{j}]", name, names, keys)


def _entry(value: Any, path: str, kernel: str, params: list[str], keys: set[str]) -> None:
    entry = _obj(value, path)
    key_values = _scalar_map(_field(entry, "key_values", path), f"{path}.key_values")
    if not keys <= set(key_values) <= set(params):
        raise BundleSchemaError(
            f"{path}.key_values: names {sorted(key_values)}; expected every tuning-key parameter "
            f"{sorted(keys)} and parameters of the kernel only"
        )
    _config(_field(entry, "config", path), f"{path}.config")
    _str(_field(entry, "artifact_key", path), f"{path}.artifact_key", _KEY, "a lowercase hex string")
    binary = _field(entry, "binary", path)
    if not isinstance(binary, str) or not BINARY_PATH.fullmatch(binary) or ".." in binary:
        raise BundleMemberError(
            f"{path}.binary: {_kind(binary)} is not a file name inside the bundle's binaries/ directory "
            f"(binaries/<name>, no '..', no absolute path); kiln reads nothing outside the bundle"
        )
    _str(_field(entry, "binary_sha256", path), f"{path}.binary_sha256", _HEX64, "64 lowercase hex digits")
    _metadata(_field(entry, "metadata", path), f"{path}.metadata", kernel)
    args = _list(_field(entry, "args", path), f"{path}.args")
    for k, arg in enumerate(args):
        _arg(arg, f"{path}.args[{k}]")
    if [a["name"] for a in args] != params:
        raise BundleSchemaError(
            f"{path}.args: names {[a['name'] for a in args]}, but the kernel's parameters are {params}"
        )
    if entry.get("tuning") is not None:
        _obj(entry["tuning"], f"{path}.tuning")
    if "source" in entry:
        _str(entry["source"], f"{path}.source")


def _config(value: Any, path: str) -> None:
    config = _obj(value, path)
    _scalar_map(_field(config, "kwargs", path), f"{path}.kwargs")
    _int(_field(config, "num_warps", path), f"{path}.num_warps", 1)
    _int(_field(config, "num_stages", path), f"{path}.num_stages", 0)
    _int(_field(config, "num_ctas", path), f"{path}.num_ctas", 1)
    _int(config.get("maxnreg"), f"{path}.maxnreg", 1, nullable=True)


def _target(value: Any, path: str) -> None:
    target = _obj(value, path)
    if _field(target, "backend", path) != "cuda":
        raise _fail(f"{path}.backend", "'cuda' (kiln launches CUDA binaries only)", target["backend"])
    _int(_field(target, "arch", path), f"{path}.arch", 1)
    _int(_field(target, "warp_size", path), f"{path}.warp_size", 1)


_METADATA_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "name": _identifier,
    "num_warps": lambda v, p: _int(v, p, 1),
    "num_ctas": lambda v, p: _int(v, p, 1),
    "shared": lambda v, p: _int(v, p, 0),
    "target": _target,
    "global_scratch_size": lambda v, p: _int(v, p, 0),
    "global_scratch_align": lambda v, p: _int(v, p, 1),
    "profile_scratch_size": lambda v, p: _int(v, p, 0),
    "profile_scratch_align": lambda v, p: _int(v, p, 1),
    "launch_cooperative_grid": _bool,
    "launch_pdl": _bool,
}
assert set(_METADATA_CHECKS) == set(LAUNCH_FIELDS), "a launch field has no schema check"


def _metadata(value: Any, path: str, kernel: str) -> None:
    metadata = _obj(value, path)
    for name in LAUNCH_FIELDS:
        if name not in metadata:
            raise BundleMetadataError(name, f"{path} ({kernel})")
        _METADATA_CHECKS[name](metadata[name], f"{path}.{name}")
    if "ptx_version" in metadata:
        _int(metadata["ptx_version"], f"{path}.ptx_version", 0, nullable=True)


def _arg(value: Any, path: str) -> None:
    arg = _obj(value, path)
    _identifier(_field(arg, "name", path), f"{path}.name")
    kind = _str(_field(arg, "type", path), f"{path}.type")
    if kind == "constexpr":
        _scalar(_field(arg, "value", path), f"{path}.value")
    if "divisible_16" in arg:
        _bool(arg["divisible_16"], f"{path}.divisible_16")
