"""What a scrape costs: exporter scrape time and size as the number of queues grows.

Each scrape reads every reported queue's attributes (one script call each) and
Redis INFO. Run:  python bench/exporter.py [--queues 10,100,1000,5000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import smq
from smq.embedded import EmbeddedRedis
from smq.exporter import Exporter, ExporterConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", default="10,100,1000,5000")
    parser.add_argument("--scrapes", type=int, default=5)
    arguments = parser.parse_args()
    counts = [int(n) for n in arguments.queues.split(",")]
    print("| queues | scrape median (ms) | per queue (µs) | bytes |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis(Path(folder)) as redis:
        client = smq.Client(redis.url)
        made = 0
        for count in counts:
            while made < count:
                queue = client.create_queue(f"q{made:06d}")
                queue.send_batch([smq.SendEntry(str(n), "x") for n in range(10)])
                queue.receive(3)
                made += 1
            exporter = Exporter(client, ExporterConfig(max_queues=count))
            times = []
            for _ in range(arguments.scrapes):
                started = time.perf_counter()
                text = exporter.metrics_text()
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            print(f"| {count:,} | {median * 1000:.1f} | {median / count * 1e6:.0f} | {len(text):,} |")
        client.close()


if __name__ == "__main__":
    main()
