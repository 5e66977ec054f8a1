"""Facts written twice must agree: Lua and Python, headers and bodies, exports."""

from __future__ import annotations

import re

import pytest
from redis.crc import key_slot

import smq
from smq import _errors
from smq._errors import Status
from smq.core import _config, _keys, _scripts

LUA = _scripts.lua_dir()
SCRIPTS = sorted(p.stem for p in LUA.glob("*.lua"))


def _body(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def test_status_codes_agree_between_lua_and_python() -> None:
    common = (LUA / "includes" / "common.lua").read_text()
    in_lua = {
        name: int(value)
        for name, value in re.findall(
            r"^local (E_\w+|OK|DELETED|ALREADY_GONE|STALE_IGNORED|DUPLICATE) = (-?\d+)$", common, re.M
        )
    }
    assert in_lua == {status.name: status.value for status in Status}


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_header_keys_match_their_bindings(name: str) -> None:
    body = _body(name)
    kinds = _scripts.parse_key_kinds(name, body)
    bindings = re.findall(r"^local (\w+) = KEYS\[(\d+)\]$", body, re.M)
    assert [(kind, str(n + 1)) for n, kind in enumerate(kinds)] == bindings
    # KEYS is read in the binding lines only: no key names from data or loops.
    assert body.count("KEYS[") == len(bindings) + len(re.findall(r"^-- KEYS\[", body, re.M))


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_keep_to_the_portable_bounded_lua_subset(name: str) -> None:
    body = _body(name)
    assert body.startswith(f"-- {name}: "), "a header naming the script's job comes first"
    assert "-- ARGV[1] now_ms" in body
    for forbidden in (
        "cmsgpack",
        "bit.",
        "struct.",
        "#!lua",
        "'KEYS'",
        "'SCAN'",
        "redis.sha1hex",
        "math.random",
    ):
        assert forbidden not in body
    # no globals: a name assigned without `local` must have been declared local
    source = "".join(p.read_text() for p in sorted((LUA / "includes").glob("*.lua"))) + body
    declared = set(re.findall(r"\blocal function (\w+)", source))
    for names in re.findall(r"\blocal ([\w, ]+?)\s*(?:=|$)", source, re.M):
        declared |= {n.strip() for n in names.split(",")}
    for names in re.findall(r"^\s*([A-Za-z_][\w, ]*?)\s*=[^=]", source, re.M):
        if names.split()[0] not in ("local", "for", "if", "elseif", "while", "return"):
            assert {n.strip() for n in names.split(",")} <= declared, names
    # every loop is a numeric for over a bounded count, or a while with a budget
    for loop in re.findall(r"^\s*(for .*|while .*)$", body, re.M):
        assert re.match(
            r"(for \w+ = \d+, (#\w+|\w+|#ARGV)(, 2)? do|while want > 0 and skips > 0 do)", loop.strip()
        ), loop


def test_every_key_of_a_queue_shares_one_cluster_slot() -> None:
    for name in ["jobs", "a", "Q-1_x", "z" * 80]:
        keys = _keys.QueueKeys.of(name)
        slots = {key_slot(keys.by_kind(kind).encode()) for kind in _keys.KINDS}
        slots.add(key_slot(keys.wake_channel.encode()))
        assert slots == {key_slot(name.encode())}


def test_the_data_layout_is_stated_once_in_lua_and_once_in_python() -> None:
    common = (LUA / "includes" / "common.lua").read_text()
    assert re.findall(r"^local LAYOUT = (\d+)$", common, re.M) == [str(_errors.LAYOUT)]


# The probe of smq's ACL check touches no queue.
_NOT_OF_A_QUEUE = {"check_access"}


@pytest.mark.parametrize("name", sorted(set(SCRIPTS) - _NOT_OF_A_QUEUE))
def test_every_script_of_a_queue_refuses_a_newer_layout_before_any_write(name: str) -> None:
    body = _body(name)
    assert "-- KEYS[" in body and " meta (hash)" in body, "the queue's meta is among its keys"
    check = body.index("if newer_layout(")
    read_into = ("layout) then\n", "settings[", "stored[", "last[")
    assert body[check:].startswith(tuple(f"if newer_layout({name}" for name in read_into))
    writes = ("HSET", "HDEL", "ZADD", "ZREM", "RPUSH", "LPUSH", "LPOP", "UNLINK", "XADD", "HINCRBY", "DEL")
    for write in (*writes, "SET", "PUBLISH"):
        assert f"'{write}'" not in body[:check], write


def test_counters_kept_by_scripts_are_the_documented_ones() -> None:
    used = set()
    includes = "".join(p.read_text() for p in sorted((LUA / "includes").glob("*.lua")))
    for name in SCRIPTS:
        used |= set(re.findall(r"HINCRBY', stats, '(\w+)'", _body(name) + includes))
    assert used == set(_config.COUNTERS)


def test_meta_fields_read_by_scripts_are_written_by_the_config() -> None:
    written = set(smq.QueueConfig().to_meta()) | set(smq.QueueConfig(fifo_queue=True).to_meta())
    # Written by the scripts themselves (dedup_by: set_attributes, at a scope switch).
    written |= {"created_ms", "modified_ms", "ghosts", "fifo_seq", "purged_ms", "dedup_by", "layout", "fair"}
    read = set()
    for name in SCRIPTS:
        for call in re.findall(r"H(?:M?GET)', meta, ([^)]*)\)", _body(name)):
            read |= set(re.findall(r"'(\w+)'", call))
    assert read <= written


def test_public_surface_is_pinned() -> None:
    assert sorted(smq.__all__) == sorted(
        [
            "COUNTERS", "MAX_VISIBILITY_TIMEOUT", "BackendError", "BatchEntryIdsNotDistinct", "BatchError",
            "BatchFailure", "BatchRequestTooLong", "BatchResult", "ChangeEntry", "Client", "Consumer",
            "DeleteEntry",
            "EmptyBatchRequest", "Event", "EvictionPolicyUnsafe",
            "InvalidAttributeName", "InvalidAttributeValue", "InvalidBatchEntryId", "InvalidDeclaration",
            "InvalidMessageContents", "InvalidParameter", "InvalidQueueName", "Job", "LeaseLost", "Message",
            "MessageAttribute",
            "MessageNotInflight", "MessageTooLong", "MissingParameter", "MoveTask", "MoveTaskActive",
            "MoveTaskNotFound",
            "OldClientsPresent", "OutcomeUnknown", "OverLimit", "PeekedMessage", "PurgeQueueInProgress",
            "Queue",
            "QueueChange", "QueueConfig",
            "QueueDeletedRecently", "QueueDoesNotExist", "QueueInfo", "QueueNameExists", "QueueUpgrade",
            "ReceiptError",
            "ReceiptExpired",
            "ReceiptHandleIsInvalid",
            "RedisCannotPersist", "RedisOutOfMemory", "RedisReadOnly",
            "RedisHealth", "RedrivePolicy", "Sample", "SendEntry", "SendResult", "Settings", "SmqError",
            "StaleReceipt", "TooFewReplicas",
            "TooManyEntriesInBatchRequest", "Unavailable", "UnsafeRedisConfig", "UnsupportedLayout",
            "VisibilityCeilingExceeded",
            "Worker",
            "WorkerConfig",
            "md5_of_attributes", "md5_of_body",
        ]
    )  # fmt: skip
    for name in smq.__all__:
        assert getattr(smq, name) is not None


def test_every_error_descends_from_the_root() -> None:
    errors = [
        getattr(smq, n)
        for n in smq.__all__
        if isinstance(getattr(smq, n), type) and issubclass(getattr(smq, n), Exception)
    ]
    assert all(issubclass(e, smq.SmqError) for e in errors)
    assert issubclass(smq.InvalidParameter, ValueError)


def test_importing_smq_has_no_side_effects() -> None:
    import subprocess
    import sys

    code = (
        "import socket\n"
        "def refuse(*args):\n"
        "    raise AssertionError('importing smq opened a connection')\n"
        "socket.socket.connect = refuse\n"
        "socket.socket.connect_ex = refuse\n"
        "import smq, smq.cli, smq.embedded\n"
        "smq.Client('redis://127.0.0.1:6379/0')\n"
        "assert not smq.core._scripts._sources.cache_info().currsize, 'scripts read at import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# What a script may do to a FIFO queue's group keys: each command here costs
# O(1) or O(log n + returned), and every range command must carry a LIMIT or a
# bounded index (checked below), so no call's work grows with the number of groups.
_GROUP_KEY_COMMANDS = {
    "groups": {"HGET", "HSET", "HDEL", "HEXISTS", "HLEN"},
    "ready": {"LPOP", "RPUSH", "LPUSH", "LLEN", "LRANGE"},
    "waiting": {"ZADD", "ZREM", "ZRANGEBYSCORE", "ZRANGE", "ZCARD"},
    "ordered": {"ZADD", "ZREM", "ZRANGEBYLEX", "ZRANGE"},
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_script_scans_the_groups_of_a_fifo_queue(name: str) -> None:
    source = "".join(p.read_text() for p in sorted((LUA / "includes").glob("*.lua"))) + _body(name)
    for command, key, rest in re.findall(r"redis\.call\('(\w+)', (?:k\.)?(\w+)([^\n]*)", source):
        if key in _GROUP_KEY_COMMANDS:
            assert command in _GROUP_KEY_COMMANDS[key], f"{command} on {key}"
            if command in ("ZRANGEBYSCORE", "ZRANGEBYLEX"):
                assert "'LIMIT'" in rest, f"{command} on {key} without LIMIT"
            if command in ("LRANGE", "ZRANGE"):
                assert "-1" not in rest, f"{command} on {key} to the end"


def test_the_event_kinds_python_knows_are_the_ones_the_scripts_emit() -> None:
    from smq.operations._events import EVENT_KINDS

    emitted = set()
    for path in LUA.rglob("*.lua"):
        # emit(events, events_max, now, '<kind>', ...): the kind is the first quoted argument.
        emitted |= set(re.findall(r"\bemit\([^'\n]*'(\w+)'", path.read_text()))
    assert emitted == set(EVENT_KINDS)
