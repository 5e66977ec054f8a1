"""Where a message's time goes: each step of smq's core beside the same step on Redis Streams.

One process, one embedded Redis (TCP on 127.0.0.1), no concurrency: for each
step (send a batch of 10, receive 10, delete 10; then, after as many sends
again, unmeasured, delete the previous 10 and receive the next 10 in one round
trip: smq's ``delete_and_receive``, on Streams XACK + XDEL pipelined with
XREADGROUP) it runs ``--calls`` calls back to back and reads, over exactly those calls, the Redis server's CPU
(``INFO cpu``), the time Redis spent inside the commands (``INFO
commandstats``: for smq the scripts, for Streams XADD / XREADGROUP / XACK +
XDEL), and this process's own CPU (``time.process_time``). Everything is per
message. The difference between a step's Redis CPU and its command time is
what the server spends around the commands (reading and parsing requests,
writing replies, the event loop); the client's CPU is Python, redis-py and
hiredis together. Medians of ``--repeat`` rounds, the steps interleaved.

Run: ``.venv/bin/python bench/step_costs.py [--calls 2000] [--repeat 5]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import redis
from _harness import Options, Run, redis_server, temp_folder

import smq

BATCH = 10
BODY = ("0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]
GROUP = "workers"


# The commands the clients send. Those a script runs are counted in commandstats too, but their
# time is inside the script's: summing every command would count it twice.
TOP_LEVEL = ("evalsha", "xadd", "xreadgroup", "xack", "xdel")
DELETE_AND_RECEIVE = "delete_and_receive"
STEPS = ("send", "receive", "delete", DELETE_AND_RECEIVE)
# The rows that add steps up: a message's whole life, by separate calls and by the consumer's
# one round trip per batch.
TOTALS = {
    "**all three**": ("send", "receive", "delete"),
    "**send + delete_and_receive**": ("send", DELETE_AND_RECEIVE),
}


def counters(admin: redis.Redis) -> tuple[float, float]:
    """(Redis CPU seconds so far, seconds spent inside the clients' commands so far)."""
    cpu = admin.info("cpu")
    commands = admin.info("commandstats")
    inside = sum(float(commands.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in TOP_LEVEL) / 1e6
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), inside


def measure(admin: redis.Redis, step: Callable[[], int], calls: int) -> dict[str, float]:
    """Run ``step`` ``calls`` times; per message: Redis CPU, time in commands, client CPU (µs)."""
    cpu_0, inside_0 = counters(admin)
    client_0 = time.process_time()
    messages = sum(step() for _ in range(calls))
    client_1 = time.process_time()
    cpu_1, inside_1 = counters(admin)
    # The two INFO calls of the reading count in the Redis figures: a few µs over thousands of calls.
    per = 1e6 / messages
    return {
        "messages": messages,
        "redis_cpu_us": round((cpu_1 - cpu_0) * per, 2),
        "in_commands_us": round((inside_1 - inside_0) * per, 2),
        "around_commands_us": round(((cpu_1 - cpu_0) - (inside_1 - inside_0)) * per, 2),
        "client_cpu_us": round((client_1 - client_0) * per, 2),
    }


def smq_steps(url: str) -> tuple[dict[str, Callable[[], int]], Callable[[], None]]:
    client = smq.Client(url)
    queue = client.create_queue("profile-smq")
    entries = [smq.SendEntry(f"m{i}", BODY) for i in range(BATCH)]
    held: list[list[smq.Message]] = []

    def send() -> int:
        return len(queue.send_batch(entries).successful)

    def receive() -> int:
        messages = queue.receive(BATCH)
        held.append(messages)
        return len(messages)

    def delete() -> int:
        messages = held.pop()
        batch = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(messages)]
        return len(queue.delete_batch(batch).successful)

    def delete_and_receive() -> int:
        # The batch received last is deleted on the fetch of the next (none on the first call).
        finished = held.pop() if held else []
        batch = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(finished)]
        _, messages = queue.delete_and_receive(batch, BATCH)
        held.append(messages)
        return len(messages)

    def done() -> None:
        client.delete_queue("profile-smq")
        client.close()

    return {"send": send, "receive": receive, "delete": delete, DELETE_AND_RECEIVE: delete_and_receive}, done


