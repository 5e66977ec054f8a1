"""A real run, watched by a real Prometheus, plotted: the image on the docs' Monitoring page.

It starts a private Redis, the exporter and Prometheus (scraping every second,
the alert rules of deploy/ loaded), then plays a short day of a queue:

  0-40 s    producers send 150 msgs/s; one worker (8 threads) handles ~80/s: the backlog grows
  40 s      two more workers join: the backlog drains
  all along 3% of messages always fail (dead-lettered after 3 receives), and a consumer
            without a heartbeat holds some messages past their 4 s visibility timeout
            (lease expiries, then redeliveries)

and plots what Prometheus recorded: backlog, throughput, lease expiries and redeliveries,
dead letters. Needs prometheus on PATH and matplotlib (pip install matplotlib).

    python bench/monitoring.py --out deploy/monitoring.png
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import threading
import time
from pathlib import Path

from _harness import ROOT, redis_server, temp_folder

sys.path.insert(0, str(ROOT / "tests"))  # the Prometheus runner the tests use

import smq  # noqa: E402
from metrics_support import PrometheusServer  # noqa: E402
from smq.exporter import Exporter  # noqa: E402

VISIBILITY = 4


def handle(job: smq.Job) -> None:
    if job.body.startswith("poison"):
        raise ValueError("cannot handle this one")
    time.sleep(0.1)


def produce(queue: smq.Queue, stop: threading.Event, started: float) -> None:
    sent = 0
    while not stop.is_set():
        target = int((time.monotonic() - started) * 150)
        while sent < target:
            entries = [
                smq.SendEntry(f"e{n}", ("poison" if random.random() < 0.03 else "job") + f"-{sent + n}")
                for n in range(min(10, target - sent))
            ]
            queue.send_batch(entries)
            sent += len(entries)
        time.sleep(0.05)


def forgetful_consumer(queue: smq.Queue, stop: threading.Event) -> None:
    """Takes a message now and then and works on it longer than its timeout, with no heartbeat."""
    while not stop.is_set():
        for message in queue.receive(2, wait_time_seconds=1):
            if stop.wait(VISIBILITY + 1.5):
                return
            try:
                queue.delete(message.receipt_handle)  # stale by now: counted, not deleted
            except smq.SmqError:
                pass
        stop.wait(1.0)


def run(seconds: float, out: Path, binary: str | None) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        sys.exit("prometheus is not on PATH (Debian: apt-get install prometheus)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with temp_folder("smq-monitoring-") as folder:
        with redis_server(binary, folder / "redis", tcp=False) as redis:
            client = smq.Client(redis.url)
            client.create_queue("jobs-dlq")
            queue = client.create_queue(
                "jobs", visibility_timeout=VISIBILITY, redrive_policy=smq.RedrivePolicy("jobs-dlq", 3)
            )
            server = Exporter(client).serve("127.0.0.1", 0)
            prometheus = PrometheusServer(
                binary,
                folder / "prometheus",
                {"smq-exporter": [f"127.0.0.1:{server.port}"]},
                rule_files=(ROOT / "deploy" / "prometheus" / "alerts.yml",),
            ).start()
            stop = threading.Event()
            config = smq.WorkerConfig(concurrency=8, backoff=0, wait_time_seconds=1)
            workers = [smq.Worker(client, "jobs", handle, config=config) for _ in range(3)]
            threads = [
                threading.Thread(target=produce, args=(queue, stop, time.monotonic())),
                threading.Thread(target=forgetful_consumer, args=(queue, stop)),
                threading.Thread(target=workers[0].run, kwargs={"install_signal_handlers": False}),
            ]
            began = time.time()
            for thread in threads:
                thread.start()
            time.sleep(40)
            for worker in workers[1:]:
                thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
                thread.start()
                threads.append(thread)
            time.sleep(max(0.0, seconds - 40))
            stop.set()
            for worker in workers:
                worker.stop()
            for thread in threads:
                thread.join()
            time.sleep(3)  # the last scrapes
            ended = time.time()

            def series(promql: str) -> tuple[list[float], list[float]]:
                data = prometheus.api(
                    "/api/v1/query_range", query=promql, start=str(began), end=str(ended), step="2"
                )["result"]
                if not data:
                    return [], []
                points = data[0]["values"]
                return [float(t) - began for t, _ in points], [float(v) for _, v in points]

            q = '{queue="jobs"}'
            panels = [
                (
                    "Backlog (messages)",
                    [
                        ("visible", f"smq_queue_messages_visible{q}"),
                        ("in flight", f"smq_queue_messages_in_flight{q}"),
                    ],
                ),
                (
                    "Throughput (msgs/s)",
                    [
                        ("sent", f"rate(smq_queue_messages_sent_total{q}[10s])"),
                        ("received", f"rate(smq_queue_messages_received_total{q}[10s])"),
                        ("deleted", f"rate(smq_queue_messages_deleted_total{q}[10s])"),
                    ],
                ),
                (
                    "Lease expiries and redeliveries (per s)",
                    [
                        ("visibility expired", f"rate(smq_queue_visibility_expired_total{q}[10s])"),
                        ("redelivered", f"rate(smq_queue_messages_redelivered_total{q}[10s])"),
                        ("stale receipts", f"rate(smq_queue_stale_receipts_total{q}[10s])"),
                    ],
                ),
                (
                    "Dead letters, and how long messages wait",
                    [
                        ("dead-letter queue depth", f"smq_queue_dead_letter_messages{q}"),
                        ("oldest message age (s)", f"smq_queue_oldest_message_age_seconds{q}"),
                    ],
                ),
            ]
            figure, axes = plt.subplots(2, 2, figsize=(12, 7), sharex=True)
            for axis, (title, lines) in zip(axes.flat, panels, strict=True):
                for label, promql in lines:
                    xs, ys = series(promql)
                    axis.plot(xs, ys, label=label)
                axis.set_title(title)
                axis.axvline(40, color="grey", linestyle=":", linewidth=1)
                axis.legend(loc="upper right", fontsize=8)
                axis.grid(alpha=0.3)
            for axis in axes[1]:
                axis.set_xlabel("seconds (dotted: two more workers join)")
            figure.suptitle("smq exporter, scraped by Prometheus every second: one queue, three workers join")
            figure.tight_layout()
            out.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(out, dpi=90)
            firing = [a["labels"]["alertname"] for a in prometheus.api("/api/v1/alerts")["alerts"]]
            prometheus.stop()
            server.stop()
            info = queue.attributes()
            client.close()
    print(f"wrote {out}")
    print(f"counters: {dict(info.counters)}")
    print(f"alerts pending or firing at the end: {sorted(set(firing)) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the run (at least 60)")
    parser.add_argument("--out", type=Path, default=ROOT / "deploy" / "monitoring.png")
    parser.add_argument("--redis-server", help="server binary to start (default: as smq.embedded finds it)")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # the poison messages' tracebacks are expected
    run(max(60.0, arguments.seconds), arguments.out, arguments.redis_server)


if __name__ == "__main__":
    main()
