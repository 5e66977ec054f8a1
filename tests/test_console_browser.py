"""The web console in real headless Chromium and Firefox, on a real `smq serve` on a real Redis:
signing in, the live table, the page of a queue, and what an operator reaches for during an
incident (charts of the last hour, create and delete a queue, page and search messages, act on
one dead letter, redrive to a chosen queue, who consumes a queue)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import BROWSERS, Browser, open_browser

import smq
from conftest import raw
from http_support import KEY_ID, SECRET, Server
from smq.operations._history import HISTORY_KEPT, HISTORY_STEP

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "assets"


@pytest.fixture
def served(keyed_server: tuple[Server, smq.Client]) -> tuple[Server, smq.Client]:
    """The keyed `smq serve`, its Redis emptied of queues for this test."""
    server, client = keyed_server
    for name in client.list_queues():
        client.delete_queue(name)
    return server, client


@pytest.fixture(scope="module", params=BROWSERS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which browser: each test runs in Chromium and in Firefox."""
    return str(request.param)


@pytest.fixture(scope="module")
def one_browser(kind: str) -> Iterator[list[Browser]]:
    """One browser of ``kind`` for the module's tests (each start costs some 4 CPU seconds), in a
    list so that a test that leaves it unusable gets it replaced."""
    held = [open_browser(kind)]
    yield held
    held[0].close()


@pytest.fixture
def browser(one_browser: list[Browser], kind: str, keyed_server: tuple[Server, smq.Client]) -> Browser:
    """The module's browser of this kind, signed out of the console and on a blank page."""
    try:
        one_browser[0].forget(f"{keyed_server[0].url}/console/")
    except (OSError, RuntimeError):
        one_browser[0].close()
        one_browser[0] = open_browser(kind)
    return one_browser[0]


def screenshot(browser: Browser, name: str, tmp_path: Path) -> None:
    """Keep a screenshot: Chromium's in the docs when SMQ_SCREENSHOTS=docs, else in the test's folder."""
    docs = os.environ.get("SMQ_SCREENSHOTS") == "docs" and type(browser).__name__ == "Chromium"
    browser.screenshot((SCREENSHOTS if docs else tmp_path) / name)


def visible_in_table(browser: Browser, queue: str) -> tuple[str, str] | None:
    """(visible, in flight) of the queue's row as the page shows it now."""
    cells = browser.script(
        "const row = document.querySelector(`tr[data-queue='${arguments[0]}']`);"
        "return row ? Array.from(row.children).map((td) => td.textContent) : null;",
        queue,
    )
    return (cells[2], cells[3]) if cells else None


