"""Drift between the metric names the processes emit and the names the alerts, the
dashboard, the KEDA query and the docs (``docs/monitoring.md``, ``docs/workers.md``) use.
The emitted names come from real scrapes: the exporter and `smq serve` on real Redis, a
worker's registry after work."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import smq
from metrics_support import names, scrape, serving_exporter
from smq.worker._metrics import WorkerMetrics
from test_alerts import promql_expressions

ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"\bsmq_[a-z0-9_]*[a-z0-9]")
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count", "_created")  # samples of one histogram


@pytest.fixture
def emitted(redis_client: smq.Client, sqs: Any, sqs_server: Any) -> set[str]:
    """Every sample name the exporter, the API server and a worker emit."""
    redis_client.create_queue("jobs-dlq")
    jobs = redis_client.create_queue("jobs", redrive_policy=smq.RedrivePolicy("jobs-dlq", 3))
    jobs.send("x")
    # A FIFO queue too: its group gauges have no series for standard queues.
    redis_client.create_queue("jobs.fifo").send("x", message_group_id="g", deduplication_id="d")
    with serving_exporter(redis_client) as url:
        exporter = names(scrape(url))
    queue_url = sqs.create_queue(QueueName="named")["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="x")
    try:
        sqs.get_queue_url(QueueName="missing")
    except Exception:
        pass
    api = names(scrape(f"{sqs_server.url}/metrics"))
    worker = WorkerMetrics("jobs", lambda: 0, lambda: 0)
    for outcome in ("succeeded", "failed"):
        worker.outcome(outcome)
    worker.processing.observe(0.1)
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(worker.registry).decode()
    worker_names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return exporter | api | worker_names


def _used(texts: list[str]) -> set[str]:
    return {name for text in texts for name in _NAME.findall(text)}


def _keda_queries() -> list[str]:
    queries = []
    for document in yaml.safe_load_all((ROOT / "deploy/kubernetes/scaledobject.yaml").read_text()):
        if document and document.get("kind") == "ScaledObject":
            queries += [
                t["metadata"]["query"] for t in document["spec"]["triggers"] if t["type"] == "prometheus"
            ]
    assert queries, "the ScaledObject has no prometheus trigger"
    return queries


def test_every_metric_the_alerts_and_dashboard_use_is_emitted(emitted: set[str]) -> None:
    expressions = promql_expressions()
    assert len(expressions) > 20
    missing = _used(expressions) - emitted
    assert not missing, f"used in alerts or dashboard, emitted by nothing: {sorted(missing)}"


def test_the_keda_backlog_query_uses_emitted_metrics(emitted: set[str]) -> None:
    used = _used(_keda_queries())
    assert used == {"smq_queue_messages_visible", "smq_queue_messages_in_flight"}
    assert used <= emitted


# The pages whose tables list the metrics: the exporter's and the API's, and the worker's.
METRIC_PAGES = ("docs/monitoring.md", "docs/workers.md")


def test_the_docs_document_every_smq_metric_and_no_other(emitted: set[str]) -> None:
    pages = "\n".join((ROOT / page).read_text() for page in METRIC_PAGES)
    documented = set(re.findall(r"^\| `(smq_[a-z0-9_]+)", pages, flags=re.M))
    histograms = {n.removesuffix("_bucket") for n in emitted if n.endswith("_bucket")}
    parts = {base + part for base in histograms for part in _HISTOGRAM_PARTS}
    parts |= {n.removesuffix("_total") + "_created" for n in emitted if n.endswith("_total")}
    families = {n for n in emitted if n.startswith("smq_") and n not in parts} | histograms
    assert documented == families


def test_the_monitoring_page_lists_every_alert_rule() -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule}
    page = (ROOT / "docs/monitoring.md").read_text()
    section = page.split("\n## Alerts and dashboard\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(Smq[A-Za-z]+)`", section))
    assert listed == alerts
