"""Scraping real /metrics endpoints and reading the samples, for the monitoring tests."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.parser import text_string_to_metric_families

import smq
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
