"""TLS: `smq serve` over HTTPS (and its certificate reload on SIGHUP), and smq over
`rediss://` to a Redis that asks for client certificates. The test makes its own CA
and certificates; every handshake is real."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
import redis
from botocore.config import Config
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import smq
import smq.aio
from http_support import BIN, KEY_ID, REGION, SECRET, Server
from smq.client._loop_scripts import CONNECTION_NAME, _tls_context
from smq.embedded import EmbeddedRedis, free_port, server_identity


@dataclass
class Pair:
    cert: Path
    key: Path


class Authority:
    """A CA made for one test session, issuing certificates into ``folder``."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.file = folder / f"{name}.pem"
        self.file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool = True) -> Pair:
        """A certificate for ``name`` (for 127.0.0.1 and localhost when ``server``) and its key."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        pair = Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return pair


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"), "smq-test-ca")


def _peer_name(url: str, ca_file: Path) -> str:
    """The common name of the certificate the server at ``url`` shows a new connection."""
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            peer = tls.getpeercert()
    assert peer is not None
    subject = dict(pair for rdn in peer["subject"] for pair in rdn)
    return str(subject["commonName"])


def _sqs(url: str, verify: Any) -> Any:
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        verify=verify,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture
def https_server(http_redis: EmbeddedRedis, ca: Authority, tmp_path: Path) -> Iterator[tuple[Server, Pair]]:
    first = ca.issue("smq-server-one")
    # The server reads the files it was named on SIGHUP: copies the test may overwrite.
    live = Pair(tmp_path / "server.crt", tmp_path / "server.key")
    shutil.copy(first.cert, live.cert)
    shutil.copy(first.key, live.key)
    server = Server(http_redis.url, "--tls-cert", str(live.cert), "--tls-key", str(live.key))
    yield server, live
    server.stop()


def test_serve_https_with_a_certificate_of_the_test_ca(
    https_server: tuple[Server, Pair], ca: Authority
) -> None:
    server, _ = https_server
    assert server.url.startswith("https://127.0.0.1:")
    sqs = _sqs(server.url, str(ca.file))
    queue_url = sqs.create_queue(QueueName="tls-orders")["QueueUrl"]
    assert queue_url.startswith(server.url + "/")
    sqs.send_message(QueueUrl=queue_url, MessageBody="over https")
    got = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    assert [message["Body"] for message in got] == ["over https"]
    assert _peer_name(server.url, ca.file) == "smq-server-one"


def test_a_policy_that_denies_plain_http_is_judged_by_the_connection(
    http_redis: EmbeddedRedis, ca: Authority, core: smq.Client
) -> None:
    pair = ca.issue("smq-server-policy")
    key = f"--access-key={KEY_ID}:{SECRET}"
    https = Server(http_redis.url, key, "--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    plain = Server(http_redis.url, key)
    try:
        secure = _sqs(https.url, str(ca.file))
        url = secure.create_queue(QueueName="https-only")["QueueUrl"]
        https_only = {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": "*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
        policy = json.dumps({"Version": "2012-10-17", "Statement": [https_only]})
        secure.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
        secure.send_message(QueueUrl=url, MessageBody="over https")
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            _sqs(plain.url, None).send_message(
                QueueUrl=url.replace(https.url, plain.url), MessageBody="plain"
            )
        assert caught.value.response["Error"]["Code"] == "AccessDenied"
        assert "with an explicit deny in a resource-based policy" in caught.value.response["Error"]["Message"]
        assert [m.body for m in core.queue("https-only").peek()] == ["over https"]
    finally:
        https.stop()
        plain.stop()


def test_a_client_that_does_not_trust_the_ca_fails_the_handshake(
    https_server: tuple[Server, Pair], tmp_path: Path
) -> None:
    server, _ = https_server
    stranger = Authority(tmp_path, "another-ca")
    with pytest.raises(botocore.exceptions.SSLError):
        _sqs(server.url, str(stranger.file)).list_queues()
    with pytest.raises(ssl.SSLCertVerificationError):
        _peer_name(server.url, stranger.file)
    # A plain HTTP request to the HTTPS port gets no SQS reply either.
    host, port = server.url.split("://", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"HTTP/1.1 200" not in raw.recv(1024)


def test_sighup_reloads_the_certificate(https_server: tuple[Server, Pair], ca: Authority) -> None:
    server, live = https_server
    sqs = _sqs(server.url, str(ca.file))
    sqs.create_queue(QueueName="tls-reload")
    second = ca.issue("smq-server-two")
    shutil.copy(second.cert, live.cert)
    shutil.copy(second.key, live.key)
    os.kill(server.pid, signal.SIGHUP)
    _wait_for(lambda: "reloaded the certificate" in server.logs(), server)
    assert _peer_name(server.url, ca.file) == "smq-server-two"
    assert any(url.endswith("/tls-reload") for url in sqs.list_queues()["QueueUrls"])

    # A bad new file: one line in the log, and the old certificate stays.
    live.key.write_text("not a key\n")
    os.kill(server.pid, signal.SIGHUP)
    _wait_for(lambda: "keeping the current certificate" in server.logs(), server)
    assert _peer_name(server.url, ca.file) == "smq-server-two"
    [line] = [line for line in server.logs().splitlines() if "keeping the current certificate" in line]
    assert str(live.key) in line
    assert server.process.poll() is None


def _wait_for(condition: Any, server: Server, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen in the server's log:\n{server.logs()}")
        time.sleep(0.05)


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "smq"), "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_bad_tls_options_of_serve_say_one_line(
    http_redis: EmbeddedRedis, ca: Authority, tmp_path: Path
) -> None:
    pair = ca.issue("smq-server-options")
    other = ca.issue("smq-server-other")
    cases = [
        (["--tls-cert", str(pair.cert)], "both a certificate and its key"),
        ([], "both a certificate and its key"),  # SMQ_TLS_KEY alone, below
        (["--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(pair.key)], "missing.crt"),
        (["--tls-cert", str(pair.cert), "--tls-key", str(other.key)], "key values mismatch"),
        (["--tls-cert", str(pair.key), "--tls-key", str(pair.key)], "holds no PEM certificate"),
        (["--tls-cert", str(pair.cert), "--tls-key", str(pair.cert)], "holds no PEM private key"),
    ]
    for args, expected in cases:
        env = {} if args else {"SMQ_TLS_KEY": str(pair.key)}
        done = _serve("--redis-url", http_redis.url, *args, env=env)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("smq: ") and expected in lines[0], (args, lines)


def test_serve_takes_the_certificate_from_the_environment(http_redis: EmbeddedRedis, ca: Authority) -> None:
    pair = ca.issue("smq-server-env")
    server = Server(http_redis.url, env={"SMQ_TLS_CERT": str(pair.cert), "SMQ_TLS_KEY": str(pair.key)})
    try:
        assert server.url.startswith("https://")
        assert _peer_name(server.url, ca.file) == "smq-server-env"
    finally:
        server.stop()


# -- Redis over TLS ---------------------------------------------------------------------


def _tls_redis_binary() -> str:
    """Debian's redis-server (Redis 7, built with TLS); the embedded Valkey has no TLS."""
    found = (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else shutil.which("redis-server")
    )
    why = "Debian's redis-server package (Redis 7, with TLS), which .ci/run installs"
    if found is None or server_identity(found).version[0] < 6:
        if os.environ.get("CI"):
            pytest.fail(f"no TLS-capable redis-server and CI is set: {why}")
        pytest.skip(f"no redis-server with TLS ({why})")
    return found


