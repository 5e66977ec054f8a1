"""The queue core: what a queue and a message are, and the Lua scripts that change them.

Holds the Redis key names of a queue, queue names and settings, message ids, bodies and
digests, the checks of a batch, sending, the steps of a core call (run blocking or from an event
loop), the script runner, and ``Backend``: what the layers above need of a client.

May import: ``smq.connection``, ``smq._errors``, ``smq._version``, and its own modules.
"""
