"""``smq java-home`` and ``smq spark-submit``: Spark's own tools on the Java that smq finds.

Spark needs Java 17 or newer. Where the machine has none, ``smq-redis[java]`` brings a runtime
from PyPI that Spark's launcher cannot start as it is (it asks for a module the runtime leaves
out); smq starts it through a small wrapper (``smq.spark.java_home``). These commands hand that
Java to ``spark-submit`` and to the cluster daemons (``spark-class``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from .._version import install_hint
from ._base import fail, main


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

    Also sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON to this Python unless they are set.
    """
    submit = _spark_tool("spark-submit")
    env = dict(os.environ, JAVA_HOME=_java_home())
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.execve(submit, [submit, *arguments], env)
