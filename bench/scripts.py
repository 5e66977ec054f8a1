"""What smq's scripts cost inside Redis, and what of it is the data commands.

Three parts, on one embedded Redis (append-only file off: this measures the
scripts, not the disk):

- ``calls``: the price list of Lua in this server. ``EVALSHA`` of scripts
  that do nothing, one ``redis.call``, ten of them, ten ``HMGET`` of ten
  fields, 1,000 concatenations of a number (Lua formats numbers with
  ``sprintf``), and nothing after the helpers smq splices in front of its
  receive script. Per ``EVALSHA``, from ``INFO commandstats``.
- ``life``: ``--messages`` messages sent by batches of 10, then drained by a
  consumer's receive of 10 and delete of 10, as ``delete_and_receive`` sends them
  (the delete of batch k and the receive of batch k+1 in one write). With smq's
  own scripts on a queue in data layout 2 (the default) and on one in layout 1;
  with *minimal* scripts that run only the data commands a send, a receive and a
  delete need in layout 1 (``HSET`` of records, ``RPUSH``, a counter,
  ``PUBLISH``; ``LPOP``, ``HMGET`` of records and states, ``HSET`` of states,
  ``ZADD``, a counter; ``HMGET``, ``ZREM``, ``HDEL``, a counter) and none of the checks:
  not a correct queue, a floor for that layout; the same with the reads smq
  cannot drop (the queue's settings, expired timeouts and due
  delays, the in-flight limit, the dead-letter outbox, a moved message's
  origin), a bound no correct script of layout 1 goes under; minimal scripts of
  layout 2 (``RPUSH`` of inline records; ``LPOP``, ``HSET`` of the records,
  ``ZADD`` of members holding the state; ``ZREM``, ``HDEL``), the floor of smq's
  layout; and the state in a member "<id>|<state>" with records in the hash. Per send and per pair: time
  in ``EVALSHA``, and of it inside the commands the scripts call; the rest is Lua,
  and turning arguments and replies between Lua and Redis.
- ``memory``: bytes per message beyond a 100-byte body, from ``INFO memory``, of
  ``--memory-n`` messages stored with plain commands in the shapes of each data
  layout, visible and in flight: layout 1 (ids in the list, records in
  ``messages``, state in ``state``), layout 2 (records inline in the list until
  the first receive, that receive's state in its in-flight member), and the
  floor of any layout with a list of the visible, a sorted set of the in
  flight scored by expiry and the records of messages in flight found by id:
  the in-flight member a bare id and no receive state at all.

Medians of ``--repeat`` rounds, the variants alternating within each round.

Run: ``.venv/bin/python bench/scripts.py [--messages 20000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import statistics
import subprocess
import sys
import time
from typing import Any

import redis
from _harness import Options, Run, redis_server

import smq
from smq.core._ids import new_ids
from smq.core._message import encode_payload
from smq.core._scripts import _definitions, _prelude_for, sources
from smq.embedded import EmbeddedRedis

BODY = ("0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]

PRICE_LIST = {
    "nothing": "return 1",
    "1 HINCRBY": "redis.call('HINCRBY', KEYS[1], 'n', 1) return 1",
    "10 HINCRBY": "for i = 1, 10 do redis.call('HINCRBY', KEYS[1], 'n', 1) end return 1",
    "10 HMGET of 10 fields": "for i = 1, 10 do redis.call('HMGET', KEYS[1], "
    + ", ".join(f"'f{i}'" for i in range(10))
    + ") end return 1",
    "1,000 number concatenations": "local s for i = 1, 1000 do s = 'a' .. i end return 1",
}
NOTHING_AFTER_HELPERS = "nothing, after receive's helpers"

# The data commands of a send of up to 10 (same keys and arguments as lua/send.lua), nothing else.
MINIMAL_SEND = """
local t = redis.call('TIME')
local stamp = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) .. '|'
local n = tonumber(ARGV[3])
local ids, records = {}, {}
for i = 1, n do
  local id = ARGV[5 * i - 1]
  ids[i] = id
  records[2 * i - 1], records[2 * i] = id, stamp .. ARGV[5 * i + 2]
