"""Operations on queues beyond send and receive, each built on the core's scripts.

Holds dead-lettering and redrive, message move tasks, declared queues, layout upgrades (and the
consumers of older releases they look for), history samples, consumers, peek, the event stream,
tags, stored policies, the dead-letter source index, single-message actions, and the access check.

May import: ``smq.core``, ``smq.connection``, ``smq._errors``, ``smq._version``, and its own
modules. A client reaches these modules as a ``smq.core.Backend`` (or ``Queues``), never as
``smq.Client``.
"""
