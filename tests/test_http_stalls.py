"""Slow and stalled clients against a real `smq serve`: request headers and bodies
must arrive in time, idle keep-alive connections end, the number of connections
is bounded, and with access keys a signed payload hash lets the server refuse a
bad signature before it waits for the body. Timeouts here are short (1 s) so
that each test takes seconds."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from http_support import BIN, KEY_ID, REGION, SECRET, Server, json_client
from metrics_support import scrape
from smq.embedded import EmbeddedRedis

SHORT = ("--header-timeout", "1", "--body-timeout", "1")
# How long past a 1 s timeout a connection may take to be closed on a loaded machine.
SLACK = 4.0


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _until_closed(sock: socket.socket, within: float) -> tuple[float, bytes]:
    """Read until the server closes the connection; (seconds it took, bytes received).

    Fails if the connection is still open after ``within`` seconds.
    """
    started = time.monotonic()
    deadline = started + within
    received = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"the server kept the connection open for {within} s (got {received!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return time.monotonic() - started, received
        received += chunk


def _headers(url: str, body_length: int, extra: dict[str, str] | None = None) -> bytes:
    fields = {
        "Host": urlsplit(url).netloc,
        "X-Amz-Target": "AmazonSQS.ListQueues",
        "Content-Type": "application/x-amz-json-1.0",
        "Content-Length": str(body_length),
        **(extra or {}),
    }
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"POST / HTTP/1.1\r\n{lines}\r\n".encode()


def _list_queues(url: str) -> int:
    """A whole, normal request on a fresh connection: its status."""
    with _connect(url) as sock:
        sock.sendall(_headers(url, 2, {"Connection": "close"}) + b"{}")
        _, reply = _until_closed(sock, 10)
    return int(reply.split(b" ", 2)[1])


@pytest.fixture
def short_server(http_redis: EmbeddedRedis) -> Iterator[Server]:
    """No authentication, 1 s for headers and for bodies, a long keep-alive."""
    server = Server(http_redis.url, "--no-auth", *SHORT, "--idle-timeout", "60")
    yield server
    server.stop()


# -- bodies -------------------------------------------------------------------------


def test_a_body_that_stops_coming_is_answered_408_and_its_connection_closed(short_server: Server) -> None:
    with _connect(short_server.url) as sock:
        sock.sendall(_headers(short_server.url, 100) + b"{")
        took, reply = _until_closed(sock, 1 + SLACK)
    assert took >= 0.9
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert b"RequestTimeout" in reply and b"Connection: close" in reply
    assert "Traceback" not in short_server.logs()
    assert _list_queues(short_server.url) == 200


def test_with_access_keys_stalled_headers_and_bodies_are_closed_as_well(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}", *SHORT)
    try:
        with _connect(server.url) as headers_only, _connect(server.url) as part_body:
            headers_only.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
            part_body.sendall(_headers(server.url, 100) + b"{")  # unsigned: its body is read first
            took, reply = _until_closed(part_body, 1 + SLACK)
            assert reply.startswith(b"HTTP/1.1 408 ") and took >= 0.9, reply
            took, reply = _until_closed(headers_only, 1 + SLACK)
            assert reply == b""
    finally:
        server.stop()


def test_a_body_sent_in_time_in_pieces_is_served(short_server: Server) -> None:
    body = json.dumps({"QueueNamePrefix": "none-such"}).encode()
    with _connect(short_server.url) as sock:
        sock.sendall(_headers(short_server.url, len(body), {"Connection": "close"}) + body[:5])
        # A pause short of the 1 s body timeout by far: on a loaded machine the server may see
        # the second piece late (a 0.3 s pause once came to a 408).
        time.sleep(0.1)
        sock.sendall(body[5:])
        _, reply = _until_closed(sock, 10)
    assert reply.startswith(b"HTTP/1.1 200 "), reply


# -- headers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [b"", b"POS", b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Tar"],
    ids=["nothing", "part-of-the-request-line", "part-of-the-headers"],
)
def test_headers_that_stop_coming_close_the_connection(short_server: Server, sent: bytes) -> None:
    with _connect(short_server.url) as sock:
        sock.sendall(sent)
        took, reply = _until_closed(sock, 1 + SLACK)
    assert took >= 0.9 and reply == b""
    assert "Traceback" not in short_server.logs()


def test_the_next_request_on_a_kept_alive_connection_has_the_same_time_for_its_headers(
    short_server: Server,
) -> None:
    with _connect(short_server.url) as sock:
        sock.sendall(_headers(short_server.url, 2) + b"{}")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200 ")
        time.sleep(1.5)  # idle longer than the header timeout: still open (the idle timeout is 60 s)
        sock.sendall(b"POST / HTTP/1.1\r\nHo")
        took, rest = _until_closed(sock, 1 + SLACK)
    assert took >= 0.9 and rest == b""


def test_a_request_begun_while_the_timer_of_an_earlier_one_runs_gets_its_whole_time(
    short_server: Server,
) -> None:
    # One timer serves a connection's requests: set for the first, it must not cut the second short.
    with _connect(short_server.url) as sock:
        sock.sendall(_headers(short_server.url, 2) + b"{}")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200 ")
        time.sleep(0.6)  # the connection's timer, set at its start, fires 0.4 s into the next request
        sock.sendall(b"POST / HTTP/1.1\r\nHo")
        took, rest = _until_closed(sock, 1 + SLACK)
    assert took >= 0.9 and rest == b""


def test_idle_keep_alive_connections_are_closed_after_the_idle_timeout(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--no-auth", "--idle-timeout", "1")
    try:
        with _connect(server.url) as sock:
            sock.sendall(_headers(server.url, 2) + b"{}")
            took, reply = _until_closed(sock, 1 + SLACK)
        assert reply.startswith(b"HTTP/1.1 200 ") and took >= 0.9
    finally:
        server.stop()


# -- the number of connections ------------------------------------------------------


def _metrics_url(server: Server) -> str:
    """The URL of the server's own metrics listener (``--metrics-port 0``), from its log."""
    deadline = time.monotonic() + 10
    while (found := re.search(r"metrics on (http://\S+/metrics)", server.logs())) is None:
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.05)
    return found.group(1)


