"""Scraping real /metrics endpoints and reading the samples, for the monitoring tests."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import smq
from smq.embedded import free_port
from smq.exporter import Exporter, ExporterConfig

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """GET ``url`` and parse it with the Prometheus text parser: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The value of the one sample named ``name`` with exactly ``labels``."""
    return samples[(name, frozenset(labels.items()))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def labelled(samples: Samples, name: str, label: str) -> set[str]:
    """The values ``label`` takes on samples named ``name``."""
    return {dict(labels)[label] for sample_name, labels in samples if sample_name == name}


@contextmanager
def serving_exporter(client: smq.Client, config: ExporterConfig | None = None) -> Iterator[str]:
    """An exporter for ``client`` serving on a free loopback port; yields its /metrics URL."""
    server = Exporter(client, config).serve("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.stop()


# -- a real Prometheus server ---------------------------------------------------------


class PrometheusServer:
    """Prometheus on a free loopback port, its data in ``directory``; stopped by its own pid."""

    def __init__(
        self,
        binary: str,
        directory: Path,
        targets: dict[str, list[str]],
        *,
        interval: str = "1s",
        rule_files: tuple[Path, ...] = (),
    ) -> None:
        self.binary = binary
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": hosts}]} for job, hosts in targets.items()
            ],
        }
        self.config = directory / "prometheus.yml"
        self.config.write_text(json.dumps(config))  # JSON is YAML
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> PrometheusServer:
        # The child keeps its own copy of the descriptor; ours closes when this returns.
        with open(self.directory / "prometheus.log", "wb") as log:
            return self._start(log)

    def _start(self, log: Any) -> PrometheusServer:
        for _ in range(5):  # a port free when probed may be taken before Prometheus binds it
            port = free_port()
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                        if reply.status == 200:
                            return self
                except OSError:
                    pass
                time.sleep(0.1)
            self.stop()
        raise RuntimeError(f"prometheus did not start:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        return (self.directory / "prometheus.log").read_text(errors="replace")

    def api(self, path: str, **params: str) -> Any:
        """GET an HTTP API path; the ``data`` of a successful reply."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant PromQL query: the result vector."""
        return self.api("/api/v1/query", query=promql)["result"]  # type: ignore[no-any-return]

    def wait_for(self, promql: str, expected: float, timeout: float = 60.0) -> float:
        """Poll a one-value query until it returns ``expected``; its last value otherwise fails."""
        deadline = time.monotonic() + timeout
        seen: float | None = None
        while time.monotonic() < deadline:
            result = self.query(promql)
            if len(result) == 1:
                seen = float(result[0]["value"][1])
                if seen == expected:
                    return seen
            time.sleep(0.25)
        raise AssertionError(f"{promql} was {seen}, not {expected}, after {timeout} s\n{self.logs()[-2000:]}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
