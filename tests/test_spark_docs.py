"""The Spark example of docs/spark.md runs as written, on real PySpark and a real Redis.

It runs in a Python process of its own, in a folder of the test's own (its stream writes the
relative paths ``out/`` and ``ck/``, which Spark resolves against its own working directory),
with ``SMQ_REDIS_URL`` naming the test's Redis. The example's stream ends by itself (its
trigger is AvailableNow); the test adds only a check that it took every message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import smq

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parent.parent / "docs" / "spark.md"
ENDING = """
import time as _time

_queue = smq.Client(url).get_queue("orders")
_deadline = _time.monotonic() + 150
while _time.monotonic() < _deadline:
    _info = _queue.attributes()
    if _info.visible + _info.in_flight == 0 and _info.counters.get("deleted", 0) == 1000:
        break
    _time.sleep(0.2)
query.stop()
"""


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _run(script: Path, redis_client: smq.Client) -> None:
    env = {**os.environ, "SMQ_REDIS_URL": redis_client.settings.url}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_format_example_runs_as_written(redis_client: smq.Client, tmp_path: Path) -> None:
    example, _ = python_blocks(DOC.read_text())
    script = tmp_path / "example.py"
    script.write_text(example + ENDING)
    _run(script, redis_client)
    info = redis_client.get_queue("orders").attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 1000)
    table = pq.read_table(tmp_path / "out")
    assert sorted(table.column("body").to_pylist()) == sorted(f"order {n}" for n in range(1000))


def test_the_foreach_batch_recipe_runs_as_written(redis_client: smq.Client, tmp_path: Path) -> None:
    """The recipe, its blocks' indentation taken off, after the example's lines up to its stream."""
    example, recipe = python_blocks(DOC.read_text())
    setup = example[: example.index("# Stream:")]
    script = tmp_path / "recipe.py"
    script.write_text(setup + textwrap.dedent(recipe) + ENDING)
    _run(script, redis_client)
    table = pq.read_table(tmp_path / "each")
    assert sorted(table.column("body").to_pylist()) == sorted(f"order {n}" for n in range(1000))
