"""Conformance corpus: every ``@triton.jit`` kernel of a pinned set of public libraries
decorates under ``kiln.install()`` and compiles through kiln's pool to Triton's own binary.

For each library of ``bench/corpus_calls.py`` (pinned versions; ``tests/corpus-requirements.txt``)
the modules that hold Triton kernels are imported after ``kiln.install()``, and every
``JITFunction`` they hold (bare, or under ``triton.autotune`` / ``triton.heuristics``) is
collected. ``@triton.jit`` helpers (functions that return a value, or that other kernels of the
library call) are listed but not compiled on their own: they compile inside their callers.

For each kernel, a call is derived the way the library makes it: the first autotune config's
meta-parameters and compile options, the heuristics evaluated on the call's arguments, the
defaults, then the library's table; tensors are the library's element type (index tensors
``i32``/``i64``), scalars ``i32`` or ``fp32`` by name. The kernel is then compiled twice for
``GPUTarget("cuda", 90, 32)``: by Triton itself (``triton.compile`` in worker processes, each on
a Triton cache of its own) and by kiln's ``CompilePool`` (on a fresh kiln cache). A row is

* ``identical``: both compiled, and kiln's cubin is byte for byte Triton's;
* ``triton_fails``: Triton's own compile raises (its error is listed; kiln's outcome noted);
* ``kiln_fails``: Triton compiles and kiln fails or gives another binary (the defect to fix).

Usage::

    python bench/corpus.py                      # the whole corpus -> bench/results/corpus-cpu2.json
    python bench/corpus.py --library fla-core   # one library
    python bench/corpus.py --sample             # the fixed sample CI compiles
    python bench/corpus.py --jobs 2 --out x.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import corpus_calls  # noqa: E402
from corpus_calls import FLOAT_SCALARS, INDEX_POINTERS, LIBRARIES, Library  # noqa: E402

DATE = "2026-11-24"
DEFAULT_OUT = HERE / "results" / "corpus-cpu2.json"
_SKIP_PARTS = re.compile(
    r"(^|\.)(tests?|testing|benchmarks?|bench|examples?|_?test_\w*|conftest|_ascend|triton_ascend)(\.|$)"
)
_KERNEL_TEXT = re.compile(r"@(triton\.)?jit\b|triton\.jit\(|@(triton\.)?autotune\b")

# -- discovery ------------------------------------------------------------------------------


def installed_version(lib: Library) -> str | None:
    try:
        return importlib.metadata.version(lib.name)
    except importlib.metadata.PackageNotFoundError:
        return None


def kernel_modules(lib: Library) -> list[str]:
    """The library's modules whose source holds a Triton kernel (tests and benchmarks left out)."""
    found: list[str] = []
    for package in lib.packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for root_dir in spec.submodule_search_locations:
            root = Path(root_dir)
            for path in sorted(root.rglob("*.py")):
                rel = path.relative_to(root).with_suffix("")
                parts = [package, *rel.parts]
                if parts[-1] == "__init__":
                    parts.pop()
                name = ".".join(parts)
                if _SKIP_PARTS.search(name) or name.startswith(lib.exclude):
                    continue
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if _KERNEL_TEXT.search(text):
                    found.append(name)
    return found


@dataclass
class Found:
    """One JIT function found in a library, with the wrappers the library put on it."""

    library: str
    module: str  # a module that holds it
    attr: str  # its name there
    qualname: str  # where it is defined: module.function
    jit: Any = field(repr=False)
    configs: list[Any] = field(default_factory=list, repr=False)  # triton.Config, first is used
    heuristics: list[dict[str, Any]] = field(default_factory=list, repr=False)
    wrappers: list[str] = field(default_factory=list)  # class names, outermost first
    helper: str = ""  # why it is a helper, not a kernel


def _unwrap(value: Any) -> tuple[Any, list[Any], list[dict[str, Any]], list[str]] | None:
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction, KernelInterface

    configs: list[Any] = []
    heuristics: list[dict[str, Any]] = []
    wrappers: list[str] = []
    obj = value
    while isinstance(obj, KernelInterface) and not isinstance(obj, JITFunction):
        cls = type(obj)
        wrappers.append(f"{cls.__module__}.{cls.__qualname__}")
        if isinstance(obj, Autotuner):
            configs = configs or list(obj.configs)
        elif isinstance(obj, Heuristics):
            heuristics.insert(0, dict(obj.values))
        obj = getattr(obj, "fn", None)
    if not isinstance(obj, JITFunction):
        return None
    return obj, configs, heuristics, wrappers


def _language(jit: Any) -> str:
    from triton_kiln.compile import gluon

    try:
        return str(gluon.language_of(jit))
    except Exception:
        return "unknown"


