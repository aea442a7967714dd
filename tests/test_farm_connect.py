"""Joining a Ray cluster that is not there: every command fails within seconds, saying why.

Found by an audit: ``kiln farm down --ray nohost.invalid:6379``, ``kiln farm up --ray 127.0.0.1:1``
and ``kiln compile ... --ray 127.0.0.1:1`` ran for minutes (killed at 120 s), printing only Ray's
C++ retry lines (``gcs_client.cc:210: Failed to get cluster ID ... TimedOut``). Each command runs
here as the real CLI in its own process (and session), marked by an environment variable so that
every process it may have started (a Ray driver's helpers) is found and counted afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray", reason="the farm's tests need Ray (pip install 'triton-kiln[ray]')")

from triton_kiln.farm.errors import FarmError

ROOT = Path(__file__).resolve().parents[1]
MARKER = "KILN_TEST_FARM_CONNECT"
LIMIT_S = 15.0  # what a user waits at most for "there is no cluster there"
ADVICE = "start one with `ray start --head`"


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on: bound (so it was free), then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def marked(tag: str) -> list[psutil.Process]:
    """The live processes carrying ``MARKER=tag`` (the command and whatever it started)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(MARKER) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def run_kiln(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``kiln ARGS`` in a session of its own, killed (the whole group) after ``LIMIT_S``; its
    result and wall time. Asserts that no process it started outlives it."""
    tag = uuid.uuid4().hex
    env = {
        **os.environ,
        MARKER: tag,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "triton_kiln", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"kiln {' '.join(args)} still ran after {LIMIT_S:g} s; it printed:\n{err[-2000:]}")
    finally:
        wall_s = time.monotonic() - started
        deadline = time.monotonic() + 10
        while (left := marked(tag)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for leftover in left:
            with contextlib.suppress(psutil.Error):
                leftover.kill()
        assert not left, [(p.pid, p.name(), p.cmdline()[:3]) for p in left]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), wall_s


KERNEL = ["compile", "support.kernels:add_kernel",
          "--signature", "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n=i32",
          "--constexpr", "BLOCK=64", "--target", "cuda:90"]  # fmt: skip


REFUSED = "nothing listens on 127.0.0.1:{port} (connection refused)"
UNRESOLVABLE = "the host name nohost.invalid does not resolve"
COMMANDS = {"down": ["farm", "down"], "up": ["farm", "up"], "compile": KERNEL}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("address", "why"),
    [("127.0.0.1:{port}", REFUSED), ("nohost.invalid:6379", UNRESOLVABLE)],
    ids=["refused", "unresolvable"],
)
def test_an_address_nobody_answers_on_fails_fast_and_says_why(command: str, address: str, why: str) -> None:
    port = closed_port()
    address = address.format(port=port)
    done, wall_s = run_kiln(*COMMANDS[command], "--ray", address)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert wall_s < LIMIT_S
    assert f"Error: could not join the Ray cluster at {address}: {why.format(port=port)}" in done.stderr
    assert ADVICE in done.stderr
    assert "gcs_client" not in done.stderr  # Ray was never asked to join it
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_with_ray_a_preload_is_left_to_the_nodes() -> None:
    # Without --ray an unknown --preload is refused here (test_cli_compile.py); a cluster's nodes
    # may have modules this machine lacks, so with --ray the command goes on to join the cluster.
    port = closed_port()
    done, _ = run_kiln(*KERNEL, "--preload", "only_on_the_nodes_xyz", "--ray", f"127.0.0.1:{port}")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "--preload" not in done.stderr
    assert REFUSED.format(port=port) in done.stderr


@pytest.mark.timeout(60)
def test_farm_up_refuses_a_timeout_that_is_not_positive() -> None:
    done, wall_s = run_kiln("farm", "up", "--ray", f"127.0.0.1:{closed_port()}", "--timeout", "-5")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Invalid value for '--timeout'" in done.stderr
    assert "-5" in done.stderr
    assert wall_s < LIMIT_S


@pytest.fixture
def full_listener() -> Iterator[tuple[str, int]]:
    """A port that takes no more connections: a listener whose backlog is full and which never
    accepts, so the next SYN is dropped and a connect waits (a firewall that drops, on 127.0.0.1)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    held = []
    try:
        for _ in range(8):  # fill the accept queue: later connects hang
            client = socket.socket()
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                client.connect(server.getsockname())
            held.append(client)
        yield "127.0.0.1", int(server.getsockname()[1])
    finally:
        for client in held:
            client.close()
        server.close()


def test_a_port_that_never_answers_times_out_at_the_probes_limit(full_listener: tuple[str, int]) -> None:
    from triton_kiln.farm import reach

    host, port = full_listener
    started = time.monotonic()
    with pytest.raises(FarmError) as caught:
        reach.check_address(f"{host}:{port}", timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert f"{host}:{port} did not answer within 1 s (connection timed out)" in str(caught.value)
    assert ADVICE in str(caught.value)


@pytest.mark.parametrize("address", [None, "auto", "local", "bad:addr:x", "ray://", "nohost"])
def test_addresses_ray_looks_up_or_refuses_itself_are_not_probed(address: str | None) -> None:
    from triton_kiln.farm import reach

    reach.check_address(address, timeout_s=0.01)  # nothing to probe: returns at once


def test_a_listening_port_passes_and_a_ray_client_address_is_probed_too() -> None:
    from triton_kiln.farm import reach

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = int(server.getsockname()[1])
        reach.check_address(f"127.0.0.1:{port}")
        reach.check_address(f"ray://127.0.0.1:{port}")
    with pytest.raises(FarmError, match=r"nothing listens on 127\.0\.0\.1:\d+ \(connection refused\)"):
        reach.check_address(f"ray://127.0.0.1:{port}")


def test_a_port_out_of_range_is_refused_by_name() -> None:
    from triton_kiln.farm import reach

    with pytest.raises(FarmError, match=r"70000 is not a TCP port \(1-65535\)"):
        reach.check_address("127.0.0.1:70000")
