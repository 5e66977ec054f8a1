"""The Python API: ``Client``, ``Queue``, sharded queues, and the event-loop machinery of
``smq.aio`` (script calls and long polls on an asyncio connection).

May import: ``smq.operations``, ``smq.core``, ``smq.connection``, ``smq._errors``,
``smq._version``, and its own modules. The surfaces (``smq.aio``, ``smq.cli``, ``smq.server``,
``smq.worker``, ``smq.exporter``, ``smq.spark``) import it; it imports none of them.
"""
