"""``smq java-home`` and ``smq spark-submit``: Spark's own tools on the Java that smq finds;
``smq spark-zip``: smq for ``spark-submit --py-files``.

Spark needs Java 17 or newer. Where the machine has none, the ``java`` extra brings a runtime
from PyPI that Spark's launcher cannot start as it is (it asks for a module the runtime leaves
out); smq starts it through a small wrapper (``smq.spark.java_home``). These commands hand that
Java to ``spark-submit`` and to the cluster daemons (``spark-class``).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .._version import install_hint
from ._base import fail, main

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def _java_home() -> str:
    """The JAVA_HOME for Spark: ``$JAVA_HOME``, else that of Java 17+ on PATH, else PyPI's, wrapped."""
    try:
        from ..spark import JavaNotFound, java_home
    except ImportError:
        fail(f"Spark needs PySpark: {install_hint('spark')}")
    try:
        home = java_home()
    except JavaNotFound as error:
        fail(str(error))
    if home is None:  # java on PATH is new enough: the home it lives in
        java = shutil.which("java")
        assert java is not None
        home = str(Path(java).resolve().parent.parent)
    return home


def _spark_tool(name: str) -> str:
    """PySpark's ``name`` script: beside this Python, else on PATH, else in the pyspark package."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    try:
        import pyspark
    except ImportError:
        fail(f"{name} comes with PySpark: {install_hint('spark')}")
    return str(Path(pyspark.__file__).parent / "bin" / name)


@main.command("java-home")
def java_home_command() -> None:
    """Print the JAVA_HOME that Spark should run with.

    For Spark's own scripts, such as the cluster daemons:
    JAVA_HOME="$(smq java-home)" spark-class org.apache.spark.deploy.master.Master
    """
    click.echo(_java_home())


# Everything after the command name is spark-submit's, --help included.
_PASS_THROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False, "help_option_names": []}


@main.command("spark-submit", context_settings=_PASS_THROUGH)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def spark_submit(arguments: tuple[str, ...]) -> None:
    """Run PySpark's spark-submit, every argument passed through, on the Java smq finds.

    Also sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to this Python unless they are set, and
    puts the local files of ``--py-files`` on PYTHONPATH: Spark plans a Python streaming source in
    a PYSPARK_PYTHON process of the driver, whose path lacks them (executors get them from Spark).
    """
    submit = _spark_tool("spark-submit")
    env = dict(os.environ, JAVA_HOME=_java_home())
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    shipped = _local_py_files(arguments)
    if shipped:
        env["PYTHONPATH"] = os.pathsep.join([*shipped, *filter(None, [env.get("PYTHONPATH")])])
    os.execve(submit, [submit, *arguments], env)


def _local_py_files(arguments: tuple[str, ...]) -> list[str]:
    """The local files that ``--py-files`` names among spark-submit's options, as absolute paths
    (those before the application file: what follows it is the application's)."""
    found: list[str] = []
    at = 0
    while at < len(arguments):
        argument = arguments[at]
        if argument == "--py-files" and at + 1 < len(arguments):
            value, at = arguments[at + 1], at + 2
        elif argument.startswith("--py-files="):
            value, at = argument.split("=", 1)[1], at + 1
        elif argument.startswith("-"):
            at += 1 if "=" in argument or argument in _FLAGS else 2
            continue
        else:
            break  # the application file
        for path in value.split(","):
            if path and ("://" not in path or path.startswith("file://")):
                found.append(str(Path(path.removeprefix("file://")).resolve()))
    return found


# spark-submit's options that take no value.
_FLAGS = {"--verbose", "-v", "--supervise", "--help", "-h", "--version"}


# What executors import for the smq format, besides smq: redis-py (pure Python), and the
# backport redis-py needs on Python older than 3.11.3 where it is installed. Not hiredis (a C
# extension: smq does without it, slower), not click (the command line only), not PySpark
# (Spark ships its own to every executor).
_SHIPPED = ("redis", "async_timeout")
_OLD_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every entry's time: the same files make the same zip


def _python_files(folder: Traversable, prefix: str, *, skip: str = "") -> list[tuple[str, Traversable]]:
    """Every ``*.py`` under ``folder`` as (name in the zip, file), ``__pycache__`` and ``skip`` left out."""
    found = []
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name not in ("__pycache__", skip):
            found.extend(_python_files(entry, f"{prefix}{entry.name}/"))
        elif entry.is_file() and entry.name.endswith(".py"):
            found.append((prefix + entry.name, entry))
    return found


def zip_entries() -> list[tuple[str, Traversable]]:
    """The files ``smq spark-zip`` writes: smq's Python files and Lua scripts, then redis-py's."""
    from ..core._scripts import lua_files

    entries = _python_files(importlib.resources.files("smq"), "smq/", skip="lua")
    lua = lua_files()
    entries += [(f"smq/lua/{name}", entry) for name, entry in _python_files(lua, "")]
    for folder, prefix in ((lua, "smq/lua/"), (lua.joinpath("includes"), "smq/lua/includes/")):
        entries += [(prefix + e.name, e) for e in folder.iterdir() if e.is_file() and e.name.endswith(".lua")]
    for package in _SHIPPED:
        if importlib.util.find_spec(package) is not None:
            entries += _python_files(importlib.resources.files(package), f"{package}/")
    return sorted(entries, key=lambda pair: pair[0])


@main.command("spark-zip")
@click.argument("output", type=click.Path(dir_okay=False, writable=True))
def spark_zip(output: str) -> None:
    """Write OUTPUT, a zip of smq for spark-submit --py-files OUTPUT.

    It holds the pure-Python part that Spark executors import for the smq format: the smq package
    with its Lua scripts, and redis-py. Not hiredis, a C extension: without it smq logs one
    warning and packs Redis commands in Python, which is slower. Executors still need Python and
    PySpark's own dependencies (pyarrow); to ship those too, use a packed virtualenv
    (spark-submit --archives).
    """
    entries = zip_entries()
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, entry in entries:
            info = zipfile.ZipInfo(name, _OLD_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entry.read_bytes())
    from .._version import __version__

    packages = sorted({name.split("/")[0] for name, _ in entries} - {"smq"})
    scripts = sum(name.endswith(".lua") for name, _ in entries)
    click.echo(
        f"wrote {output}: smq {__version__} with its {scripts} Lua scripts, and {', '.join(packages)} "
        f"({len(entries)} files); no hiredis, so executors pack commands in Python (slower)"
    )