def _connection_counts(metrics_url: str) -> dict[str, float]:
    samples = scrape(metrics_url)
    counts = {"open": samples[("smq_api_connections", frozenset())]}
    for reason in ("shed", "refused", "header_timeout"):
        counts[reason] = samples[("smq_api_connections_closed_total", frozenset({("reason", reason)}))]
    return counts


def _until_open(metrics_url: str, count: int) -> None:
    """Wait until the server holds ``count`` connections (it has accepted what the kernel queued)."""
    deadline = time.monotonic() + 20
    while (held := _connection_counts(metrics_url)["open"]) != count:
        assert time.monotonic() < deadline, f"the server holds {held} connections, not {count}"
        time.sleep(0.05)


def _stall(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection that sends half a request's headers and stops."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
    return sock


def _still_open(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False


def _list_queues_from(port: int, source: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(_headers(f"http://127.0.0.1:{port}", 2, {"Connection": "close"}) + b"{}")
        _, reply = _until_closed(sock, 10)
    return int(reply.split(b" ", 2)[1])


def test_at_the_limit_a_new_connection_takes_the_place_of_the_one_stalled_longest(
    http_redis: EmbeddedRedis,
) -> None:
    # No cap per address: every connection here comes from 127.0.0.1. Headers may take 30 s:
    # what closes a stalled connection here is the limit, not its timeout.
    limits = {"SMQ_MAX_CONNECTIONS": "5", "SMQ_MAX_CONNECTIONS_PER_ADDRESS": "0"}
    server = Server(http_redis.url, "--no-auth", "--header-timeout", "30", "--metrics-port", "0", env=limits)
    metrics = _metrics_url(server)
    port = urlsplit(server.url).port
    assert port is not None
    stalled: list[socket.socket] = []
    try:
        stalled = [_stall(port) for _ in range(5)]
        _until_open(metrics, 5)
        time.sleep(1.2)  # a stalled connection makes room once it has waited 1 s
        assert _list_queues(server.url) == 200
        took, reply = _until_closed(stalled[0], SLACK)
        assert reply == b""
        assert all(_still_open(sock) for sock in stalled[1:]), "only the one stalled longest is closed"
        _until_open(metrics, 4)
        counts = _connection_counts(metrics)
        assert (counts["shed"], counts["refused"], counts["header_timeout"]) == (1, 0, 0)
        logs = server.logs()
        assert "closed 1 connection(s) to admit new ones" in logs and "Traceback" not in logs
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


def test_when_every_connection_is_busy_a_new_one_is_refused_503_until_one_ends(
    http_redis: EmbeddedRedis,
) -> None:
    limits = {"SMQ_MAX_CONNECTIONS": "3", "SMQ_MAX_CONNECTIONS_PER_ADDRESS": "0"}
    server = Server(http_redis.url, "--no-auth", "--metrics-port", "0", env=limits)
    metrics = _metrics_url(server)
    url = json_client(server.url).create_queue(QueueName="quiet")["QueueUrl"]
    body = json.dumps({"QueueUrl": url, "WaitTimeSeconds": 20}).encode()
    polls: list[socket.socket] = []
    try:
        for _ in range(3):  # three long polls on an empty queue: every connection busy
            sock = _connect(server.url)
            sock.sendall(_headers(server.url, len(body), {"X-Amz-Target": "AmazonSQS.ReceiveMessage"}) + body)
            polls.append(sock)
        deadline = time.monotonic() + 10
        while scrape(metrics)[("smq_api_requests_in_flight", frozenset())] != 3:
            assert time.monotonic() < deadline, "the long polls did not begin"
            time.sleep(0.05)
        time.sleep(1.2)  # old enough to be shed, were they waiting rather than busy
        assert _list_queues(server.url) == 503
        assert _connection_counts(metrics)["refused"] == 1
        assert all(_still_open(sock) for sock in polls), "a busy connection is never shed"
        polls.pop().close()  # a client hangs up: its poll ends and frees its connection
        deadline = time.monotonic() + 10
        while (status := _list_queues(server.url)) != 200:
            assert status == 503 and time.monotonic() < deadline
            time.sleep(0.1)
        assert "--max-connections" in server.logs() and "Traceback" not in server.logs()
    finally:
        for sock in polls:
            sock.close()
        server.stop()


def test_slow_sockets_from_many_addresses_do_not_lock_the_other_clients_out(
    http_redis: EmbeddedRedis,
) -> None:
    # 3 addresses x 150 stalled sockets, over a limit of 300 with its per-address half: the
    # limit is full of stalled sockets, and every request from a fourth address is served.
    server = Server(
        http_redis.url,
        "--no-auth",
        "--header-timeout",
        "20",
        "--metrics-port",
        "0",
        env={"SMQ_MAX_CONNECTIONS": "300"},
    )
    metrics = _metrics_url(server)
    port = urlsplit(server.url).port
    assert port is not None
    stalled: list[socket.socket] = []
    try:
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            stalled += [_stall(port, source) for _ in range(150)]
        _until_open(metrics, 300)
        time.sleep(1.2)
        statuses = [_list_queues_from(port, "127.0.0.5") for _ in range(30)]
        assert statuses == [200] * 30
        assert _connection_counts(metrics)["shed"] >= 1  # the first made room; each ends, freeing its own
        assert "Traceback" not in server.logs()
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


# -- long polls ---------------------------------------------------------------------


def test_a_long_poll_outlasts_the_body_and_header_timeouts(http_redis: EmbeddedRedis) -> None:
    server = Server(http_redis.url, "--no-auth", *SHORT, "--idle-timeout", "1")
    try:
        sqs = json_client(server.url)
        url = sqs.create_queue(QueueName="stalls-long-poll")["QueueUrl"]
        started = time.monotonic()
        reply = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=3)
        took = time.monotonic() - started
        assert reply["ResponseMetadata"]["HTTPStatusCode"] == 200 and "Messages" not in reply
        assert 2.9 <= took < 3 + SLACK
        sqs.delete_queue(QueueUrl=url)
    finally:
        server.stop()


# -- signatures before bodies -------------------------------------------------------


@pytest.fixture
def signed_server(http_redis: EmbeddedRedis) -> Iterator[Server]:
    server = Server(http_redis.url, "--access-key", f"{KEY_ID}:{SECRET}", "--body-timeout", "30")
    yield server
    server.stop()


def _signed(url: str, body: bytes, signed_body: bytes | None = None) -> dict[str, str]:
    """Headers of a ListQueues signed with the test key, with the payload hash in a header."""
    payload_hash = hashlib.sha256(body if signed_body is None else signed_body).hexdigest()
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body,
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Content-SHA256": payload_hash,
        },
    )
    SigV4Auth(Credentials(KEY_ID, SECRET), "sqs", REGION).add_auth(request)
    return {name: str(value) for name, value in request.headers.items()}


