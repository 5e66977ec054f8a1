"""What a scrape costs: exporter scrape time and size as the number of queues grows.

Each scrape reads every reported queue's attributes (one script call each) and
Redis INFO. Run:  python bench/exporter.py [--queues 10,100,1000,5000]
"""

from __future__ import annotations

import statistics
import sys
import time

from _harness import Options, Run, ints, redis_server

import smq
from smq.exporter import Exporter, ExporterConfig


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "exporter", repeat=None)
    parser.add_argument("--queues", default="10,100,1000,5000")
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args(argv)
    run = Run(__file__, args, argv)
    rows = []
    print("| queues | scrape median (ms) | per queue (µs) | bytes |")
    print("|---:|---:|---:|---:|")
    with redis_server(args.redis_server, tcp=False) as redis, smq.Client(redis.url) as client:
        made = 0
        for count in ints(args.queues):
            while made < count:
                queue = client.create_queue(f"q{made:06d}")
                queue.send_batch([smq.SendEntry(str(n), "x") for n in range(10)])
                queue.receive(3)
                made += 1
            exporter = Exporter(client, ExporterConfig(max_queues=count))
            times = []
            for _ in range(args.scrapes):
                started = time.perf_counter()
                text = exporter.metrics_text()
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            rows.append({"queues": count, "scrape_seconds": times, "bytes": len(text)})
            print(f"| {count:,} | {median * 1000:.1f} | {median / count * 1e6:.0f} | {len(text):,} |")
    run.write(args.output, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
