"""kiln's autotuner: ``triton.autotune``'s contract on kiln's pool, sandbox and database.

From the top down (each module imports only those below it):

* :mod:`.decorator`: :func:`autotune`, :func:`precompile`; :mod:`.arguments`: their arguments checked;
* :mod:`.autotuner`: the contract (:class:`Autotuner`), which builds a run's plan and services once;
* :mod:`.library_search`: a library's own search served through ``_bench``;
* :mod:`.session`: one tuning run (candidates, cached?, compile, screen, final round, choose, record);
* :mod:`.node_tuning`, :mod:`.node_share`: one run per node; the node's GPUs screening together;
* :mod:`.final_round`, :mod:`.screening`: the final round; the first pass and its strategies;
* :mod:`.bench`: benchmarking a config (sandbox or in-process) and classifying failures;
* :mod:`.launch_tables`: what the autotuner has launched (launch tables, bundle records);
* :mod:`.gpu`, :mod:`.compile_requests`, :mod:`.call_conventions`, :mod:`.outputs`,
  :mod:`.compare_kernels`, :mod:`.prewarm`, :mod:`.timesplit`, :mod:`.tuning_progress`,
  :mod:`.log_lines`: the GPU, a call's compile requests, calling conventions, the output rule and
  its kernel, what starts at a first miss, where the time went, what the reader sees;
* :mod:`.plan`: what a run is given (:class:`~.plan.TuningPlan`, :class:`~.plan.Services`).

The package may import kiln's lower parts (compile, artifacts, pool, sandbox, tuning, remote, launch,
bundle, node, triton_compat, settings, errors), never the routing or command line above it.
"""

from triton_kiln.autotuner.autotuner import Autotuner
from triton_kiln.autotuner.decorator import autotune, precompile
from triton_kiln.autotuner.session import AutotuneError

__all__ = ["AutotuneError", "Autotuner", "autotune", "precompile"]
