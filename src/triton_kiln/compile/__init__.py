"""What a compile is: the request (request), a kernel's identity and how it travels to a worker
(kernel_spec), the data forms of the values it depends on (values), and how a worker gets the
kernel back (rebuild).

Also: :mod:`.options` (the values compile options may take), :mod:`.spec_batch` (a kernel
described once for many requests), :mod:`.gluon` (Triton vs Gluon kernels), :mod:`.parse`
(kiln's ``ast.parse``) and :mod:`.unroll` (a kernel's ``tl.static_range`` copy count, the
pool's compile order).

Imports: only :mod:`triton_kiln.errors`, :mod:`triton_kiln.settings` and
:mod:`triton_kiln.triton_compat`; whatever compiles (pool, farm, autotuner, integrations,
command line) builds on it."""
