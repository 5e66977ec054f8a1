"""A real headless Chromium, driven through chromedriver's W3C WebDriver API (plain HTTP and JSON).

Debian's ``chromium`` and ``chromium-driver`` packages provide both (``.ci/run`` installs them as
root). The client below speaks the few WebDriver commands the console tests need.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from smq.embedded import free_port

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def browser_programs() -> tuple[str, str]:
    """(chromium, chromedriver) paths; skips the test where they are missing, unless CI is set."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        reason = "needs Debian's chromium and chromium-driver packages (.ci/run installs them)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return chromium, driver


class Browser:
    """One chromedriver process and one headless Chromium session; ``close`` ends both."""

    def __init__(self, chromium: str, driver: str, width: int = 1100, height: int = 800) -> None:
        self.profile = tempfile.mkdtemp(prefix="smq-chromium-")
        self.port = free_port()
        self.process = subprocess.Popen(
            [driver, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.process.kill()
                raise RuntimeError("chromedriver did not start")
            time.sleep(0.1)
        options = {
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
            ],
        }
        wanted = {"browserName": "chrome", "goog:chromeOptions": options}
        self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": wanted}})["sessionId"]

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.loads(reply.read())["value"]
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"WebDriver {method} {path}: {error.read().decode()[:500]}") from None

    def _session(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", payload)

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self._session("GET", "/url"))

    def find(self, css: str) -> str:
        """The element matching ``css`` (an error if none does)."""
        return str(self._session("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        found = self._session("POST", "/elements", {"using": "css selector", "value": css})
        return [str(element[ELEMENT]) for element in found]

    def type(self, css: str, text: str) -> None:
        self._session("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self._session("POST", f"/element/{self.find(css)}/click", {})

    def text(self, css: str) -> str:
        return str(self._session("GET", f"/element/{self.find(css)}/text"))

    def script(self, source: str, *args: Any) -> Any:
        return self._session("POST", "/execute/sync", {"script": source, "args": list(args)})

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))

    def wait_for(self, check: Any, timeout: float = 15, what: str = "the page") -> Any:
        """Poll ``check()`` until it returns something true; fail after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = check()
            except RuntimeError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not come within {timeout} s (at {self.url})")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        except (OSError, RuntimeError):
            pass
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
