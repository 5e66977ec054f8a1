"""A real Prometheus server scrapes the exporter and answers PromQL about the backlog."""

from __future__ import annotations

from pathlib import Path

import smq
from conftest import need_program
from metrics_support import PrometheusServer, serving_exporter

ALERTS = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "alerts.yml"


def test_prometheus_scrapes_the_exporter_and_promql_returns_the_backlog(
    redis_client: smq.Client, tmp_path: Path
) -> None:
    binary = need_program("prometheus", "Debian: apt-get install prometheus")
    jobs = redis_client.create_queue("backlog")
    jobs.send_batch([smq.SendEntry(f"e{n}", "x") for n in range(10)])
    for batch in range(3):
        jobs.send_batch([smq.SendEntry(f"e{n}", f"{batch}") for n in range(9)])
    jobs.receive(5)  # 37 sent: 32 visible, 5 in flight
    with serving_exporter(redis_client) as url:
        target = url.removeprefix("http://").removesuffix("/metrics")
        with PrometheusServer(
            binary, tmp_path / "prometheus", {"smq-exporter": [target]}, rule_files=(ALERTS,)
        ) as prometheus:
            # The KEDA ScaledObject's query: backlog = visible + in flight.
            backlog = (
                'sum(smq_queue_messages_visible{queue="backlog"})'
                ' + sum(smq_queue_messages_in_flight{queue="backlog"})'
            )
            assert prometheus.wait_for(backlog, 37) == 37
            assert prometheus.wait_for('up{job="smq-exporter"}', 1) == 1
            assert prometheus.wait_for('smq_queue_messages_sent_total{queue="backlog"}', 37) == 37
            # A change in Redis shows in the next scrapes.
            jobs.send_batch([smq.SendEntry(f"n{n}", "x") for n in range(3)])
            assert prometheus.wait_for(backlog, 40) == 40
            # The alert rules load and evaluate in a real Prometheus.
            groups = prometheus.api("/api/v1/rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert sum(rule["type"] == "alerting" for rule in rules) >= 9
    assert all(rule["health"] in ("ok", "unknown") for rule in rules), [
        (rule["name"], rule.get("lastError")) for rule in rules if rule["health"] == "err"
    ]
