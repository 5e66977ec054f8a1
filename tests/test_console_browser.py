"""The web console in a real headless Chromium, on a real `smq serve` on a real Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import BROWSERS, Browser, open_browser

import smq
from http_support import KEY_ID, SECRET, Server

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "assets"


@pytest.fixture
def served(keyed_server: tuple[Server, smq.Client]) -> tuple[Server, smq.Client]:
    """The keyed `smq serve`, its Redis emptied of queues for this test."""
    server, client = keyed_server
    for name in client.list_queues():
        client.delete_queue(name)
    return server, client


@pytest.fixture(params=BROWSERS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which browser: each test runs in Chromium and in Firefox."""
    return str(request.param)


@pytest.fixture
def browser(kind: str) -> Iterator[Browser]:
    made = open_browser(kind)
    try:
        yield made
    finally:
        made.close()


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
    return (cells[1], cells[2]) if cells else None


def test_sign_in_watch_the_table_change_and_sign_out(
    served: tuple[Server, smq.Client], browser: Browser, tmp_path: Path
) -> None:
    server, client = served
    queue = client.create_queue("orders")
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
            "const drawn = cells[10].querySelector('svg polyline');"
            "return cells[7].textContent && drawn ? cells[7].textContent : null;"
        ),
        what="the rates and the trend line",
    )
    assert float(rates) >= 0

    def sent_rate() -> float:
        text = browser.script(
            "return document.querySelectorAll(`tr[data-queue='orders'] td`)[7].textContent;"
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
