"""A SparkSession with the smq data source registered, on a Java that works here."""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(
    master: str | None = None, *, app_name: str = "smq", remote: str | None = None, **conf: str
) -> Any:
    """Get or create a SparkSession and register the ``smq`` data source on it.

    ``master`` defaults to ``local[*]``, except under ``spark-submit``, whose
    ``--master`` stands. ``conf`` holds Spark settings, passed as
    ``**{"spark.sql.shuffle.partitions": "4"}``. Java comes from
    ``smq.spark.java_home``; Python workers use this interpreter unless
    ``PYSPARK_PYTHON`` says otherwise.

    ``remote`` (``sc://host:15002``) makes a Spark Connect client session instead,
    which needs no Java here (the ``spark-connect`` extra); the server's Python
    workers run the data source, so smq must be installed where the server runs.
    """
    from pyspark.sql import SparkSession

    if remote is not None:
        builder = SparkSession.builder.remote(remote)
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        register(spark)
        return spark
    from ._java import java_home

    home = java_home()
    if home is not None:
        os.environ["JAVA_HOME"] = home
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not under spark-submit (which starts the JVM first and sets this), so
        # nothing has chosen a master yet.
        builder = builder.master("local[*]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: Any) -> None:
    """Register the ``smq`` format on ``spark`` (``spark.read.format("smq")`` and friends)."""
    from ._source import SmqDataSource

    spark.dataSource.register(SmqDataSource)