def discover(
    libs: Iterable[Library], only: set[str] | None = None
) -> tuple[list[Found], dict[str, dict[str, str]]]:
    """Import every kernel module of ``libs`` after ``kiln.install()``; the kernels they hold.

    Returns the kernels and, per library, the modules that failed to import (with the error).
    """
    import triton_kiln as kiln

    kiln.install()
    found: dict[int, Found] = {}
    import_errors: dict[str, dict[str, str]] = {}
    for lib in libs:
        errors = import_errors.setdefault(lib.name, {})
        for name in kernel_modules(lib):
            if only is not None and name not in only:
                continue
            try:
                module = importlib.import_module(name)
            except BaseException as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            for attr, value in sorted(vars(module).items()):
                unwrapped = _unwrap(value)
                if unwrapped is None:
                    continue
                jit, configs, heuristics, wrappers = unwrapped
                if _language(jit) != "triton":
                    continue
                qualname = f"{jit.fn.__module__}.{jit.fn.__qualname__}"
                if not qualname.startswith(lib.packages):
                    continue  # imported from another library (e.g. fla's use of Triton's own)
                entry = found.get(id(jit))
                if entry is None or (not entry.wrappers and wrappers):
                    # keep the most wrapped reference (the one the library launches)
                    found[id(jit)] = Found(lib.name, name, attr, qualname, jit, configs, heuristics, wrappers)
    kernels = sorted(found.values(), key=lambda f: (f.library, f.qualname))
    _mark_helpers(kernels)
    return kernels, import_errors


def _source_tree(jit: Any) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(textwrap.dedent(jit.src))
    except (SyntaxError, AttributeError, TypeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            return node
    return None


def _called_jit(jit: Any, tree: ast.FunctionDef) -> Iterator[Any]:
    """The JIT functions that ``jit``'s body calls (by global name or module attribute)."""
    from triton.runtime.jit import JITFunction

    globals_ = jit.fn.__globals__
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        target: Any = None
        if isinstance(func, ast.Name):
            target = globals_.get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = getattr(globals_.get(func.value.id), func.attr, None)
        if isinstance(target, JITFunction):
            yield target


def _mark_helpers(kernels: list[Found]) -> None:
    called: set[int] = set()
    trees = {id(k.jit): _source_tree(k.jit) for k in kernels}
    for k in kernels:
        tree = trees[id(k.jit)]
        if tree is not None:
            called.update(id(c) for c in _called_jit(k.jit, tree) if c is not k.jit)
    for k in kernels:
        tree = trees[id(k.jit)]
        if k.wrappers:
            continue  # autotuned or heuristics-wrapped: launched by the library
        if tree is not None and any(
            isinstance(n, ast.Return) and n.value is not None for n in ast.walk(tree)
        ):
            k.helper = "returns a value: a @triton.jit helper, compiled inside its callers"
        elif id(k.jit) in called:
            k.helper = "called by other kernels of the library: compiled inside its callers"


# -- deriving a call ------------------------------------------------------------------------

_LOADS = {
    "load",
    "store",
    "atomic_add",
    "atomic_max",
    "atomic_min",
    "atomic_cas",
    "atomic_xchg",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "make_block_ptr",
    "make_tensor_descriptor",
    "prefetch",
}


def _base_names(expr: ast.expr) -> set[str]:
    """Names that may be the pointer in a pointer expression (``p + off``, ``p if c else q``)."""
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        # ``ptr + off``: the pointer is on the left, unless the left is arithmetic (``i * s + ptr``)
        if (
            isinstance(expr.op, ast.Add)
            and isinstance(expr.left, ast.BinOp)
            and not isinstance(expr.left.op, (ast.Add, ast.Sub))
        ):
            return _base_names(expr.right)
        return _base_names(expr.left)
    if isinstance(expr, ast.IfExp):
        return _base_names(expr.body) | _base_names(expr.orelse)
    if isinstance(expr, ast.Subscript):
        return _base_names(expr.value)
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in {"to", "multiple_of"}
    ):
        inner = expr.func.value if expr.func.attr == "to" else (expr.args[0] if expr.args else None)
        return _base_names(inner) if inner is not None else set()
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in {"advance"}:
        return _base_names(expr.args[0]) if expr.args else set()
    return set()


_POINTER_CACHE: dict[int, set[str]] = {}


