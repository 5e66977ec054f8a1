"""The release of smq, the name it is installed by, and how to install an extra of it."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__version__ = "0.2.0"

#: The distribution's name, the one it will have on PyPI (nothing is published there yet).
#: ``smq`` on PyPI is an unrelated project: every install instruction names this one, or a
#: checkout or wheel of it (``import smq`` is unchanged).
DISTRIBUTION = "smq-redis"


def install_hint(extra: str) -> str:
    """A command that adds ``extra`` to this smq, for messages that name a fix.

    pip records where it installed a distribution from (PEP 610's ``direct_url.json``): a
    checkout (editable or not), a wheel file or a URL. The command installs the extra from the
    same place, with the pip of the Python that runs smq. A copy installed by name came from an
    index, which has it. When the running smq is not the installed one, or its source is gone,
    the hint names the extra and where the install is described.
    """
    from importlib import metadata

    try:
        installed = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _unknown(extra)
    running = Path(__file__).resolve().parent
    copy = Path(str(installed.locate_file("smq"))).resolve()
    recorded = installed.read_text("direct_url.json")
    if recorded is None:  # installed by name, from an index, which has it
        found = installed.read_text("INSTALLER") is not None and copy == running
        return _pip(f"'{DISTRIBUTION}[{extra}]'") if found else _unknown(extra)
    return hint_from(json.loads(recorded), extra, running=running, copy=copy)


def hint_from(direct_url: dict[str, Any], extra: str, *, running: Path, copy: Path) -> str:
    """The hint for a distribution pip installed as ``direct_url`` (PEP 610) says: ``copy`` is
    where its ``smq`` package went unless editable, ``running`` the one this process imported."""
    url = str(direct_url.get("url", ""))
    parts = urlsplit(url)
    dir_info = direct_url.get("dir_info")
    if parts.scheme == "file" and isinstance(dir_info, dict):  # a checkout
        source = Path(unquote(parts.path))
        editable = bool(dir_info.get("editable"))
        imported = (source / "smq").resolve() if editable else copy
        if imported != running or not (source / "pyproject.toml").is_file():
            return _unknown(extra)
        return _pip(("-e " if editable else "") + shlex.quote(f"{source}[{extra}]"))
    if copy != running:
        return _unknown(extra)
    if parts.scheme == "file":  # a wheel (or an sdist) file
        archive = Path(unquote(parts.path))
        return _pip(shlex.quote(f"{archive}[{extra}]")) if archive.is_file() else _unknown(extra)
    vcs_info = direct_url.get("vcs_info")
    if isinstance(vcs_info, dict):
        revision = vcs_info.get("requested_revision") or vcs_info.get("commit_id")
        url = f"{vcs_info.get('vcs')}+{url}" + (f"@{revision}" if revision else "")
    return _pip(shlex.quote(f"{DISTRIBUTION}[{extra}] @ {url}")) if url else _unknown(extra)


def _pip(arguments: str) -> str:
    """pip's install command with ``arguments``, run by the pip of this Python: ``pip``, or this
    Python's by path when ``pip`` on PATH is another's (a virtualenv not activated, pipx)."""
    on_path = shutil.which("pip")
    same = on_path is not None and Path(on_path).parent == Path(sys.executable).parent
    pip = "pip" if same else f"{shlex.quote(sys.executable)} -m pip"
    return f"{pip} install {arguments}"


def _unknown(extra: str) -> str:
    return (
        f"the {extra} extra of {DISTRIBUTION} (in a checkout of smq: pip install '.[{extra}]'; "
        "see Install in its README)"
    )
