"""The web console in a real headless Chromium, on a real `smq serve` on a real Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import Browser, browser_programs

import smq
from http_support import KEY_ID, SECRET, Server
from smq.embedded import EmbeddedRedis

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "assets"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, smq.Client]]:
    with EmbeddedRedis(tmp_path_factory.mktemp("console-browser-redis")) as redis:
        server = Server(redis.url, "--access-key", f"{KEY_ID}:{SECRET}")
        client = smq.Client(redis.url)
        try:
            yield server, client
        finally:
            client.close()
            server.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    chromium, driver = browser_programs()
    made = Browser(chromium, driver)
    try:
        yield made
    finally:
        made.close()


def screenshot(browser: Browser, name: str, tmp_path: Path) -> None:
    """Keep a screenshot: in the docs when SMQ_SCREENSHOTS=docs, else in the test's folder."""
    folder = SCREENSHOTS if os.environ.get("SMQ_SCREENSHOTS") == "docs" else tmp_path
    browser.screenshot(folder / name)


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
    screenshot(browser, "console-queues.png", tmp_path)

    browser.click("form[action='/console/sign-out'] button")
    browser.wait_for(lambda: browser.url.endswith("/console/sign-in"), what="the sign-in page again")
    browser.get(server.url + "/console")
    browser.wait_for(lambda: browser.url.endswith("/console/sign-in"), what="no session left")


def test_the_table_is_readable_at_phone_width(served: tuple[Server, smq.Client], tmp_path: Path) -> None:
    chromium, driver = browser_programs()
    phone = Browser(chromium, driver, width=390, height=844)
    try:
        server, client = served
        client.create_queue("a-queue-with-a-rather-long-name-for-a-small-screen")
        phone.get(server.url + "/console/sign-in")
        phone.type("#key_id", KEY_ID)
        phone.type("#secret", SECRET)
        phone.click("button[type=submit]")
        phone.wait_for(lambda: phone.find_all("tr[data-queue]"), what="the queue table")
        # Nothing wider than the screen: no sideways scrolling.
        width = phone.script("return [document.documentElement.scrollWidth, window.innerWidth];")
        assert width[0] <= width[1], width
        screenshot(phone, "console-phone.png", tmp_path)
    finally:
        phone.close()
