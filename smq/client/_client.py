"""The client: connection to Redis, queue lifecycle, and the script boundary."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .._errors import (
    LAYOUT,
    BackendError,
    InvalidParameter,
    OutcomeUnknown,
    QueueDoesNotExist,
    QueueNameExists,
    Status,
    Unavailable,
    UnsafeRedisConfig,
    error_for,
)
from ..connection._eviction import EvictionWatch, read_memory
from ..connection._health import RedisHealth, read_health
from ..connection._redis_errors import refusal_error, refusal_kind, refused
from ..connection._replicas import (
    READ_ONLY,
    NotReplicated,
    check_wait,
    decide_wait,
    note_not_replicated,
    wait_of,
    warn_deposable,
)
from ..connection._sentinel import SCHEMES as SENTINEL_SCHEMES
from ..connection._sentinel import connect_sentinel, is_sentinel_url, parse_sentinel_url
from ..connection._settings import Settings
from ..connection._sharded_pubsub import ShardedSubscriber
from ..connection._tls import is_tls_url
from ..connection._wakeup import Waker
from ..core._config import (
    QueueConfig,
    check_dead_letter_target,
    check_extra_attributes,
    check_int,
    check_queue_name,
    new_queue_config,
)
from ..core._keys import REGISTRY, QueueKeys
from ..core._names import MAX_QUALIFIED, NAME_CHARACTERS, SEPARATOR
from ..core._scripts import NotSent, ScriptRunner, text_pairs
from ..operations import _declared, _move_tasks, _upgrade
from ..operations._access import PROBE, acl_hint, check_access, refusal
from ..operations._declared import QueueChange
from ..operations._legacy import old_consumers_seen
from ..operations._move_tasks import MoveTask
from ..operations._moves import recover, redrive
from ..operations._sources import list_sources, note_source
from ..operations._tags import check_tags
from ..operations._upgrade import QueueUpgrade
from ._queue import Queue
from ._shards import SHARD_NAMES, SHARD_OF, Layouts, shard_names

log = logging.getLogger("smq.layout")

_NAME_PART = re.compile(rf"[{NAME_CHARACTERS}]{{1,{MAX_QUALIFIED}}}")


_SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES)


def _no_retries() -> Retry:
    # redis-py retries failed calls by default; a retried send or receive could
    # run twice, so smq never retries (a lost call surfaces as OutcomeUnknown).
    return Retry(NoBackoff(), 0)


def connect(settings: Settings) -> Any:
    """A redis-py client for ``settings``, with retries off and timeouts set."""
    settings = settings.resolved()
    url = settings.url
    assert url is not None
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES:
        raise InvalidParameter(
            f"Redis URL {url!r}: the scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}"
        )
    options: dict[str, Any] = dict(
        retry=_no_retries(),
        socket_timeout=settings.socket_timeout,
        socket_connect_timeout=settings.connect_timeout,
    )
    sentinel = is_sentinel_url(url)
    if settings.uses_tls_files:
        if not is_tls_url(url):
            raise ValueError("a TLS CA file or client certificate needs a rediss:// URL")
        # Cluster mode hands these to the connection of every node.
        options.update(
            ssl_ca_certs=settings.tls_ca, ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key
        )
    if sentinel:
        if settings.cluster:
            raise ValueError("a Sentinel URL names a primary and replicas, not a Cluster: drop cluster")
        return connect_sentinel(parse_sentinel_url(url), settings.max_connections, options)
    if settings.cluster:
        try:
            return RedisCluster.from_url(url, max_connections=settings.max_connections, **options)
        except (RedisError, RedisClusterException) as error:
            # The cluster client reads the slot map and command table as it is made.
            refused = refusal(error, cluster=True)
            if refused is not None:
                raise refused from error
            raise
    return redis.Redis.from_url(url, max_connections=settings.max_connections, **options)


class Client:
    """Entry point of smq: creates, lists and deletes queues on one Redis.

    A client is thread-safe and cheap to share; create one per process::

        client = smq.Client("redis://localhost:6379/0")
        jobs = client.create_queue("jobs", visibility_timeout=60)
        jobs.send("hello")

    Constructing a client opens no connection; the first call does, and
    checks that Redis will not evict queue data (see ``Settings``).
    """

    def __init__(
        self,
        url: str | Settings | None = None,
        *,
        settings: Settings | None = None,
        redis_client: Any = None,
    ) -> None:
        """Connect by ``url`` or ``settings``, or wrap an existing redis-py client.

        ``url`` may also be a ``Settings``. With neither, the client uses
        ``$SMQ_REDIS_URL``, else the embedded server that ``smq serve`` runs
        in ``.smq`` (see ``Settings``). ``redis_client`` (a
        ``redis.Redis`` or ``redis.cluster.RedisCluster``) must not decode
        responses; give it no retries and explicit timeouts (see
        ``connect``), as smq does for the clients it makes.
        """
        if isinstance(url, Settings):
            if settings is not None:
                raise TypeError("pass either url or settings, not both")
            url, settings = None, url
        if settings is None:
            settings = Settings(url=url)
        elif url:
            raise TypeError("pass either url or settings, not both")
        self._embedded_default = settings.uses_embedded and redis_client is None
        self.settings = settings.resolved()
        if redis_client is not None and _decodes_responses(redis_client):
            raise TypeError("smq needs a redis client made with decode_responses=False (the default)")
        self._redis = redis_client if redis_client is not None else connect(settings)
        self._scripts = ScriptRunner(self._redis, wait_of(self.settings))
        self._waker = Waker(self._make_pubsub)
        self._layouts = Layouts(self)
        self._checked = False
        # The eviction policy, read again while the client runs (None: eviction allowed).
        self._eviction = None if self.settings.allow_eviction else EvictionWatch()
        self._warned_layout = False
        self._now_ms_override: int | None = None  # tests only: replaces Redis TIME

    # -- queues ---------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        tags: Mapping[str, str] | None = None,
        refuse_recently_deleted: bool = False,
        **settings: Any,
    ) -> Queue:
        """Create a queue, or return the existing one if its settings match.

        Settings are ``QueueConfig`` fields (``visibility_timeout=60``...).
        Raises QueueNameExists if the queue exists with a different value of
        any setting given here; settings not given are not compared (of
        ``extra_attributes``, only the names given). ``tags`` (at most 50) are
        set with a new queue, in the same step; an existing queue keeps its
        own, as in SQS.

        ``shards=N`` (2-32) makes one queue of N full queues in their own hash
        slots, placed on different primaries of a Redis Cluster (see
        ``smq.client._shards``); a sharded FIFO queue's deduplication_scope is
        ``"messageGroup"``.

        ``refuse_recently_deleted=True`` applies SQS's rule: a new queue of a
        name whose queue was deleted less than 60 seconds ago raises
        QueueDeletedRecently (``smq serve`` asks for it; by default a name is
        free again at once).
        """
        config = new_queue_config(name, settings)
        checked_tags = check_tags(tags) if tags is not None else {}
        self._check_dead_letter_target(name, config)
        fifo = config.fifo_queue
        keys = QueueKeys.of(name)
        pairs: list[Any] = [item for field_value in config.to_meta().items() for item in field_value]
        layout = self._new_queue_layout()
        if layout != LAYOUT:
            pairs += ["layout", layout]
        if fifo:
            # The scope deduplication keeps, whatever DeduplicationScope later says (as SQS).
            pairs += ["dedup_by", config.deduplication_scope]
        policy = config.redrive_policy
        if policy is not None:
            # Before the policy can exist: the index of sources is a superset.
            note_source(self, name, policy.dead_letter_queue)
        if config.shards > 1 and not self._call(self._redis.exists, keys.meta):
            if refuse_recently_deleted and self._call(self._redis.exists, keys.deleted):
                # Checked before the shards are made (the script checks it again): a
                # refused create leaves nothing behind. The mark lapses after 60 s.
                raise error_for(Status.E_DELETED_RECENTLY, name)
            names = shard_names(self, name, config.shards)
            for shard in names[1:]:
                # Each shard a full queue, unlisted, before the main queue names them.
                shard_pairs = [*pairs, SHARD_OF, name]
                shard_args = [self._now_arg(), "", len(shard_pairs) // 2, *shard_pairs]
                self.run("create_queue", QueueKeys.of(shard), shard_args, queue=name)
            pairs += [SHARD_NAMES, " ".join(names[1:])]
        args: list[Any] = [self._now_arg(), "1" if refuse_recently_deleted else "", len(pairs) // 2, *pairs]
        for key, value in checked_tags.items():
            args += [key, value]
        reply = self.run("create_queue", keys, args, queue=name)
        if reply[1] == 0:
            existing = QueueConfig.from_meta(text_pairs(reply[2:]))
            self._compare(name, existing, config, settings)
        if policy is not None:
            note_source(self, name, policy.dead_letter_queue)  # after, too: see smq.operations._sources
        self._write("listing", name, REGISTRY, "ZADD", REGISTRY, 0, name)
        self._layouts.forget(name)  # what this client read before may predate the queue
        return Queue(self, name)

    def _new_queue_layout(self) -> int:
        """The layout a new queue starts in: as pinned (``Settings.layout``), else the newest
        unless 0.2.0 consumers may share this Redis (``smq.operations._legacy``)."""
        pinned = self.settings.pinned_layout()
        if pinned is not None:
            return pinned
        seen = old_consumers_seen(self)
        if seen is False:
            return LAYOUT
        if not self._warned_layout:
            self._warned_layout = True
            why = (
                "Redis refuses SCRIPT EXISTS (an ACL from smq 0.2.0?), so this client cannot tell "
                "whether smq 0.2.0 consumers share it"
                if seen is None
                else "an smq 0.2.0 client has received messages from this Redis since it started "
                "(its scripts are in the script cache)"
            )
            log.warning(
                "%s: new queues are made in data layout 1, which 0.2.0 reads. Once no 0.2.0 client "
                "is left, set SMQ_LAYOUT=%d (or SCRIPT FLUSH) and run smq upgrade; see Rolling upgrades "
                "in the operations guide",
                why,
                LAYOUT,
            )
        return 1

    @staticmethod
    def _compare(name: str, existing: QueueConfig, config: QueueConfig, settings: Mapping[str, Any]) -> None:
        for setting in settings:
            if setting == "extra_attributes":
                for attribute, value in check_extra_attributes(settings[setting]).items():
                    if existing.extra_attributes.get(attribute, "") != value:
                        raise QueueNameExists(
                            f"queue {name!r} exists with {attribute}="
                            f"{existing.extra_attributes.get(attribute, '')!r}, not {value!r}",
                            attribute,
                        )
            elif getattr(existing, setting) != getattr(config, setting):
                raise QueueNameExists(
                    f"queue {name!r} exists with {setting}={getattr(existing, setting)!r}, "
                    f"not {getattr(config, setting)!r}",
                    setting,
                )

    def get_queue(self, name: str) -> Queue:
        """The queue called ``name``; raises QueueDoesNotExist if there is none."""
        check_queue_name(name)
        if not self.queue_exists(name):
            raise QueueDoesNotExist(f"queue {name!r} does not exist")
        return Queue(self, name)

    def queue(self, name: str) -> Queue:
        """A handle on queue ``name`` without checking that it exists (no I/O)."""
        return Queue(self, check_queue_name(name))

    def _queue_of(self, name: str) -> Queue:
        """A handle on the queue (or shard) that holds keys of ``name``, not checked, not sharded."""
        return Queue(self, name, home=name)

    def queue_exists(self, name: str) -> bool:
        return bool(self._call(self._redis.exists, QueueKeys.of(check_queue_name(name)).meta))

    def list_queues(
        self, prefix: str = "", *, limit: int | None = None, after: str = "", qualified: bool = True
    ) -> list[str]:
        """Names of queues starting with ``prefix``, sorted; page with ``after``.

        ``limit`` (1-1000) caps the names returned; pass the last name of a
        page as ``after`` to get the next one. Qualified names
        (``<region>:<account>:<name>``) are listed like any other: the
        prefix ``eu-west-1:000000000000:`` lists one namespace's queues;
        ``qualified=False`` leaves them all out (the bare names only).
        """
        if not isinstance(prefix, str) or (prefix and not _NAME_PART.fullmatch(prefix)):
            raise InvalidParameter(f"queue name prefix {prefix!r} is invalid")
        if not isinstance(after, str) or (after and not _NAME_PART.fullmatch(after)):
            raise InvalidParameter(f"'after' must be a queue name, not {after!r}")
        if limit is not None:
            check_int("limit", limit, 1, 1000)
        low = f"({after}" if after and after >= prefix else f"[{prefix}"
        high = f"[{prefix}\xff"
        if qualified:
            return self._names_between(low, high, limit)
        if limit is None:
            return [name for name in self._names_between(low, high, None) if SEPARATOR not in name]
        names: list[str] = []
        while len(names) < limit:
            skipped = False
            for name in self._names_between(low, high, limit - len(names)):
                if SEPARATOR in name:
                    # Names of one region sort together: skip them all in one step, so
                    # a page costs at most one call per region, never one per queue.
                    region = name.partition(SEPARATOR)[0]
                    low = f"[{region}{chr(ord(SEPARATOR) + 1)}"
                    skipped = True
                    break
                names.append(name)
            if not skipped:
                break  # the page was full, or the names ran out
        return names

    def _names_between(self, low: str, high: str, limit: int | None) -> list[str]:
        if limit is not None:
            names = self._call(self._redis.zrangebylex, REGISTRY, low, high, start=0, num=limit)
        else:
            names = self._call(self._redis.zrangebylex, REGISTRY, low, high)
        return [n.decode() for n in names]

    def delete_queue(self, name: str) -> bool:
        """Delete a queue and all its messages; False if it did not exist."""
        check_queue_name(name)
        shards = self._layouts.read(name)
        # Unlist first: a crash between the steps leaves a queue that exists
        # but is unlisted (create_queue lists it again), never a listed ghost.
        self._write("unlisting", name, REGISTRY, "ZREM", REGISTRY, name)
        reply = self.run("delete_queue", QueueKeys.of(name), [self._now_arg()], queue=name)
        for shard in shards[1:]:
            self.run("delete_queue", QueueKeys.of(shard), [self._now_arg()], queue=name)
        self._layouts.forget(name)
        return bool(reply[1])

    def recover(self, name: str, *, min_age: float = 0.0) -> int:
        """Finish moves of queue ``name`` interrupted between their steps.

        Returns the number of messages whose move was finished. Receives run
        this by themselves for moves older than 30 s; redrive runs it first.
        Of a sharded queue: the moves out of every shard.
        """
        check_queue_name(name)
        if isinstance(min_age, bool) or not isinstance(min_age, (int, float)) or not 0 <= min_age <= 86400:
            raise InvalidParameter(f"min_age must be 0 to 86400 seconds, not {min_age!r}")
        shards = self._layouts.read(name) or [name]
        return sum(recover(self, shard, min_age_ms=int(min_age * 1000)) for shard in shards)

    def redrive(self, name: str, *, destination: str | None = None, max_messages: int | None = None) -> int:
        """Move the visible messages of dead-letter queue ``name`` back.

        Each message goes to the queue it was dead-lettered from, or all to
        ``destination``. The move is two-step and idempotent, so a crash
        neither loses nor doubles a message. Returns the number moved.
        Of a sharded queue: the messages of every shard, shard by shard.
        """
        check_queue_name(name)
        if max_messages is not None:
            check_int("max_messages", max_messages, 1, 10**9)
        if destination is not None:
            self.get_queue(destination)
        moved = 0
        for shard in self._layouts.read(name) or [name]:
            left = None if max_messages is None else max_messages - moved
            if left == 0:
                break
            moved += redrive(self, shard, destination or "", left)
        return moved

    def apply_queues(
        self, declared: str | os.PathLike[str] | Mapping[str, Any], *, dry_run: bool = False
    ) -> list[QueueChange]:
        """Create or update the queues a declared-queues file declares (see Declared queues).

        ``declared`` is the path of a TOML file (``[queues.NAME]`` tables of
        SQS attributes and ``tags``), or the mapping such a file parses to.
        A queue that does not exist is created; one that exists gets the
        attributes and tags declared (those not declared stay as they are).
        Dead-letter queues come first. The whole file is checked first,
        against the queues that exist too: an error raises
        InvalidDeclaration, naming the file, queue and attribute, and
        nothing is changed. With ``dry_run``, nothing is changed either.
        Returns one QueueChange per queue, in the order applied; a second
        run of the same file reports every queue ``unchanged``.
        """
        declaration = _declared.parse(declared) if isinstance(declared, Mapping) else _declared.load(declared)
        return _declared.apply(self, declaration, dry_run=dry_run)

    def upgrade(self, *, dry_run: bool = False, force: bool = False) -> list[QueueUpgrade]:
        """Move every queue's data to the newest layout this version knows (``smq upgrade``).

        Run it once every client of the queues runs this version or a newer
        one (see "Rolling upgrades" in the operations guide): a client older
        than a queue's layout refuses the queue (UnsupportedLayout). Queues stay
        in use while they move. Safe to run again, and from several processes.
        With ``dry_run``, nothing changes. Returns one QueueUpgrade per queue
        (and per shard of a sharded queue), in name order. Raises
        OldClientsPresent, before any change, while smq 0.2.0 consumers may
        share the Redis (their scripts are in its script cache), unless
        ``force``.
        """
        return _upgrade.upgrade(self, dry_run=dry_run, force=force)

    def dead_letter_sources(self, name: str, *, limit: int | None = None, after: str = "") -> list[str]:
        """Names of the queues whose redrive policy names ``name`` as dead-letter queue.

        Sorted, paged like ``list_queues``: ``limit`` (1-1000) caps the
        names returned; pass the last name of a page as ``after`` for the next.
        Raises QueueDoesNotExist if there is no queue ``name``.
        """
        check_queue_name(name)
        if not isinstance(after, str) or (after and not _NAME_PART.fullmatch(after)):
            raise InvalidParameter(f"'after' must be a queue name, not {after!r}")
        if limit is not None:
            check_int("limit", limit, 1, 1000)
        self.get_queue(name)
        return list_sources(self, name, limit, after)

    # -- message move tasks ---------------------------------------------------

    def start_move_task(
        self, source: str, *, destination: str | None = None, max_per_second: int | None = None
    ) -> MoveTask:
        """Start moving the messages of dead-letter queue ``source`` (SQS StartMessageMoveTask).

        Each message goes back to the queue it was dead-lettered from, or all
        to ``destination``; ``max_per_second`` (1-500) caps the rate, None
        moves as fast as possible. Records a RUNNING task and returns it;
        ``run_move_tasks`` (which ``smq serve`` calls) does the moving.
        Raises QueueDoesNotExist (source or destination), InvalidParameter if
        ``source`` is not a dead-letter queue, MoveTaskActive if it has a
        running or cancelling task.
        """
        return _move_tasks.start(self, source, destination, max_per_second)

    def list_move_tasks(self, source: str, *, limit: int = 10) -> list[MoveTask]:
        """The ``limit`` (1-10) most recent move tasks of queue ``source``, newest first.

        Tasks are kept until ten newer ones have started (or the queue is deleted).
        """
        return _move_tasks.list_tasks(self, source, limit)

    def cancel_move_task(self, handle: str) -> MoveTask:
        """Ask a running move task to stop (SQS CancelMessageMoveTask).

        The task becomes CANCELLING and its runner makes it CANCELLED at its
        next step; messages already moved stay moved. Returns the task with
        its count of messages moved. Raises MoveTaskNotFound for a handle of
        no task, or of a task that is no longer running.
        """
        return _move_tasks.cancel(self, handle)

    def run_move_tasks(self, *, owner: str, lease: float = 10.0, deadline: float | None = None) -> int:
        """Work on running move tasks; returns how many it worked on.

        Safe to call from any number of processes at once: each task is held
        by one ``owner`` (a name unique to the calling process, 1-100
        characters) at a time, under a lease of ``lease`` seconds (1-3600)
        renewed after each chunk of messages; a task whose holder stopped
        renewing is taken over when its lease runs out. Returns by
        ``deadline`` (a ``time.monotonic()`` value) at the latest, leaving
        unfinished tasks running for the next call; None runs them to the end.
        """
        return _move_tasks.run(self, owner, lease, deadline)

    def check_writable(self) -> None:
        """Raise unless smq can write to Redis now; what ``smq serve``'s ``/ready`` asks.

        Reads the eviction policy afresh and writes (then deletes) probe keys
        no queue uses, on every primary: raises ``EvictionPolicyUnsafe``,
        ``RedisOutOfMemory``, ``RedisCannotPersist`` (a failing disk),
        ``RedisReadOnly``, ``TooFewReplicas``, ``Unavailable`` (no
        connection) or another ``BackendError``.
        """
        if self._eviction is not None:
            self._eviction.suspect()
        self._before_call(False)
        self._at_boundary("the write check", PROBE, check_access, self)

    def _require_noeviction(self) -> None:
        """Refuse writes under the volatile-* policies too: for a caller whose own keys carry a
        TTL that must last (the Spark stream's records of its micro-batches)."""
        if self._eviction is not None:
            self._eviction.strict = True
            self._eviction.suspect()

    def redis_health(self) -> list[RedisHealth]:
        """Memory, eviction policy and persistence of the Redis servers holding the queues.

        One entry for a single Redis, one per primary of a Redis Cluster.
        Raises BackendError.
        """
        return self._call(read_health, self._redis)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the long-poll listener and close connections."""
        self._waker.close()
        self._scripts.close()
        self._call(self._redis.close)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the script boundary --------------------------------------------------

    def run(self, script: str, keys: QueueKeys, args: Sequence[Any], *, queue: str, tolerate: int = 0) -> Any:
        """Run a script; raise the error its status names (but ``tolerate``)."""
        self._before_call(script in READ_ONLY)
        reply = self._at_boundary(script, queue, self._scripts.run, script, keys, args)
        return self._status_checked(reply, queue, tolerate)

    def _status_checked(self, reply: Any, queue: str, tolerate: int) -> Any:
        """A script's reply; raise the error its status names (but ``tolerate``)."""
        if reply[0] < 0 and reply[0] != tolerate:
            raise error_for(reply[0], queue, reply[1] if len(reply) > 1 else "")
        return reply

    def run_many(
        self, calls: Sequence[tuple[str, QueueKeys, Sequence[Any]]], *, queue: str, tolerate: int = 0
    ) -> list[Any]:
        """Run scripts of one queue in one write to Redis; raise the first error a status names."""
        self._before_call(all(name in READ_ONLY for name, _, _ in calls))
        replies: list[Any] = self._at_boundary(_Named(calls), queue, self._scripts.run_many, calls)
        for reply in replies:
            if reply[0] < 0 and reply[0] != tolerate:
                raise error_for(reply[0], queue, reply[1] if len(reply) > 1 else "")
        return replies

    def _write(self, what: str, queue: str, key: str, *command: Any) -> Any:
        """Send one command that changes ``key`` (an index of queues), waited for as scripts are."""
        self._before_call(False)
        return self._at_boundary(what, queue, self._scripts.write, key, *command)

    def _read(self, what: str, queue: str, key: str, *command: Any) -> Any:
        """Send one command that only reads ``key``; no answer is Unavailable (it changed nothing)."""
        self._before_call(True)
        try:
            return self._scripts.read(key, *command)
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise Unavailable(f"{what} of queue {queue!r}: {error}") from error
        except RedisError as error:
            if refused(error):
                raise Unavailable(f"{what} of queue {queue!r}: {error}") from error
            raise BackendError(f"{what} of queue {queue!r}: {error}") from error

    def _before_call(self, only_reads: bool) -> None:
        """The checks before a call: Redis's, at the client's first call; the eviction policy's,
        again when due (see ``smq.connection._eviction``). A write is refused while the policy is unsafe."""
        watch = self._eviction
        if watch is None:
            if not self._checked:
                self._check_redis()
            return
        due = watch.claim()
        if not self._checked:
            if due or watch.refusal is None:
                self._check_redis(only_reads)
        elif due:
            self._read_eviction_policy()
        if watch.refusal is not None and not only_reads:
            raise watch.error()

    def _read_eviction_policy(self) -> None:
        """Read the eviction policy of every server again (the client's writes wait for it)."""
        assert self._eviction is not None
        try:
            readings = read_memory(self._redis)
        except (RedisError, RedisClusterException) as error:
            self._eviction.suspect()
            raise Unavailable(
                f"the check of Redis's eviction policy did not complete, so the call was not sent: {error}"
            ) from error
        self._eviction.note(readings)

    def _loop_may_write(self) -> bool:
        """Whether the event loop may send a write itself: the first call's checks are done, and
        the eviction policy was safe when last read (``_reread_if_due`` reads it in a thread)."""
        watch = self._eviction
        return self._checked and (watch is None or watch.refusal is None)

    def _reread_due(self) -> bool:
        """Whether the eviction policy is due to be read again before the next write."""
        return self._checked and self._eviction is not None and self._eviction.due()

    def _reread_if_due(self) -> None:
        """Read the eviction policy again if that is due (blocking: the event loop's thread hop)."""
        if self._eviction is not None and self._eviction.claim():
            self._read_eviction_policy()

    def _at_boundary(self, what: str | _Named, queue: str, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except NotReplicated as error:
            note_not_replicated(str(what), queue, error)
            raise OutcomeUnknown(f"{what} on queue {queue!r}: {error}") from error
        except RedisError as error:
            if self._eviction is not None:
                self._eviction.suspect()  # a failover, a restart, a full Redis: read the policy again
            raise self._backend_error(f"{what} on queue {queue!r}", error) from error

    def _backend_error(self, what: str, error: RedisError) -> BackendError:
        """The error of a call ``what`` (``send on queue 'jobs'``) that failed with ``error``."""
        if isinstance(error, (RedisConnectionError, RedisTimeoutError)):
            if not _not_run(error):
                return OutcomeUnknown(f"{what}: {error}")
            # Not sent, or refused unrun by a replica (the text says so already).
            return (refusal_kind(error) or Unavailable)(f"{what} did not run: {error}")
        if refused(error):
            return Unavailable(f"{what} did not run: {error}")
        kind = refusal_kind(error)
        if kind is not None:
            limit = self._eviction.limit_text() if self._eviction is not None else ""
            return refusal_error(kind, what, str(error), limit)
        return BackendError(f"{what}: {error}")

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except RedisConnectionError as error:
            if isinstance(self._redis, RedisCluster) and _refused_user(error):
                raise _user_refused(error) from error
            if self._embedded_default:
                raise Unavailable(
                    f"no Redis URL given, and no embedded server answers at {self.settings.url}: "
                    "start one with `smq serve` in this folder, or pass a URL (or set SMQ_REDIS_URL)"
                ) from error
            if _not_run(error):
                raise Unavailable(str(error) + _tls_hint(self.settings, error)) from error
            raise BackendError(str(error) + _tls_hint(self.settings, error)) from error
        except RedisError as error:
            if refused(error):
                raise Unavailable(str(error)) from error
            kind = refusal_kind(error)
            if kind is not None:
                raise refusal_error(kind, "the call", str(error)) from error
            raise BackendError(str(error)) from error

    def _now_arg(self) -> str:
        return "" if self._now_ms_override is None else str(self._now_ms_override)

    def _check_redis(self, only_reads: bool = False) -> None:
        """What the client checks before its first call: the eviction policy, which Pub/Sub
        wake-ups use, whether to wait for replicas, and the ACL (by writes to probe keys,
        left for the first write while the policy is unsafe: ``only_reads`` go on meanwhile)."""
        hint = acl_hint(isinstance(self._redis, RedisCluster))
        try:
            sharding = isinstance(self._redis, RedisCluster) and self.settings.sharded_pubsub is not False
            needed = sharding or not self.settings.allow_eviction
            healths = self.redis_health() if needed else []
            self._scripts.sharded = self._use_sharded_pubsub(healths)
            if self.settings.wait_replicas is None:
                seen = healths if needed else self._replica_health()
                self._scripts.set_wait(decide_wait(self.settings, seen))
            warn_deposable(self._scripts.wait, healths)
            if self._eviction is not None:
                self._eviction.note(healths)
                if self._eviction.refusal is not None:
                    if only_reads:
                        return  # the access check writes: it waits for a safe policy
                    raise self._eviction.error()
            check_access(self)
            check_wait(self._redis, self._scripts.wait, self.redis_health)
        except NoPermissionError as error:  # NOPERM on EVALSHA or SCRIPT LOAD themselves
            raise BackendError(f"{error}: give the Redis user smq's ACL ({hint})") from error
        except (RedisConnectionError, RedisTimeoutError) as error:
            if isinstance(self._redis, RedisCluster) and _refused_user(error):
                raise _user_refused(error) from error
            # Whatever became of the check, the caller's call was not sent.
            raise Unavailable(f"the access check at start did not complete: {error}") from error
        except RedisError as error:
            if refused(error):
                raise Unavailable(f"the access check at start did not run: {error}") from error
            raise BackendError(f"the access check failed: {error}") from error
        except BackendError as error:
            if isinstance(error.__cause__, NoPermissionError):
                raise BackendError(f"{error}: give the Redis user smq's ACL ({hint})") from error
            raise
        self._checked = True

    def _replica_health(self) -> list[RedisHealth]:
        """``redis_health`` for the wait decision, or nothing from a server without INFO (a fake)."""
        try:
            return self.redis_health()
        except BackendError as error:
            if isinstance(error.__cause__, ResponseError) and "unknown command" in str(error).lower():
                return []
            raise

    def _use_sharded_pubsub(self, healths: list[RedisHealth]) -> bool:
        """Sharded Pub/Sub for wake-ups: on a Redis Cluster whose primaries all have it (7+)."""
        wanted = self.settings.sharded_pubsub
        if wanted is False or not isinstance(self._redis, RedisCluster):
            return False
        if all(_major(health.version) >= 7 for health in healths):
            return True
        if wanted:
            old = min(healths, key=lambda health: _major(health.version))
            raise UnsafeRedisConfig(
                f"sharded Pub/Sub needs Redis 7 or later on every primary; {old.node} runs {old.version}"
            )
        return False

    def _check_dead_letter_target(self, name: str, config: QueueConfig, *, sharded: bool = False) -> None:
        check_dead_letter_target(name, config, sharded=sharded)
        policy = config.redrive_policy
        if policy is None or policy.dead_letter_queue == name:
            return
        if not self.queue_exists(policy.dead_letter_queue):
            raise QueueDoesNotExist(
                f"dead-letter queue {policy.dead_letter_queue!r} does not exist; create it first"
            )

    def _make_pubsub(self) -> Any:
        if not self._checked:
            self._call(self._check_redis)  # which kind of Pub/Sub the scripts publish on
        if self._scripts.sharded:
            return self._call(ShardedSubscriber, self._redis)
        return self._redis.pubsub(ignore_subscribe_messages=False)


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _decodes_responses(redis_client: Any) -> bool:
    if isinstance(redis_client, RedisCluster):
        return bool(redis_client.get_encoder().decode_responses)  # type: ignore[no-untyped-call]
    pool = getattr(redis_client, "connection_pool", None)
    return bool(pool is not None and pool.connection_kwargs.get("decode_responses"))


__all__ = ["Client", "Status", "connect"]


def _refused_user(error: BaseException) -> bool:
    """Whether a connection failed because the server refused the user (smq's scripts wrap it)."""
    return isinstance(error, AuthenticationError) or isinstance(error.__cause__, AuthenticationError)


def _user_refused(error: BaseException) -> BackendError:
    # Each node of a cluster has its own users: the one that refused may be the one left out.
    return BackendError(
        f"a node of the Redis Cluster refused the user: {error} "
        f"(every node needs the user, replicas too: {acl_hint(True)})"
    )


def _tls_hint(settings: Settings, error: BaseException) -> str:
    """What to check when a TLS server dropped the connection of a client without a certificate.

    Over TLS 1.3 the client's handshake ends before the server checks the
    client's certificate: a server that wants one closes the connection at
    the first command, which redis-py reports as an EOF.
    """
    if not is_tls_url(settings.url or "") or settings.tls_cert is not None:
        return ""
    text = str(error)
    dropped = ("EOF occurred", "reset by peer", "closed by server")
    if any(d in text for d in dropped) or "CERTIFICATE_REQUIRED" in text.upper().replace(" ", "_"):
        return (
            " (the TLS server closed the connection: if it asks for client certificates, give one "
            "with its key: Settings tls_cert and tls_key, or --redis-tls-cert and --redis-tls-key)"
        )
    return ""


def _not_run(error: BaseException) -> bool:
    """Whether a connection error surely left the command unrun.

    True for a script smq could not send (``NotSent``), a Redis answering
    LOADING, and a failure of redis-py's own ``connect()``, which it words
    "Error N connecting to ..." (or "Timeout connecting to ..."): calls that
    go through redis-py's command path (cluster redirects, script loads) are
    told apart so.
    """
    if isinstance(error, (NotSent, BusyLoadingError)):
        return True
    text = str(error)
    return " connecting to " in text or text.startswith(("Timeout connecting", "Connection refused"))


class _Named:
    """The names of scripts run together ("delete and receive"), put into words only for an error."""

    __slots__ = ("calls",)

    def __init__(self, calls: Sequence[tuple[str, QueueKeys, Sequence[Any]]]) -> None:
        self.calls = calls

    def __str__(self) -> str:
        return " and ".join(name for name, _, _ in self.calls)
