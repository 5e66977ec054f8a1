"""The image and the Compose stack, run for real on a Docker engine this module starts itself.

The engine is Debian's dockerd (package docker.io, which .ci/run installs), started as root on a
private socket, data root and exec root, with host networking only (no bridge, no iptables), and
stopped by its pid. No registry is reachable, so the base image is made here from Debian's
packages (debootstrap: python3 and python3-venv; cached under .venv/smq-test-cache) and the image
is built with deploy/build-image, as a user builds it. Without root, dockerd or debootstrap the
module skips with the reason, except under CI, where it fails.

Checked: the image's version, user and init; the single-container mode on its embedded server
(read-only root, data kept on the volume across a graceful stop); the production mode against a
Redis given by SMQ_REDIS_URL (access keys required); and the Compose file's smq services (API with
declared queues, two workers, exporter) against a Redis: a message processed, a failing one in the
DLQ, the exporter showing it. Compose's redis, prometheus and grafana services need images from a
registry and do not run here (tests/test_deploy.py checks their files offline).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

import smq
from conftest import building_from_the_checkout, file_lock, machine_lock, need_program
from metrics_support import scrape, value
from smq.embedded import EmbeddedRedis, free_port
from worker_support import wait_for

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CACHE = ROOT / ".venv" / "smq-test-cache"
BASE_TAR = CACHE / "debian-bookworm-python3.tar"
BASE = "smq-test-base:bookworm"
IMAGE = "smq:local"
WHY = "Debian's docker.io and debootstrap, which .ci/run installs; dockerd runs as root"


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}, and CI is set ({WHY})")
    pytest.skip(f"{why} ({WHY})")


@dataclass
class Docker:
    """The private engine: run the docker client (and docker-compose) against its socket."""

    env: dict[str, str]

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def logs(self, container: str) -> str:
        done = self("logs", container, check=False)
        return done.stdout + done.stderr


@pytest.fixture(scope="module", autouse=True)
def _alone_on_the_machine() -> Iterator[None]:
    """One Docker engine or network namespace test at a time (tests/test_partition.py holds it too)."""
    with machine_lock("network"):
        yield


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    if os.geteuid() != 0:
        _unavailable("dockerd needs root here")
    for program in ("dockerd", "docker", "debootstrap"):
        if shutil.which(program) is None:
            _unavailable(f"{program} is not installed")
    # Short paths: the engine's sockets live under them and a Unix socket path has 107 bytes.
    root = Path(tmp_path_factory.mktemp("dk"))
    socket = root / "docker.sock"
    log = (root / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [
            "dockerd",
            f"--host=unix://{socket}",
            f"--data-root={root / 'data'}",
            f"--exec-root={root / 'exec'}",
            f"--pidfile={root / 'dockerd.pid'}",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
    env.pop("DOCKER_CONTEXT", None)
    engine = Docker(env)
    try:
        deadline = time.monotonic() + 60
        while engine("version", check=False, timeout=20).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                tail = (root / "dockerd.log").read_text()[-2000:]
                _unavailable(f"dockerd did not start:\n{tail}")
            time.sleep(0.2)
        yield engine
    finally:
        if daemon.poll() is None:
            ids = engine("ps", "-aq", check=False).stdout.split()
            if ids:
                engine("rm", "-f", *ids, check=False)
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        log.close()
        # What the engine left mounted (its network namespace file), so the folder can go.
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _debian_base(tmp: Path) -> Path:
    """A tar of a minimal Debian 12 with python3 and python3-venv, made once and cached."""
    with file_lock(CACHE / "debian-base.lock"):  # another run may be making it
        if not BASE_TAR.exists():
            _debootstrap(tmp)
    return BASE_TAR


def _debootstrap(tmp: Path) -> None:
    rootfs = tmp / "rootfs"
    done = subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv",
            "bookworm",
            str(rootfs),
            "http://deb.debian.org/debian",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        _unavailable(f"debootstrap failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    for bulk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale"):
        shutil.rmtree(rootfs / bulk, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = BASE_TAR.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
    partial.replace(BASE_TAR)
    shutil.rmtree(rootfs, ignore_errors=True)


@pytest.fixture(scope="module")
def image(docker: Docker, tmp_path_factory: pytest.TempPathFactory) -> str:
    """smq:local, built by deploy/build-image (wheels on the host, no network in the build)."""
    docker("import", str(_debian_base(tmp_path_factory.mktemp("base"))), BASE, timeout=300)
    started = time.monotonic()
    with building_from_the_checkout():
        done = subprocess.run(
            [str(DEPLOY / "build-image"), "--base", BASE, "--", "--network", "host"],
            env={**docker.env, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert done.returncode == 0, f"deploy/build-image failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    print(f"image built in {time.monotonic() - started:.0f} s")
    return IMAGE


def _inspect(docker: Docker, *what: str) -> Any:
    return json.loads(docker("inspect", *what).stdout)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _sqs(port: int, key: str = "local", secret: str = "local") -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def _exited(docker: Docker, container: str) -> bool:
    return not _inspect(docker, container)[0]["State"]["Running"]


def test_the_image_is_the_package_version_runs_as_non_root_under_an_init(docker: Docker, image: str) -> None:
    (config,) = _inspect(docker, image)
    assert config["Config"]["Labels"]["org.opencontainers.image.version"] == smq.__version__
    assert _inspect(docker, f"smq:{smq.__version__}")[0]["Id"] == config["Id"]
    assert config["Config"]["User"] == "10001:10001"
    assert config["Config"]["Entrypoint"][:2] == ["/opt/smq/bin/dumb-init", "--single-child"]
    assert config["Config"]["Cmd"] == ["serve"]
    version = docker("run", "--rm", "--network", "host", image, "--version").stdout
    assert version.startswith(f"smq {smq.__version__}"), version
    uid = docker("run", "--rm", "--network", "host", "--entrypoint", "id", image, "-u").stdout.strip()
    assert uid == "10001"


def test_one_container_serves_the_api_and_console_on_its_embedded_server_and_keeps_the_volume(
    docker: Docker, image: str
) -> None:
    port = free_port()
    volume = f"smq-data-{uuid.uuid4().hex[:8]}"
    name = f"smq-one-{uuid.uuid4().hex[:8]}"
    # As `docker run -p 9324:9324 -v smq-data:/data IMAGE`, on the host network (no bridge here).
    args = ["--network", "host", "--read-only", "-v", f"{volume}:/data", "-e", f"SMQ_PORT={port}", image]
    docker("run", "-d", "--name", name, *args)
    try:
        wait_for(lambda: _ready(port) or (_exited(docker, name) and "exited"), 60, "the API to be ready")
        assert _ready(port), docker.logs(name)
        logs = docker.logs(name)
        assert "development mode" in logs and "authentication is off" in logs, logs
        sqs = _sqs(port, "any-key", "any-secret")  # authentication is off: any key works
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="kept on the volume")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/console", timeout=5) as reply:
            assert reply.status == 200 and b"orders" in reply.read()

        started = time.monotonic()
        docker("stop", "--time", "30", name)
        stopped_in = time.monotonic() - started
        (state,) = _inspect(docker, name)
        assert state["State"]["ExitCode"] == 0, docker.logs(name)
        assert stopped_in < 15, (
            f"SIGTERM should stop smq gracefully, not after the 30 s kill ({stopped_in:.1f} s)"
        )

        docker("rm", name)
        docker("run", "-d", "--name", name, *args)  # a new container on the same volume
        wait_for(
            lambda: _ready(port) or (_exited(docker, name) and "exited"), 60, "the API to be ready again"
        )
        received = _sqs(port).receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
        assert [m["Body"] for m in received] == ["kept on the volume"]
    finally:
        docker("rm", "-f", name, check=False)
        docker("volume", "rm", volume, check=False)


@pytest.fixture
def network_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A Redis on a TCP port of this host, as production gives one."""
    with EmbeddedRedis(tmp_path / "redis", port=free_port()) as server:
        yield server


