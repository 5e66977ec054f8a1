"""Real headless browsers for the web console's tests, driven by the W3C WebDriver commands.

Chromium through chromedriver's HTTP API (Debian's ``chromium`` and ``chromium-driver``), Firefox
through its own Marionette protocol (Debian's ``firefox-esr``; Debian has no geckodriver, and
Marionette takes the same WebDriver commands over a socket). ``.ci/run`` installs all three as
root. The clients below speak the few commands the console tests need, named as Marionette
names them.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from smq.embedded import free_port

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
BROWSERS = ("chromium", "firefox")
T = TypeVar("T")


def _program(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def open_browser(kind: str, width: int = 1280, height: int = 800) -> Browser:
    """A headless browser of ``kind``; skips the test where it is missing, unless CI is set."""
    if kind == "chromium":
        chromium, driver = _program("chromium", "chromium-browser"), _program("chromedriver")
        if chromium is None or driver is None:
            _missing("needs Debian's chromium and chromium-driver packages (.ci/run installs them)")
        assert chromium is not None and driver is not None
        return Chromium(chromium, driver, width, height)
    firefox = _program("firefox-esr", "firefox")
    if firefox is None:
        _missing("needs Debian's firefox-esr package (.ci/run installs it)")
    assert firefox is not None
    return Firefox(firefox, width, height)


class Browser:
    """One headless browser session; ``close`` ends it and its processes."""

    process: subprocess.Popen[bytes]
    profile: str

    def command(self, name: str, params: dict[str, Any]) -> Any:
        """Run the WebDriver command ``name`` (Marionette's name); its value."""
        raise NotImplementedError

    def get(self, url: str) -> None:
        self.command("WebDriver:Navigate", {"url": url})

    @property
    def url(self) -> str:
        return str(self.command("WebDriver:GetCurrentURL", {}))

    def find(self, css: str) -> str:
        """The element matching ``css`` (an error if none does)."""
        return str(self.command("WebDriver:FindElement", {"using": "css selector", "value": css})[ELEMENT])

    def find_all(self, css: str) -> list[str]:
        found = self.command("WebDriver:FindElements", {"using": "css selector", "value": css})
        return [str(element[ELEMENT]) for element in found]

    def type(self, css: str, text: str) -> None:
        self.command("WebDriver:ElementSendKeys", {"id": self.find(css), "text": text})

    def click(self, css: str) -> None:
        self.command("WebDriver:ElementClick", {"id": self.find(css)})

    def text(self, css: str) -> str:
        """The rendered text of the element matching ``css``, found afresh when the page
        re-rendered it between the find and the read (a stale element, not a failure)."""
        for _ in range(5):
            try:
                return str(self.command("WebDriver:GetElementText", {"id": self.find(css)}))
            except RuntimeError as error:
                if "stale" not in str(error).lower():
                    raise
        return str(self.command("WebDriver:GetElementText", {"id": self.find(css)}))

    def script(self, source: str, *args: Any) -> Any:
        return self.command("WebDriver:ExecuteScript", {"script": source, "args": list(args)})

    def forget(self, url: str) -> None:
        """Delete the cookies ``url`` sees (a sign-in's, say), then show a blank page: the next test
        starts signed out, as in a new browser."""
        self.get(url)
        self.command("WebDriver:DeleteAllCookies", {})
        self.get("about:blank")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.command("WebDriver:TakeScreenshot", {})))

    def wait_for(self, check: Callable[[], T], timeout: float = 15, what: str = "the page") -> T:
        """Poll ``check()`` until it returns something true; fail after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = check()
            except RuntimeError:
                value = None  # type: ignore[assignment]
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not come within {timeout} s (at {self.url})")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self._end_session()
        except (OSError, RuntimeError):
            pass
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _end_session(self) -> None:
        raise NotImplementedError


# chromedriver's HTTP endpoint of each command: (method, path after /session/{id}).
_CHROMEDRIVER = {
    "WebDriver:Navigate": ("POST", "/url"),
    "WebDriver:GetCurrentURL": ("GET", "/url"),
    "WebDriver:FindElement": ("POST", "/element"),
    "WebDriver:FindElements": ("POST", "/elements"),
    "WebDriver:ElementSendKeys": ("POST", "/element/{id}/value"),
    "WebDriver:ElementClick": ("POST", "/element/{id}/click"),
    "WebDriver:GetElementText": ("GET", "/element/{id}/text"),
    "WebDriver:ExecuteScript": ("POST", "/execute/sync"),
    "WebDriver:TakeScreenshot": ("GET", "/screenshot"),
    "WebDriver:DeleteAllCookies": ("DELETE", "/cookie"),
}


class Chromium(Browser):
    """Headless Chromium through one chromedriver process of its own."""

    def __init__(self, chromium: str, driver: str, width: int, height: int) -> None:
        self.profile = tempfile.mkdtemp(prefix="smq-chromium-")
        port = free_port()
        self.process = subprocess.Popen(
            [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if self._http("GET", "/status")["ready"]:
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
        self.session = self._http("POST", "/session", {"capabilities": {"alwaysMatch": wanted}})["sessionId"]

    def _http(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.loads(reply.read())["value"]
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"WebDriver {method} {path}: {error.read().decode()[:500]}") from None

    def command(self, name: str, params: dict[str, Any]) -> Any:
        method, path = _CHROMEDRIVER[name]
        if "{id}" in path:
            params = dict(params)
            path = path.format(id=params.pop("id"))
        return self._http(method, f"/session/{self.session}{path}", params if method == "POST" else None)

    def _end_session(self) -> None:
        self._http("DELETE", f"/session/{self.session}")


class Firefox(Browser):
    """Headless Firefox, spoken to over Marionette (``len:[0, id, command, params]`` frames)."""

    def __init__(self, firefox: str, width: int, height: int) -> None:
        self.profile = tempfile.mkdtemp(prefix="smq-firefox-")
        port = free_port()
        prefs = {
            "marionette.port": port,
            "browser.shell.checkDefaultBrowser": False,
            "browser.startup.homepage_override.mstone": "ignore",
            "datareporting.policy.dataSubmissionEnabled": False,
            "toolkit.telemetry.reportingpolicy.firstRun": False,
            "app.update.disabledForTesting": True,
            "browser.sessionstore.resume_from_crash": False,
        }
        Path(self.profile, "user.js").write_text(
            "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items())
        )
        self.process = subprocess.Popen(
            [
                firefox,
                "--headless",
                "--marionette",
                "--no-remote",
                "--profile",
                self.profile,
                f"--width={width}",
                f"--height={height}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "MOZ_HEADLESS": "1", "HOME": self.profile},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.socket = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.process.kill()
                    raise RuntimeError("Firefox's Marionette did not start") from None
                time.sleep(0.2)
        self.buffer = b""
        self._read()  # the greeting
        self.next_id = 0
        self.command("WebDriver:NewSession", {"capabilities": {"alwaysMatch": {"acceptInsecureCerts": True}}})
        self.command("WebDriver:SetWindowRect", {"width": width, "height": height})

    def _read(self) -> Any:
        while b":" not in self.buffer:
            self._fill()
        size, _, self.buffer = self.buffer.partition(b":")
        while len(self.buffer) < int(size):
            self._fill()
        frame, self.buffer = self.buffer[: int(size)], self.buffer[int(size) :]
        return json.loads(frame)

    def _fill(self) -> None:
        chunk = self.socket.recv(65536)
        if not chunk:
            raise RuntimeError("Marionette closed the connection")
        self.buffer += chunk

    def command(self, name: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        frame = json.dumps([0, self.next_id, name, params]).encode()
        self.socket.sendall(b"%d:%s" % (len(frame), frame))
        while True:
            kind, message_id, error, result = self._read()
            if kind == 1 and message_id == self.next_id:
                break
        if error:
            raise RuntimeError(f"Marionette {name}: {error}")
        return result.get("value") if isinstance(result, dict) and "value" in result else result

    def _end_session(self) -> None:
        self.command("WebDriver:DeleteSession", {})
        self.socket.close()
