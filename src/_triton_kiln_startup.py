"""``KILN_AUTOTUNE=1`` with no ``import triton_kiln``: kiln's startup hook.

kiln's wheel puts ``triton_kiln.pth`` in site-packages. Python runs its one line at every
interpreter start (``site``), and the line imports this module only when ``KILN_AUTOTUNE`` is set
to something other than ``0``; otherwise it costs one dictionary lookup. This module imports
nothing: it puts :class:`RouteOnTritonImport` first on ``sys.meta_path`` and returns.

The finder waits for the first ``import triton``. It then takes itself off ``sys.meta_path``,
lets the other finders find Triton, and wraps the loader they return: Triton's ``__init__`` runs
as usual, then ``import triton_kiln`` runs, which with ``KILN_AUTOTUNE=1`` calls
:func:`triton_kiln.routing.autotune.install_from_environment` (the ``triton_kiln.install()`` that never
raises on a setting). So ``triton.autotune`` is kiln's before the code that imported Triton goes
on to decorate its kernels.

Why not import triton_kiln from the ``.pth`` line itself: ``site`` runs ``.pth`` files while it is
still building ``sys.path``, so Triton (and torch) may not be importable yet, and importing them
at every interpreter start would cost every Python process a second or more.

If ``triton_kiln`` is already imported when Triton is (the application imported kiln first, or kiln
is the one importing Triton), kiln has routed or is routing already, and the finder only takes
itself off. A failure to route never breaks ``import triton``: it is reported as a
:class:`RuntimeWarning` and Triton's own autotuner stays in place.
"""

import sys

TYPE_CHECKING = False  # no typing import at interpreter start (annotations are strings)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

TRIGGER = "triton"


class RouteOnTritonImport:
    """A ``sys.meta_path`` finder that routes ``triton.autotune`` through kiln once Triton is imported."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if fullname != TRIGGER:
            return None
        disarm()
        if "triton_kiln" in sys.modules:
            return None  # kiln is imported: it routes (or has routed) by itself
        from importlib.util import find_spec

        spec = find_spec(TRIGGER)  # the other finders, this one being off sys.meta_path
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _RouteAfterLoading(spec.loader)  # type: ignore[assignment]  # a Loader by its methods
        return spec


class _RouteAfterLoading:
    """Triton's loader, then kiln's routing. Triton's module keeps its own loader."""

    def __init__(self, loader: "Any") -> None:
        self.loader = loader

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        create = getattr(self.loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: "ModuleType") -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _route()


def _route() -> None:
    try:
        import triton_kiln  # noqa: F401  (its import routes: KILN_AUTOTUNE is set)
    except Exception as exc:  # an import of triton must not fail because kiln could not route
        import warnings

        warnings.warn(
            f"kiln: KILN_AUTOTUNE is set, but importing triton_kiln to route triton.autotune failed: "
            f"{type(exc).__name__}: {exc}. Triton's own autotuner is in place; to use kiln, fix the "
            f"error above (run `python -c 'import triton_kiln'` to see it), or unset KILN_AUTOTUNE.",
            RuntimeWarning,
            stacklevel=2,
        )


def arm() -> None:
    """Put the finder first on ``sys.meta_path`` (once); route now if Triton is already imported."""
    if TRIGGER in sys.modules:
        _route()
    elif RouteOnTritonImport not in sys.meta_path:
        sys.meta_path.insert(0, RouteOnTritonImport)


def disarm() -> None:
    """Take the finder off ``sys.meta_path``."""
    while RouteOnTritonImport in sys.meta_path:
        sys.meta_path.remove(RouteOnTritonImport)


arm()