end
redis.call('HSET', KEYS[4], unpack(records))
redis.call('RPUSH', KEYS[2], unpack(ids))
redis.call('HINCRBY', KEYS[5], 'sent', n)
redis.call('PUBLISH', ARGV[2], '1')
return {0}
"""

# The data commands of a receive of up to 10 (same keys as lua/receive.lua), nothing else.
MINIMAL_RECEIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('LPOP', KEYS[2], tonumber(ARGV[2]))
if not ids then return {0} end
local records = redis.call('HMGET', KEYS[5], unpack(ids))
redis.call('HMGET', KEYS[6], unpack(ids))
local state = ARGV[4] .. '|1|' .. now .. '|' .. now
local expiry = now + 30000
local states, inflight, reply = {}, {}, {0}
for i = 1, #ids do
  states[2 * i - 1], states[2 * i] = ids[i], state
  inflight[2 * i - 1], inflight[2 * i] = expiry, ids[i]
  reply[2 * i], reply[2 * i + 1] = ids[i], records[i]
end
redis.call('HSET', KEYS[6], unpack(states))
redis.call('ZADD', KEYS[3], unpack(inflight))
redis.call('HINCRBY', KEYS[7], 'received', #ids)
return reply
"""

# The data commands of a delete of up to 10 (same keys as lua/delete.lua), nothing else.
MINIMAL_DELETE = """
local ids = {}
for i = 1, tonumber(ARGV[3]) do ids[i] = ARGV[2 * i + 2] end
redis.call('HMGET', KEYS[4], unpack(ids))
redis.call('ZREM', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
redis.call('HDEL', KEYS[4], unpack(ids))
redis.call('HINCRBY', KEYS[5], 'deleted', #ids)
return {0}
"""

# The floor plus the reads smq cannot drop on this layout and nothing else: each script reads the
# queue's settings, receive takes back expired visibility timeouts and due delays, checks the
# in-flight limit and the dead-letter outbox, delete checks the limit (to wake long polls) and
# drops a moved message's origin. A bound: no correct smq script on this layout costs less.
FLOOR_CALLS_SEND = MINIMAL_SEND.replace(
    "local t = redis.call('TIME')",
    "redis.call('HMGET', KEYS[1], 'delay_ms', 'max_size', 'events_max')\nlocal t = redis.call('TIME')",
)
FLOOR_CALLS_RECEIVE = MINIMAL_RECEIVE.replace(
    "local ids = redis.call('LPOP'",
    """redis.call('HMGET', KEYS[1], 'vis_ms', 'retention_ms', 'dlq', 'max_receives', 'inflight_limit',
  'events_max', 'wait_ms', 'ghosts')
redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 100)
redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
redis.call('ZCARD', KEYS[3])
redis.call('ZRANGE', KEYS[10], 0, 0, 'WITHSCORES')
local ids = redis.call('LPOP'""",
)
FLOOR_CALLS_DELETE = MINIMAL_DELETE.replace(
    "redis.call('HMGET', KEYS[4], unpack(ids))",
    """redis.call('HMGET', KEYS[1], 'events_max', 'inflight_limit', 'fifo', 'delay_ms')
redis.call('ZCARD', KEYS[2])
redis.call('HMGET', KEYS[4], unpack(ids))""",
).replace(
    "redis.call('HDEL', KEYS[4], unpack(ids))",
    "redis.call('HDEL', KEYS[4], unpack(ids))\nredis.call('HDEL', KEYS[7], unpack(ids))",
)
assert FLOOR_CALLS_SEND != MINIMAL_SEND and FLOOR_CALLS_RECEIVE != MINIMAL_RECEIVE
assert FLOOR_CALLS_DELETE.count("KEYS[7]") == 1 and "ZCARD" in FLOOR_CALLS_DELETE

