"""Quiet tenants behind a noisy one: their dwell time on a shared standard queue.

The scenario of SQS's fair queues (and of the issue that asks smq for them): one tenant
queues a backlog (``--backlog`` messages at once), quiet tenants keep sending a few messages a
second each (``--quiet-rate`` in all, spread over ``--tenants`` - 1 quiet tenants in turn), and
``--consumers`` consumer threads receive 10 at a time with a long poll, spend ``--process-ms``
on each message (a sleep: the handler's work) and delete the batch. Messages carry their
tenant as MessageGroupId (``groups``) or nothing (``no groups``): on a queue without fair
queues the two behave alike, and quiet messages wait behind the whole backlog.

Dwell time is a message's first receive minus its send, both by the Redis server's clock
(``first_received_at - sent_at``). A quiet message still waiting when the window ends counts as
not received (its dwell is at least the time it has waited). Reported per case: the quiet
tenants' p50/p90/p99 dwell, how many of their messages were received within the window, the
noisy tenant's messages done, and messages done per second in all; medians over ``--repeat``
rounds, the cases alternating within each round, with the load average of each round.

Run: ``.venv/bin/python bench/fair.py`` (about 3 minutes); ``--quick`` for a smoke run.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any

from _harness import Options, Run, csv, ints, percentile, redis_server, table

import smq

MODES = ("groups", "no groups")
NOISY = "noisy"


def run_case(client: smq.Client, mode: str, tenants: int, args: Any) -> dict[str, Any]:
    """One case on a fresh queue: the quiet tenants' dwell times and what was done."""
    name = "fair-bench"
    client.delete_queue(name)
    queue = client.create_queue(name, visibility_timeout=60, receive_message_wait_time_seconds=1)
    grouped = mode == "groups"
    body = "x" * 100
    for start in range(0, args.backlog, 10):
        queue.send_batch(
            [
                smq.SendEntry(str(i), f"{NOISY}:{body}", message_group_id=NOISY if grouped else None)
                for i in range(min(10, args.backlog - start))
            ]
        )
    stop = threading.Event()
    lock = threading.Lock()
    quiet_dwell: list[float] = []
    noisy_done = [0]
    sent_quiet: list[float] = []  # send times by the local clock, for the messages left waiting
    done = [0]

    def consume() -> None:
        consumer = client.queue(name)
        while not stop.is_set():
            messages = consumer.receive(10, wait_time_seconds=1)
            for message in messages:
                if stop.is_set():
                    return
                time.sleep(args.process_ms / 1000)
                with lock:
                    if message.body.startswith(NOISY):
                        noisy_done[0] += 1
                    else:
                        quiet_dwell.append(message.first_received_at - message.sent_at)
            if messages:
                consumer.delete_batch(
                    [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)]
                )
                with lock:
                    done[0] += len(messages)

    def produce_quiet() -> None:
        producer = client.queue(name)
        interval = 1 / args.quiet_rate
        quiet = max(1, tenants - 1)
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            tenant = f"tenant-{n % quiet}"
            producer.send(f"{tenant}:{body}", message_group_id=tenant if grouped else None)
            sent_quiet.append(time.monotonic())
            n += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(args.consumers)]
    threads.append(threading.Thread(target=produce_quiet, daemon=True))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(timeout=10)
    with lock:
        received = len(quiet_dwell)
        dwell = sorted(quiet_dwell)
        sent = len(sent_quiet)
    return {
        "mode": mode,
        "tenants": tenants,
        "quiet_sent": sent,
        "quiet_received": received,
        "quiet_p50_s": percentile(dwell, 0.5) if dwell else None,
        "quiet_p90_s": percentile(dwell, 0.9) if dwell else None,
        "quiet_p99_s": percentile(dwell, 0.99) if dwell else None,
        "noisy_done": noisy_done[0],
        "done_per_s": done[0] / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "fair", repeat=3, quick={"seconds": 4.0, "backlog": 300, "repeat": 1})
    parser.add_argument("--tenants", default="10,1000", help="tenants in all, the noisy one included")
    parser.add_argument("--modes", default=",".join(MODES), help="groups, no groups")
    parser.add_argument("--backlog", type=int, default=3000, help="the noisy tenant's messages")
    parser.add_argument("--quiet-rate", type=float, default=16.0, help="quiet messages a second, in all")
    parser.add_argument("--consumers", type=int, default=4, help="consumer threads")
    parser.add_argument("--process-ms", type=float, default=25.0, help="a handler's time per message")
    parser.add_argument("--seconds", type=float, default=18.0, help="the window of each case")
    args = parser.parse_args(argv)
    modes = csv(args.modes)
    if not modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    bench = Run(__file__, args, argv)
    cases = {f"{mode}, {n} tenants": (mode, n) for n in ints(args.tenants) for mode in modes}
    with redis_server(args.redis_server, tcp=False) as server, smq.Client(server.url) as client:
        results = bench.rounds(
            {label: (lambda m=mode, n=n: run_case(client, m, n, args)) for label, (mode, n) in cases.items()},
            args.repeat,
            show=lambda r: (
                f"quiet p90 {r['quiet_p90_s'] or 0:.2f} s, {r['quiet_received']}/{r['quiet_sent']} received"
            ),
        )

    def med(label: str, key: str) -> float | None:
        values = [r[key] for r in results[label] if r[key] is not None]
        return statistics.median(values) if values else None

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    rows = []
    for label in cases:
        received = med(label, "quiet_received") or 0
        sent = med(label, "quiet_sent") or 0
        rows.append(
            [
                label,
                seconds(med(label, "quiet_p50_s")),
                seconds(med(label, "quiet_p90_s")),
                seconds(med(label, "quiet_p99_s")),
                f"{received:.0f} / {sent:.0f}",
                f"{med(label, 'noisy_done') or 0:.0f}",
                f"{med(label, 'done_per_s') or 0:.0f}",
            ]
        )
    print(
        table(
            ["case", "quiet p50 s", "p90 s", "p99 s", "quiet received / sent", "noisy done", "msgs/s"],
            rows,
        )
    )
    bench.write(args.output, {"cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
