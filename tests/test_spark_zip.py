"""smq without hiredis, and from the zip ``smq spark-zip`` writes (for ``spark-submit --py-files``).

Each case runs a Python process of its own in which ``import hiredis`` fails (a
``sitecustomize`` on ``PYTHONPATH`` puts ``None`` in ``sys.modules["hiredis"]``, as if the C
extension were missing), against the test's real Redis: smq logs one line and works, packing
commands with redis-py's Python packer, and redis-py reads replies with its Python parser.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import smq
from smq.core._scripts import lua_dir, sources

SMQ = str(Path(sys.executable).parent / "smq")

CLIENT = """
import json, sys

import redis.utils
import smq
from smq.core._scripts import sources

client = smq.Client(sys.argv[1])
queue = client.get_queue("plain")
for start in range(0, 25, 10):
    queue.send_batch([smq.SendEntry(str(n), f"m-{n}") for n in range(start, min(start + 10, 25))])
received = []
while len(received) < 25:
    batch = queue.receive(10, wait_time_seconds=1)
    received += batch
    queue.delete_batch([smq.DeleteEntry(str(n), m.receipt_handle) for n, m in enumerate(batch)])
fifo = client.get_queue("ordered.fifo")
fifo.send("first", message_group_id="g", deduplication_id="d1")
(message,) = fifo.receive(1)
fifo.delete(message.receipt_handle)
print(json.dumps({
    "smq": smq.__file__,
    "redis": redis.utils.__file__,
    "hiredis_in_redis_py": redis.utils.HIREDIS_AVAILABLE,
    "bodies": sorted(m.body for m in received),
    "fifo": message.body,
    "digests": {name: s.sha for name, s in sources().items()},
}))
"""


def _without_hiredis(tmp_path: Path, *first_on_path: str) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\n\nsys.modules['hiredis'] = None  # import fails\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*first_on_path, str(shim)])}


def _run_client(redis_client: smq.Client, env: dict[str, str], cwd: Path) -> tuple[dict[str, object], str]:
    redis_client.create_queue("plain")
    redis_client.create_queue("ordered.fifo")
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, redis_client.settings.url],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    info = redis_client.get_queue("plain").attributes()
    assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 25)
    return json.loads(done.stdout), done.stderr


WARNING = "hiredis could not be loaded: smq packs Redis commands in Python, which is slower"


def test_smq_works_without_hiredis_and_says_so_once(redis_client: smq.Client, tmp_path: Path) -> None:
    found, stderr = _run_client(redis_client, _without_hiredis(tmp_path), tmp_path)
    assert found["bodies"] == sorted(f"m-{n}" for n in range(25)) and found["fifo"] == "first"
    assert found["hiredis_in_redis_py"] is False  # redis-py reads replies in Python too
    assert stderr.splitlines() == [WARNING]
    assert found["digests"] == {name: s.sha for name, s in sources().items()}


@pytest.fixture
def spark_zip(tmp_path: Path) -> Path:
    out = tmp_path / "smq.zip"
    done = subprocess.run([SMQ, "spark-zip", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out}: smq {smq.__version__} with its ") and "redis" in done.stdout
    return out


def test_the_zip_holds_smq_its_scripts_and_redis_py_and_nothing_compiled(spark_zip: Path) -> None:
    names = set(zipfile.ZipFile(spark_zip).namelist())
    scripts = {f"smq/lua/{p.relative_to(lua_dir()).as_posix()}" for p in lua_dir().rglob("*.lua")}
    assert scripts <= names and "smq/lua/__init__.py" in names
    assert {"smq/__init__.py", "smq/core/_scripts.py", "smq/spark/_source.py", "redis/__init__.py"} <= names
    assert {name.split("/")[0] for name in names} <= {"smq", "redis", "async_timeout"}
    assert all(name.endswith((".py", ".lua")) for name in names)  # no C extension, no bytecode
    assert not any("__pycache__" in name for name in names)


def test_smq_runs_from_the_zip_without_hiredis(
    redis_client: smq.Client, spark_zip: Path, tmp_path: Path
) -> None:
    found, stderr = _run_client(redis_client, _without_hiredis(tmp_path, str(spark_zip)), tmp_path)
    assert str(found["smq"]).startswith(f"{spark_zip}{os.sep}smq")  # imported from the zip
    assert str(found["redis"]).startswith(f"{spark_zip}{os.sep}redis")
    assert found["bodies"] == sorted(f"m-{n}" for n in range(25))
    assert stderr.splitlines() == [WARNING]
    assert found["digests"] == {name: s.sha for name, s in sources().items()}  # same scripts, byte for byte


def test_spark_zip_writes_the_same_zip_twice(spark_zip: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.zip"
    subprocess.run([SMQ, "spark-zip", str(again)], check=True, capture_output=True, timeout=60)
    assert again.read_bytes() == spark_zip.read_bytes()


def test_spark_submit_puts_the_local_py_files_on_the_drivers_python_path(tmp_path: Path) -> None:
    from smq.cli._spark import _local_py_files

    arguments = (
        "--master",
        "local[2]",
        "-v",
        "--py-files",
        "smq.zip,hdfs://x/y.zip,file:///abs/z.zip",
        "--conf",
        "a=b",
        "--py-files=other.zip",
        "job.py",
        "--py-files",
        "app-argument.zip",
    )
    assert _local_py_files(arguments) == [
        str(Path("smq.zip").resolve()),
        "/abs/z.zip",
        str(Path("other.zip").resolve()),
    ]
    assert _local_py_files(("job.py",)) == []
