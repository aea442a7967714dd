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
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "src/triton_kiln/launch/_kiln_launch.c"
SOURCE_SHA256 = hashlib.sha256(Path(__file__).resolve().parent.joinpath(SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "triton_kiln.launch._kiln_launch",
            sources=[SOURCE],
            define_macros=[("LAUNCHER_SOURCE_SHA256", f'"{SOURCE_SHA256}"')],
            extra_compile_args=["-std=c11"],
            libraries=["dl"],
            optional=True,
        )
    ]
)
