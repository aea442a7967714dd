"""kiln inside ``torch.compile``: every Triton compile torch Inductor starts runs in kiln's
compile pool, so a compiler crash or hang fails one config, not the graph (docs/INDUCTOR.md).

::

    import triton_kiln.inductor
    triton_kiln.inductor.install()      # or KILN_INDUCTOR=1, read at `import triton_kiln`
    model = torch.compile(model)        # codegen kernels, template choices, user Triton kernels
    triton_kiln.inductor.install(sandbox_benchmarks=True)   # or KILN_INDUCTOR_SANDBOX=1: template
                                        # benchmarks in a kiln sandbox process (an IMA skips a choice)

Modules: :mod:`.routing` (install/uninstall, the replaced attributes), :mod:`.jobs` (the
pool Inductor is given), :mod:`.configs` (a kernel's configs in kiln's pool, Triton's cache
seeded), :mod:`.benchmarks` (template benchmarks in a sandbox process), :mod:`.errors`. Every
torch private name is in :mod:`triton_kiln.triton_compat.inductor`.
"""

from __future__ import annotations

from triton_kiln.inductor.errors import (
    InductorConfigCrashedError,
    InductorKernelError,
    InductorUnsupportedError,
)
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
    "InductorUnsupportedError",
    "install",
    "install_from_environment",
    "installed",
    "uninstall",
]
