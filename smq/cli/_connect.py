"""Which Redis a command talks to: ``--redis-url``, or the embedded one of ``smq serve``."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import click
import redis

from .._errors import InvalidParameter
from ..client._client import Client
from ..connection._sentinel import sentinel_url
from ..connection._settings import Settings
from ..connection._tls import check_client_files, is_tls_url
from ._base import fail

F = TypeVar("F", bound=Callable[..., Any])


_SERVER_KEY = "smq.redis_server"
_TLS_KEY = "smq.redis_tls"
_SENTINEL_KEY = "smq.sentinel"
_WAIT_KEY = "smq.wait"


def _remember_server(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta[_SERVER_KEY] = value


def _remember(group: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """An option callback that keeps the option's value (None for an empty one) under ``group``
    in the context, for the helpers that read it (``_given``) rather than each command."""

    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        assert param.name is not None
        # An empty text (or no values) is None; 0 and False stay: --wait-replicas 0 means 0.
        ctx.meta.setdefault(group, {})[param.name] = None if value in ("", ()) else value

    return remember


def _given(group: str) -> dict[str, Any]:
    """The options of ``group`` the running command was given (see ``_remember``)."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(group, {})) if ctx is not None else {}


def _sentinel_from_options(redis_url: str | None) -> str | None:
    """The ``redis+sentinel://`` URL of ``--sentinel`` and ``--sentinel-service``, if given."""
    given = _given(_SENTINEL_KEY)
    addresses = [a for value in given.get("sentinels") or () for a in value.replace(",", " ").split()]
    if not addresses:
        return None
    if redis_url:
        fail("--sentinel and --redis-url exclude each other (a redis+sentinel:// URL may name both)")
    try:
        return sentinel_url(addresses, given.get("sentinel_service") or "mymaster")
    except ValueError as error:
        fail(str(error))


