"""Helper process for test_one_clock: an smq client whose wall clock is off.

Usage: skewed_client.py URL SKEW_SECONDS (send BODY | receive VIS | wait-receive WAIT)
Prints one JSON object.
"""

import json
import sys
import time

url, skew = sys.argv[1], int(sys.argv[2])
_real_time, _real_time_ns = time.time, time.time_ns
time.time = lambda: _real_time() + skew
time.time_ns = lambda: _real_time_ns() + skew * 1_000_000_000

import smq  # noqa: E402  (after the clock is skewed)

queue = smq.Client(url).create_queue("skew")
command, argument = sys.argv[3], sys.argv[4]
out: dict = {"clock_skew": round(time.time() - _real_time())}
if command == "send":
    out["message_id"] = queue.send(argument).message_id
else:
    if command == "receive":
        messages = queue.receive(visibility_timeout=int(argument))
    else:
        messages = queue.receive(wait_time_seconds=int(argument))
    out["bodies"] = [m.body for m in messages]
    if messages:
        out["receive_count"] = messages[0].receive_count
        out["sent_at"] = messages[0].sent_at
print(json.dumps(out))