@pytest.fixture(scope="module")
def tls_redis(ca: Authority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis that speaks TLS only and asks for client certificates; yields its rediss:// URL."""
    binary = _tls_redis_binary()
    pair = ca.issue("smq-redis-server")
    last: Exception | None = None
    for attempt in range(5):  # a port found free may be taken before the server binds it
        port = free_port()
        server = EmbeddedRedis(
            tmp_path_factory.mktemp(f"tls-redis-{attempt}"),
            server=binary,
            config=[
                f"tls-port {port}",
                f"tls-cert-file {pair.cert}",
                f"tls-key-file {pair.key}",
                f"tls-ca-cert-file {ca.file}",
                "tls-auth-clients yes",
            ],
        )
        try:
            server.start()
        except RuntimeError as error:
            last = error
            if "Address already in use" in str(error):
                continue
            if os.environ.get("CI"):
                raise
            pytest.skip(f"{binary} does not start with TLS: {' '.join(str(error).split())[-300:]}")
        try:
            yield f"rediss://127.0.0.1:{port}/0"
        finally:
            server.stop()
        return
    raise AssertionError(f"no TLS Redis started: {last}")


def test_client_over_rediss_with_a_client_certificate(tls_redis: str, ca: Authority) -> None:
    me = ca.issue("smq-client", server=False)
    settings = smq.Settings(url=tls_redis, tls_ca=str(ca.file), tls_cert=str(me.cert), tls_key=str(me.key))
    with smq.Client(settings=settings) as client:
        queue = client.create_queue("tls-jobs")
        queue.send("over rediss")
        [message] = queue.receive(max_messages=1)
        assert message.body == "over rediss"
        assert queue.delete(message)


def test_the_asyncio_client_over_rediss_runs_its_hot_calls_from_the_event_loop(
    tls_redis: str, ca: Authority
) -> None:
    me = ca.issue("smq-aio-client", server=False)
    settings = smq.Settings(url=tls_redis, tls_ca=str(ca.file), tls_cert=str(me.cert), tls_key=str(me.key))

    async def main() -> list[Any]:
        async with smq.aio.AsyncClient(settings=settings) as client:
            queue = await client.create_queue("aio-over-tls")
            await queue.attributes()  # the first call on a queue reads its layout
            await queue.send("over rediss")
            [message] = await queue.receive(1, wait_time_seconds=1)
            assert message.body == "over rediss" and await queue.delete(message)
            admin = redis.Redis.from_url(
                tls_redis, ssl_ca_certs=str(ca.file), ssl_certfile=str(me.cert), ssl_keyfile=str(me.key)
            )
            with admin:
                return [c for c in admin.client_list() if c.get("name") == smq.aio.CONNECTION_NAME]

    loop_connections = asyncio.run(main())
    assert len(loop_connections) == 1 and loop_connections[0]["cmd"] == "evalsha", loop_connections


def test_serve_over_rediss_runs_its_hot_scripts_from_the_event_loop(tls_redis: str, ca: Authority) -> None:
    """The event loop's own connection speaks TLS with the same files as the threads' connections."""
    me = ca.issue("smq-serve-client", server=False)
    files = ["--redis-tls-ca", str(ca.file), "--redis-tls-cert", str(me.cert), "--redis-tls-key", str(me.key)]
    server = Server(tls_redis, "--no-auth", *files)
    try:
        api = boto3.session.Session().client(
            "sqs", endpoint_url=server.url, region_name=REGION, aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET, config=Config(retries={"max_attempts": 1}),
        )  # fmt: skip
        url = api.create_queue(QueueName="over-tls")["QueueUrl"]
        for body in ("a", "b", "c"):
            api.send_message(QueueUrl=url, MessageBody=body)
        got = api.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in got) == ["a", "b", "c"]
        api.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)],
        )
        admin = redis.Redis.from_url(
            tls_redis, ssl_ca_certs=str(ca.file), ssl_certfile=str(me.cert), ssl_keyfile=str(me.key)
        )
        with admin:
            loop = [c for c in admin.client_list() if c.get("name") == CONNECTION_NAME]
        assert len(loop) == 1 and loop[0]["cmd"] == "evalsha", loop
        assert "Messages" not in api.receive_message(QueueUrl=url)
    finally:
        server.stop()
    assert "Traceback" not in server.logs()


