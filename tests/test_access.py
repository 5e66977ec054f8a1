"""Least privilege: smq's ACL is enough (the `client` fixture's "acl" and
"cluster-acl" backends run the core contract tests as that user, on one server
and on a 3-primary Redis Cluster, and find every node's ACL LOG empty after each
test), and a user lacking a command smq needs is told so in one line when a
client starts."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import smq
from conftest import ACL_PASSWORD, ROOT, acl_cluster_url, acl_refusals, acl_url
from smq.embedded import EmbeddedCluster, EmbeddedRedis
from smq.operations._access import CLIENT_COMMANDS, CLUSTER_COMMANDS, SCRIPT_COMMANDS, acl_rules

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


def test_smq_redis_acl_cluster_prints_the_cluster_acl(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "smq", "redis-acl", "--cluster"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.stdout == f"ACL SETUSER smq on >PASSWORD {acl_rules(cluster=True)}\n"


def test_the_cluster_rules_add_only_what_a_cluster_client_sends() -> None:
    single, cluster = acl_rules().split(), acl_rules(cluster=True).split()
    assert cluster[:5] == single[:5]
    assert set(cluster) - set(single) == {f"+{command}" for command in CLUSTER_COMMANDS}


# -- Redis Cluster: users short of something, on every node or on one ----------

PARTIAL_NODE = 2
"""The node on which the user ``partial`` lacks ZMSCORE (and ``lonely`` is missing)."""


@pytest.fixture(scope="module")
def short_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    rules = acl_rules(cluster=True)
    users = {
        "single": acl_rules(),  # the single-server ACL, given to a cluster by mistake
        "nocommand": rules.replace(" +command", ""),
        "partial": rules,
        "lonely": rules,
    }
    config = [f"user {user} on >{ACL_PASSWORD} {rules}" for user, rules in users.items()]
    with EmbeddedCluster(tmp_path_factory.mktemp("acl-cluster-short"), config=config) as cluster:
        with cluster.nodes[PARTIAL_NODE].client() as admin:
            admin.execute_command("ACL", "SETUSER", "partial", "-zmscore")
            admin.execute_command("ACL", "DELUSER", "lonely")
        yield cluster


@pytest.mark.parametrize(
    ("user", "command"), [("single", "CLUSTER SLOTS"), ("nocommand", "COMMAND"), ("partial", "ZMSCORE")]
)
def test_a_cluster_user_without_a_command_smq_needs_is_told_at_start(
    short_cluster: EmbeddedCluster, user: str, command: str
) -> None:
    settings = smq.Settings(url=acl_cluster_url(short_cluster, user=user), cluster=True)
    with pytest.raises(smq.BackendError) as caught:
        client = smq.Client(settings=settings)  # the cluster client reads the slot map here
        try:
            client.create_queue("jobs")
        finally:
            client.close()
    message = str(caught.value)
    assert f"may not run {command}" in message and "smq redis-acl --cluster" in message, message
    assert "\n" not in message


def test_a_cluster_node_without_the_user_is_told_at_start(short_cluster: EmbeddedCluster) -> None:
    client = smq.Client(
        settings=smq.Settings(url=acl_cluster_url(short_cluster, user="lonely"), cluster=True)
    )
    with pytest.raises(smq.BackendError) as caught:
        client.create_queue("jobs")
    client.close()
    assert "every node needs the user" in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_says_it_in_one_line_for_a_cluster(
    short_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    url = acl_cluster_url(short_cluster, user="single")
    done = subprocess.run(
        [sys.executable, "-m", "smq", "queue", "create", "jobs", "--redis-url", url, "--cluster"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "CLUSTER SLOTS" in done.stderr, done.stderr


def test_the_cluster_user_is_refused_nothing_on_any_node(acl_cluster: EmbeddedCluster) -> None:
    acl_refusals(acl_cluster.nodes)
    settings = smq.Settings(url=acl_cluster_url(acl_cluster), cluster=True)
    with smq.Client(settings=settings) as client:
        queues = [client.create_queue(f"jobs-{n}") for n in range(6)]  # slots on all three primaries
        for queue in queues:
            sender = threading.Timer(0.2, queue.send, ["wake up"])
            sender.start()
            assert [m.body for m in queue.receive(wait_time_seconds=5)] == ["wake up"]  # woken by Pub/Sub
            sender.join()
        assert len(client.list_queues("jobs-")) == 6
        for queue in queues:
            client.delete_queue(queue.name)
    assert acl_refusals(acl_cluster.nodes) == []
