"""``smq redis-acl``: the Redis ACL of a least-privilege user for smq."""

from __future__ import annotations

import click

from ..operations._access import acl_rules
from ._base import main


@main.command(name="redis-acl")
@click.option("--user", default="smq", show_default=True, help="The ACL user's name.")
@click.option(
    "--cluster",
    is_flag=True,
    envvar="SMQ_CLUSTER",
    help="The user is for a Redis Cluster: add the commands its clients need (env SMQ_CLUSTER).",
)
@click.option(
    "--wait-aof",
    is_flag=True,
    envvar="SMQ_WAIT_AOF",
    help="Clients will wait for append-only files (--wait-aof): add WAITAOF, which needs "
    "Redis 7.2 or later, or Valkey (env SMQ_WAIT_AOF).",
)
def redis_acl(user: str, cluster: bool, wait_aof: bool) -> None:
    """Print the ACL SETUSER command of a Redis user that may do what smq does, and no more.

    Its keys and Pub/Sub channels are those under ``smq:``; its commands are
    those smq's scripts and clients run. Replace PASSWORD, run it with
    redis-cli as an admin (or put ``user ...`` in the ACL file), and give smq
    the user in its URL: ``redis://smq:PASSWORD@host:6379/0``. With
    ``--cluster``, run it on every node of the cluster, replicas too: nodes
    do not share their users.
    """
    click.echo(f"ACL SETUSER {user} on >PASSWORD {acl_rules(cluster=cluster, wait_aof=wait_aof)}")
