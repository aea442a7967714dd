"""kiln's autotuner: ``triton.autotune``'s contract on kiln's pool, sandbox and database.

* :mod:`.autotuner`: the contract (:class:`Autotuner`); :mod:`.decorator`: :func:`autotune`,
  :func:`precompile`;
* :mod:`.calls`: heuristics and normalizing calling conventions for the C dispatcher;
* :mod:`.session`: one tuning run (compile all, screen, final round, database);
* :mod:`.bench`: benchmarking a config (sandbox or in-process) and classifying failures;
* :mod:`.specialize`: a call's arguments -> one compile request per config;
* :mod:`.variants`: what the autotuner has launched (launch tables, bundle records);
* :mod:`.binaries`: where it gets stored binaries' files and Triton kernels.
"""

from triton_kiln.autotuner.autotuner import Autotuner
from triton_kiln.autotuner.decorator import autotune, precompile
from triton_kiln.autotuner.session import AutotuneError

__all__ = ["AutotuneError", "Autotuner", "autotune", "precompile"]
