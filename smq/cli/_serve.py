"""``smq serve``: the SQS API over HTTP."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from .._errors import InvalidDeclaration, InvalidParameter, SmqError
from ..client._client import Client
from ..connection._settings import Settings
from ..operations import _declared
from ._base import fail as _fail
from ._base import main
from ._connect import redis_for, redis_options, redis_tls_settings, redis_wait_settings


def _access_keys(values: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """(key id -> secret, key id -> account) of ``ID:SECRET[:ACCOUNT]`` values."""
    keys: dict[str, str] = {}
    accounts: dict[str, str] = {}
    for value in values:
        for given in value.replace(",", " ").split():
            key_id, sep, secret = given.partition(":")
            account = ""
            if secret.count(":"):
                secret, _, account = secret.rpartition(":")
                if not re.fullmatch("[0-9]{12}", account):
                    _fail(f"access key {key_id!r}: its account must be 12 digits, not {account!r}")
            if not sep or not key_id or not secret:
                _fail(f"access key {key_id!r}: give it as ID:SECRET or ID:SECRET:ACCOUNT")
            if key_id in keys:
                _fail(f"access key {key_id!r} is given more than once")
            keys[key_id] = secret
            if account:
                accounts[key_id] = account
    return keys, accounts


def _apply_queues(client: Client, declaration: _declared.Declaration) -> None:
    """Apply the declared queues (``--queues``), a line per queue on stderr; an error ends serve."""
    try:
        changes = _declared.apply(client, declaration)
    except InvalidDeclaration as error:
        _fail(str(error))  # names the file already
    except SmqError as error:
        _fail(f"applying {declaration.source}: {error}")
    for change in changes:
        click.echo(f"smq serve: {declaration.source}: {change}", err=True)


# The values --access-log (SMQ_ACCESS_LOG) took when it was an on/off flag, still understood.
_ON = ("true", "1", "yes", "on")
_OFF = ("false", "0", "no", "off", "")


def _access_log_target(value: str) -> str | None:
    """Where access lines go: ``"stderr"``, a file's path, or None (no access log).

    ``auto`` is stderr unless stderr is a terminal: a log collector, a container
    runtime, systemd or CI reads them there, while in a developer's terminal a
    line per request would bury everything else.
    """
    word = value.strip().lower()
    if word == "auto":
        return None if sys.stderr.isatty() else "stderr"
    if word == "stderr" or word in _ON:
        return "stderr"
    if word in _OFF:
        return None
    return value.strip()


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


@main.command()
@redis_options
@click.option(
    "--host", envvar="SMQ_HOST", default="127.0.0.1", show_default=True, help="Address to listen on."
)
@click.option(
    "--port",
    envvar="SMQ_PORT",
    default=9324,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--region",
    envvar="SMQ_REGION",
    default="us-east-1",
    show_default=True,
    help="The server's own region: of unsigned requests, and of the queues under bare names.",
)
@click.option(
    "--account-id",
    envvar="SMQ_ACCOUNT_ID",
    default="000000000000",
    show_default=True,
    help="Account id in queue URLs and ARNs.",
)
@click.option(
    "--public-url",
    envvar="SMQ_PUBLIC_URL",
    default=None,
    help="Base of queue URLs; default: from each request.",
)
@click.option(
    "--access-key",
    "access_keys",
    envvar="SMQ_ACCESS_KEYS",
    multiple=True,
    metavar="ID:SECRET[:ACCOUNT]",
    help="Accept requests signed (SigV4) with this key, acting in ACCOUNT (12 digits; default "
    "--account-id); repeat for more (env SMQ_ACCESS_KEYS).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    envvar="SMQ_NO_AUTH",
    help="Accept unsigned requests on any address (local development only).",
)
@click.option("--max-clock-skew", envvar="SMQ_MAX_CLOCK_SKEW", default=300.0, show_default=True, type=float)
@click.option(
    "--threads",
    envvar="SMQ_THREADS",
    default=16,
    show_default=True,
    type=click.IntRange(1, 1024),
    help="Threads for the Redis calls the event loop does not make itself (long polls that wait hold none).",
)
@click.option(
    "--shutdown-timeout",
    envvar="SMQ_SHUTDOWN_TIMEOUT",
    default=30.0,
    show_default=True,
    type=float,
    help="Seconds a graceful stop waits for requests in flight.",
)
@click.option(
    "--header-timeout",
    envvar="SMQ_HEADER_TIMEOUT",
    default=20.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a client has to send a request's headers; slower connections are closed.",
)
@click.option(
    "--body-timeout",
    envvar="SMQ_BODY_TIMEOUT",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a client has to send a request's body once its headers are in (a long poll's "
    "wait does not count); slower requests get 408 and are closed.",
)
@click.option(
    "--idle-timeout",
    envvar="SMQ_IDLE_TIMEOUT",
    default=75.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a keep-alive connection may wait idle for its next request.",
)
@click.option(
    "--max-connections",
    envvar="SMQ_MAX_CONNECTIONS",
    default=10000,
    show_default=True,
    type=click.IntRange(1),
    help="Open connections at most; at the limit a new connection takes the place of the one "
    "waiting longest for its request (or idle longest), and gets 503 only when all are busy.",
)
@click.option(
    "--max-connections-per-address",
    envvar="SMQ_MAX_CONNECTIONS_PER_ADDRESS",
    default=None,
    type=click.IntRange(0),
    help="Open connections from one client address at most (0: no cap) [default: half of "
    "--max-connections]; behind a proxy or load balancer, raise it to --max-connections.",
)
@click.option(
    "--tls-cert",
    envvar="SMQ_TLS_CERT",
    default=None,
    metavar="FILE",
    help="Serve HTTPS with this certificate (PEM, chain after it); needs --tls-key. "
    "SIGHUP loads both files again.",
)
@click.option(
    "--tls-key",
    envvar="SMQ_TLS_KEY",
    default=None,
    metavar="FILE",
    help="Private key (PEM) of --tls-cert.",
)
@click.option(
    "--metrics-token",
    envvar="SMQ_METRICS_TOKEN",
    default=None,
    metavar="TOKEN",
    help="/metrics answers only Authorization: Bearer TOKEN (16+ characters; Prometheus's "
    "authorization setting).",
)
@click.option(
    "--metrics-port",
    envvar="SMQ_METRICS_PORT",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve /metrics on this port (plain HTTP, on --metrics-host) instead of the API's.",
)
@click.option(
    "--metrics-host",
    envvar="SMQ_METRICS_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address of the --metrics-port listener.",
)
@click.option(
    "--queues",
    "queues_file",
    envvar="SMQ_QUEUES",
    default=None,
    metavar="FILE",
    help="Create or update the queues this TOML file declares before listening, as smq queue apply "
    "does; a file in error stops the server before it listens.",
)
@click.option(
    "--access-log",
    envvar="SMQ_ACCESS_LOG",
    default="auto",
    show_default=True,
    metavar="auto|stderr|off|FILE",
    help="Where the access log (one JSON line per request) goes: stderr, off, or appended to FILE; "
    "auto: stderr unless stderr is a terminal, where it is off and serve says so.",
)
@click.option("--no-access-log", is_flag=True, help="Same as --access-log off.")
@click.option(
    "--consumer-beat-interval",
    envvar="SMQ_CONSUMER_BEAT_INTERVAL",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds between the notes of the SQS clients that received through this server among "
    "their queues' consumers (the console's who consumes a queue).",
)
def serve(
    redis_url: str | None,
    cluster: bool,
    host: str,
    port: int,
    region: str,
    account_id: str,
    public_url: str | None,
    access_keys: tuple[str, ...],
    no_auth: bool,
    max_clock_skew: float,
    threads: int,
    shutdown_timeout: float,
    header_timeout: float,
    body_timeout: float,
    idle_timeout: float,
    max_connections: int,
    max_connections_per_address: int | None,
    tls_cert: str | None,
    tls_key: str | None,
    metrics_token: str | None,
    metrics_port: int | None,
    metrics_host: str,
    access_log: str,
    no_access_log: bool,
    consumer_beat_interval: float,
    queues_file: str | None,
    data_dir: Path,
) -> None:
    """Serve the SQS API (JSON and Query protocols) over HTTP, or HTTPS with --tls-cert.

    Point any SQS client at it: aws sqs --endpoint-url http://127.0.0.1:9324 list-queues
    """
    import asyncio

    from ..server import ServerConfig, log_to_stderr, run
    from ..server._tls import server_context

    keys, key_accounts = _access_keys(access_keys)
    access_to = None if no_access_log else _access_log_target(access_log)
    if keys and no_auth:
        _fail("--access-key and --no-auth exclude each other")
    if not keys and not no_auth and not _is_loopback(host):
        _fail(f"refusing to serve {host} without authentication: pass --access-key ID:SECRET (or --no-auth)")
    try:
        config = ServerConfig(
            region=region,
            account_id=account_id,
            public_url=public_url,
            access_keys=keys,
            key_accounts=key_accounts,
            max_clock_skew=max_clock_skew,
            threads=threads,
            shutdown_timeout=shutdown_timeout,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            idle_timeout=idle_timeout,
            max_connections=max_connections,
            max_connections_per_address=max_connections_per_address,
            tls_cert=tls_cert,
            tls_key=tls_key,
            access_log=access_to is not None,
            metrics_token=metrics_token,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
            consumer_beat_interval=consumer_beat_interval,
        )
        if tls_cert is not None and tls_key is not None:
            server_context(tls_cert, tls_key)  # a bad file: one line now, not at the first connection
    except ValueError as error:
        _fail(str(error))
    # The file's own errors before Redis is reached (or started); the rest once it is.
    declaration = _declared.load(queues_file) if queues_file is not None else None
    try:
        log_to_stderr(access_file=None if access_to in (None, "stderr") else access_to)
    except OSError as error:
        _fail(f"--access-log {access_to}: {error.strerror or error}")
    if not keys:
        click.echo("smq serve: authentication is off (no access keys configured)", err=True)
    if access_to is None and not no_access_log and access_log.strip().lower() == "auto":
        click.echo(
            "smq serve: the access log is off on a terminal; --access-log stderr (or a file) turns it on",
            err=True,
        )
    elif access_to not in (None, "stderr"):
        click.echo(f"smq serve: access log appended to {access_to}", err=True)

    def ready(url: str) -> None:
        click.echo(f"smq serve: listening on {url}")
        sys.stdout.flush()

    def serve_on(url: str) -> None:
        settings = Settings(url=url, cluster=cluster, **redis_tls_settings(url), **redis_wait_settings())
        try:
            client = Client(settings=settings)
        except InvalidParameter as error:
            _fail(f"--redis-url (or SMQ_REDIS_URL): {error}")
        try:
            if declaration is not None:
                _apply_queues(client, declaration)
            asyncio.run(run(client, config, host, port, on_ready=ready))
        except OSError as error:
            _fail(f"cannot listen on {host}:{port}: {error.strerror or error}")
        except SmqError as error:
            _fail(str(error))
        finally:
            client.close()

    with redis_for(redis_url, cluster, data_dir, long_running=True) as url:
        shared = "" if redis_url else " (smq.Client() and smq commands run in this folder use it too)"
        click.echo(f"smq serve: Redis at {url}{shared}", err=True)
        serve_on(url)
