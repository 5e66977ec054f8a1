"""The release of smq and the name it is installed by."""

from __future__ import annotations

__version__ = "0.2.0"

#: The distribution name on PyPI. ``smq`` there is an unrelated project:
#: every install instruction names this one (``import smq`` is unchanged).
DISTRIBUTION = "smq-redis"


def install_hint(extra: str | None = None) -> str:
    """The pip command that installs smq (with ``extra``), for messages that name a fix."""
    target = f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION
    return f"pip install '{target}'"
