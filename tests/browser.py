"""A headless Chromium driven over the DevTools protocol, for opening reports in tests.

Debian's ``chromium`` (installed by scripts/test.sh when missing). Each page is opened in a
fresh tab; console errors, uncaught exceptions, failed loads and JavaScript dialogs (an
``alert`` that should never run) are collected. Under ``CI=true`` a missing Chromium fails
the tests that need it; elsewhere they skip.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--window-size=1400,1000",
    "--remote-debugging-port=0",
)

# per plot wrapper: is there a plotly graph with an SVG and traces in it?
PLOTS_JS = """
Array.from(document.querySelectorAll('[data-plot]')).map(w => {
  const gd = w.querySelector('.js-plotly-plot');
  return {id: w.dataset.plot, plotly: !!gd,
          svg: gd ? gd.querySelectorAll('svg.main-svg').length : 0,
          traces: gd && gd._fullData ? gd._fullData.length : 0,
          height: gd ? gd.getBoundingClientRect().height : 0};
})
"""

# the page settled: its fonts loaded, then one more turn of the event loop for what they queued
SETTLED_JS = "document.fonts.ready.then(() => new Promise(resolve => setTimeout(resolve, 0))).then(() => true)"

# every plot laid out again at the window's new size: plotly's own resize, awaited, instead of the
# window's resize event that its responsive handler answers a frame or more later
RESIZED_JS = """
Promise.all(window.Plotly ? Array.from(document.querySelectorAll('.js-plotly-plot'), gd => Plotly.Plots.resize(gd)) : [])
  .then(() => new Promise(resolve => setTimeout(resolve, 0))).then(() => true)
"""


def chromium_binary() -> Optional[str]:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@dataclass
class PageResult:
    url: str
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    console: list[str] = field(default_factory=list)  # every console message
    dialogs: list[str] = field(default_factory=list)  # alert/confirm/prompt that opened
    plots: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # the expressions asked for, evaluated after load
    screenshot: Optional[Path] = None


class Chromium:
    """One headless browser process; :meth:`open` loads a page in a new tab and inspects it."""

    def __init__(self, binary: str):
        import websocket  # websocket-client

        self._ws_mod = websocket
        self.profile = tempfile.mkdtemp(prefix="harness-chromium-")
        # chromium puts its singleton socket in a folder of its own under TMPDIR and leaves it
        # there when stopped by a signal: under the profile, it goes with the profile
        scratch = Path(self.profile) / "tmp"
        scratch.mkdir()
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(scratch)},
        )
        self.port = self._wait_for_port()

    def _wait_for_port(self, timeout: float = 60) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before it listened")
            if marker.exists():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port in time")

    def _browser_ws_url(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=10) as r:
            return json.loads(r.read())["webSocketDebuggerUrl"]

    def open(
        self,
        path: Path,
        screenshot: Optional[Path] = None,
        evaluate: Optional[dict[str, str]] = None,
        timeout: float = 60,
        viewport: Optional[tuple[int, int]] = None,
        cut_at: Optional[str] = None,
    ) -> PageResult:
        """Load a file, wait for every plot to draw, collect errors, evaluate expressions, save a
        PNG: of the whole page, or with ``viewport`` (width, height in CSS pixels) of its top,
        laid out at that size from the start; ``cut_at``, a CSS selector, ends that top where the
        last element it matches begins in the viewport's lower half (a section's heading: no
        section cut in half)."""
        browser = _Session(
            self._ws_mod.create_connection(self._browser_ws_url(), timeout=timeout, suppress_origin=True)
        )
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        page = _Session(
            self._ws_mod.create_connection(
                f"ws://127.0.0.1:{self.port}/devtools/page/{target}", timeout=timeout, suppress_origin=True
            )
        )
        result = PageResult(url=Path(path).resolve().as_uri())
        page.on_event = lambda m: _collect(page, m, result)
        try:
            for domain in ("Page", "Runtime", "Log"):
                page.call(f"{domain}.enable")
            if viewport is not None:
                _set_size(page, *viewport)
            page.call("Page.navigate", {"url": result.url})
            page.wait_for("Page.loadEventFired", timeout)
            deadline = time.time() + timeout
            while True:  # plots draw from inline scripts; wait until each has its SVG and traces
                result.plots = page.evaluate(PLOTS_JS)
                if all(p["plotly"] and p["svg"] and p["traces"] for p in result.plots) or time.time() > deadline:
                    break
                time.sleep(0.2)
            page.evaluate(SETTLED_JS)  # late console errors (fonts, what the plots queued)
            page.drain()
            result.title = page.evaluate("document.title")
            result.values = {name: page.evaluate(expr) for name, expr in (evaluate or {}).items()}
            if screenshot is not None:
                if viewport is None:
                    result.screenshot = self._screenshot(page, Path(screenshot))
                else:
                    result.screenshot = self._top_screenshot(page, Path(screenshot), viewport, cut_at)
        finally:
            page.close()
            browser.call("Target.closeTarget", {"targetId": target})
            browser.close()
        return result

    def _screenshot(self, page: _Session, out: Path) -> Path:
        size = page.call("Page.getLayoutMetrics")["cssContentSize"]
        _set_size(page, 1400, min(int(size["height"]) + 1, 16000))
        page.evaluate(RESIZED_JS)
        return _save(page.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}), out)

    def _top_screenshot(self, page: _Session, out: Path, viewport: tuple[int, int], cut_at: Optional[str]) -> Path:
        width, height = viewport
        if cut_at is not None:
            tops = page.evaluate(
                f"Array.from(document.querySelectorAll({json.dumps(cut_at)}), e => e.getBoundingClientRect().top)"
            )
            height = int(max([t for t in tops if height / 2 <= t <= height], default=height))
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        return _save(page.call("Page.captureScreenshot", {"format": "png", "clip": clip}), out)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        shutil.rmtree(self.profile, ignore_errors=True)


def _save(shot: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


def _set_size(page: _Session, width: int, height: int) -> None:
    """The page's viewport, in CSS pixels, one device pixel each."""
    page.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )


