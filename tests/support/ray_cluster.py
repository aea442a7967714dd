"""A real local Ray cluster for tests and ``bench/farm.py``: started with ``ray start --head``, ended by pid.

Every process of the cluster (GCS, raylet, Ray's worker processes, the kiln zygotes and workers
those start) inherits ``KILN_TEST_RAY_CLUSTER=<its temp dir>`` from ``ray start``'s
environment, so :meth:`LocalRayCluster.stop` ends exactly those processes, by pid (what ``ray
stop`` does, without touching any other Ray on the machine), and :meth:`LocalRayCluster.leftovers`
counts what outlived it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

MARKER = "KILN_TEST_RAY_CLUSTER"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ray_executable() -> str:
    found = shutil.which("ray", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        raise RuntimeError("the `ray` command is not installed (pip install 'triton-kiln[ray]')")
    return found


class LocalRayCluster:
    """``ray start --head`` on 127.0.0.1, a free port, ``num_cpus`` CPUs, no dashboard."""

    def __init__(
        self, num_cpus: int, *, pythonpath: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        """``env``: variables for the cluster's processes beyond this one's (Ray's ``RAY_*`` system
        settings among them, read by ``ray start``)."""
        self.num_cpus = num_cpus
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp_dir = tempfile.mkdtemp(prefix="kray-", dir="/tmp")  # short: Ray's socket paths
        paths = pythonpath if pythonpath is not None else [str(ROOT / "src"), str(ROOT / "tests")]
        self.env = dict(os.environ)
        self.env[MARKER] = self.temp_dir
        self.env["PYTHONPATH"] = os.pathsep.join([*paths, self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.env.update(env or {})
        self._seen: list[psutil.Process] = []  # every process of the cluster seen so far

    def start(self) -> LocalRayCluster:
        command = [
            ray_executable(), "start", "--head", f"--port={self.port}", "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.num_cpus}", "--num-gpus=0", "--include-dashboard=false",
            f"--temp-dir={self.temp_dir}", "--disable-usage-stats",
        ]  # fmt: skip
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        self.processes()  # remember them all now, while the agents are the raylet's children
        return self

    def add_node(self, num_cpus: int) -> None:
        """A second raylet (a second "machine") joining this cluster."""
        command = [
            ray_executable(), "start", f"--address={self.address}", "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}", "--num-gpus=0", "--disable-usage-stats",
        ]  # fmt: skip
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ray start --address failed:\n{done.stdout}\n{done.stderr}")
        self.processes()

    def processes(self) -> list[psutil.Process]:
        """The cluster's live processes: those carrying the marker, their children, and every
        process seen before (Ray's agents rename themselves, which hides their environment)."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER) == self.temp_dir:
                    found[proc.pid] = proc
                    found.update((child.pid, child) for child in proc.children(recursive=True))
            except (psutil.Error, OSError):
                continue
        found.update((proc.pid, proc) for proc in self._seen if proc.is_running())
        self._seen = list(found.values())
        live = []
        for proc in found.values():
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    live.append(proc)
        return live

    def leftovers(self, timeout: float = 15.0) -> list[psutil.Process]:
        deadline = time.monotonic() + timeout
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def stop(self) -> None:
        """End every process of this cluster: SIGTERM, then SIGKILL after 2 s (by pid). Ray's
        daemons (the GCS, the raylet, their agents) take longer than 10 s to end on SIGTERM, each
        waiting on the others; a test cluster has nothing to save, so they get SIGKILL. A process
        that ended counts as gone though it is a zombie nobody reaps yet (they are not this
        process's children)."""
        for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
            if not self.leftovers(timeout=wait_s):
                break
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
