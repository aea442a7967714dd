"""Gluon kernels (``@gluon.jit``): what makes them differ from Triton kernels, in one place.

Gluon (``triton.experimental.gluon``) is Triton's lower-level frontend: the kernel writes its
layouts explicitly. To Python a Gluon kernel is a ``GluonJITFunction`` (a ``JITFunction``
subclass), and Triton compiles it from a ``GluonASTSource``, whose pipeline starts at
``ttgir`` (Gluon's codegen) instead of ``ttir``. Rebuilding one with ``triton.jit`` yields a
Triton kernel whose Gluon calls go to Triton's semantics and fail. So kiln keeps a function's
*language* with its spec:

* ``"triton"``: ``@triton.jit`` (rebuilt with ``triton.jit``, compiled from ``ASTSource``);
* ``"gluon"``: ``@gluon.jit`` (rebuilt with ``gluon.jit``, compiled from ``GluonASTSource``);
* ``"constexpr_function"``: ``@constexpr_function`` helpers, plain Python run at compile time
  (common in Gluon code; rebuilt with ``constexpr_function``, never compiled on their own).

The language is part of a kernel's identity, so a Gluon kernel and a Triton kernel of the same
source never share a compile key. The classes are the same in Triton 3.5.1, 3.6.0 and 3.7.1.
"""

from __future__ import annotations

from typing import Any

from triton_kiln import triton_compat
from triton_kiln.errors import KernelSpecError

TRITON = "triton"
GLUON = "gluon"
CONSTEXPR_FUNCTION = "constexpr_function"
LANGUAGES = (TRITON, GLUON, CONSTEXPR_FUNCTION)


def language_of(fn: Any) -> str:
    """The language of a ``@jit``-like function (see the module docstring)."""
    if triton_compat.is_constexpr_function(fn):
        return CONSTEXPR_FUNCTION
    is_gluon = getattr(fn, "is_gluon", None)
    if callable(is_gluon) and is_gluon():
        return GLUON
    return TRITON


def rejit(language: str, raw: Any, options: dict[str, Any]) -> Any:
    """Wrap the plain Python function ``raw`` the way its original was (worker side)."""
    if language == TRITON:
        import triton

        return triton.jit(raw, **options)
    if language == GLUON:
        from triton.experimental import gluon

        return gluon.jit(raw, **options)
    if language == CONSTEXPR_FUNCTION:
        return triton_compat.constexpr_function(raw)
    raise KernelSpecError(f"unknown kernel language {language!r} (kiln knows {list(LANGUAGES)})")


def language_source(source: Any, kernel: Any) -> Any:
    """``source`` (Triton's ``ASTSource`` for ``kernel``) in the kernel's own language.

    For a Gluon kernel: a ``GluonASTSource`` with the same signature, constants and attributes;
    for a Triton kernel: ``source`` itself.
    """
    language = language_of(kernel)
    if language == TRITON:
        return source
    if language == GLUON:
        return triton_compat.gluon_ast_source(kernel, source)
    raise KernelSpecError(
        f"{getattr(kernel, '__name__', kernel)!r} is a {language}, not a kernel: only @triton.jit and "
        f"@gluon.jit functions can be compiled."
    )
