"""kiln inside ``torch.compile``: every Triton compile torch Inductor starts runs in kiln's
compile pool, so a compiler crash or hang fails one config, not the graph (docs/INDUCTOR.md).

::

    import triton_kiln.inductor
    triton_kiln.inductor.install()      # or KILN_INDUCTOR=1, read at `import triton_kiln`
    model = torch.compile(model)        # codegen kernels, template choices, user Triton kernels
    triton_kiln.inductor.install(sandbox_benchmarks=True)   # or KILN_INDUCTOR_SANDBOX=1: template
                                        # benchmarks and runtime autotunes in a kiln sandbox
                                        # process (an IMA skips a choice or a config)

Modules: :mod:`.hooks` (install/uninstall, the replaced attributes), :mod:`.process_pool` (the
pool Inductor is given), :mod:`.config_compiler` (a kernel's configs in kiln's pool, Triton's
cache seeded), :mod:`.sidecar` / :mod:`.sidecar_main` (kiln's Inductor sidecar process),
:mod:`.benchmarks` (template benchmarks in a sandbox process), :mod:`.runtime_autotune` (a
kernel's runtime autotune in that process), :mod:`.errors`. Every torch
private name is in :mod:`triton_kiln.triton_compat.inductor`.

Imports: torch (through ``triton_compat.inductor``), the compile pool, the sandbox's call
sandbox, artifacts, compile requests, and the top-level errors, framing, notices, procs and
settings; only ``import triton_kiln`` (with ``KILN_INDUCTOR`` set) and the user import it.
"""

from __future__ import annotations

from triton_kiln.inductor.errors import (
    InductorConfigCrashedError,
    InductorKernelError,
    InductorRuntimeAutotuneError,
    InductorUnsupportedError,
)
from triton_kiln.inductor.hooks import (
    InductorUnavailableError,
    install,
    install_from_environment,
    installed,
    uninstall,
)

__all__ = [
    "InductorConfigCrashedError",
    "InductorKernelError",
    "InductorRuntimeAutotuneError",
    "InductorUnavailableError",
    "InductorUnsupportedError",
    "install",
    "install_from_environment",
    "installed",
    "uninstall",
]
