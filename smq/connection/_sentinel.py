"""Redis Sentinel: find the primary of a service, and follow it through a failover.

A Sentinel deployment is named by a URL::

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db][?options]
    rediss+sentinel://...      (TLS to the Sentinels and to the data nodes)

The user and password are the data nodes' (smq's Redis user); Sentinels that
ask for a password of their own take ``sentinel_username`` and
``sentinel_password`` options. Connections ask a Sentinel for the current
primary when they open, and a connection that finds its node demoted to a
replica (a ``READONLY`` answer) closes, so the next call asks again: script
calls, the long-poll listener and a worker's heartbeat all reach the new
primary after a failover without a restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_PORT = 26379
_HOST = re.compile(r"\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9_.-]+)")
_OPTIONS = ("sentinel_username", "sentinel_password")


@dataclass(frozen=True)
class SentinelTarget:
    """What a Sentinel URL names."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a Sentinel deployment (``redis+sentinel://``, ``rediss+sentinel://``)."""
    return url.split("://", 1)[0].lower() in SCHEMES


def sentinel_url(sentinels: list[str], service: str) -> str:
    """The ``redis+sentinel://`` URL of Sentinels given as ``host:port`` and a service name."""
    if not sentinels:
        raise ValueError("give at least one Sentinel address (host:port)")
    url = f"redis+sentinel://{','.join(sentinels)}/{service}"
    parse_sentinel_url(url)  # the same checks, the same messages
    return url


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The Sentinels, service and options of a Sentinel URL; ValueError naming what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(f"not a Sentinel URL (redis+sentinel://host:port,.../service): {url!r}")
    parts = urlsplit("redis://" + rest)
    credentials, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = credentials.partition(":")
        username, password = unquote(user) or None, unquote(secret) if colon else None
    sentinels = tuple(_address(given) for given in hosts.split(","))
    path = [piece for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise ValueError(f"a Sentinel URL names its service after the hosts (.../mymaster[/db]): {url!r}")
    service = unquote(path[0])
    db = 0
    if len(path) == 2:
        if not path[1].isascii() or not path[1].isdigit():
            raise ValueError(f"the database of a Sentinel URL must be a number, not {path[1]!r}")
        db = int(path[1])
    options = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"unknown Sentinel URL option {unknown[0]!r}; known: {', '.join(_OPTIONS)}")
    return SentinelTarget(
        sentinels,
        service,
        db,
        tls=scheme.lower() == "rediss+sentinel",
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username", [None])[-1],
        sentinel_password=options.get("sentinel_password", [None])[-1],
    )


def _address(given: str) -> tuple[str, int]:
    host, port = given, str(DEFAULT_PORT)
    if given.startswith("["):
        host, _, tail = given.partition("]")
        host += "]"
        if tail:
            if not tail.startswith(":"):
                raise ValueError(f"Sentinel address {given!r} is not host:port")
            port = tail[1:]
    elif ":" in given:
        host, _, port = given.rpartition(":")
    match = _HOST.fullmatch(host)
    if match is None or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Sentinel address {given!r} is not host:port")
    return match.group("ipv6") or match.group("name"), int(port)


def connect_sentinel(target: SentinelTarget, max_connections: int, options: dict[str, Any]) -> Any:
    """A redis-py client of the service's primary, found through the Sentinels."""
    from redis.sentinel import Sentinel

    tls: dict[str, Any] = {}
    if target.tls:
        tls = {key: value for key, value in options.items() if key.startswith("ssl_")}
        tls["ssl"] = True
    plain = {key: value for key, value in options.items() if not key.startswith("ssl_")}
    sentinel_options: dict[str, Any] = {
        "socket_timeout": plain.get("socket_timeout"),
        "socket_connect_timeout": plain.get("socket_connect_timeout"),
        **tls,
    }
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    if target.sentinel_username is not None:
        sentinel_options["username"] = target.sentinel_username
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    return manager.master_for(  # type: ignore[no-untyped-call]
        target.service,
        db=target.db,
        username=target.username,
        password=target.password,
        max_connections=max_connections,
        **plain,
        **tls,
    )


_NOT_CANDIDATES = {"s_down", "o_down", "disconnected"}
"""Flags of a replica a Sentinel would not promote (nor one of replica priority 0)."""


def sentinel_replicas(pool: Any, connection: Any) -> frozenset[str] | None:
    """The replicas (``host:port``) of the node of ``connection`` that a failover could
    promote, as the Sentinels see them; None when they do not name that node the primary.

    ``pool`` is the Sentinel connection pool of ``connect_sentinel``'s client.
    Every Sentinel that answers is asked: one that names another primary
    makes it None (the Sentinel that led a failover names the promoted
    replica first, the others follow a moment later), and so does no answer
    at all. A replica counts when some Sentinel holds it up (not down, not
    cut off from it, of a priority above 0) and last saw it replicate from
    this node; one that reports another primary (a deposed primary the
    Sentinels have not yet turned into a replica) would not have this node's
    changes whatever smq waited for.
    """
    here = (str(connection.host), int(connection.port))
    found: set[str] | None = None
    for sentinel in pool.sentinel_manager.sentinels:
        try:
            address = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", pool.service_name)
            if not address:
                continue
            host, port = (_str(part) for part in address)
            if (host, int(port)) != here:
                return None
            replicas = sentinel.execute_command("SENTINEL", "replicas", pool.service_name)
        except Exception:  # noqa: BLE001 - a Sentinel down or cut off: ask the others
            continue
        found = found or set()
        for replica in replicas:
            fields = {_str(k): _str(v) for k, v in _pairs(replica)}
            if (
                set(fields.get("flags", "").split(",")) & _NOT_CANDIDATES
                or fields.get("slave-priority") == "0"
            ):
                continue
            following = (fields.get("master-host"), fields.get("master-port")) == (here[0], str(here[1]))
            if fields.get("role-reported") == "slave" and following:
                found.add(f"{fields.get('ip')}:{fields.get('port')}")
    return None if found is None else frozenset(found)


def _pairs(reply: Any) -> Any:
    """The (field, value) pairs of a Sentinel's description of an instance (a map or a flat list)."""
    return reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
