"""`pip install .` gives a working package: the Lua scripts ship inside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT


def test_the_wheel_carries_every_lua_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("smq-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".lua")}
    expected = {f"smq/lua/{p.relative_to(ROOT / 'lua').as_posix()}" for p in (ROOT / "lua").rglob("*.lua")}
    assert shipped == expected
    assert "smq/spark/_source.py" in zipfile.ZipFile(wheel).namelist()