def pointer_params(jit: Any, depth: int = 0) -> set[str]:
    """Parameters of ``jit`` that its body uses as pointers (loads, stores, block pointers,
    ``.dtype.element_ty``, or passed on as a pointer to a JIT helper)."""
    cached = _POINTER_CACHE.get(id(jit))
    if cached is not None:
        return cached
    tree = _source_tree(jit)
    params = [p.name for p in jit.params]
    if tree is None:
        return set()
    _POINTER_CACHE[id(jit)] = set()  # recursion guard
    globals_ = jit.fn.__globals__
    pointers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            fname = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if fname in _LOADS:
                first: ast.expr | None = node.args[0] if node.args else None
                for kw in node.keywords:
                    if kw.arg in {"pointer", "base", "ptr"}:
                        first = kw.value
                if first is not None:
                    pointers |= _base_names(first)
            callee: Any = None
            if isinstance(func, ast.Name):
                callee = globals_.get(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                callee = getattr(globals_.get(func.value.id), func.attr, None)
            if callee is not None and hasattr(callee, "params") and hasattr(callee, "src") and depth < 4:
                callee_ptrs = pointer_params(callee, depth + 1)
                callee_names = [p.name for p in callee.params]
                for i, arg in enumerate(node.args):
                    if i < len(callee_names) and callee_names[i] in callee_ptrs:
                        pointers |= _base_names(arg)
                for kw in node.keywords:
                    if kw.arg in callee_ptrs:
                        pointers |= _base_names(kw.value)
        elif isinstance(node, ast.Attribute) and node.attr in {"element_ty", "dtype"}:
            inner = node.value
            if isinstance(inner, ast.Attribute) and inner.attr in {"dtype", "type"}:
                inner = inner.value
            if isinstance(inner, ast.Name) and node.attr == "element_ty":
                pointers.add(inner.id)
    # Propagate back through assignments: ``p = base + off`` makes ``base`` a pointer.
    assigns: list[tuple[set[str], ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
            assigns.append((targets, node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigns.append(({node.target.id}, node.value))
    changed = True
    while changed:
        changed = False
        for targets, value in assigns:
            if targets & pointers:
                new = _base_names(value) - pointers
                if new:
                    pointers |= new
                    changed = True
    result = pointers & set(params)
    _POINTER_CACHE[id(jit)] = result
    return result


@dataclass
class Call:
    """A derived call: Triton's signature, constexprs and compile options."""

    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    notes: list[str] = field(default_factory=list)


class Underivable(Exception):
    """No call could be derived for a kernel."""


_BOOL_NAME = re.compile(
    r"^(HAS|USE|IS|ENABLE|RETURN|SAVE|STORE|OUTPUT|EVEN|FUSE|FUSED|COMPUTE|WITH|APPLY|NEED|DO|INPLACE|"
    r"IN_PLACE|REVERSE|CAUSAL|TRAINING|HEAD_FIRST|TRANSPOSE|RECOMPUTE|ADD|NORM|SCALE|BIAS|RESIDUAL|"
    r"PRE|POST|LOAD|WRITE|STABLE|ATOMIC|CHECK|MASK|ONE|SHARED|SINGLE|EXCLUSIVE)(_\w*)?$",
    re.I,
)


def _guess_constexpr(name: str, lib: Library) -> Any:
    import triton.language as tl

    if name in lib.constexprs:
        return lib.constexprs[name]
    if "dtype" in name.lower() or name.lower().endswith("_ty"):
        return tl.float32
    if re.match(FLOAT_SCALARS, name):
        return 0.5
    if _BOOL_NAME.match(name):
        return False
    return 64


def _fake_args(jit: Any, pointers: set[str], lib: Library, constexprs: dict[str, Any]) -> dict[str, Any]:
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    args: dict[str, Any] = {}
    for p in jit.params:
        if p.name in constexprs:
            args[p.name] = constexprs[p.name]
        elif p.name in pointers:
            dtype = (
                torch.int32
                if re.match(INDEX_POINTERS, p.name)
                else dtypes.get(lib.pointer_dtype, torch.float32)
            )
            args[p.name] = torch.empty(16, dtype=dtype)
        elif re.match(FLOAT_SCALARS, p.name):
            args[p.name] = 0.5
        else:
            args[p.name] = 256
    return args


def _override(found: Found, lib: Library) -> dict[str, Any]:
    short = found.qualname.rsplit(".", 1)[-1]
    merged: dict[str, Any] = {}
    for key, values in lib.overrides.items():
        if key.endswith(".") and found.qualname.startswith(key):  # a module's kernels
            merged.update(values)
    merged.update(lib.overrides.get(short, {}))
    merged.update(lib.overrides.get(found.qualname, {}))
    return merged


def derive_call(found: Found, lib: Library) -> Call:
    """The library's call of ``found``: signature, constexprs and options for one config."""
    jit = found.jit
    overrides = _override(found, lib)
    pointers = pointer_params(jit)
    notes: list[str] = []
    constexprs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    config = found.configs[0] if found.configs else None
    if config is not None:
        constexprs.update(config.kwargs)
        for opt in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
            value = getattr(config, opt, None)
            if value is not None and not (opt == "num_ctas" and value == 1):
                options[opt] = value
        notes.append(f"config 1 of {len(found.configs)}")
    for name, value in overrides.items():
        if isinstance(value, tuple) and value and value[0] == "constexpr":
            constexprs[name] = value[1]
    params = {p.name: p for p in jit.params}
    constexpr_params = [p.name for p in jit.params if p.is_constexpr]
    by_rule = {name for table in found.heuristics for name in table}
    for name, value in lib.constexprs.items():
        if name in params and name not in constexprs and name not in by_rule:
            constexprs[name] = value

    def fill(names: Iterable[str]) -> None:
        for name in names:
            if name in constexprs:
                continue
            param = params[name]
            if param.has_default:
                constexprs[name] = param.default
            else:
                constexprs[name] = _guess_constexpr(name, lib)
                notes.append(f"{name}={constexprs[name]!r} guessed")

    fill(n for n in constexpr_params if n not in by_rule)
    # Heuristics (innermost last) compute meta-parameters from the call's arguments.
    for table in found.heuristics:
        for name, rule in table.items():
            if name in constexprs:
                continue
            args = _fake_args(jit, pointers, lib, constexprs)
            try:
                value = rule(args)
            except Exception as exc:
                notes.append(f"heuristic {name}: {type(exc).__name__}")
                continue
            if hasattr(value, "item") and callable(value.item):
                value = value.item()
            constexprs[name] = value
    fill(constexpr_params)
    # Only the kernel's constexprs are meta-parameters (an autotune config may name others:
    # then the library passes them as plain arguments).
    extra = set(constexprs) - set(constexpr_params)
    signature: dict[str, str] = {}
    for p in jit.params:
        if p.name in constexpr_params:
            continue
        override = overrides.get(p.name)
        if override is None:
            override = next((t for pattern, t in lib.param_types.items() if re.match(pattern, p.name)), None)
        if isinstance(override, str):
            signature[p.name] = override
        elif p.name in extra:
            value = constexprs[p.name]
            signature[p.name] = "i32" if isinstance(value, int) else "fp32"
        elif p.name in pointers or re.search(r"(?i)ptrs?$|_ptr_|^ptr_", p.name):
            elem = lib.index_dtype if re.match(INDEX_POINTERS, p.name) else lib.pointer_dtype
            signature[p.name] = f"*{elem}"
        elif re.match(FLOAT_SCALARS, p.name):
            signature[p.name] = "fp32"
        else:
            signature[p.name] = "i32"
    for name in extra:
        constexprs.pop(name)
    return Call(signature, constexprs, options, notes)


# -- compiling ------------------------------------------------------------------------------

TARGET_ARGS = ("cuda", 90, 32)
DEFAULT_TIMEOUT_S = 300  # one kernel's compile, either way


def _load_jit(module: str, attr: str) -> Any:
    from triton.runtime.jit import JITFunction

    obj: Any = getattr(importlib.import_module(module), attr)
    while not isinstance(obj, JITFunction):
        obj = obj.fn
    return obj


def triton_compile_job(
    module: str,
    attr: str,
    signature: dict[str, str],
    constexprs: dict[str, Any],
    options: dict[str, Any],
    timeout_s: int = 600,
) -> dict[str, Any]:
    """Triton's own compile of one kernel (run in a worker process, on its own Triton cache)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        jit = _load_jit(module, attr)
    except BaseException as exc:
        return {"ok": False, "error": f"import: {type(exc).__name__}: {exc}"[:2000]}
    full = dict(signature, **dict.fromkeys(constexprs, "constexpr"))
    full = {p.name: full[p.name] for p in jit.params}
    started = time.monotonic()
    # A compile that runs past its time is ended by the alarm's default action (the process
    # dies, whatever the compiler is doing); the parent retries the others and lists this one.
    signal.alarm(timeout_s)
    try:
        with tempfile.TemporaryDirectory(prefix="corpus-triton-") as cache:
            os.environ["TRITON_CACHE_DIR"] = cache
            compiled = triton.compile(
                ASTSource(jit, full, dict(constexprs)), target=GPUTarget(*TARGET_ARGS), options=dict(options)
            )
            binary = compiled.asm["cubin"]
        signal.alarm(0)
    except BaseException as exc:
        signal.alarm(0)
        return {
            "ok": False,
            "error": error_text(exc)[-3000:],
            "seconds": round(time.monotonic() - started, 2),
        }
    return {
        "ok": True,
        "sha256": hashlib.sha256(binary).hexdigest(),
        "ptx_sha256": hashlib.sha256(compiled.asm["ptx"].encode()).hexdigest(),
        "name": compiled.name,
        "seconds": round(time.monotonic() - started, 2),
    }


def _worker_init(src: str) -> None:
    if src not in sys.path:
        sys.path.insert(0, src)
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="corpus-triton-"))


def _triton_worker(src: str, conn: Any) -> None:
    """A worker of :func:`run_triton`: compiles the jobs it is sent, one at a time."""
    _worker_init(src)
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(triton_compile_job(*job))


def run_triton(
    jobs: list[tuple[str, str, dict[str, str], dict[str, Any], dict[str, Any]]],
    workers: int,
    timeout_s: int = DEFAULT_TIMEOUT_S,
) -> list[dict[str, Any]]:
    """Triton's compile of every job, in ``workers`` spawned processes, one job each at a time:
    a compile that crashes its process or runs past ``timeout_s`` fails that job alone (the
    worker is replaced)."""
    import multiprocessing.connection

    ctx = multiprocessing.get_context("spawn")
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    queue = list(reversed(range(len(jobs))))

    def start() -> dict[str, Any]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_triton_worker, args=(str(HERE), child), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "job": None, "started": 0.0}

    def stop(slot: dict[str, Any]) -> None:
        slot["proc"].kill()
        slot["proc"].join(10)
        slot["conn"].close()

    slots = [start() for _ in range(min(workers, len(jobs)))]
    finished = 0
    try:
        while queue or any(slot["job"] is not None for slot in slots):
            for slot in slots:
                if slot["job"] is None and queue:
                    slot["job"] = queue.pop()
                    slot["started"] = time.monotonic()
                    slot["conn"].send((*jobs[slot["job"]], timeout_s))
            busy = [slot["conn"] for slot in slots if slot["job"] is not None]
            ready = multiprocessing.connection.wait(busy, timeout=1.0)
            for n, slot in enumerate(slots):
                i = slot["job"]
                if i is None:
                    continue
                result: dict[str, Any] | None = None
                if slot["conn"] in ready:
                    try:
                        result = slot["conn"].recv()
                    except (EOFError, OSError):
                        result = None
                elif time.monotonic() - slot["started"] < timeout_s + 120 and slot["proc"].is_alive():
                    continue  # still compiling (the import of its module is not timed by the alarm)
                if result is None:
                    code = slot["proc"].exitcode
                    result = {
                        "ok": False,
                        "error": f"Triton's compiler process died (exit {code}: crashed, or ran past "
                        f"{timeout_s} s)",
                    }
                    stop(slot)
                    slots[n] = start()
                else:
                    slot["job"] = None
                results[i] = result
                finished += 1
                if finished % 25 == 0 or finished == len(jobs):
                    print(f"triton: {finished}/{len(jobs)} compiled", file=sys.stderr, flush=True)
    finally:
        for slot in slots:
            with contextlib.suppress(OSError, BrokenPipeError):
                slot["conn"].send(None)
            slot["proc"].join(5)
            if slot["proc"].is_alive():
                stop(slot)
    return [r if r is not None else {"ok": False, "error": "not run"} for r in results]


def run_kiln(
    found: list[Found],
    calls: list[Call],
    workers: int,
    cache_dir: Path,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    skip: frozenset[int] = frozenset(),
) -> list[dict[str, Any]]:
    """kiln's compile of every call through one ``CompilePool`` on a fresh cache."""
    from triton_kiln import CompilePool, CompileRequest, GPUTarget

    target = GPUTarget(*TARGET_ARGS)
    out: list[dict[str, Any]] = [{} for _ in found]
    requests: list[Any] = []
    where: list[int] = []
    for i, (f, call) in enumerate(zip(found, calls, strict=True)):
        if i in skip:
            out[i] = {"ok": False, "error": "not compiled by kiln: Triton's own compile died"}
            continue
        try:
            requests.append(
                CompileRequest(f.jit, call.signature, call.constexprs, options=call.options, target=target)
            )
            where.append(i)
        except Exception as exc:
            out[i] = {"ok": False, "error": f"request: {type(exc).__name__}: {exc}"[:2000]}
    from triton_kiln import settings

    keep_ir = settings.current().replace(keep_ir=True)  # the PTX, to tell a ptxas difference
    with CompilePool(workers=workers, cache_dir=cache_dir, job_timeout_s=timeout_s, settings=keep_ir) as pool:
        artifacts = pool.compile_many(requests, progress=False)
    for i, artifact in zip(where, artifacts, strict=True):
        if isinstance(artifact, BaseException):
            out[i] = {"ok": False, "error": error_text(artifact)[-3000:]}
        else:
            out[i] = {
                "ok": True,
                "sha256": hashlib.sha256(artifact.binary).hexdigest(),
                "ptx_sha256": hashlib.sha256(artifact.asm["ptx"].encode()).hexdigest()
                if "ptx" in artifact.asm
                else None,
                "name": artifact.name,
            }
    return out


# -- the table ------------------------------------------------------------------------------


def error_text(exc: BaseException) -> str:
    """The exception and the innermost one it was raised from, one line each."""
    chain = [exc]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 8:
        chain.append(nxt)
    lines = []
    for e in (chain[0], chain[-1]) if len(chain) > 1 else (chain[0],):
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
        lines.append(text)
    return "\n".join(lines)


def import_without_kiln(module: str) -> str:
    """Whether ``module`` imports on Triton alone (a fresh interpreter): '' or its error."""
    import subprocess

    code = f"import importlib; importlib.import_module({module!r})"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    if out.returncode == 0:
        return ""
    lines = [x for x in out.stderr.strip().splitlines() if x.strip()]
    return lines[-1][:500] if lines else f"exit {out.returncode}"


def _first_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip() and set(x.strip()) != {"^"}]
    where = next((x for x in lines if re.match(r"^at \d+:\d+:", x)), "")
    last = lines[-1] if lines else ""
    return (f"{where} {last}" if where and where != last else last)[:400]


def classify(
    triton_result: dict[str, Any], kiln_result: dict[str, Any], triton_again: dict[str, Any] | None = None
) -> str:
    """``identical``, ``triton_fails`` or ``kiln_fails``. A cubin that differs from Triton's is
    still kiln's own compile of the same thing when the PTX is byte-identical *and* Triton's own
    second compile (``triton_again``, fresh cache) gave a cubin different from its first: ptxas
    is not deterministic for that kernel, so no compile, Triton's included, reproduces a cubin."""
    if not triton_result.get("ok"):
        return "triton_fails"
    if not kiln_result.get("ok"):
        return "kiln_fails"
    if kiln_result.get("sha256") == triton_result.get("sha256"):
        return "identical"
    if (
        triton_again is not None
        and triton_again.get("ok")
        and kiln_result.get("ptx_sha256") is not None
        and kiln_result.get("ptx_sha256") == triton_result.get("ptx_sha256") == triton_again.get("ptx_sha256")
        and triton_again.get("sha256") != triton_result.get("sha256")
    ):
        return "identical"
    return "kiln_fails"


def unstable_cubin(triton_result: dict[str, Any], kiln_result: dict[str, Any]) -> bool:
    """Whether a row needs Triton's second compile: both compiled, cubins differ, PTX is the same."""
    return bool(
        triton_result.get("ok")
        and kiln_result.get("ok")
        and kiln_result.get("sha256") != triton_result.get("sha256")
        and kiln_result.get("ptx_sha256") == triton_result.get("ptx_sha256")
    )


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def run_corpus(
    libs: list[Library],
    *,
    sample: dict[str, tuple[str, ...]] | None = None,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    jobs: int = 2,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """Discover, derive, compile both ways, compare; the corpus's table as a dict."""
    started = time.monotonic()
    present = [lib for lib in libs if installed_version(lib) is not None]
    libraries = []
    for lib in libs:
        version = installed_version(lib)
        libraries.append({"name": lib.name, "version": lib.version, "installed": version})
    wrong = [x for x in libraries if x["installed"] is not None and x["installed"] != x["version"]]
    if wrong:
        raise SystemExit(f"installed versions differ from the pinned ones: {wrong}")
    # The sample imports only the modules that define its kernels.
    only = {k.rsplit(".", 1)[0] for names in sample.values() for k in names} if sample is not None else None
    found, import_errors = discover(present, only)
    by_name = {lib.name: lib for lib in present}
    rows: list[dict[str, Any]] = []
    helpers: list[dict[str, Any]] = []
    todo: list[tuple[Found, Call]] = []
    for f in found:
        if sample is not None and f.qualname not in sample.get(f.library, ()):
            continue
        if f.helper:
            helpers.append({"library": f.library, "kernel": f.qualname, "why": f.helper})
            continue
        try:
            call = derive_call(f, by_name[f.library])
        except Exception as exc:
            rows.append(
                {"library": f.library, "kernel": f.qualname, "status": "underivable", "error": repr(exc)}
            )
            continue
        todo.append((f, call))
    derive_s = time.monotonic() - started
    triton_jobs = [(f.module, f.attr, c.signature, c.constexprs, c.options) for f, c in todo]
    t0 = time.monotonic()
    triton_results = run_triton(triton_jobs, jobs, timeout_s)
    # A kernel whose Triton compile died (crash or time limit) is not compiled by kiln again.
    died = frozenset(i for i, r in enumerate(triton_results) if "compiler process died" in r.get("error", ""))
    triton_s = time.monotonic() - t0
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        cache = cache_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="corpus-kiln-")))
        # kiln's workers compile on a Triton cache of their own too (nothing answered from before)
        triton_cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="corpus-kiln-triton-"))
        stack.enter_context(_env("TRITON_CACHE_DIR", triton_cache))
        kiln_results = run_kiln([f for f, _ in todo], [c for _, c in todo], jobs, cache, timeout_s, died)
    kiln_s = time.monotonic() - t0
    # Cubins that differ over the same PTX: compile those once more with Triton alone.
    again_at = [
        i
        for i, (tr, kr) in enumerate(zip(triton_results, kiln_results, strict=True))
        if unstable_cubin(tr, kr)
    ]
    again = dict(zip(again_at, run_triton([triton_jobs[i] for i in again_at], jobs, timeout_s), strict=True))
    for i, ((f, call), tr, kr) in enumerate(zip(todo, triton_results, kiln_results, strict=True)):
        status = classify(tr, kr, again.get(i))
        row: dict[str, Any] = {
            "library": f.library,
            "kernel": f.qualname,
            "status": status,
            "wrappers": [w.rsplit(".", 1)[-1] for w in f.wrappers],
            "signature": call.signature,
            "constexprs": {k: repr(v) for k, v in call.constexprs.items()},
            "options": call.options,
            "notes": call.notes,
            "triton_s": tr.get("seconds"),
        }
        if status == "identical":
            row["sha256"] = tr["sha256"]
            if kr.get("sha256") != tr["sha256"]:
                row["sha256_kiln"] = kr["sha256"]
                row["sha256_triton_again"] = again[i]["sha256"]
                row["notes"] = [
                    *call.notes,
                    "cubin not reproducible: Triton's own two compiles gave two cubins; kiln's PTX "
                    "is byte-identical to Triton's (ptxas is not deterministic for this kernel)",
                ]
        if status == "triton_fails":
            row["triton_error"] = _first_line(tr.get("error", ""))
            row["kiln_outcome"] = "same failure" if not kr.get("ok") else "compiled"
            if not kr.get("ok"):
                row["kiln_error"] = _first_line(kr.get("error", ""))
        if status == "kiln_fails":
            row["kiln_error"] = _first_line(kr.get("error", "")) if not kr.get("ok") else "a different binary"
            if kr.get("ok"):  # what differed: the cubin alone (ptxas), or the PTX too
                row["hashes"] = {
                    side: {"cubin": r.get("sha256"), "ptx": r.get("ptx_sha256")}
                    for side, r in (("triton", tr), ("kiln", kr), ("triton_again", again.get(i, {})))
                }
        rows.append(row)
    counts = {
        s: sum(r["status"] == s for r in rows)
        for s in ("identical", "triton_fails", "kiln_fails", "underivable")
    }
    per_library = []
    for lib in libs:
        mine = [r for r in rows if r["library"] == lib.name]
        per_library.append(
            {
                "library": lib.name,
                "version": lib.version,
                "installed": installed_version(lib) is not None,
                "kernels": len(mine),
                "identical": sum(r["status"] == "identical" for r in mine),
                "triton_fails": sum(r["status"] == "triton_fails" for r in mine),
                "kiln_fails": sum(r["status"] == "kiln_fails" for r in mine),
                "helpers": sum(h["library"] == lib.name for h in helpers),
                "modules_failing_to_import": {
                    name: {"with_kiln": error, "without_kiln": import_without_kiln(name) or "imports"}
                    for name, error in import_errors.get(lib.name, {}).items()
                },
            }
        )
    import triton

    return {
        "date": DATE,
        "target": "cuda:90 (warp 32)",
        "triton": triton.__version__,
        "sample": sample is not None,
        "libraries": [{"name": x["name"], "version": x["version"]} for x in libraries if x["installed"]],
        "libraries_not_installed": [x["name"] for x in libraries if not x["installed"]],
        "kernels": len(rows),
        "identical": counts["identical"],
        "triton_fails": counts["triton_fails"],
        "kiln_fails": counts["kiln_fails"],
        "underivable": counts["underivable"],
        "helpers": len(helpers),
        "per_library": per_library,
        "seconds": {
            "discover": round(derive_s, 1),
            "triton": round(triton_s, 1),
            "kiln": round(kiln_s, 1),
            "total": round(time.monotonic() - started, 1),
        },
        "rows": rows,
        "helper_functions": helpers,
    }


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One table of several runs over different libraries (each library's rows from one run)."""
    order = [lib.name for lib in LIBRARIES]
    per_library: dict[str, dict[str, Any]] = {}
    owner: dict[str, dict[str, Any]] = {}  # the last run that holds a library gives its rows
    for report in reports:
        for entry in report["per_library"]:
            if entry["installed"]:
                per_library[entry["library"]] = entry
                owner[entry["library"]] = report
    names = [n for n in order if n in per_library]
    rows = [r for n in names for r in owner[n]["rows"] if r["library"] == n]
    helpers = [h for n in names for h in owner[n]["helper_functions"] if h["library"] == n]
    merged = dict(reports[0])
    merged.update(
        {
            "libraries": [{"name": n, "version": per_library[n]["version"]} for n in names],
            "libraries_not_installed": [n for n in order if n not in per_library],
            "kernels": len(rows),
            "identical": sum(r["status"] == "identical" for r in rows),
            "triton_fails": sum(r["status"] == "triton_fails" for r in rows),
            "kiln_fails": sum(r["status"] == "kiln_fails" for r in rows),
            "underivable": sum(r["status"] == "underivable" for r in rows),
            "helpers": len(helpers),
            "per_library": [per_library[n] for n in names],
            "seconds": {
                k: round(sum(rep["seconds"][k] for rep in reports), 1) for k in reports[0]["seconds"]
            },
            "runs": len(reports),
            "rows": rows,
            "helper_functions": helpers,
        }
    )
    return merged


def table(report: dict[str, Any]) -> str:
    head = ("kernels", "identical", "triton fails", "kiln fails", "helpers")
    lines = [f"{'library':40}" + "".join(f" {h:>12}" for h in head)]
    for x in report["per_library"]:
        if not x["installed"]:
            lines.append(f"{x['library'] + ' ' + x['version']:40} (not installed)")
            continue
        counts = (x["kernels"], x["identical"], x["triton_fails"], x["kiln_fails"], x["helpers"])
        lines.append(f"{x['library'] + ' ' + x['version']:40}" + "".join(f" {c:>12}" for c in counts))
    totals = (
        report["kernels"],
        report["identical"],
        report["triton_fails"],
        report["kiln_fails"],
        report["helpers"],
    )
    lines.append(f"{'total':40}" + "".join(f" {c:>12}" for c in totals))
    return "\n".join(lines)


def recheck(report: dict[str, Any], jobs: int, timeout_s: int) -> dict[str, Any]:
    """Compile the rows where kiln gave another binary again, both ways, each kernel alone; a row
    whose second look is identical becomes ``identical`` and keeps its first result in
    ``recheck`` (listed in the table's ``rechecked``); one that differs again stays kiln's failure.
    For differences that come and go (a cubin kiln's pool and Triton agree on in a quiet run)."""
    wanted: dict[str, tuple[str, ...]] = {}
    for row in report["rows"]:
        if row["status"] == "kiln_fails" and row.get("kiln_error") == "a different binary":
            wanted[row["library"]] = (*wanted.get(row["library"], ()), row["kernel"])
    if not wanted:
        return report
    again = run_corpus(
        [corpus_calls.library(n) for n in wanted], sample=wanted, jobs=jobs, timeout_s=timeout_s
    )
    second = {r["kernel"]: r for r in again["rows"]}
    rechecked = list(report.get("rechecked", []))
    rows = []
    for row in report["rows"]:
        new = second.get(row["kernel"]) if row["kernel"] in wanted.get(row["library"], ()) else None
        if new is not None and new["status"] == "identical":
            first = {k: row[k] for k in ("status", "kiln_error", "hashes") if k in row}
            rechecked.append(row["kernel"])
            rows.append({**new, "recheck": {"first_run": first, "second_run": "identical (compiled alone)"}})
        else:
            rows.append(row)
    out = dict(report, rows=rows, rechecked=rechecked)
    for key in ("identical", "triton_fails", "kiln_fails", "underivable"):
        out[key] = sum(r["status"] == key for r in rows)
    out["per_library"] = [
        dict(
            entry,
            **{
                k: sum(r["status"] == k and r["library"] == entry["library"] for r in rows)
                for k in ("identical", "triton_fails", "kiln_fails")
            },
        )
        for entry in report["per_library"]
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--library", action="append", help="only this library (repeatable)")
    parser.add_argument("--sample", action="store_true", help="only the fixed sample that CI compiles")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per compile")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"where to write the JSON (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="merge these runs' JSON (one library each) into --out"
    )
    parser.add_argument(
        "--recheck",
        type=Path,
        help="compile this table's 'a different binary' rows again, each alone, and rewrite it",
    )
    args = parser.parse_args(argv)
    if args.recheck:
        report = recheck(json.loads(args.recheck.read_text()), args.jobs, args.timeout)
        args.recheck.write_text(json.dumps(report, indent=1, default=repr) + "\n")
        print(f"wrote {args.recheck}\n{table(report)}")
        return 1 if report["kiln_fails"] else 0
    if args.merge:
        report = merge_reports([json.loads(p.read_text()) for p in args.merge])
        out = args.out or DEFAULT_OUT
        out.write_text(json.dumps(report, indent=1, default=repr) + "\n")
        print(f"wrote {out}\n{table(report)}")
        return 1 if report["kiln_fails"] else 0
    libs = [corpus_calls.library(n) for n in args.library] if args.library else list(LIBRARIES)
    report = run_corpus(
        libs, sample=corpus_calls.SAMPLE if args.sample else None, jobs=args.jobs, timeout_s=args.timeout
    )
    out = args.out or (DEFAULT_OUT if not args.sample and not args.library else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, default=repr) + "\n")
        print(f"wrote {out}")
    print(table(report))
    for row in report["rows"]:
        if row["status"] in ("kiln_fails", "underivable"):
            print(f"{row['status']}: {row['kernel']}: {row.get('kiln_error') or row.get('error')}")
    print(f"seconds: {report['seconds']}")
    return 1 if report["kiln_fails"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
