"""smq.spark's surface and its promise to import nothing heavy until used."""

from __future__ import annotations

import subprocess
import sys

import smq.spark


def test_the_spark_surface_is_pinned() -> None:
    assert sorted(smq.spark.__all__) == ["JavaNotFound", "java_home", "register", "spark_session"]
    for name in smq.spark.__all__:
        assert getattr(smq.spark, name) is not None


def test_importing_smq_spark_imports_no_pyspark_and_starts_no_java() -> None:
    code = (
        "import sys, smq.spark\n"
        "roots = ('pyspark', 'py4j', 'pyarrow', 'matplotlib')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
