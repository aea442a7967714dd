"""kiln in place of Triton's own names, for code you don't own: the entry points behind
``triton_kiln.install()`` / ``triton_kiln.uninstall()`` and ``KILN_AUTOTUNE=1``.

Modules: :mod:`.autotune` (``install()``, ``uninstall()``, ``install_from_environment()``:
``triton.autotune`` and later subclasses of Triton's ``Autotuner`` made kiln's, and plain
``@triton.jit`` routing turned on with them) and :mod:`.jit` (plain ``@triton.jit`` kernels'
compiles in kiln's pool, through ``JITFunction._do_compile``; docs/JIT_ROUTING.md).

Imports: the autotuner, the pool, the launcher's prebuild, artifacts, ``triton_compat`` and the
top-level modules (settings, errors, notices, procs); only ``triton_kiln/__init__.py`` (and,
through it, the startup hook ``_triton_kiln_startup``) imports this package, so no part of kiln
depends on routing. The package holds no function of its own: ``install`` and ``uninstall`` are
:mod:`.autotune`'s, published as ``triton_kiln.install`` / ``triton_kiln.uninstall``.
"""