def streams_steps(address: dict[str, Any]) -> tuple[dict[str, Callable[[], int]], Callable[[], None]]:
    connection = redis.Redis(**address)
    name = "profile-streams"
    connection.xgroup_create(name, GROUP, id="$", mkstream=True)
    held: list[list[Any]] = []

    def send() -> int:
        with connection.pipeline(transaction=False) as pipe:
            for _ in range(BATCH):
                pipe.xadd(name, {"b": BODY})
            pipe.execute()
        return BATCH

    def receive() -> int:
        reply = connection.xreadgroup(GROUP, "c", {name: ">"}, count=BATCH)
        ids = [entry_id for entry_id, _ in reply[0][1]] if reply else []
        held.append(ids)
        return len(ids)

    def delete() -> int:
        ids = held.pop()
        with connection.pipeline(transaction=False) as pipe:
            pipe.xack(name, GROUP, *ids)
            pipe.xdel(name, *ids)
            acked, _ = pipe.execute()
        return int(acked)

    def delete_and_receive() -> int:
        ids = held.pop() if held else []
        with connection.pipeline(transaction=False) as pipe:
            if ids:
                pipe.xack(name, GROUP, *ids)
                pipe.xdel(name, *ids)
            pipe.xreadgroup(GROUP, "c", {name: ">"}, count=BATCH)
            reply = pipe.execute()[-1]
        received = [entry_id for entry_id, _ in reply[0][1]] if reply else []
        held.append(received)
        return len(received)

    def done() -> None:
        connection.delete(name)
        connection.close()

    return {"send": send, "receive": receive, "delete": delete, DELETE_AND_RECEIVE: delete_and_receive}, done


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "profile", repeat=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls of each step per round")
    args = parser.parse_args(argv)
    run = Run(__file__, args, argv, name="profile")
    rounds: dict[tuple[str, str], list[dict[str, float]]] = {}
    with temp_folder("smq-profile-") as folder:
        with redis_server(args.redis_server, folder) as server:
            address = {"host": "127.0.0.1", "port": server.port}
            with server.client() as admin:
                for round_number in run.each_round(args.repeat):
                    for system in ("smq", "streams"):
                        if system == "smq":
                            steps, done = smq_steps(f"redis://127.0.0.1:{server.port}/0")
                        else:
                            steps, done = streams_steps(address)
                        # Sends first (so receives find messages), then receives, then deletes;
                        # then as many sends again, not measured, for delete_and_receive to take.
                        for step in STEPS:
                            if step == DELETE_AND_RECEIVE:
                                for _ in range(args.calls):
                                    steps["send"]()
                            figures = measure(admin, steps[step], args.calls)
                            rounds.setdefault((system, step), []).append(figures)
                        done()
                    print(f"round {round_number}/{args.repeat} done", file=sys.stderr, flush=True)
            identity = str(server.identity)
    table = _table(rounds)
    print(table)
    run.write(
        args.output,
        {"rounds": {f"{system} {step}": values for (system, step), values in rounds.items()}},
        calls=args.calls,
        rounds=args.repeat,
        batch=BATCH,
        server=identity,
        figure="medians over the rounds, µs per message",
    )
    return 0


def _table(rounds: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    kinds = ("redis_cpu_us", "in_commands_us", "around_commands_us", "client_cpu_us")
    header = "| step | system | Redis CPU | in commands | around commands | client CPU |"
    lines = [header, "|---|---|---:|---:|---:|---:|"]
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for (system, step), values in rounds.items():
        medians[system, step] = {kind: statistics.median(v[kind] for v in values) for kind in kinds}
        figures = medians[system, step]
        lines.append(f"| {step} | {system} | " + " | ".join(f"{figures[k]:.1f}" for k in kinds) + " |")
    systems = list(dict.fromkeys(system for system, _ in rounds))
    for label, parts in TOTALS.items():
        for system in systems:
            sums = [sum(medians[system, step][k] for step in parts) for k in kinds]
            lines.append(f"| {label} | {system} | " + " | ".join(f"{v:.1f}" for v in sums) + " |")
    client = {
        label: [sum(medians[system, step]["client_cpu_us"] for step in parts) for system in systems]
        for label, parts in TOTALS.items()
    }
    if len(systems) == 2:
        lines.append("")
        for label, (first, second) in client.items():
            lines.append(
                f"client CPU, {label.strip('*')}: {systems[0]} / {systems[1]} = {first / second:.2f}"
            )
    return "\n".join(lines) + "\n\nµs per message; batches of 10."


if __name__ == "__main__":
    sys.exit(main())