# The same, with the receive state kept in the in-flight entry's member ("<id>|<state>") and no
# state hash: the floor of a layout smq does not use. The reply gives each member for the delete.
MINIMAL_MEMBER_RECEIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('LPOP', KEYS[2], tonumber(ARGV[2]))
if not ids then return {0} end
local records = redis.call('HMGET', KEYS[5], unpack(ids))
local state = '|' .. ARGV[4] .. '|1|' .. now .. '|' .. now
local expiry = now + 30000
local inflight, reply = {}, {0}
for i = 1, #ids do
  local member = ids[i] .. state
  inflight[2 * i - 1], inflight[2 * i] = expiry, member
  reply[3 * i - 1], reply[3 * i], reply[3 * i + 1] = ids[i], member, records[i]
end
redis.call('ZADD', KEYS[3], unpack(inflight))
redis.call('HINCRBY', KEYS[7], 'received', #ids)
return reply
"""

MINIMAL_MEMBER_DELETE = """
local ids, members = {}, {}
for i = 1, tonumber(ARGV[3]) do ids[i], members[i] = ARGV[2 * i + 2], ARGV[2 * i + 3] end
redis.call('ZREM', KEYS[2], unpack(members))
redis.call('HDEL', KEYS[3], unpack(ids))
redis.call('HINCRBY', KEYS[5], 'deleted', #ids)
return {0}
"""

# The data commands of layout 2 (smq's: records inline in the list until the first receive, that
# receive's state in its member "<id>:<token>.<receive ms>"), nothing else: the floor of smq's
# layout. The receive's reply gives each message's token for the delete.
MINIMAL_INLINE_SEND = """
local t = redis.call('TIME')
local stamp = '|' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) .. '|'
local n = tonumber(ARGV[3])
local entries = {}
for i = 1, n do
  entries[i] = ARGV[5 * i - 1] .. stamp .. ARGV[5 * i + 2]
end
redis.call('RPUSH', KEYS[2], unpack(entries))
redis.call('HINCRBY', KEYS[5], 'sent', n)
redis.call('PUBLISH', ARGV[2], '1')
return {0}
"""

MINIMAL_INLINE_RECEIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entries = redis.call('LPOP', KEYS[2], tonumber(ARGV[2]))
if not entries then return {0} end
local token = ARGV[4] .. '.' .. now
local expiry = now + 30000
local records, inflight, reply = {}, {}, {0}
for i = 1, #entries do
  local bar = string.find(entries[i], '|', 1, true)
  local id, record = string.sub(entries[i], 1, bar - 1), string.sub(entries[i], bar + 1)
  records[2 * i - 1], records[2 * i] = id, record
  inflight[2 * i - 1], inflight[2 * i] = expiry, id .. ':' .. token
  reply[3 * i - 1], reply[3 * i], reply[3 * i + 1] = id, token, record
end
redis.call('HSET', KEYS[5], unpack(records))
redis.call('ZADD', KEYS[3], unpack(inflight))
redis.call('HINCRBY', KEYS[7], 'received', #entries)
return reply
"""

MINIMAL_INLINE_DELETE = """
local ids, members = {}, {}
for i = 1, tonumber(ARGV[3]) do
  ids[i] = ARGV[2 * i + 2]
  members[i] = ids[i] .. ':' .. ARGV[2 * i + 3]
end
redis.call('ZREM', KEYS[2], unpack(members))
redis.call('HDEL', KEYS[3], unpack(ids))
redis.call('HINCRBY', KEYS[5], 'deleted', #ids)
return {0}
"""

Variant = tuple[str, str, str, tuple[int, int, int]]
LAYOUT_1 = "smq, queue in layout 1"
"""Send, receive and delete scripts, and where a receive reply's messages are (see ``drain``)."""

# Commands a script may run: their time is inside EVALSHA's.
_NOT_INSIDE = ("cmdstat_evalsha", "cmdstat_config|resetstat", "cmdstat_script|load", "cmdstat_info")


def script_times(admin: redis.Redis) -> tuple[float, float]:
    """(µs in EVALSHA, µs inside the commands scripts called) since the last reset."""
    stats = admin.info("commandstats")
    evalsha = float(stats.get("cmdstat_evalsha", {}).get("usec", 0))
    inside = sum(float(v["usec"]) for name, v in stats.items() if name not in _NOT_INSIDE)
    return evalsha, inside


def price_list(admin: redis.Redis, calls: int) -> dict[str, float]:
    """µs per EVALSHA of each script of PRICE_LIST, and of nothing after receive's helpers."""
    admin.delete("bench-prices")
    admin.hset("bench-prices", mapping={f"f{i}": "x" * 40 for i in range(10)})
    receive = sources()["receive"].text
    helpers = receive[: receive.index("\n-- receive:")]  # the includes spliced in front of it
    prices: dict[str, float] = {}
    for name, body in {**PRICE_LIST, NOTHING_AFTER_HELPERS: helpers + "\nreturn 1"}.items():
        sha = admin.script_load(body)
        admin.config_resetstat()
        pipe = admin.pipeline(transaction=False)
        for _ in range(calls):
            pipe.evalsha(sha, 1, "bench-prices")
        pipe.execute()
        prices[name] = script_times(admin)[0] / calls
    return prices


def send_all(admin: redis.Redis, queue: smq.Queue, send: str, count: int) -> int:
    """Send ``count`` messages by batches of 10 with this send script; returns the calls."""
    sha = admin.script_load(send)
    keys = [getattr(queue.keys, kind) for kind in sources()["send"].key_kinds]
    payload = encode_payload(BODY.encode(), {})
    pipe = admin.pipeline(transaction=False)
    calls = 0
    for start in range(0, count, 10):
        ids = new_ids(min(10, count - start))
        args: list[Any] = ["", queue.keys.wake_channel, len(ids)]
        for stored, _ in ids:
            args += [stored, -1, len(BODY), payload, ""]
        pipe.evalsha(sha, len(keys), *keys, *args)
        calls += 1
        if calls % 100 == 0:
            check_replies(pipe.execute())
    check_replies(pipe.execute())
    return calls


def check_replies(replies: list[Any]) -> None:
    for reply in replies:
        if reply[0] != 0:
            raise RuntimeError(f"send failed: {reply}")


def drain(admin: redis.Redis, client: smq.Client, variant: Variant, count: int) -> dict[str, float]:
    """Send ``count`` messages, then drain them by receive/delete pairs: µs per send and per pair.

    ``layout``: where the receive's reply has its first message id, how many fields a message
    takes, and where after its id the second delete argument is (0: the receive's token).
    """
    send, receive, delete, layout = variant
    client.delete_queue("bench-scripts")
    queue = client.create_queue("bench-scripts", visibility_timeout=30)
    keys = queue.keys
    admin.config_resetstat()
    sends = send_all(admin, queue, send, count)
    send_evalsha, send_inside = script_times(admin)
    all_sources = sources()
    receive_keys = [getattr(keys, kind) for kind in all_sources["receive"].key_kinds]
    delete_keys = [getattr(keys, kind) for kind in all_sources["delete"].key_kinds]
    receive_sha, delete_sha = admin.script_load(receive), admin.script_load(delete)
    admin.config_resetstat()
    done: list[Any] = []
    pairs = 0
    received = 0
    while received < count:
        token = secrets.token_urlsafe(12)
        pipe = admin.pipeline(transaction=False)
        if done:
            delete_args = ["", keys.wake_channel, len(done) // 2, *done]
            pipe.evalsha(delete_sha, len(delete_keys), *delete_keys, *delete_args)
        pipe.evalsha(receive_sha, len(receive_keys), *receive_keys, "", 10, -1, token, queue.name)
        replies = pipe.execute()
        if done and replies[0][0] != 0:
            raise RuntimeError(f"delete failed: {replies[0]}")
        reply = replies[-1]
        if reply[0] != 0:
            raise RuntimeError(f"receive failed: {reply}")
        first, stride, second = layout
        # smq's first receives in layout 2: the token gains the reply's suffix (count 1).
        suffix = reply[5].decode() if first == 6 and reply[5] else ""
        done = []
        for i in range(first, len(reply), stride):
            first_receive = suffix and reply[i + 2] == 1
            done += [reply[i], reply[i + second] if second else token + suffix if first_receive else token]
        received += len(done) // 2
        pairs += 1
    evalsha, inside = script_times(admin)
    left = queue.attributes().visible
    if left:
        raise RuntimeError(f"{left} messages left in the queue")
    return {
        "send": send_evalsha / sends,
        "send_inside": send_inside / sends,
        "evalsha": evalsha / pairs,
        "inside": inside / pairs,
        "outside": (evalsha - inside) / pairs,
    }


def layout_memory(admin: redis.Redis, count: int) -> dict[str, float]:
    """Bytes per message beyond a 100-byte body, visible and in flight, in each layout's shapes."""
    ids = [base64.urlsafe_b64encode(os.urandom(15)).decode().replace("_", "-") for _ in range(count)]
    token = secrets.token_urlsafe(12)
    now = int(time.time() * 1000)
    record = f"{now}|0:".encode() + b"x" * 100
    suffix = "." + base36(now)
    state = f"{token}|1|{now}|{now}"

    def layout_1(pipe: Any, id_: str, in_flight: bool) -> None:
        pipe.hset("bench-messages", id_, record)
        if in_flight:
            pipe.zadd("bench-inflight", {id_: now})
            pipe.hset("bench-state", id_, state)
        else:
            pipe.rpush("bench-visible", id_)

    def layout_2(pipe: Any, id_: str, in_flight: bool) -> None:
        if in_flight:
            pipe.hset("bench-messages", id_, record)
            pipe.zadd("bench-inflight", {f"{id_}:{token}{suffix}": now})
        else:
            pipe.rpush("bench-visible", id_.encode() + b"|" + record)

    def floor(pipe: Any, id_: str, in_flight: bool) -> None:
        if in_flight:
            pipe.hset("bench-messages", id_, record)
            pipe.zadd("bench-inflight", {id_: now})
        else:
            pipe.rpush("bench-visible", id_.encode() + b"|" + record)

    result = {}
    for name, store in (("layout 1", layout_1), ("layout 2", layout_2), ("floor", floor)):
        for in_flight in (False, True):
            admin.delete("bench-visible", "bench-inflight", "bench-messages", "bench-state")
            before = int(admin.info("memory")["used_memory"])
            pipe = admin.pipeline(transaction=False)
            for i, id_ in enumerate(ids):
                store(pipe, id_, in_flight)
                if i % 1000 == 999:
                    pipe.execute()
            pipe.execute()
            used = (int(admin.info("memory")["used_memory"]) - before) / count - 100
            result[f"{name}, {'in flight' if in_flight else 'visible'}"] = used
    admin.delete("bench-visible", "bench-inflight", "bench-messages", "bench-state")
    return result


def base36(n: int) -> str:
    """``n`` in base 36, as the scripts write a receive time."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if n == 0:
            return out


def main(argv: list[str] | None = None) -> int:
    parser = Options(__doc__, "scripts", repeat=5)
    parser.add_argument("--messages", type=int, default=20000, help="messages drained per variant and round")
    parser.add_argument("--calls", type=int, default=5000, help="EVALSHA per script of the price list")
    parser.add_argument("--memory-n", type=int, default=200000)
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also smq's send, receive and delete as at git revision REV (their keys a prefix of today's)",
    )
    args = parser.parse_args(argv)
    bench = Run(__file__, args, argv)

    own = sources()
    variants: dict[str, Variant] = {
        "smq": (own["send"].text, own["receive"].text, own["delete"].text, (6, 4, 0)),
        # The same scripts on a queue in layout 1 (ids in the list, every state in `state`).
        LAYOUT_1: (own["send"].text, own["receive"].text, own["delete"].text, (6, 4, 0)),
        "minimal": (MINIMAL_SEND, MINIMAL_RECEIVE, MINIMAL_DELETE, (1, 2, 0)),
        "minimal + smq's necessary reads": (
            FLOOR_CALLS_SEND,
            FLOOR_CALLS_RECEIVE,
            FLOOR_CALLS_DELETE,
            (1, 2, 0),
        ),
        "minimal, layout 2": (MINIMAL_INLINE_SEND, MINIMAL_INLINE_RECEIVE, MINIMAL_INLINE_DELETE, (1, 3, 1)),
        "minimal, state in the member": (
            MINIMAL_SEND,
            MINIMAL_MEMBER_RECEIVE,
            MINIMAL_MEMBER_DELETE,
            (1, 3, 1),
        ),
    }
    if args.before:
        old = scripts_at(args.before)
        variants[f"smq at {args.before}"] = (old["send"], old["receive"], old["delete"], (6, 4, 0))
    with redis_server(args.redis_server, tcp=False) as server:
        rounds, memory, version = run(server, variants, args, bench)
    report(rounds, memory, version, variants, args, bench)
    return 0


def scripts_at(rev: str) -> dict[str, str]:
    """smq's send, receive and delete as git revision ``rev`` had them, each with the helpers of
    that revision's includes it uses (as ``smq.core._scripts`` builds them)."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
        ).stdout

    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:lua/includes"], capture_output=True, text=True, check=True
    ).stdout.split()
    prelude = "".join(show(f"lua/includes/{name}") + "\n" for name in sorted(names) if name.endswith(".lua"))
    definitions = _definitions(prelude)
    found = {}
    for name in ("send", "receive", "delete"):
        body = show(f"lua/{name}.lua")
        found[name] = _prelude_for(body, definitions) + body
    return found


