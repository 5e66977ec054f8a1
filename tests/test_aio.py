"""What the asyncio client does beyond the sync client's contract (which the contract tests check
on both): its hot calls run on the event loop, long polls park there, a loop of its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

import smq
from smq.aio import CONNECTION_NAME, AsyncClient
from smq.embedded import EmbeddedRedis


@pytest.fixture
def url(redis_client: smq.Client) -> Iterator[str]:
    """The URL of a fresh real Redis."""
    yield redis_client.settings.url


def test_hot_calls_run_on_the_event_loop_s_own_connection_not_in_threads(
    url: str, redis_server: EmbeddedRedis
) -> None:
    async def main() -> None:
        async with AsyncClient(url) as client:
            queue = await client.create_queue("jobs")  # in a thread; checks Redis on the way
            await queue.attributes()  # the first call on a queue reads its layout (shards) in a thread
            in_thread = client._in_thread

            async def no_threads(*args: Any, **kwargs: Any) -> Any:
                raise AssertionError(f"a thread was asked to run {args[0]}")

            client._in_thread = no_threads  # type: ignore[method-assign]
            await queue.send("a")
            await queue.send_batch([smq.SendEntry("1", "b"), smq.SendEntry("2", "c")])
            (first,) = await queue.receive(1)
            await queue.change_visibility(first, 0)
            result, received = await queue.delete_and_receive([], 10, wait_time_seconds=0)
            assert len(received) == 3
            entries = [smq.DeleteEntry(str(i), m.receipt_handle) for i, m in enumerate(received[1:])]
            result, _ = await queue.delete_and_receive(entries, 1, wait_time_seconds=0)
            assert len(result.successful) == 2
            assert await queue.delete(received[0]) is True
            info = await queue.attributes()
            assert (info.visible, info.in_flight, info.counters["deleted"]) == (0, 0, 3)
            with redis_server.client() as admin:
                names = [c.get("name") for c in admin.client_list()]
            assert CONNECTION_NAME in names
            client._in_thread = in_thread  # type: ignore[method-assign]

    asyncio.run(main())


def test_many_long_polls_wait_on_the_loop_with_two_threads(url: str) -> None:
    async def main() -> None:
        async with AsyncClient(url, threads=2) as client:
            queue = await client.create_queue("jobs")
            polls = [asyncio.create_task(queue.receive(1, wait_time_seconds=20)) for _ in range(50)]
            await asyncio.sleep(0.5)
            assert not any(poll.done() for poll in polls)  # all 50 wait, on two threads
            began = time.monotonic()
            await queue.send_batch([smq.SendEntry(str(i), f"m{i}") for i in range(10)])
            for start in range(10, 50, 10):
                await queue.send_batch([smq.SendEntry(str(i), f"m{start + i}") for i in range(10)])
            got = await asyncio.wait_for(asyncio.gather(*polls), 15)
            assert time.monotonic() - began < 15
            assert sorted(m.body for batch in got for m in batch) == sorted(f"m{i}" for i in range(50))

    asyncio.run(main())


def test_a_cancelled_long_poll_ends_and_the_client_goes_on(url: str) -> None:
    async def main() -> None:
        async with AsyncClient(url) as client:
            queue = await client.create_queue("jobs")
            poll = asyncio.create_task(queue.receive(1, wait_time_seconds=20))
            await asyncio.sleep(0.3)
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            await queue.send("after")
            (message,) = await queue.receive(1, wait_time_seconds=5)
            assert message.body == "after"

    asyncio.run(main())


def test_one_event_loop_at_a_time(url: str) -> None:
    client = AsyncClient(url)

    async def send(body: str) -> None:
        queue = await client.create_queue("jobs")
        await queue.send(body)

    asyncio.run(send("first"))  # that loop is closed at the end: the next one may take over
    asyncio.run(send("second"))
    other = asyncio.new_event_loop()

    async def from_two_loops() -> None:  # noqa: RUF029
        await client.queue("jobs").send("third")
        with pytest.raises(RuntimeError, match="serves another event loop"):
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(client.queue("jobs").send("x"), other))

    import threading

    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run(from_two_loops())
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()
    assert client.sync.queue("jobs").attributes().visible == 3
    asyncio.run(client.aclose())
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(send("after close"))


def test_errors_are_the_sync_client_s(url: str) -> None:
    async def main() -> None:
        async with AsyncClient(url) as client:
            with pytest.raises(smq.QueueDoesNotExist):
                await client.queue("missing").send("x")
            with pytest.raises(smq.QueueDoesNotExist):
                await client.get_queue("missing")
            queue = await client.create_queue("jobs")
            with pytest.raises(smq.InvalidParameter):
                await queue.receive(11)
            with pytest.raises(smq.ReceiptHandleIsInvalid):
                await queue.delete("not a receipt")
            with pytest.raises(TypeError):
                AsyncClient(url, client=client.sync)

    asyncio.run(main())
