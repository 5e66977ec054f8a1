"""A streaming query over an smq queue, run as its own process by tests/test_spark_stream.py.

Each micro-batch appends "<batch id> <message id>" lines to --out. With --crash
the process kills itself (SIGKILL) right after writing its first non-empty
batch's output, before Spark commits that batch. Otherwise it runs until
--expect distinct messages are done and the queue is empty, then stops.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import smq
from smq.spark import spark_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--url", "--queue", "--checkpoint", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--visibility-timeout", default="3")
    args = parser.parse_args()
    out = Path(args.out)
    spark = spark_session("local[2]", **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    stream = (
        spark.readStream.format("smq")
        .option("url", args.url)
        .option("queue", args.queue)
        .option("visibilityTimeout", args.visibility_timeout)
        .option("maxMessagesPerBatch", "100")
        .load()
    )

    def each(batch: object, batch_id: int) -> None:
        ids = [row.message_id for row in batch.select("message_id").collect()]  # type: ignore[attr-defined]
        with out.open("a") as file:
            file.writelines(f"{batch_id} {message_id}\n" for message_id in ids)
        if args.crash and ids:
            os.kill(os.getpid(), signal.SIGKILL)

    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    queue = smq.Client(args.url).get_queue(args.queue)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = {line.split()[1] for line in out.read_text().splitlines()} if out.exists() else set()
        info = queue.attributes()
        if len(done) >= args.expect and info.visible + info.in_flight + info.delayed == 0:
            break
        time.sleep(0.2)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