def run(
    server: EmbeddedRedis, variants: dict[str, Variant], args: argparse.Namespace, bench: Run
) -> tuple[list[dict[str, Any]], dict[str, float], str]:
    """Every round of the price list and the pairs, then the memory part."""
    admin = redis.Redis.from_url(server.url)
    admin.config_set("appendonly", "no")
    admin.config_set("lazyfree-lazy-user-del", "no")  # memory freed by DEL shows at once
    info = admin.info("server")
    version = str(info.get("valkey_version") or info["redis_version"])
    client = smq.Client(server.url)
    pinned = smq.Client(smq.Settings(url=server.url, layout=1))
    rounds: list[dict[str, Any]] = []
    try:
        for n in bench.each_round(args.repeat):
            one: dict[str, Any] = {"prices": price_list(admin, args.calls)}
            for name, variant in variants.items():
                one[name] = drain(admin, pinned if name == LAYOUT_1 else client, variant, args.messages)
            rounds.append(one)
            pairs = ", ".join(f"{name} {one[name]['evalsha']:.1f}" for name in variants)
            print(f"round {n}, µs in EVALSHA a pair: {pairs}")
        return rounds, layout_memory(admin, args.memory_n), version
    finally:
        client.close()
        pinned.close()


def report(
    rounds: list[dict[str, Any]],
    memory: dict[str, float],
    version: str,
    variants: dict[str, Any],
    args: argparse.Namespace,
    bench: Run,
) -> None:
    """Print the tables and write the JSON."""

    def median(path: tuple[str, str]) -> float:
        return float(statistics.median(r[path[0]][path[1]] for r in rounds))

    print(f"\nserver: {version}, medians of {args.repeat}")
    print("\n| script | µs per EVALSHA |\n|---|---:|")
    for name in [*PRICE_LIST, NOTHING_AFTER_HELPERS]:
        print(f"| {name} | {median(('prices', name)):.2f} |")
    print(
        "\n| scripts | send 10: in EVALSHA, µs | of it in commands "
        "| receive 10 + delete 10: in EVALSHA | of it in commands | a message's life, µs | x minimal |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    floor = (median(("minimal", "send")) + median(("minimal", "evalsha"))) / 10
    for name in variants:
        values = [median((name, part)) for part in ("send", "send_inside", "evalsha", "inside")]
        life = (values[0] + values[2]) / 10
        cells = " | ".join(f"{v:.1f}" for v in values)
        print(f"| {name} | {cells} | {life:.2f} | {life / floor:.2f} |")
    print("\n| layout, state | bytes per message beyond the body |\n|---|---:|")
    for name, size in memory.items():
        print(f"| {name} | {size:.1f} |")
    sections = {"server": version, "messages": args.messages, "repeat": args.repeat}
    bench.write(args.output, {**sections, "rounds": rounds, "memory": memory})


if __name__ == "__main__":
    sys.exit(main())