def test_given_a_redis_the_container_uses_it_and_requires_access_keys(
    docker: Docker, image: str, network_redis: EmbeddedRedis
) -> None:
    port = free_port()
    name = f"smq-prod-{uuid.uuid4().hex[:8]}"
    args = ["-e", f"SMQ_REDIS_URL={network_redis.url}", "-e", f"SMQ_PORT={port}"]
    # /data not writable either, as under Kubernetes' read-only root with no volume there.
    args += ["--mount", "type=tmpfs,destination=/data,tmpfs-mode=0555"]
    refused = docker("run", "--rm", "--network", "host", "--read-only", *args, image, check=False)
    assert refused.returncode != 0
    assert "refusing to serve 0.0.0.0 without authentication" in refused.stderr, refused.stderr
    assert "development mode" not in refused.stderr

    docker(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        *args,
        "-e",
        "SMQ_ACCESS_KEYS=ak:sk",
        image,
    )
    try:
        wait_for(lambda: _ready(port) or (_exited(docker, name) and "exited"), 60, "the API to be ready")
        assert _ready(port), docker.logs(name)
        assert "development mode" not in docker.logs(name)
        sqs = _sqs(port, "ak", "sk")
        url = sqs.create_queue(QueueName="invoices")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="in the given Redis")
        with pytest.raises(Exception, match="InvalidClientTokenId|SignatureDoesNotMatch"):
            _sqs(port, "other", "sk").list_queues()
        client = smq.Client(url=network_redis.url)
        try:
            (message,) = client.get_queue("invoices").receive(1, wait_time_seconds=1)
            assert message.body == "in the given Redis"
        finally:
            client.close()
    finally:
        docker("rm", "-f", name, check=False)


def _with_port(command: list[str], option: str, port: int) -> list[str]:
    index = command.index(option)
    return [*command[: index + 1], str(port), *command[index + 2 :]]


