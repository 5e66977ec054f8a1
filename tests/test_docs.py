"""The documentation: the MkDocs site builds with ``--strict`` (no broken link or anchor, no page
left out of the navigation), its references are generated from the code, and the README stays a
landing page whose links lead somewhere."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import smq
from conftest import ROOT
from smq.cli import main

# A markdown link or image: [text](target) or ![alt](target).
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module as ``mkdocs build --strict`` builds it."""
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs the suite through ./dev test, which installs the docs extra")
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (./dev test does)")
    directory = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(directory)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return directory


def _text(path: Path) -> str:
    """A built page's text, tags dropped."""
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text()))


def _command_paths(group: click.Group, prefix: str = "smq") -> list[str]:
    paths: list[str] = []
    for name, command in sorted(group.commands.items()):
        paths.append(f"{prefix} {name}")
        if isinstance(command, click.Group):
            paths += _command_paths(command, f"{prefix} {name}")
    return paths


def test_the_docs_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "getting-started" / "index.html").is_file()


def test_the_cli_reference_lists_every_command_with_its_options(site: Path) -> None:
    page = _text(site / "cli" / "index.html")
    assert isinstance(main, click.Group)
    commands = _command_paths(main)
    assert {"smq queue create", "smq send", "smq receive", "smq serve", "smq worker"} <= set(commands)
    assert "smq exporter" in commands
    missing = [command for command in commands if f"Usage: {command} " not in " ".join(page.split())]
    assert not missing, f"commands without a reference entry: {missing}"
    assert "--visibility-timeout" in page and "--redis-server" in page


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    page = (site / "python-api" / "index.html").read_text()
    missing = [name for name in smq.__all__ if f'id="smq.{name}"' not in page]
    assert not missing, f"names of smq.__all__ without a reference entry: {missing}"
    assert 'id="smq.Client.create_queue"' in page
    assert "create_queue" in _text(site / "python-api" / "index.html")


def test_the_readme_is_a_landing_page() -> None:
    readme = ROOT / "README.md"
    assert readme.stat().st_size < 15_000, "the README is a landing page: details go to docs/"
    targets = [target for target in _LINK.findall(readme.read_text()) if "://" not in target]
    assert targets, "the README links into the docs"
    broken = [
        target
        for target in targets
        if not target.startswith("#") and not (ROOT / target.split("#", 1)[0]).exists()
    ]
    assert not broken, f"README links to files that do not exist: {broken}"


def test_the_monitoring_page_shows_the_image_the_benchmark_wrote() -> None:
    # bench/monitoring.py writes deploy/monitoring.png; the site can only show files under docs/.
    copy = ROOT / "docs" / "assets" / "monitoring.png"
    assert copy.read_bytes() == (ROOT / "deploy" / "monitoring.png").read_bytes(), (
        "copy deploy/monitoring.png to docs/assets/monitoring.png"
    )
