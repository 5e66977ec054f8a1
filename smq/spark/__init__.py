"""smq on Spark: queues as Spark data, and lifecycle analytics that tune visibility timeouts.

Needs the ``spark`` extra (PySpark 4 with Arrow; ``pip install '.[spark]'`` in a checkout) and
Java 17+ (or the ``java`` extra). Importing this package imports no PySpark; the functions do::

    from smq.spark import spark_session

    spark = spark_session()                     # local[*]; the "smq" format registered
    df = spark.read.format("smq").option("queue", "jobs").load()   # a snapshot (peek)
    df.write.format("smq").option("queue", "out").mode("append").save()
    stream = spark.readStream.format("smq").option("queue", "jobs").load()

The data source's options are in ``smq.spark._options``.
"""

from ._java import JavaNotFound, java_home
from ._session import register, spark_session

__all__ = ["JavaNotFound", "java_home", "register", "spark_session"]