def _without(command: list[str], *options: str) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in command:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        else:
            kept.append(arg)
    return kept


def _queue_counts(sqs: Any, name: str) -> tuple[int, int]:
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return int(got[names[0]]), int(got[names[1]])


def _on_the_host_network(compose: dict[str, Any], redis_url: str, ports: dict[str, int]) -> dict[str, Any]:
    """The Compose file's smq services as they can run on an engine with host networking only.

    Changed, and only this: the services share the host's network (so no published ports), the
    Redis is the test's (so no depends_on the redis service), the API and the exporter listen on
    free ports (the API's health check too), and the workers serve no metrics port (two replicas
    on one host network would share it).
    """
    services: dict[str, Any] = {}
    for name in ("api", "worker", "exporter"):
        service = dict(compose["services"][name])
        service.pop("ports", None)
        service["network_mode"] = "host"
        service["environment"] = {**service["environment"], "SMQ_REDIS_URL": redis_url}
        service["depends_on"] = {k: v for k, v in service["depends_on"].items() if k != "redis"}
        if not service["depends_on"]:
            del service["depends_on"]
        command = [str(arg) for arg in service["command"]]
        if name in ports:
            command = _with_port(command, "--port", ports[name])
        else:
            command = _without(command, "--metrics-port", "--metrics-host")
        service["command"] = command
        if name == "api":
            test = service["healthcheck"]["test"]
            service["healthcheck"] = {
                **service["healthcheck"],
                "test": [t.replace(":9324/", f":{ports[name]}/") for t in test],
            }
            assert service["healthcheck"]["test"] != test
        services[name] = service
    return {"services": services}


def test_the_compose_stack_s_smq_services_process_dead_letter_and_export(
    docker: Docker, image: str, network_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    compose_bin = need_program("docker-compose", "Debian's docker-compose package, which .ci/run installs")
    ports = {"api": free_port(), "exporter": free_port()}
    api_port, exporter_port = ports["api"], ports["exporter"]
    source = yaml.safe_load((DEPLOY / "compose.yaml").read_text())  # PyYAML resolves the `<<` merges
    (tmp_path / "compose.yaml").write_text(
        yaml.safe_dump(_on_the_host_network(source, network_redis.url, ports))
    )
    project = f"smqtest{uuid.uuid4().hex[:8]}"
    # Relative paths (./queues.toml) resolve in deploy/, as for the file itself.
    compose = [
        compose_bin,
        "-p",
        project,
        "--project-directory",
        str(DEPLOY),
        "-f",
        str(tmp_path / "compose.yaml"),
    ]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*compose, *args], env=docker.env, capture_output=True, text=True, timeout=180, check=False
        )
        assert done.returncode == 0, (
            f"docker-compose {' '.join(args)}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
        return done

    try:
        # The API applies the declared queues (deploy/queues.toml) before it listens; the workers
        # wait for its health check (depends_on), so they find jobs.
        run("up", "-d", "--no-build", "--scale", "worker=2", "api", "worker", "exporter")
        wait_for(lambda: _ready(api_port), 60, "the compose API to be ready")
        sqs = _sqs(api_port)  # the compose file's default access key local:local
        jobs = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
        redrive = json.loads(
            sqs.get_queue_attributes(QueueUrl=jobs, AttributeNames=["RedrivePolicy"])["Attributes"][
                "RedrivePolicy"
            ]
        )
        assert redrive["deadLetterTargetArn"].endswith(":jobs-dlq")
        sqs.send_message(QueueUrl=jobs, MessageBody="weekly report")
        sqs.send_message(QueueUrl=jobs, MessageBody="fail")

        # The example handler fails "fail" at each receive; after maxReceiveCount it is dead-lettered
        # (the worker's backoff 1, 2, 4, 8, 16 s between tries: about 31 s).
        wait_for(
            lambda: _queue_counts(sqs, "jobs-dlq") == (1, 0),
            120,
            "the failing message in jobs-dlq",
            every=0.5,
        )
        assert _queue_counts(sqs, "jobs") == (0, 0)
        dlq = sqs.get_queue_url(QueueName="jobs-dlq")["QueueUrl"]
        (dead,) = sqs.receive_message(QueueUrl=dlq, VisibilityTimeout=0)["Messages"]
        assert dead["Body"] == "fail"
        assert len(run("ps", "-q", "worker").stdout.split()) == 2
        logs = run("logs", "--no-color", "worker").stdout
        assert "weekly report" in logs, logs[-3000:]

        samples = scrape(f"http://127.0.0.1:{exporter_port}/metrics")
        assert value(samples, "smq_queue_messages_visible", queue="jobs-dlq") == 1
        assert value(samples, "smq_queue_messages_visible", queue="jobs") == 0
    finally:
        subprocess.run(
            [*compose, "down", "-v", "--timeout", "10"],
            env=docker.env,
            capture_output=True,
            timeout=180,
            check=False,
        )