class _Session:
    """One DevTools websocket: numbered calls, events handed to ``on_event``."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.on_event = lambda message: None
        self.seen: list[str] = []

    def call(self, method: str, params: Optional[dict] = None) -> dict:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == my_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        if "method" in message:
            self.seen.append(message["method"])
            self.on_event(message)

    def wait_for(self, method: str, timeout: float) -> None:
        deadline = time.time() + timeout
        while method not in self.seen:
            if time.time() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self._event(json.loads(self.ws.recv()))

    def drain(self) -> None:
        """Handle the events already sent (a no-op call flushes them)."""
        self.call("Runtime.evaluate", {"expression": "0"})

    def evaluate(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in out:
            raise RuntimeError(f"evaluate failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def close(self) -> None:
        self.ws.close()


def _collect(page: _Session, message: dict, result: PageResult) -> None:
    method, params = message["method"], message.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
        result.console.append(f"{params.get('type')}: {text}")
        if params.get("type") in ("error", "assert"):
            result.errors.append(f"console.{params.get('type')}: {text}")
    elif method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        result.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
    elif method == "Log.entryAdded":
        entry = params.get("entry", {})
        if entry.get("level") == "error":
            result.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}")
    elif method == "Page.javascriptDialogOpening":
        result.dialogs.append(f"{params.get('type')}: {params.get('message')}")
        page.ws.send(
            json.dumps(
                {"id": 10**6 + len(result.dialogs), "method": "Page.handleJavaScriptDialog", "params": {"accept": True}}
            )
        )


@pytest.fixture(scope="session")
def chromium():
    """A running headless Chromium; fails under CI=true when it is missing, skips elsewhere."""
    binary = chromium_binary()
    if binary is None:
        message = "chromium is not installed (scripts/test.sh installs it: apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    browser = Chromium(binary)
    yield browser
    browser.close()


def screenshot_dir(tmp_path: Path) -> Path:
    """Where tests save screenshots: $HARNESS_SCREENSHOTS if set, else the test's tmp folder."""
    return Path(os.environ.get("HARNESS_SCREENSHOTS") or tmp_path)