def test_the_event_loops_tls_settings_are_redis_pys(ca: Authority) -> None:
    """The context the event loop connects with checks what redis-py's own connections check."""
    me = ca.issue("smq-context-client", server=False)
    files = {"ssl_ca_certs": str(ca.file), "ssl_certfile": str(me.cert), "ssl_keyfile": str(me.key)}
    for extra in ({}, {"ssl_check_hostname": True}, {"ssl_cert_reqs": "none"}):
        connection = redis.SSLConnection(host="127.0.0.1", port=1, **files, **extra)  # type: ignore[arg-type]
        context = _tls_context(connection)
        assert context is not None
        assert (context.verify_mode, context.check_hostname) == (
            connection.cert_reqs,
            connection.check_hostname,
        )
        assert context.verify_mode == (
            ssl.CERT_NONE if extra.get("ssl_cert_reqs") == "none" else ssl.CERT_REQUIRED
        )
        # The system's CAs, as redis-py's context has them, and the test's.
        assert ((("commonName", "smq-test-ca"),),) in [c["subject"] for c in context.get_ca_certs()]
    assert (
        _tls_context(redis.SSLConnection(host="127.0.0.1", port=1, ssl_validate_ocsp=True, **files)) is None
    )


def test_rediss_without_a_client_certificate_is_refused(tls_redis: str, ca: Authority) -> None:
    with smq.Client(settings=smq.Settings(url=tls_redis, tls_ca=str(ca.file))) as client:
        with pytest.raises(smq.SmqError) as refused:
            client.create_queue("tls-refused")
    text = str(refused.value)
    assert "\n" not in text
    assert "client certificate" in text and "--redis-tls-cert" in text, text


