"""kiln's demo: compile real kernels through the pool, two of them bad on purpose.

Modules: :mod:`.kernels` (the kernels, one aborting the compiler and one hanging it) and
:mod:`.run` (``kiln demo``'s run and its table). Imports the pool, compile requests,
``triton_compat`` and the top-level settings, errors and terminal; only the command line
imports it."""
