"""The smq format over Spark Connect: a Connect server the test starts (a Spark JVM with the
Connect plugin, in a process of its own, on a port it picks itself), and a client session in
another process that registers the data source over gRPC and writes, reads and streams a queue.

The data source runs in the server's Python workers (this interpreter, where smq is installed);
the client only sends the registration (the class, pickled by reference) and the plans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import smq

pytestmark = pytest.mark.slow
if not os.environ.get("CI"):  # CI installs the spark-connect extra: there, a missing one fails
    pytest.importorskip("grpc", reason="the spark-connect extra is not installed")

SERVER = """
import sys
import time

from smq.spark import spark_session

conf = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.connect.grpc.binding.port": "0",  # a free port, which the server tells below
    "spark.ui.enabled": "false",
}
spark = spark_session("local[2]", app_name="smq-connect-server", **conf)
service = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.connect.service.SparkConnectService$")
port = service.getMethod("localPort", None).invoke(service.getField("MODULE$").get(None), None)
print("port", port, flush=True)
sys.stdin.read()  # until the test closes it
"""

CLIENT = """
import os
import sys

import smq
from smq.spark import spark_session

url, folder = os.environ["SMQ_REDIS_URL"], sys.argv[2]
spark = spark_session(remote=sys.argv[1])
print("session", type(spark).__module__)
rows = spark.range(0, 200, 1, 4).selectExpr("concat('row ', id) AS body")
rows.write.format("smq").option("url", url).option("queue", "connect").option("writeId", "w1").mode(
    "append"
).save()
snapshot = spark.read.format("smq").option("url", url).option("queue", "connect").load()
print("read", snapshot.count(), snapshot.select("body").distinct().count())
query = (
    spark.readStream.format("smq").option("url", url).option("queue", "connect")
    .option("maxMessagesPerBatch", "50").load()
    .writeStream.format("parquet").option("path", f"{folder}/out")
    .option("checkpointLocation", f"{folder}/ck").trigger(availableNow=True).start()
)
query.awaitTermination(120)
written = spark.read.parquet(f"{folder}/out")
print("streamed", written.count(), written.select("message_id").distinct().count(), query.exception())
spark.stop()
"""


@pytest.fixture
def connect_server(tmp_path: Path) -> Iterator[str]:
    """A Spark Connect server of the test's own; its ``sc://`` address."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # the JVM's start: up to a minute on a busy machine
        assert line.startswith("port "), f"the Connect server did not start: {line!r}"
        yield f"sc://127.0.0.1:{int(line.split()[1])}"
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # the JVM and its Python workers, by the group's pid
        server.wait(timeout=30)


def test_the_format_works_through_a_spark_connect_client(
    connect_server: str, redis_client: smq.Client, tmp_path: Path
) -> None:
    queue = redis_client.create_queue("connect")
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, connect_server, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "session pyspark.sql.connect.session" in done.stdout
    assert "read 200 200" in done.stdout
    assert "streamed 200 200 None" in done.stdout, done.stdout
    info = queue.attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 200)