def test_tls_files_need_a_rediss_url(ca: Authority) -> None:
    with pytest.raises(ValueError, match="rediss://"):
        smq.Client(settings=smq.Settings(url="redis://127.0.0.1:1/0", tls_ca=str(ca.file)))
    with pytest.raises(ValueError, match="needs its key"):
        smq.Settings(url="rediss://127.0.0.1:1/0", tls_cert=str(ca.file))


def test_cli_over_rediss_takes_the_tls_options(tls_redis: str, ca: Authority, tmp_path: Path) -> None:
    me = ca.issue("smq-cli-client", server=False)
    base = [str(BIN / "smq"), "queue", "create", "tls-cli", "--redis-url", tls_redis]
    done = subprocess.run(
        [
            *base,
            "--redis-tls-ca",
            str(ca.file),
            "--redis-tls-cert",
            str(me.cert),
            "--redis-tls-key",
            str(me.key),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    env = {
        **os.environ,
        "SMQ_REDIS_TLS_CA": str(ca.file),
        "SMQ_REDIS_TLS_CERT": str(me.cert),
        "SMQ_REDIS_TLS_KEY": str(me.key),
    }
    done = subprocess.run(
        [str(BIN / "smq"), "queue", "list", "--redis-url", tls_redis],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0 and "tls-cli" in done.stdout, done.stderr
    for extra, expected in [
        (["--redis-tls-ca", str(tmp_path / "missing.pem")], "No such file or directory: "),
        (["--redis-tls-ca", str(me.key)], "holds no PEM certificate"),
        (["--redis-tls-cert", str(me.cert)], "needs its key"),
    ]:
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1 and expected in lines[0], lines


def test_cluster_mode_passes_the_tls_files_to_its_nodes(tls_redis: str, ca: Authority) -> None:
    """The TLS Redis is no cluster: cluster mode gets as far as asking it about its slots,
    which takes a handshake with the client certificate; without one, the server drops it."""
    me = ca.issue("smq-cluster-client", server=False)
    files = {"tls_ca": str(ca.file), "tls_cert": str(me.cert), "tls_key": str(me.key)}
    with pytest.raises(Exception, match="Cluster mode is not enabled"):
        smq.Client(settings=smq.Settings(url=tls_redis, cluster=True, **files))
    # The server refuses it: an EOF, a reset, or the TLS 1.3 alert, by when it is seen.
    with pytest.raises(
        Exception, match="EOF occurred|reset by peer|closed by server|Broken pipe|CERTIFICATE_REQUIRED"
    ):
        smq.Client(settings=smq.Settings(url=tls_redis, cluster=True, tls_ca=str(ca.file)))


def test_client_takes_the_tls_files_from_the_environment_with_the_url(
    tls_redis: str, ca: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = ca.issue("smq-env-client", server=False)
    monkeypatch.setenv("SMQ_REDIS_URL", tls_redis)
    monkeypatch.setenv("SMQ_REDIS_TLS_CA", str(ca.file))
    monkeypatch.setenv("SMQ_REDIS_TLS_CERT", str(me.cert))
    monkeypatch.setenv("SMQ_REDIS_TLS_KEY", str(me.key))
    with smq.Client() as client:
        client.create_queue("tls-env").send("from the environment")
        assert client.get_queue("tls-env").receive()[0].body == "from the environment"


def test_the_spark_data_source_takes_the_tls_files_as_options(tls_redis: str, ca: Authority) -> None:
    from smq.spark._options import SourceOptions

    me = ca.issue("smq-spark-client", server=False)
    options = SourceOptions.parse(
        {
            "queue": "tls-spark",
            "url": tls_redis,
            "tlsCa": str(ca.file),
            "tlsCert": str(me.cert),
            "tlsKey": str(me.key),
        }
    )
    with smq.Client(settings=options.settings) as client:  # what the source's readers and writers make
        client.create_queue("tls-spark").send("from spark")
        assert client.get_queue("tls-spark").receive()[0].body == "from spark"
    with pytest.raises(smq.InvalidParameter, match="tlsCert and tlsKey"):
        SourceOptions.parse({"queue": "q", "url": tls_redis, "tlsCert": str(me.cert)})