def redis_options(command: F) -> F:
    """Add ``--redis-url``, ``--cluster`` and ``--data-dir`` (keywords ``redis_url``, ``cluster``,
    ``data_dir``) to a command; pass them to ``open_client``. ``--redis-server`` (the binary
    of an embedded server this command may start) reaches ``redis_for`` through the context,
    and so do ``--redis-tls-ca``, ``--redis-tls-cert`` and ``--redis-tls-key`` (see
    ``redis_tls_settings``) and ``--wait-replicas``, ``--wait-timeout`` and ``--wait-aof``
    (see ``redis_wait_settings``)."""
    options = [
        click.option(
            "--redis-url",
            envvar="SMQ_REDIS_URL",
            default=None,
            metavar="URL",
            help="Redis to use, redis://host:port/db or unix:///path (env SMQ_REDIS_URL); "
            "default: the embedded Redis in --data-dir.",
        ),
        click.option(
            "--sentinel",
            "sentinels",
            envvar="SMQ_SENTINELS",
            multiple=True,
            metavar="HOST:PORT",
            expose_value=False,
            callback=_remember(_SENTINEL_KEY),
            help="A Redis Sentinel to ask for the primary (repeat, or comma-separate in env SMQ_SENTINELS); "
            "the same as --redis-url redis+sentinel://HOST:PORT,.../SERVICE.",
        ),
        click.option(
            "--sentinel-service",
            "sentinel_service",
            envvar="SMQ_SENTINEL_SERVICE",
            default="mymaster",
            show_default=True,
            metavar="NAME",
            expose_value=False,
            callback=_remember(_SENTINEL_KEY),
            help="The service (master name) the Sentinels watch (env SMQ_SENTINEL_SERVICE).",
        ),
        click.option(
            "--cluster",
            is_flag=True,
            envvar="SMQ_CLUSTER",
            help="The Redis URL names a node of a Redis Cluster (env SMQ_CLUSTER).",
        ),
        click.option(
            "--data-dir",
            envvar="SMQ_DATA_DIR",
            default=".smq",
            show_default=True,
            type=click.Path(file_okay=False, path_type=Path),
            help="Folder of the embedded Redis, as smq serve uses it (env SMQ_DATA_DIR).",
        ),
        click.option(
            "--redis-server",
            envvar="SMQ_REDIS_SERVER",
            default=None,
            metavar="PATH",
            expose_value=False,
            callback=_remember_server,
            help="Server binary to start when no Redis runs in --data-dir (env SMQ_REDIS_SERVER); "
            "default: the embedded Valkey of smq's embedded extra. "
            "A redis-server on PATH is used only if named.",
        ),
        click.option(
            "--redis-tls-ca",
            "redis_tls_ca",
            envvar="SMQ_REDIS_TLS_CA",
            default=None,
            metavar="FILE",
            expose_value=False,
            callback=_remember(_TLS_KEY),
            help="CA file (PEM) that signed the certificate of a rediss:// Redis (env SMQ_REDIS_TLS_CA); "
            "default: the system's CAs.",
        ),
        click.option(
            "--redis-tls-cert",
            "redis_tls_cert",
            envvar="SMQ_REDIS_TLS_CERT",
            default=None,
            metavar="FILE",
            expose_value=False,
            callback=_remember(_TLS_KEY),
            help="Client certificate (PEM) for a rediss:// Redis that asks for one; needs "
            "--redis-tls-key (env SMQ_REDIS_TLS_CERT).",
        ),
        click.option(
            "--redis-tls-key",
            "redis_tls_key",
            envvar="SMQ_REDIS_TLS_KEY",
            default=None,
            metavar="FILE",
            expose_value=False,
            callback=_remember(_TLS_KEY),
            help="Private key (PEM) of --redis-tls-cert (env SMQ_REDIS_TLS_KEY).",
        ),
        click.option(
            "--wait-replicas",
            envvar="SMQ_WAIT_REPLICAS",
            type=click.IntRange(0, 1000),
            default=None,
            metavar="N",
            expose_value=False,
            callback=_remember(_WAIT_KEY),
            help="Replicas that must have each change before a call answers (Redis WAIT); when fewer "
            "confirm within --wait-timeout, the call fails with its outcome unknown. Default: 1 where "
            "Redis has replicas, else 0; 0 answers sooner, but a failover may lose acknowledged "
            "changes (env SMQ_WAIT_REPLICAS).",
        ),
        click.option(
            "--wait-timeout",
            envvar="SMQ_WAIT_TIMEOUT",
            type=click.FloatRange(0.001, None),
            default=1.0,
            show_default=True,
            metavar="SECONDS",
            expose_value=False,
            callback=_remember(_WAIT_KEY),
            help="How long a change waits for --wait-replicas (env SMQ_WAIT_TIMEOUT).",
        ),
        click.option(
            "--wait-aof",
            is_flag=True,
            envvar="SMQ_WAIT_AOF",
            expose_value=False,
            callback=_remember(_WAIT_KEY),
            help="Wait for each change to be on disk, in the append-only files of the primary and of "
            "--wait-replicas replicas (WAITAOF: Redis 7.2 or later, or Valkey) (env SMQ_WAIT_AOF).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _answers(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    try:
        with redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2) as probe:
            return bool(probe.ping())
    except (redis.RedisError, OSError):
        return False


@contextmanager
def open_client(
    redis_url: str | None,
    cluster: bool,
    data_dir: Path,
    *,
    long_running: bool = False,
    **settings: Any,
) -> Iterator[Client]:
    """A client for one command; closes what it opened (see ``redis_for``).

    ``settings`` are more ``Settings`` fields (``allow_eviction=True``...).
    """
    with redis_for(redis_url, cluster, data_dir, long_running=long_running) as url:
        tls = redis_tls_settings(url)
        wait = redis_wait_settings()
        try:
            client = Client(settings=Settings(url=url, cluster=cluster, **tls, **wait, **settings))
        except InvalidParameter as error:
            fail(f"--redis-url (or SMQ_REDIS_URL): {error}")
        with client:
            yield client


class WaitSettings(TypedDict, total=False):
    """The wait fields of ``Settings``."""

    wait_replicas: int | None
    wait_timeout: float
    wait_aof: bool


def redis_wait_settings() -> WaitSettings:
    """The ``Settings`` wait fields the running command was given (``--wait-replicas``...),
    checked against each other: a bad combination ends the command with one line."""
    given = _given(_WAIT_KEY)
    wait = WaitSettings()
    if given.get("wait_replicas") is not None:
        wait["wait_replicas"] = int(given["wait_replicas"])
    if given.get("wait_timeout") is not None:
        wait["wait_timeout"] = float(given["wait_timeout"])
    if given.get("wait_aof"):
        wait["wait_aof"] = True
    try:
        Settings(url="redis://", **wait)
    except ValueError as error:
        fail(f"--wait-timeout: {error}")
    return wait


class TlsFiles(TypedDict, total=False):
    """The TLS fields of ``Settings``."""

    tls_ca: str | None
    tls_cert: str | None
    tls_key: str | None


def redis_tls_settings(url: str) -> TlsFiles:
    """The ``Settings`` TLS fields the running command was given, checked: a missing or
    unreadable file, a key without its certificate, or TLS files for a URL that is not
    ``rediss://`` end the command with one line."""
    given = _given(_TLS_KEY)
    if not any(given.values()):
        return TlsFiles()
    if not is_tls_url(url):
        fail("--redis-tls-ca, --redis-tls-cert and --redis-tls-key need a rediss:// --redis-url")
    try:
        check_client_files(given.get("redis_tls_ca"), given.get("redis_tls_cert"), given.get("redis_tls_key"))
    except ValueError as error:
        fail(f"Redis TLS: {error}")
    return TlsFiles(
        tls_ca=given.get("redis_tls_ca"),
        tls_cert=given.get("redis_tls_cert"),
        tls_key=given.get("redis_tls_key"),
    )


@contextmanager
def redis_for(
    redis_url: str | None, cluster: bool, data_dir: Path, *, long_running: bool = False
) -> Iterator[str]:
    """The Redis URL a command uses; stops what it started.

    With a URL, that one. Without one, the embedded Redis of ``smq serve``
    in ``data_dir/redis``: the running one if its socket answers, else one
    started for this command (AOF keeps the data for the next command). A
    short command keeps the one it started to itself, and others wait their
    turn; a ``long_running`` one (``smq serve``, ``smq worker``) shares it
    with the commands that come while it runs, and stops it when it ends.
    """
    redis_url = _sentinel_from_options(redis_url) or redis_url
    if redis_url:
        yield redis_url
        return
    if cluster:
        fail("--cluster needs --redis-url (the embedded Redis is not a cluster)")
    directory = data_dir / "redis"
    socket_path = directory / "redis.sock"
    directory.mkdir(parents=True, exist_ok=True)
    # One redis-server per AOF: commands that start their own take turns.
    with open(directory / "cli.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            click.echo(f"smq: waiting for another smq command using the Redis in {directory}", err=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if _answers(socket_path):  # smq serve, a worker, or a redis-server of yours runs there
            fcntl.flock(lock, fcntl.LOCK_UN)
            yield f"unix://{socket_path.resolve()}"
            return
        yield from _embedded(directory, long_running, lambda: fcntl.flock(lock, fcntl.LOCK_UN))


def chosen_server() -> str | None:
    """The ``--redis-server`` of the running command (or ``SMQ_REDIS_SERVER``), if any."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_SERVER_KEY) if ctx is not None else None


def _embedded(directory: Path, long_running: bool, unlock: Callable[[], None]) -> Iterator[str]:
    from ..embedded import EmbeddedRedis, server_identity

    try:
        server = EmbeddedRedis(directory, server=chosen_server())
    except FileNotFoundError as error:
        fail(str(error))
    try:
        what = str(server_identity(server.server))
    except RuntimeError as error:
        fail(" ".join(str(error).split()))
    if long_running:
        said = f"starting {what}; other smq commands use it until this one stops"
    else:
        said = f"starting {what} for this command (smq serve keeps one running; --redis-url picks another)"
    click.echo(f"smq: no Redis runs in {server.directory}: {said}", err=True)
    try:
        server.start()
    except RuntimeError as error:  # ServerMismatch included: one line naming both servers
        fail(" ".join(str(error).split()))
    try:
        if long_running:
            unlock()  # from now on, commands that come find it answering and use it
        yield server.url
    finally:
        server.stop()
