"""Every instruction to install smq, in the docs and in smq's own messages, names the project's
own distribution. ``smq`` on PyPI is an unrelated project: ``pip install 'smq[embedded]'``
would install it instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import smq
from conftest import ROOT
from smq._version import DISTRIBUTION, install_hint

_PYPROJECT = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; smq supports 3.10)
PROJECT_NAME = re.search(r'^name = "([^"]+)"', _PYPROJECT, re.M).group(1)  # type: ignore[union-attr]
EXTRAS = set(re.findall(r"^([a-z]+) = \[", _PYPROJECT.split("[project.optional-dependencies]")[1], re.M))
# pip, pipx, uv pip, uv tool, poetry add, uv add: what follows up to the end of the command.
_INSTALL = re.compile(
    r"\b(?:pip3?|pipx|uv pip|uv tool|python3? -m pip)\s+install\s+([^\n`]*)|\b(?:poetry|uv) add\s+([^\n`]*)"
)
# A requirement naming smq with extras, or "install smq" in prose ("install `smq[spark]` on every node").
_SMQ_REQUIREMENT = re.compile(r"""(?<![\w.-])['"]?smq\[[a-z,]+\]|install\s+['"`]?smq['"`]?(?![\w.\[-])""")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _texts() -> list[Path]:
    paths = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "deploy" / "Dockerfile"]
    for folder, pattern in (("docs", "*.md"), ("deploy", "*.md"), ("smq", "*.py"), ("bench", "*.md")):
        paths += sorted((ROOT / folder).rglob(pattern))
    return [path for path in paths if path.is_file()]


def _requirements(arguments: str) -> list[str]:
    """Names of the requirements an install command's arguments ask for (paths and options skipped)."""
    names: list[str] = []
    tokens = arguments.split()
    skip_next = False
    for token in tokens:
        token = token.strip("'\"`),;")
        if skip_next:
            skip_next = False
            continue
        if token in ("-r", "-c", "--requirement", "--constraint", "-d", "--target", "-t", "--python"):
            skip_next = True
            continue
        if not token or token.startswith(("-", ".", "/", "$", "~", "<", "(")) or "://" in token:
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", token)
        if match and not token.startswith(("&&", "|")):
            names.append(match.group(0))
        if token in ("&&", "||", "|", ";", "#"):
            break
    return names


def _wrong_installs(text: str) -> list[str]:
    """The install instructions in ``text`` that name a distribution of smq other than the project's."""
    wrong = [match.group(0) for match in _SMQ_REQUIREMENT.finditer(text)]
    for match in _INSTALL.finditer(text):
        for name in _requirements(match.group(1) or match.group(2)):
            if _normalized(name).startswith("smq") and _normalized(name) != DISTRIBUTION:
                wrong.append(match.group(0))
    return wrong


def test_the_distribution_name_is_the_one_the_messages_use() -> None:
    assert PROJECT_NAME == DISTRIBUTION == "smq-redis"
    assert install_hint("spark") == "pip install 'smq-redis[spark]'"
    assert EXTRAS >= {"embedded", "spark", "java"}


def test_the_version_is_the_package_version() -> None:
    from importlib import metadata

    assert metadata.version(DISTRIBUTION) == smq.__version__ == "0.2.0"


@pytest.mark.parametrize("path", _texts(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_doc_or_message_tells_users_to_install_another_distribution(path: Path) -> None:
    wrong = _wrong_installs(path.read_text())
    assert not wrong, f"{path.relative_to(ROOT)} names another distribution than {DISTRIBUTION}: {wrong}"


@pytest.mark.parametrize(
    "text",
    [
        "pip install 'smq[embedded]'",
        "pip install smq",
        "python -m pip install -U smq[spark]",
        "install `smq[spark]` on every node",
        "pipx install smq-queue",
    ],
)
def test_the_check_catches_wrong_names(text: str) -> None:
    assert _wrong_installs(text)


@pytest.mark.parametrize(
    "text",
    ["pip install 'smq-redis[embedded]'", "pip install -e '.[test]'", "pip install 'celery[sqs]' smq-redis"],
)
def test_the_check_accepts_right_names(text: str) -> None:
    assert not _wrong_installs(text)
