"""Lint, format and strict typing are part of the suite."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def _run(*command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_finds_nothing() -> None:
    folders = [name for name in ("smq", "tests", "bench", "chaos") if (ROOT / name).is_dir()]
    _run("ruff", "check", *folders)
    _run("ruff", "format", "--check", *folders)


def test_mypy_strict_passes_on_the_package() -> None:
    _run("mypy")
