"""Builds kiln's C launcher with the package; everything else is in pyproject.toml.

The launcher (``src/triton_kiln/launch/_kiln_launch.c``) needs Python's headers and a C compiler
to build, and neither CUDA headers nor CUDA libraries (it opens libcuda.so.1 at run time). The
extension is optional: where it cannot be built (no compiler, no Python headers) the install goes
on without it, and kiln builds it at first use or, failing that, launches through Triton's
launcher (see ``triton_kiln/launch/native.py``). ``LAUNCHER_SOURCE_SHA256`` records which source the
module was built from, so kiln never uses one built from a different ``_kiln_launch.c`` (an
editable install whose C source was edited since). Release wheels come from
``.ci/build_wheels.py``, which builds this extension with ``zig cc`` for glibc 2.27 through
``CC``/``LDSHARED`` (docs/RELEASING.md); nothing here is specific to one compiler.

``build_py`` also puts ``src/triton_kiln.pth`` (kiln's startup hook for ``KILN_AUTOTUNE=1``, see
``src/_triton_kiln_startup.py``) at the top of site-packages, in wheels and in editable installs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SOURCE = "src/triton_kiln/launch/_kiln_launch.c"
SOURCE_SHA256 = hashlib.sha256(Path(__file__).resolve().parent.joinpath(SOURCE).read_bytes()).hexdigest()

STARTUP_HOOK = "src/triton_kiln.pth"


class build_py_with_startup_hook(build_py):
    """``build_py``, plus the startup hook's ``.pth`` at the top of the installed tree.

    A wheel installs ``build_lib`` as site-packages. An editable wheel holds only a ``.pth`` that
    puts ``src`` on ``sys.path`` (the hook's module, ``src/_triton_kiln_startup.py``, is then found
    there) and what ``install_lib`` points at, which setuptools sets to the editable wheel's root.
    """

    def run(self) -> None:
        super().run()
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.copy_file(STARTUP_HOOK, str(Path(root, Path(STARTUP_HOOK).name)), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        hook = [] if self.editable_mode else [str(Path(self.build_lib, Path(STARTUP_HOOK).name))]
        return [*super().get_outputs(include_bytecode), *hook]

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), STARTUP_HOOK]


setup(
    cmdclass={"build_py": build_py_with_startup_hook},
    ext_modules=[
        Extension(
            "triton_kiln.launch._kiln_launch",
            sources=[SOURCE],
            define_macros=[("LAUNCHER_SOURCE_SHA256", f'"{SOURCE_SHA256}"')],
            extra_compile_args=["-std=c11"],
            libraries=["dl"],
            optional=True,
        )
    ],
)
