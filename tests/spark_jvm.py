"""The options of the Spark JVMs the tests start: drivers, a standalone cluster's daemons, executors.

Each Spark application a test runs costs a driver JVM (and on the standalone cluster two executor
JVMs), which spend most of their start loading some 10,000 of Spark's classes. Two options make
them cheaper without changing what runs in them:

- ``QUICK``: the quick compiler only (C2's optimising compile of Spark's code costs more CPU
  than it saves in a life of seconds) and one GC thread. On 2 cores this about halved the CPU of
  a standalone-cluster job (170 s to 86 s).
- a class data sharing archive (the JDK's ``-XX:SharedArchiveFile``) of the classes a small
  local job loads: each JVM maps them instead of parsing and verifying them again. It is dumped
  once (``-XX:ArchiveClassesAtExit``, about 20 s) into the suite's cache folder, one per Java
  and PySpark. An empty local application: 9.2 to 6.0 CPU seconds; a cluster job of
  ``test_spark_cluster.py``: 42 to 37.

:func:`use_in_this_process` puts both into ``SPARK_SUBMIT_OPTS`` for the JVMs this process
starts from then on (unless the caller set that variable before the run). A JVM that cannot use
the archive (another Java, say) loads its classes as usual: the JVM's own notes, warnings
included, go to stderr, never into a job's stdout.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUICK = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: The JVM's unified logging writes warnings to stdout by default, where a test reads the job's
#: own output: to stderr instead.
_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"

#: Set before the run by the caller: left as it is. (``QUICK`` is the suite's own, set by
#: conftest.py in the process that started this one: pytest-xdist's workers see it.)
_CALLERS_OPTIONS = os.environ.get("SPARK_SUBMIT_OPTS", QUICK)

_CACHE = Path(sys.executable).parent.parent / "smq-test-cache" / "spark-class-archive"

#: The job whose classes the archive holds: what most tests' jobs do first (a session, a
#: DataFrame of rows, a shuffle, a Python UDF, a micro-batch of a streaming query).
_WARM_JOB = """
from pyspark.sql.functions import udf
from smq.spark import spark_session

spark = spark_session("local[1]", app_name="smq-tests-class-archive", **{"spark.ui.enabled": "false"})
rows = spark.range(0, 100, 1, 2).selectExpr("concat('row ', id) AS body", "id % 3 AS part")
same = udf(lambda body: body, "string")
rows.select(same("body").alias("body"), "part").groupBy("part").count().collect()
rows.select("body").distinct().count()
query = (
    spark.readStream.format("rate").option("rowsPerSecond", "50").load()
    .writeStream.format("memory").queryName("warm").start()
)
query.processAllAvailable()
query.stop()
spark.stop()
"""


def options() -> str:
    """The JVM options for every Spark JVM of the tests: ``QUICK``, and the class archive's
    where it could be made."""
    archive = class_archive()
    if archive is None:
        return QUICK
    return f"{QUICK} -Xshare:auto -XX:SharedArchiveFile={archive} {_LOG_TO_STDERR}"


def use_in_this_process() -> None:
    """``SPARK_SUBMIT_OPTS`` (read by every ``spark-submit``, PySpark's local sessions included) is
    :func:`options` for the JVMs this process starts from now on, unless set before the run."""
    if _CALLERS_OPTIONS == QUICK:
        os.environ["SPARK_SUBMIT_OPTS"] = options()


@functools.cache
def class_archive() -> Path | None:
    """The class archive for this Java and this PySpark, dumped first if missing (once across the
    workers of a run, and the runs of a virtualenv); None where the dump failed."""
    import pyspark

    from conftest import file_lock
    from spark_cluster import spark_java_home

    java = (Path(spark_java_home()) / "bin" / "java").resolve()
    made = java.stat()
    key = hashlib.sha256(f"{java} {made.st_size} {made.st_mtime_ns}".encode()).hexdigest()[:12]
    archive = _CACHE / f"pyspark-{pyspark.__version__}-java-{key}.jsa"
    with file_lock(_CACHE / "dump.lock"):
        if archive.exists():
            return archive
        if _dump(archive):
            return archive
    return None


def _dump(archive: Path) -> bool:
    """Run ``_WARM_JOB`` in local mode with ``-XX:ArchiveClassesAtExit``; the archive in place on success."""
    from conftest import patience

    folder = Path(tempfile.mkdtemp(prefix="smq-class-archive-"))
    try:
        (folder / "warm.py").write_text(_WARM_JOB)
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")  # on the archive's disk
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{QUICK} -XX:ArchiveClassesAtExit={partial} {_LOG_TO_STDERR}",
        }
        smq = str(Path(sys.executable).parent / "smq")
        try:
            done = subprocess.run(
                [smq, "spark-submit", "--master", "local[1]", str(folder / "warm.py")],
                cwd=folder,
                env=env,
                capture_output=True,
                timeout=patience(300),
            )
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            return False
        if done.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            return False
        os.replace(partial, archive)  # whole or not at all: another run may map it at once
        return True
    finally:
        shutil.rmtree(folder, ignore_errors=True)
