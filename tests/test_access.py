"""Least privilege: smq's ACL is enough (the `client` fixture's "acl" backend runs
the core contract tests as that user), and a user lacking a command smq needs is
told so in one line when a client starts."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import smq
from conftest import ACL_PASSWORD, ROOT, acl_url
from smq._access import CLIENT_COMMANDS, SCRIPT_COMMANDS, acl_rules
from smq.embedded import EmbeddedRedis

LUA = ROOT / "lua"


def test_the_acl_names_every_command_the_scripts_call() -> None:
    called = set()
    for path in [*LUA.glob("*.lua"), *LUA.glob("includes/*.lua")]:
        called |= {name.lower() for name in re.findall(r"redis\.p?call\('([A-Za-z]+)'", path.read_text())}
    assert called <= set(SCRIPT_COMMANDS), sorted(called - set(SCRIPT_COMMANDS))
    tried = {name.lower() for name in re.findall(r"\{'([A-Z]+)'", (LUA / "check_access.lua").read_text())}
    assert tried == set(SCRIPT_COMMANDS)


def test_the_rules_grant_only_smqs_keys_channels_and_commands() -> None:
    rules = acl_rules().split()
    assert rules[:5] == ["resetkeys", "~smq:*", "resetchannels", "&smq:*", "-@all"]
    assert {rule[1:] for rule in rules[5:]} == set(SCRIPT_COMMANDS) | set(CLIENT_COMMANDS)


@pytest.fixture(scope="module")
def short_of_zmscore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    rules = acl_rules().replace(" +zmscore", "")
    config = [f"user smq on >{ACL_PASSWORD} {rules}", f"user nobody on >{ACL_PASSWORD} -@all"]
    with EmbeddedRedis(tmp_path_factory.mktemp("acl-short"), config=config) as server:
        yield server


def test_a_user_without_a_command_smq_needs_is_told_at_start(short_of_zmscore: EmbeddedRedis) -> None:
    client = smq.Client(acl_url(short_of_zmscore))
    with pytest.raises(smq.BackendError) as caught:
        client.list_queues("")
        client.create_queue("jobs")
    message = str(caught.value)
    assert "ZMSCORE" in message and "smq redis-acl" in message and "\n" not in message
    client.close()


def test_a_user_without_any_permission_is_told_at_start(short_of_zmscore: EmbeddedRedis) -> None:
    client = smq.Client(acl_url(short_of_zmscore, user="nobody"))
    with pytest.raises(smq.BackendError, match="smq's ACL"):
        client.create_queue("jobs")
    client.close()


def test_the_command_line_says_it_in_one_line(short_of_zmscore: EmbeddedRedis, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "smq", "queue", "create", "jobs", "--redis-url", acl_url(short_of_zmscore)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "ZMSCORE" in done.stderr, done.stderr


def test_smq_redis_acl_prints_the_acl(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "smq", "redis-acl", "--user", "queues"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.stdout == f"ACL SETUSER queues on >PASSWORD {acl_rules()}\n"
