"""A headless Chromium driven over the DevTools protocol on a pipe (no websocket, no extra package).

::

    test process                                    chromium --headless=new --remote-debugging-pipe
      fd -> child's fd 3: {"id", "method", "params", "sessionId"}\\0  ->  commands
      fd <- child's fd 4: {"id", "result"} / {"method", "params"}\\0  <-  replies and events

:func:`load` opens one ``file://`` page, waits for its ``load`` event, and returns
:class:`PageLoad`: every console message and uncaught exception (``Runtime.*``), every browser log
entry (``Log.entryAdded``: failed loads, Content-Security-Policy violations), what JavaScript
expressions evaluated to in the page, and optionally a PNG of the full page. A page with a
Content-Security-Policy that forbids scripts can still be inspected: DevTools evaluation is not
subject to the page's policy.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    """The first Chromium on PATH, or ``None``."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


class BrowserError(RuntimeError):
    """Chromium did not start, answer, or load the page in time."""


@dataclass
class PageLoad:
    """What one page load showed."""

    console: list[dict[str, Any]] = field(default_factory=list)  # {"level", "text"}
    values: dict[str, Any] = field(default_factory=dict)  # expression -> its value
    screenshot: bytes | None = None

    def errors(self) -> list[dict[str, Any]]:
        """Console errors and warnings, uncaught exceptions, failed loads, CSP violations."""
        return [m for m in self.console if m["level"] in ("error", "warning", "assert", "exception")]


class _Pipe:
    def __init__(self, browser: str, profile: str) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        args = [
            browser, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--no-default-browser-check", "--remote-debugging-pipe", f"--user-data-dir={profile}",
            "about:blank",
        ]  # fmt: skip
        # The pipe's ends arrive as the shell's stdin and stdout, which moves them to fds 3 and 4
        # (where --remote-debugging-pipe looks) before it becomes chromium: no preexec_fn, so this
        # is safe with threads running. Its own session, so close() can end every process it made.
        self.process = subprocess.Popen(
            ["sh", "-c", 'exec 3<&0 4>&1 </dev/null >/dev/null; exec "$@"', "sh", *args],
            stdin=to_child_r,
            stdout=from_child_w,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        return self._next_id

    def read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise BrowserError(f"chromium closed its pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        decoded: dict[str, Any] = json.loads(message)
        return decoded

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float = 30.0) -> dict[str, Any]:  # fmt: skip
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.read(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method: str, timeout_s: float) -> None:
        if any(event["method"] == method for event in self.events):
            return
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.read(deadline)
            if "method" in message:
                self.events.append(message)
                if message["method"] == method:
                    return

    def close(self) -> None:
        """Close the browser; :class:`BrowserError` if any of its processes outlived it (they are
        killed first)."""
        try:
            self.send("Browser.close")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_child)
            os.close(self._from_child)
        deadline = time.monotonic() + 5.0
        while _group_alive(self.process.pid):
            if time.monotonic() > deadline:
                os.killpg(self.process.pid, signal.SIGKILL)
                raise BrowserError("chromium left processes behind after Browser.close (killed)")
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies left for init to reap count as gone)."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def _console(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for event in events:
        params = event.get("params", {})
        if event["method"] == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            found.append({"level": params.get("type", "log"), "text": text})
        elif event["method"] == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            found.append({"level": "exception", "text": text})
        elif event["method"] == "Log.entryAdded":
            entry = params.get("entry", {})
            found.append({"level": entry.get("level", "info"), "text": entry.get("text", "")})
    return found


def load(
    page: Path,
    expressions: tuple[str, ...] = (),
    *,
    width: int = 1280,
    screenshot: bool = False,
    clip: tuple[float, float, float, float] | None = None,
    settle_s: float = 0.5,
    timeout_s: float = 60.0,
) -> PageLoad:
    """Load ``page`` (a local file) in a fresh headless Chromium; see the module's documentation."""
    browser = find_browser()
    if browser is None:
        raise BrowserError(f"no browser found on PATH (looked for {', '.join(BROWSERS)})")
    with tempfile.TemporaryDirectory(prefix="kiln-chromium-") as profile:
        pipe = _Pipe(browser, profile)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"}, timeout_s=timeout_s)
            attached = pipe.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
            session = attached["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                pipe.call(f"{domain}.enable", session=session)
            pipe.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            pipe.events.clear()
            pipe.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
            pipe.wait_for("Page.loadEventFired", timeout_s)
            time.sleep(settle_s)  # late console messages
            result = PageLoad()
            for expression in expressions:
                reply = pipe.call(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
                )
                if "exceptionDetails" in reply:
                    raise BrowserError(f"evaluating {expression!r}: {reply['exceptionDetails']}")
                result.values[expression] = reply["result"].get("value")
            if screenshot:
                shot = pipe.call(
                    "Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": True}
                    | (
                        {}
                        if clip is None
                        else {
                            "clip": dict(zip("xy", clip[:2], strict=True))
                            | {"width": clip[2], "height": clip[3], "scale": 1}
                        }
                    ),
                    session=session,
                )
                result.screenshot = base64.b64decode(shot["data"])
            pipe.call("Runtime.evaluate", {"expression": "0"}, session=session)  # drain events
            result.console = _console(pipe.events)
            return result
        finally:
            pipe.close()