def _send(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    with _connect(url) as sock:
        extra = {**headers, "Connection": "close"}
        sock.sendall(_headers(url, len(body), extra) + body)
        _, reply = _until_closed(sock, 10)
    head, _, payload = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(payload)


def test_a_bad_signature_over_a_payload_hash_is_refused_before_the_body_comes(
    signed_server: Server,
) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={KEY_ID}/{stamp[:8]}/{REGION}/sqs/aws4_request, "
        f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={'0' * 64}"
    )
    headers = {
        "Authorization": authorization,
        "X-Amz-Date": stamp,
        "X-Amz-Content-SHA256": hashlib.sha256(b"x" * 100).hexdigest(),
    }
    with _connect(signed_server.url) as sock:
        sock.sendall(_headers(signed_server.url, 100, headers))  # the body never comes
        sock.settimeout(SLACK)
        started = time.monotonic()
        reply = b""
        while b"SignatureDoesNotMatch" not in reply:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                pytest.fail(f"no reply within {SLACK} s without the body (body timeout: 30 s): {reply!r}")
            assert chunk, reply
            reply += chunk
    assert time.monotonic() - started < SLACK
    assert reply.startswith(b"HTTP/1.1 403 ") and b"Connection: close" in reply


def test_a_signed_payload_hash_is_served_and_checked_against_the_body(signed_server: Server) -> None:
    body = b"{}"
    status, reply = _send(signed_server.url, _signed(signed_server.url, body), body)
    assert status == 200, reply
    # Signed over another body's hash: the signature holds, the body does not match it.
    status, reply = _send(signed_server.url, _signed(signed_server.url, body, b'{"x": 1}'), body)
    assert status == 403 and reply["__type"].endswith("#SignatureDoesNotMatch"), reply
    # SDK clients that send no payload hash header are served as before.
    assert json_client(signed_server.url).list_queues()["ResponseMetadata"]["HTTPStatusCode"] == 200


