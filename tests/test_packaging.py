"""`pip install .` gives a working package: the Lua scripts ship inside it, under the project's
own distribution name, with its license, extras and command."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, building_from_the_checkout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    folder = tmp_path_factory.mktemp("wheel")
    pip_wheel = ["pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), str(ROOT)]
    with building_from_the_checkout():
        done = subprocess.run(
            [sys.executable, "-m", *pip_wheel],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = folder.glob("smq_redis-0.2.0-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_carries_every_lua_script(wheel: zipfile.ZipFile) -> None:
    shipped = {name for name in wheel.namelist() if name.endswith(".lua")}
    expected = {f"smq/lua/{p.relative_to(ROOT / 'lua').as_posix()}" for p in (ROOT / "lua").rglob("*.lua")}
    assert shipped == expected
    assert "smq/spark/_source.py" in wheel.namelist()


def test_the_wheel_carries_the_console_s_script_and_style(wheel: zipfile.ZipFile) -> None:
    assert {"smq/server/console/console.js", "smq/server/console/console.css"} <= set(wheel.namelist())


def test_the_wheel_is_smq_redis_with_its_license_extras_and_command(wheel: zipfile.ZipFile) -> None:
    info = "smq_redis-0.2.0.dist-info"
    metadata = wheel.read(f"{info}/METADATA").decode()
    assert "Name: smq-redis\n" in metadata and "Version: 0.2.0\n" in metadata
    assert "License-Expression: Apache-2.0\n" in metadata
    assert {"embedded", "spark", "java"} <= set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    license_text = wheel.read(f"{info}/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text() and "Apache License" in license_text
    assert "smq = smq.cli:main" in wheel.read(f"{info}/entry_points.txt").decode()
