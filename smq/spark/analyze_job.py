"""The lifecycle analytics as a Spark application, for ``spark-submit``.

::

    spark-submit smq/spark/analyze_job.py --input events.jsonl --output report
    spark-submit --master spark://host:7077 smq/spark/analyze_job.py \\
        --queue jobs --redis-url redis://redis:6379/0 --output report

The same job as ``smq analyze``: the master comes from ``spark-submit``. With
``--input`` (files of ``smq events export``, any path Spark reads) the
executors need no smq; with ``--queue`` they read Redis through the ``smq``
data source, so smq must be installed there. The report is written on the
driver, into ``--output``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the job in the session ``spark-submit`` made, print one line per queue."""
    parser = argparse.ArgumentParser(prog="analyze_job.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--input", nargs="+", default=[], metavar="FILE_OR_DIR", help="event files")
    parser.add_argument("--queue", nargs="+", default=[], metavar="NAME", help="queues to read from Redis")
    parser.add_argument("--format", choices=["auto", "jsonl", "parquet"], default="auto")
    parser.add_argument("--redis-url", default=os.environ.get("SMQ_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--cluster", action="store_true", help="the Redis URL names a cluster node")
    parser.add_argument("--output", required=True, help="report folder (on the driver)")
    args = parser.parse_args(argv)
    if bool(args.input) == bool(args.queue):
        parser.error("give --input or --queue (one of them)")

    from smq.cli._output import print_table
    from smq.spark import spark_session
    from smq.spark._analyze import run_job
    from smq.spark._report import summary

    spark = spark_session(app_name="smq-analyze")
    try:
        reports = run_job(
            spark,
            Path(args.output),
            inputs=args.input,
            queues=args.queue,
            url=args.redis_url,
            cluster=args.cluster,
            file_format=args.format,
        )
    finally:
        spark.stop()
    print_table(*summary(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
