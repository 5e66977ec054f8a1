"""Real clients against a real ``smq serve``: the server as a subprocess, boto3
speaking JSON, boto3 speaking the Query protocol, and the AWS CLI.

The Query-protocol client is today's botocore driven by SQS's own Query
service model, as the last botocore releases before SQS moved to JSON
shipped it (1.31.0, downloaded from PyPI once per virtualenv). Its
serializer and parser are botocore's, so requests and replies are checked
by a real SDK, not by code written here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import boto3
import botocore.session
from botocore.config import Config

from conftest import file_lock

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ACCOUNT = "000000000000"
REGION = "us-east-1"
KEY_ID, SECRET = "AKIDSMQTEST", "smq-test-secret"
OTHER_KEY, OTHER_SECRET = "AKIDOTHERTENANT", "other-secret"  # a tenant's key (see keyed_server)

_QUERY_BOTOCORE = "botocore==1.31.0"
_QUERY_MODEL_DIR = BIN.parent / "smq-test-cache" / "botocore-query"


class Server:
    """``smq serve`` as a subprocess on a given Redis; stopped by its own pid."""

    def __init__(self, redis_url: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="smq-serve-", suffix=".log", delete=False)
        # The tests read the access lines in the log file: on stderr, as asked, not as auto would choose.
        chosen = any(arg.startswith(("--access-log", "--no-access-log")) for arg in args)
        if not chosen and "SMQ_ACCESS_LOG" not in (env or {}):
            args = ("--access-log", "stderr", *args)
        command = [str(BIN / "smq"), "serve", "--redis-url", redis_url, "--port", "0", *args]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 20
        line = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"smq serve did not start: {line!r}\n{self.logs()}")
        self.url = line.split("listening on", 1)[1].strip()

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def json_client(
    url: str, *, region: str = REGION, key: tuple[str, str] = (KEY_ID, SECRET), **config: Any
) -> Any:
    """boto3's SQS client: the AWS JSON 1.0 protocol (signing for ``region`` with ``key``)."""
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=Config(retries={"max_attempts": 1}, **config),
    )


def _query_model() -> Path:
    target = _QUERY_MODEL_DIR / "sqs" / "2012-11-05" / "service-2.json"
    if not target.exists():
        with file_lock(_QUERY_MODEL_DIR.parent / "botocore-query.lock"):  # another worker may be at it
            if not target.exists():
                _download_query_model(target)
    return _QUERY_MODEL_DIR


def _download_query_model(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", _QUERY_BOTOCORE, "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("botocore-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            model = archive.read("botocore/data/sqs/2012-11-05/service-2.json")
    assert json.loads(model)["metadata"]["protocol"] == "query"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")  # readers look without the lock: whole or missing
    partial.write_bytes(model)
    partial.replace(target)


def query_client(
    url: str, *, region: str = REGION, key: tuple[str, str] = (KEY_ID, SECRET), **config: Any
) -> Any:
    """boto3's SQS client speaking the Query protocol (form fields, XML replies), signing for ``region``
    with ``key``."""
    core = botocore.session.get_session()
    core.get_component("data_loader").search_paths.insert(0, str(_query_model()))
    session = boto3.session.Session(botocore_session=core)
    client = session.client(
        "sqs",
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=Config(retries={"max_attempts": 1}, **config),
    )
    assert client.meta.service_model.protocol == "query"
    return client


def aws_cli(url: str, *args: str, check: bool = True, key: tuple[str, str] = (KEY_ID, SECRET)) -> Any:
    """Run ``aws sqs ARGS`` (the AWS CLI, as a subprocess, signing with ``key``); parsed JSON output."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": key[0],
        "AWS_SECRET_ACCESS_KEY": key[1],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    done = subprocess.run(
        [str(BIN / "aws"), "--endpoint-url", url, "--output", "json", "sqs", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"aws sqs {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    if not check:
        return done
    return json.loads(done.stdout) if done.stdout.strip() else {}


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of a plain GET, an error status included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