# -- options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, value",
    [
        ("--header-timeout", "0"),
        ("--body-timeout", "-1"),
        ("--idle-timeout", "x"),
        ("--max-connections", "0"),
    ],
)
def test_bad_limits_are_one_readable_line(http_redis: EmbeddedRedis, option: str, value: str) -> None:
    done = subprocess.run(
        [str(BIN / "smq"), "serve", "--redis-url", http_redis.url, "--port", "0", option, value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and f"Invalid value for '{option}'" in lines[0], done.stderr


def test_one_address_cannot_hold_every_connection_and_lock_the_others_out(http_redis: EmbeddedRedis) -> None:
    # 127.0.0.1 may hold 3 of the 10 connections; 127.0.0.2 (another client) is still served.
    server = Server(
        http_redis.url,
        "--no-auth",
        *SHORT,
        env={"SMQ_MAX_CONNECTIONS": "10", "SMQ_MAX_CONNECTIONS_PER_ADDRESS": "3"},
    )
    port = urlsplit(server.url).port
    stalled: list[socket.socket] = []
    try:
        for _ in range(8):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
            stalled.append(sock)
        for sock in stalled[3:]:
            took, reply = _until_closed(sock, SLACK)
            assert took < 0.9, "a connection over the per-address cap must be refused at once"
            assert reply == b"" or reply.startswith(b"HTTP/1.1 503 "), reply
        # Another client, from another address, is served meanwhile.
        with socket.create_connection(
            ("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0)
        ) as sock:
            sock.sendall(_headers(server.url, 2, {"Connection": "close"}) + b"{}")
            _, reply = _until_closed(sock, 10)
        assert reply.startswith(b"HTTP/1.1 200 "), reply
        logs = server.logs()
        assert "--max-connections-per-address" in logs and "Traceback" not in logs
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


def test_a_client_that_hangs_up_mid_body_is_a_disconnect_not_a_server_error(short_server: Server) -> None:
    with _connect(short_server.url) as sock:
        sock.sendall(_headers(short_server.url, 1000) + b'{"QueueNamePrefix": "a')
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while "hung up" not in short_server.logs():
        assert time.monotonic() < deadline, short_server.logs()
        time.sleep(0.05)
    logs = short_server.logs()
    assert "Traceback" not in logs and "InternalFailure" not in logs, logs
    assert '"status": 499' in logs and "ClientClosedRequest" in logs
    metrics = urllib.request.urlopen(f"{short_server.url}/metrics", timeout=10).read().decode()
    assert 'code="499"' in metrics
    assert not re.search(r'smq_api_requests_total\{[^}]*code="5\d\d"', metrics), metrics
    assert _list_queues(short_server.url) == 200
