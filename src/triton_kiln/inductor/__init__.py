"""kiln inside ``torch.compile``: every Triton compile torch Inductor starts runs in kiln's
compile pool, so a compiler crash or hang fails one config, not the graph (docs/INDUCTOR.md).

::

    import triton_kiln.inductor
    triton_kiln.inductor.install()      # or KILN_INDUCTOR=1, read at `import triton_kiln`
    model = torch.compile(model)        # codegen kernels, template choices, user Triton kernels

Modules: :mod:`.routing` (install/uninstall, the three replaced attributes), :mod:`.jobs` (the
pool Inductor is given), :mod:`.configs` (a kernel's configs in kiln's pool, Triton's cache
seeded), :mod:`.errors`. Every torch private name is in :mod:`kiln.triton_compat.inductor`.
"""

from __future__ import annotations

from triton_kiln.inductor.errors import InductorConfigCrashedError, InductorKernelError
from triton_kiln.inductor.routing import (
    InductorUnavailableError,
    install,
    install_from_environment,
    installed,
    uninstall,
)

__all__ = [
    "InductorConfigCrashedError",
    "InductorKernelError",
    "InductorUnavailableError",
    "install",
    "install_from_environment",
    "installed",
    "uninstall",
]
