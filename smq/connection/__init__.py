"""The Redis connection and topology layer: how smq reaches its Redis and what it learns of it.

Holds the connection settings, Sentinel discovery and failover, TLS files, the replica and disk
waits, sharded Pub/Sub and the wake-up channels of long polls, Redis's refusals, the health and
eviction checks, outage reporting and what a forked child must make afresh.

May import: redis-py, ``smq._errors`` and ``smq._version``, and its own modules. Nothing here
knows what a queue or a message is.
"""