def test_sign_in_watch_the_table_change_and_sign_out(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("orders")
    seed_history(client, queue)  # the last hour, as smq serve keeps it: the trend line
    browser.get(server.url + "/console")
    browser.wait_for(lambda: browser.url.endswith("/console/sign-in"), what="the sign-in page")

    browser.type("#key_id", KEY_ID)
    browser.type("#secret", "not the secret")
    browser.click("button[type=submit]")
    assert "not right" in browser.wait_for(lambda: browser.text("[role=alert]"), what="the error")

    browser.type("#key_id", KEY_ID)
    browser.type("#secret", SECRET)
    browser.click("button[type=submit]")
    browser.wait_for(lambda: visible_in_table(browser, "orders") == ("0", "0"), what="the queue table")
    # The session cookie is HttpOnly: the page's scripts cannot read it.
    assert "smq_console" not in browser.script("return document.cookie;")

    # The table follows the queue without a reload.
    queue.send_batch([smq.SendEntry(str(i), f"order {i}") for i in range(5)])
    queue.receive(2)
    browser.wait_for(lambda: visible_in_table(browser, "orders") == ("3", "2"), what="the new counts")
    # Rates (from two readings of the counters) and a trend line per queue.
    rates = browser.wait_for(
        lambda: browser.script(
            "const cells = document.querySelectorAll(`tr[data-queue='orders'] td`);"
            "const drawn = cells[12].querySelector('svg polyline');"
            "return cells[9].textContent && drawn ? cells[9].textContent : null;"
        ),
        what="the rates and the trend line",
    )
    assert float(rates) >= 0

    def sent_rate() -> float:
        text = browser.script(
            "return document.querySelectorAll(`tr[data-queue='orders'] td`)[9].textContent;"
        )
        return float(text or 0)

    # Sends between two readings show as a rate.
    queue.send_batch([smq.SendEntry(str(i), f"more {i}") for i in range(10)])
    browser.wait_for(lambda: sent_rate() > 0, what="a send rate above 0")
    screenshot(browser, "console-queues.png", tmp_path)

    browser.click("form[action='/console/sign-out'] button")
    browser.wait_for(lambda: browser.url.endswith("/console/sign-in"), what="the sign-in page again")
    browser.get(server.url + "/console")
    browser.wait_for(lambda: browser.url.endswith("/console/sign-in"), what="no session left")


def test_the_pages_are_readable_at_phone_width(
    served: tuple[Server, smq.Client], kind: str, tmp_path: Path
) -> None:
    phone = open_browser(kind, width=390, height=844)
    try:
        server, client = served
        name = "a-queue-with-a-rather-long-name-for-a-small-screen"
        queue = client.create_queue(name)
        queue.send("a body that is long enough to need wrapping on a phone " * 4)
        queue.receive(1, visibility_timeout=300)
        phone.get(server.url + "/console/sign-in")
        phone.type("#key_id", KEY_ID)
        phone.type("#secret", SECRET)
        phone.click("button[type=submit]")
        phone.wait_for(lambda: phone.find_all("tr[data-queue]"), what="the queue table")

        def no_sideways_scrolling() -> None:
            width = phone.script("return [document.documentElement.scrollWidth, window.innerWidth];")
            assert width[0] <= width[1], width

        no_sideways_scrolling()
        screenshot(phone, "console-phone.png", tmp_path)
        phone.get(f"{server.url}/console/queues/{name}?state=in_flight")
        phone.wait_for(lambda: phone.find_all("tr[data-message]"), what="the message in flight")
        no_sideways_scrolling()  # a wide table scrolls inside its own box, not the page
    finally:
        phone.close()


def sign_in(browser: Browser, url: str) -> None:
    browser.get(url + "/console/sign-in")
    browser.type("#key_id", KEY_ID)
    browser.type("#secret", SECRET)
    browser.click("button[type=submit]")
    browser.wait_for(lambda: browser.url.endswith("/console"), what="the queue table")


def test_peek_send_and_purge_on_the_page_of_a_queue(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("jobs")
    queue.send("resize photo 17")
    (held,) = queue.receive(1, visibility_timeout=600)
    sign_in(browser, server.url)
    browser.click("a[href='/console/queues/jobs']")
    browser.wait_for(lambda: browser.url.endswith("/console/queues/jobs"), what="the queue's page")

    # The message held by a receipt: which receipt, and until when.
    browser.click("a[href='/console/queues/jobs?state=in_flight']")
    row = f"tr[data-message='{held.message_id}']"
    browser.wait_for(lambda: browser.find_all(row), what="the message in flight")
    assert "resize photo 17" in browser.text(row)
    assert held.receipt_handle == browser.script(
        "return document.querySelector(arguments[0] + ' code[title]').title;", row
    )
    # Rates need two readings of the counters: the page has updated itself twice.
    browser.wait_for(lambda: browser.text("[data-count=sent_rate]"), what="the rates")
    screenshot(browser, "console-queue.png", tmp_path)

    # Send from the form.
    browser.type("#send-body", "sent from the console")
    browser.click("form[action='/console/queues/jobs/send'] button")
    browser.wait_for(lambda: "Message sent." in browser.text("[role=status]"), what="the notice")
    assert [m.body for m in queue.peek("visible")] == ["sent from the console"]
    browser.wait_for(lambda: browser.text("[data-count=visible]") == "1", what="the live count")

    # Purge, after typing the queue's name.
    browser.click("form[action='/console/queues/jobs/purge'] button")
    browser.wait_for(lambda: browser.find_all("#confirm"), what="the confirmation")
    assert queue.attributes().visible == 1  # asking changed nothing
    browser.type("#confirm", "jobs")
    browser.click("form[action='/console/queues/jobs/purge'] button")
    browser.wait_for(lambda: "Queue purged." in browser.text("[role=status]"), what="the purge")
    browser.wait_for(lambda: queue.attributes().visible + queue.attributes().in_flight == 0, what="empty")


def test_redrive_shows_its_progress_reaching_the_end(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    client.create_queue("mail-dlq")
    source = client.create_queue("mail", redrive_policy=smq.RedrivePolicy("mail-dlq", 1))
    source.send_batch([smq.SendEntry(str(n), f"mail {n}") for n in range(8)])
    while source.receive(10, visibility_timeout=0):
        pass
    sign_in(browser, server.url)
    browser.get(server.url + "/console/queues/mail-dlq")
    browser.click("form[action='/console/queues/mail-dlq/redrive'] button")
    browser.wait_for(lambda: "Redrive started." in browser.text("[role=status]"), what="the start")

    def progress() -> bool:
        value, top = browser.script(
            "const p = document.querySelector('progress[data-task]'); return [p.value, p.max];"
        )
        return bool(top == 8 and value == 8)

    browser.wait_for(progress, timeout=30, what="the progress bar at 100 %")
    assert "8 of 8 moved" in browser.text("[data-task-text]")
    browser.script("document.querySelector('progress[data-task]').scrollIntoView({block: 'center'});")
    screenshot(browser, "console-redrive.png", tmp_path)
    assert source.attributes().visible == 8


HOUR_SAMPLES = HISTORY_KEPT


def seed_history(client: smq.Client, queue: smq.Queue, depth: int = 400) -> list[str]:
    """An hour of samples, as `smq serve` would have kept them: the depth rises to a peak of
    ``depth`` half an hour ago and falls back; 5 sends a second throughout, 3 receives."""
    admin = raw(client)
    seconds, _ = admin.time()
    now = seconds - seconds % HISTORY_STEP
    samples = []
    for k in range(HOUR_SAMPLES, 0, -1):
        at = now - k * HISTORY_STEP
        i = HOUR_SAMPLES - k
        visible = depth - abs(i - HOUR_SAMPLES // 2) * depth * 2 // HOUR_SAMPLES
        counters = (i * 50, i * 30, i * 30, 0, 0)  # sent, received, deleted, expired, dead-lettered
        samples.append("|".join(map(str, (at * 1000, visible, 7, 0, *counters))))
    with admin.pipeline(transaction=True) as pipe:
        pipe.delete(queue.keys.history)
        pipe.rpush(queue.keys.history, *samples)
        pipe.execute()
    return samples


def test_the_charts_show_the_last_hour_with_axes_and_values_on_hover(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("orders")
    client.create_queue("orders-dlq")
    client.queue("orders").set_attributes(redrive_policy=smq.RedrivePolicy("orders-dlq", 5))
    queue.send_batch([smq.SendEntry(str(i), f"order {i}") for i in range(3)])
    seed_history(client, queue)
    sign_in(browser, server.url)

    # The table: at once a trend of the last hour and rates from the history, and the DLQ marked.
    def trend_and_rates() -> bool:
        cells = browser.script(
            "const cells = document.querySelectorAll(`tr[data-queue='orders'] td`);"
            "if (!cells.length) { return null; }"
            "const line = cells[12].querySelector('polyline');"
            "return [cells[9].textContent, line ? line.getAttribute('points').split(' ').length : 0];"
        )
        return bool(cells and cells[0] and cells[1] >= 50)

    browser.wait_for(trend_and_rates, what="the trend and the rates from the history")
    assert browser.text("tr[data-queue='orders-dlq'] td:nth-child(2)") == "StandardDLQ"
    screenshot(browser, "console-queues.png", tmp_path)

    browser.get(server.url + "/console/queues/orders")
    depth = "figure[data-chart=depth]"

    def drawn() -> list[str] | None:
        labels = browser.script(
            "const texts = document.querySelectorAll(arguments[0] + ' svg text');"
            "return Array.from(texts).map((t) => t.textContent);",
            depth,
        )
        lines = browser.find_all(depth + " svg polyline")
        return labels if labels and len(lines) == 3 else None

    labels = browser.wait_for(drawn, what="the depth chart")
    assert labels[0] == "messages"  # the unit
    assert "400" in labels or "500" in labels  # the value axis reaches the peak of 400
    assert sum(1 for label in labels if ":" in label) >= 3  # time labels every 15 minutes
    readout = browser.text(depth + " .readout")  # the newest sample's values
    assert "visible" in readout and "in flight" in readout and readout.endswith("messages"), readout

    def hover_middle(figure: str) -> str:
        """The readout with the pointer in the middle of the chart: half an hour ago."""
        return str(
            browser.script(
                "const rect = document.querySelector(arguments[0] + ' rect.hover');"
                "const box = rect.getBoundingClientRect();"
                "rect.dispatchEvent(new PointerEvent('pointermove', {bubbles: true,"
                " clientX: box.left + box.width / 2, clientY: box.top + box.height / 2}));"
                "return document.querySelector(arguments[0] + ' .readout').textContent;",
                figure,
            )
        )

    peak = hover_middle(depth)
    assert re.search(r"visible (39\d|400), in flight 7", peak), peak  # the peak of 400, or next to it
    rates = hover_middle("figure[data-chart=rates]")  # 5 sent and 3 received per second
    assert "sent 5, received 3, deleted 3 messages / s" in rates, rates
    # The keyboard steps through the samples too: Home is an hour ago, when the depth was 0 (or 3,
    # ten seconds later, if the oldest sample has just left the hour).
    first = browser.script(
        "const chart = document.querySelector(arguments[0] + ' svg');"
        "chart.focus();"
        "chart.dispatchEvent(new KeyboardEvent('keydown', {key: 'Home', bubbles: true}));"
        "return document.querySelector(arguments[0] + ' .readout').textContent;",
        depth,
    )
    assert re.search(r"visible [03], in flight 7", first), first
    browser.script("document.querySelector('#counts-title').scrollIntoView();")
    screenshot(browser, "console-charts.png", tmp_path)


def test_create_a_fifo_queue_with_a_dead_letter_queue_then_delete_it(
    served: tuple[Server, smq.Client], browser: Browser, kind: str, tmp_path: Path
) -> None:
    server, client = served
    name = f"jobs-{kind}.fifo"  # one per browser: a deleted queue's name is taken for 60 s
    client.create_queue("jobs-dlq.fifo", fifo_queue=True)
    sign_in(browser, server.url)
    browser.click("a[href='/console/create']")
    browser.wait_for(lambda: browser.find_all("#c-name"), what="the form")
    browser.click("input[name=type][value=fifo]")
    browser.type("#c-name", name)
    browser.type("#c-VisibilityTimeout", "99999")
    browser.type("#c-dlq", "jobs-dlq.fifo")
    browser.type("#c-max", "3")
    screenshot(browser, "console-create.png", tmp_path)
    browser.click("form[action='/console/create'] button[type=submit]")
    # The API's own message, and the values as typed.
    error = browser.wait_for(lambda: browser.text("[role=alert]"), what="the error")
    assert "VisibilityTimeout" in error
    assert browser.script("return document.querySelector('#c-name').value;") == name
    assert browser.script("return document.querySelector('input[value=fifo]').checked;") is True
    browser.script("document.querySelector('#c-VisibilityTimeout').value = '';")
    browser.type("#c-VisibilityTimeout", "45")
    browser.click("form[action='/console/create'] button[type=submit]")
    browser.wait_for(lambda: "Queue created." in browser.text("[role=status]"), what="the new queue's page")
    info = client.queue(name).attributes()
    assert info.config.fifo_queue and info.config.visibility_timeout == 45
    assert info.config.redrive_policy == smq.RedrivePolicy("jobs-dlq.fifo", 3)

    browser.click(f"form[action='/console/queues/{name}/delete'] button")
    browser.wait_for(lambda: browser.find_all("#confirm"), what="the confirmation")
    browser.type("#confirm", "jobs")  # not the name: asked again, nothing deleted
    browser.click(f"form[action='/console/queues/{name}/delete'] button")
    # (the page before has a #confirm too: wait for what only the new one says)
    browser.wait_for(
        lambda: "is not the queue's name" in browser.text("[role=alert]"), what="the confirmation again"
    )
    assert name in client.list_queues()
    browser.type("#confirm", name)
    browser.click(f"form[action='/console/queues/{name}/delete'] button")
    browser.wait_for(lambda: "Queue deleted." in browser.text("[role=status]"), what="the table")
    assert name not in client.list_queues()


def test_page_through_and_search_messages(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("orders")
    for first in range(0, 230, 10):
        queue.send_batch(
            [
                smq.SendEntry(str(i), f"order {i:03}", attributes={"region": "eu" if i % 50 == 7 else "us"})
                for i in range(first, first + 10)
            ]
        )
    sign_in(browser, server.url)
    browser.get(server.url + "/console/queues/orders")
    rows = "table.messages tbody tr"
    first_cell = "table.messages tbody tr td.body"
    assert len(browser.find_all(rows)) == 50
    assert browser.text(first_cell) == "order 000"
    browser.click("nav.pages a[rel=next]")
    browser.wait_for(lambda: browser.text(first_cell) == "order 050", what="the second page")
    assert "51 to 100 of about 230" in browser.text("#messages-title + nav + p + form + p")
    browser.click("nav.pages a:last-child")  # Last
    browser.wait_for(lambda: browser.text(first_cell) == "order 180", what="the last page")

    # Search the body: bounded, and it says how far it looked.
    browser.get(server.url + "/console/queues/orders")
    browser.type("#search-q", "order 117")
    browser.click("form.search button")
    said = browser.wait_for(lambda: browser.text("[data-searched]"), what="the search")
    assert "messages 1 to 230 of about 230" in said and "1 found" in said, said
    assert browser.text(first_cell) == "order 117"
    # By attribute, from a number on: ids 107, 157, 207 are in eu.
    browser.get(server.url + "/console/queues/orders?state=visible&in=attribute&q=region%3Deu&offset=100")
    found = browser.script(
        "return Array.from(document.querySelectorAll('table.messages td.body')).map((td) => td.textContent);"
    )
    assert found == ["order 107", "order 157", "order 207"]
    browser.script("document.querySelector('#messages-title').scrollIntoView();")
    screenshot(browser, "console-search.png", tmp_path)
    # By message id: the one message.
    target = queue.peek(limit=1, offset=42)[0]
    browser.get(server.url + f"/console/queues/orders?state=visible&in=id&q={target.message_id[:13]}")
    assert browser.wait_for(lambda: browser.text(first_cell), what="by id") == "order 042"
    assert queue.attributes().visible == 230  # looking changed nothing


def test_fifo_messages_show_group_sequence_number_and_deduplication_id(
    served: tuple[Server, smq.Client], browser: Browser
) -> None:
    server, client = served
    queue = client.create_queue("tasks.fifo", fifo_queue=True)
    sent = [
        queue.send(f"task {i}", message_group_id=f"user-{i % 2}", deduplication_id=f"d-{i}") for i in range(4)
    ]
    sign_in(browser, server.url)
    browser.get(server.url + "/console/queues/tasks.fifo")
    headers = browser.script(
        "return Array.from(document.querySelectorAll('table.messages th')).map((th) => th.textContent);"
    )
    assert headers[4:7] == ["Group", "Sequence number", "Deduplication id"]
    for message in sent:
        row = f"tr[data-message='{message.message_id}']"
        cells = browser.script(
            "return Array.from(document.querySelectorAll(arguments[0] + ' td')).map((td) => td.textContent);",
            row,
        )
        assert cells[4:7] == [f"user-{int(cells[7][-1]) % 2}", message.sequence_number, f"d-{cells[7][-1]}"]
    # Times read as people read them, the exact time on hover.
    title = browser.script("return document.querySelector('table.messages time').title;")
    assert title.endswith(" UTC") and title[:2] == "20"


def dead_letters(client: smq.Client, count: int) -> tuple[smq.Queue, smq.Queue]:
    """``orders`` whose messages, received once, went to ``orders-dlq``: the DLQ holds ``count``."""
    dlq = client.create_queue("orders-dlq")
    source = client.create_queue("orders", redrive_policy=smq.RedrivePolicy("orders-dlq", 1))
    source.send_batch([smq.SendEntry(str(i), f"order {i}") for i in range(count)])
    while source.receive(10, visibility_timeout=0):
        pass
    assert dlq.attributes().visible == count
    return source, dlq


def test_act_on_one_dead_lettered_message_and_redrive_the_rest_to_a_chosen_queue(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    source, dlq = dead_letters(client, 6)
    archive = client.create_queue("archive")
    sign_in(browser, server.url)
    browser.get(server.url + "/console/queues/orders-dlq")
    peeked = dlq.peek(limit=10)
    assert sorted(m.body for m in peeked) == [f"order {i}" for i in range(6)]
    assert browser.text(f"tr[data-message='{peeked[0].message_id}'] td:nth-child(7)") == "orders"  # came from
    browser.script("document.querySelector('#messages-title').scrollIntoView();")
    screenshot(browser, "console-dlq.png", tmp_path)

    def act(message: smq.PeekedMessage, op: str, notice: str, destination: str = "") -> None:
        row = f"tr[data-message='{message.message_id}']"
        if destination:
            browser.type(row + " input[name=destination]", destination)
        browser.click(f"{row} button[value={op}]")
        # The row gone too: the page before may say the same notice (two moves in a row).
        browser.wait_for(
            lambda: not browser.find_all(row) and notice in browser.text("[role=status]"), what=f"{op} done"
        )

    act(peeked[1], "delete", "Message deleted.")
    act(peeked[2], "redrive", "Message moved.")
    act(peeked[3], "move", "Message moved.", destination="archive")
    left = [m.body for m in peeked[:1] + peeked[4:]]
    assert [m.body for m in dlq.peek(limit=10)] == left
    assert [m.body for m in source.peek(limit=10)] == [peeked[2].body]
    assert [m.body for m in archive.peek(limit=10)] == [peeked[3].body]

    # A message already gone: the page says so, and nothing changes.
    gone = dlq.peek(limit=1)[0]
    browser.get(server.url + "/console/queues/orders-dlq")
    assert dlq.discard(gone.message_id)
    browser.click(f"tr[data-message='{gone.message_id}'] button[value=delete]")
    error = browser.wait_for(lambda: browser.text("[role=alert]"), what="the error")
    assert "no longer where the page showed it" in error
    # A move to a queue that does not exist takes nothing out.
    kept = dlq.peek(limit=10)[0]  # (the first entry is the ghost of the one discarded)
    row = f"tr[data-message='{kept.message_id}']"
    browser.type(row + " input[name=destination]", "no-such-queue")
    browser.click(row + " button[value=move]")
    browser.wait_for(
        lambda: "There is no queue no-such-queue" in browser.text("[role=alert]"), what="the missing queue"
    )
    assert dlq.attributes().visible == 2

    # The rest, to a queue of our choosing (StartMessageMoveTask's DestinationArn).
    browser.type("#redrive-to", "archive")
    browser.click("form[action='/console/queues/orders-dlq/redrive'] button")
    browser.wait_for(lambda: "Redrive started." in browser.text("[role=status]"), what="the redrive")
    browser.wait_for(lambda: "2 of 2 moved" in browser.text("[data-task-text]"), timeout=30, what="the end")
    assert sorted(m.body for m in archive.peek(limit=10)) == sorted([peeked[3].body, *left[1:]])
    assert [m.body for m in source.peek(limit=10)] == [peeked[2].body]


def test_who_consumes_a_queue_and_a_backlog_without_consumers(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("orders")
    client.create_queue("quiet")
    queue.send_batch([smq.SendEntry(str(i), f"order {i}") for i in range(5)])
    sign_in(browser, server.url)
    # No one receives: the row says so at a glance, and the queue's page warns.
    browser.wait_for(
        lambda: browser.script("const r = document.querySelector(`tr[data-queue='orders']`);"
                               "return r && r.className === 'alert';"),
        what="the row marked",
    )  # fmt: skip
    assert browser.text("tr[data-queue='orders'] td:nth-child(9)") == "none"
    assert browser.script("return document.querySelector(`tr[data-queue='quiet']`).className;") == ""
    browser.get(server.url + "/console/queues/orders")
    assert browser.script("return document.querySelector('[data-idle]').hidden;") is False

    release = threading.Event()
    worker = smq.Worker(client, queue, lambda job: release.wait(30), config=smq.WorkerConfig(concurrency=2))
    worker._beat_every = 0.5
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    runner.start()
    try:
        row = browser.wait_for(
            lambda: browser.find_all("table.consumers tr[data-consumer]"), what="the worker on the page"
        )
        assert row
        text = browser.text("table.consumers tbody tr")
        assert "smq worker" in text and "concurrency 2" in text and "receiving" in text
        browser.wait_for(
            lambda: browser.script("return document.querySelector('[data-idle]').hidden;"), what="no warning"
        )
        browser.wait_for(
            lambda: re.search(r"holds [1-9]", browser.text("table.consumers tbody tr")),
            what="the worker holding messages",
        )
        browser.script("document.querySelector('#consumers-title').scrollIntoView();")
        screenshot(browser, "console-consumers.png", tmp_path)
        browser.get(server.url + "/console")
        browser.wait_for(
            lambda: browser.text("tr[data-queue='orders'] td:nth-child(9)") == "1", what="one consumer"
        )
    finally:
        release.set()
        worker.stop()
        runner.join(30)
