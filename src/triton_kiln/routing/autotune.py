"""``triton_kiln.install()``: kiln for code you don't own (Liger-Kernel, flash-linear-attention...).

::

    import triton_kiln; triton_kiln.install()  # or KILN_AUTOTUNE=1, read at `import triton_kiln`
                                               # (install_from_environment: an import never raises);
                                               # installed kiln's startup hook (triton_kiln.pth,
                                               # _triton_kiln_startup) imports it at `import triton`
    import liger_kernel, fla  # their @triton.autotune kernels are now triton_kiln.autotune's

What it routes, by rebinding names in Triton's modules (:func:`triton_kiln.triton_compat.autotune_names`):

* ``triton.autotune`` (also ``triton.runtime.autotune``, ``triton.runtime.autotuner.autotune``):
  every kernel decorated *after* ``install()`` is a :class:`triton_kiln.Autotuner`;
* ``triton.runtime.autotuner.Autotuner`` (and ``triton.runtime.Autotuner``): a library's own
  autotuner class defined *after* ``install()`` (FLA's ``CachedAutotuner``) derives from kiln's.
  A subclass that overrides a method kiln relies on is put back on Triton's class, with the
  reason logged (see :data:`triton_kiln.autotuner.autotuner.TRITON_ONLY_METHODS`), never broken.

* ``JITFunction._do_compile`` (unless ``KILN_ROUTE_JIT=0``): plain ``@triton.jit`` kernels,
  whenever defined, compile in kiln's pool; a compiler crash raises
  :class:`triton_kiln.routing.jit.JitCompileCrashedError` (:mod:`triton_kiln.routing.jit`,
  docs/JIT_ROUTING.md).

It also keeps the program record (unless ``KILN_PROGRAM_RECORD=0``; :mod:`triton_kiln.program`):
the compiles this program asks the pool for are noted, and the last run's that no cache holds
start compiling now, each once the program has imported its kernel's module.

What it does not route: kernels decorated before ``install()``, classes defined before it, and
code that kept its own reference to Triton's ``autotune``/``Autotuner`` (``from triton import
autotune`` executed earlier). ``uninstall()`` restores Triton's names; kernels already made stay
kiln's. Both are logged at INFO on the ``kiln.install`` logger. (This module is
``triton_kiln.routing.autotune``; the functions are ``triton_kiln.install``/``triton_kiln.uninstall``.)
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("kiln.install")

_lock = threading.Lock()
_saved: list[tuple[Any, str, Any]] = []  # (module, name, Triton's value)


def install() -> None:
    """Route ``triton.autotune`` and later subclasses of Triton's ``Autotuner`` through kiln.

    Raises :class:`~triton_kiln.errors.SettingsError` (naming the variable), with nothing routed, if a
    ``KILN_*`` variable is malformed.
    """
    from triton_kiln import settings

    current = settings.current()
    _route()
    if current.route_jit:
        _route_jit()
    _prepare()
    _replay(current)


def install_from_environment() -> None:
    """``KILN_AUTOTUNE=1`` at ``import triton_kiln``: route, and never raise.

    An import must not fail on a setting (every ``kiln`` command, ``kiln --help`` included,
    imports kiln first). So: a malformed ``KILN_AUTOTUNE`` routes nothing and logs one line
    naming it (``kiln.install`` logger, WARNING); with ``KILN_AUTOTUNE=1`` and another malformed
    variable, ``triton.autotune`` is routed (what was asked for), nothing is prepared, and the
    :class:`~triton_kiln.errors.SettingsError` naming the variable is raised where kiln is first used:
    when a kernel is decorated (its :class:`triton_kiln.Autotuner` is made) or a pool is made (logged
    here at DEBUG only, so a ``kiln`` command says it once, as its ``Error:`` line).
    """
    from triton_kiln import notices, settings
    from triton_kiln.errors import SettingsError

    try:
        wanted = settings.parse_variable("autotune")
    except SettingsError as exc:
        notices.warn(log, f"kiln: {exc} triton.autotune is not routed through kiln.")
        return
    if not wanted:
        return
    try:
        current = settings.current()
    except SettingsError as exc:
        _route()
        log.debug("kiln: %s Kernels triton.autotune makes raise it until the variable is fixed.", exc)
        return
    _route()
    if current.route_jit:
        _route_jit()
    _prepare()
    _replay(current)


def _route() -> None:
    from triton_kiln.autotuner import Autotuner, autotune
    from triton_kiln.triton_compat import autotune_names

    with _lock:
        if _saved:
            return
        replacement = {"autotune": autotune, "Autotuner": Autotuner}
        for module, name in autotune_names():
            _saved.append((module, name, getattr(module, name)))
            setattr(module, name, replacement[name])
    log.info(
        "kiln: installed: triton.autotune and classes derived from triton.runtime.autotuner.Autotuner "
        "from now on are kiln's (kernels and classes defined earlier stay Triton's)"
    )


def _route_jit() -> None:
    # Plain @triton.jit kernels (not autotuned): their compiles in kiln's pool (triton_kiln.routing.jit).
    from triton_kiln.routing import jit

    jit.install()


def _prepare() -> None:
    # Starts nothing: the sandbox, the pool and Triton's driver utilities start at a tuning's
    # first miss (triton_kiln.autotuner.prewarm), so a process that never tunes holds none of them.
    from triton_kiln.autotuner.prewarm import prepare

    prepare()


def _replay(current: Any) -> None:
    # The program record (triton_kiln.program): this run's compiles noted from now on, and the
    # last run's that no cache holds started in the pool before the program asks for them.
    # Without a record, one failed open() and no process.
    from triton_kiln import program

    program.start(current)


def uninstall() -> None:
    """Give Triton its names back (kernels and classes made meanwhile stay kiln's)."""
    with _lock:
        if not _saved:
            return
        for module, name, value in reversed(_saved):
            setattr(module, name, value)
        _saved.clear()
    from triton_kiln.routing import jit

    jit.uninstall()
    from triton_kiln import program

    program.stop()
    log.info("kiln: uninstalled: triton.autotune is Triton's again")


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return bool(_saved)
