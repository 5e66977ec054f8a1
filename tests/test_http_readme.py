"""The AWS CLI and boto3 examples of ``docs/sqs-api.md`` run exactly as written, against a
real `smq serve` (the only change: the server's free port instead of 9324). Every ``sh``
block of the page runs, in order, and its one ``python`` block."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import smq
from http_support import BIN, ROOT, Server

PAGE = "docs/sqs-api.md"
PAGE_URL = "http://127.0.0.1:9324"


def _blocks(language: str) -> list[str]:
    text = (ROOT / PAGE).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_the_sqs_api_page_aws_cli_examples_work_as_written(sqs_server: Server, core: smq.Client) -> None:
    script = "\n".join(_blocks("sh"))  # the standard queue's commands, then the FIFO queue's
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(PAGE_URL, sqs_server.url)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "resize image 42" in done.stdout
    assert core.queue("orders.fifo").attributes().visible == 1
    assert '"ApproximateNumberOfMessagesNotVisible": "1"' in done.stdout


def test_the_sqs_api_page_boto3_example_works_as_written(sqs_server: Server, core: smq.Client) -> None:
    (program,) = _blocks("python")
    namespace: dict[str, Any] = {}
    exec(compile(program.replace(PAGE_URL, sqs_server.url), PAGE, "exec"), namespace)
    info = core.get_queue("thumbnails").attributes()
    assert info.config.visibility_timeout == 60
    assert info.counters["deleted"] == 1
