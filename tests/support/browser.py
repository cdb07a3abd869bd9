"""A real headless Chromium driven over the DevTools protocol (websocket-client), for tests of
the live status page: navigate, read the rendered text, wait for it to change, screenshot.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it when missing); without it,
:func:`find_chromium` returns None and the tests that need it skip with that reason.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


class HeadlessChromium:
    """One headless browser with one page; a context manager."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000) -> None:
        # Chromium's helper processes may still write the profile as it is removed: a leftover
        # directory in /tmp is no failure of the test.
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True)
        self._process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderers and helpers: one process group to kill
        )  # fmt: skip
        port = self._devtools_port(Path(self._profile.name) / "DevToolsActivePort")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        self._socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30)
        self._ids = itertools.count(1)
        self.call("Page.enable")

    def _devtools_port(self, file: Path, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if file.exists() and file.read_text().strip():
                return int(file.read_text().splitlines()[0])
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._process.returncode}")
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are skipped)."""
        call_id = next(self._ids)
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait_for_text(self, *needles: str, timeout: float = 30.0) -> str:
        """The page's text once it contains every one of ``needles``."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.2)
        missing = [n for n in needles if n not in text]
        raise AssertionError(f"the page never showed {missing}; it shows:\n{text}")

    def screenshot(self, path: Path, height: int | None = None) -> None:
        """A PNG of the whole page (its first ``height`` pixels when given)."""
        metrics = self.call("Page.getLayoutMetrics")
        whole = int(metrics["cssContentSize"]["height"])
        height = whole if height is None else min(whole, height)
        data = self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": 1400, "height": max(height, 600), "scale": 1},
        )["data"]  # fmt: skip
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._socket.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._profile.cleanup()

    def __enter__(self) -> HeadlessChromium:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable; the test skips naming the package where there is none (under
    ``CI=true`` that skip fails: support.required)."""
    found = find_chromium()
    if found is None:
        pytest.skip("no Chromium here: apt-get install chromium (.ci/run installs it)")
    return found
