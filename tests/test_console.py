"""The web console of a real `smq serve` on a real Redis, over real HTTP: sign-in, sessions,
CSRF, and the queue table (what a key's API calls would see, nothing more)."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from typing import Any

import pytest

import smq
from http_support import KEY_ID, OTHER_KEY, OTHER_SECRET, SECRET, Server, json_client
from smq.server.console._sessions import COOKIE, Sessions


class Browser:
    """A client that keeps the console's cookie and does not follow redirects."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.cookie = ""

    def request(self, method: str, path: str, form: dict[str, str] | None = None, **headers: str) -> Any:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        body = urllib.parse.urlencode(form) if form is not None else None
        sent = dict(headers)
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        if self.cookie:
            sent["Cookie"] = f"{COOKIE}={self.cookie}"
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        response.text = response.read().decode()
        for header in response.headers.get_all("Set-Cookie") or []:
            if header.startswith(f"{COOKIE}="):
                self.cookie = header.split(";", 1)[0].split("=", 1)[1].strip('"')
        connection.close()
        return response

    def csrf(self, path: str = "/console") -> str:
        page = self.request("GET", path).text
        match = re.search(r'name=csrf value="([^"]+)"', page)
        assert match, page
        return match.group(1)


@pytest.fixture
def console(keyed_server: tuple[Server, smq.Client]) -> tuple[Browser, smq.Client]:
    server, client = keyed_server
    for name in client.list_queues():
        client.delete_queue(name)
    return Browser(server.url), client


def row_cells(page: str, queue: str) -> list[str]:
    """The text of each cell of the queue table's row of ``queue``."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}"[^>]*>(.*?)</tr>', page, re.S)
    assert row is not None, f"no row of {queue}"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in cells]


def sign_in(browser: Browser, key_id: str = KEY_ID, secret: str = SECRET) -> Any:
    return browser.request("POST", "/console/sign-in", {"key_id": key_id, "secret": secret})


def test_without_a_session_the_console_asks_to_sign_in(console: tuple[Browser, smq.Client]) -> None:
    browser, _ = console
    response = browser.request("GET", "/console")
    assert response.status == 303
    assert response.headers["Location"] == "/console/sign-in"
    form = browser.request("GET", "/console/sign-in")
    assert form.status == 200
    assert "type=password" in form.text and "default-src 'self'" in form.headers["Content-Security-Policy"]


def test_a_wrong_secret_or_unknown_key_gets_no_session(console: tuple[Browser, smq.Client]) -> None:
    browser, _ = console
    for key_id, secret in ((KEY_ID, "wrong"), ("AKIDNOBODY", SECRET), (KEY_ID, "")):
        response = sign_in(browser, key_id, secret)
        assert response.status == 401
        assert "not right" in response.text
        assert browser.cookie == ""
    assert browser.request("GET", "/console").status == 303


def test_sign_in_sets_a_strict_http_only_cookie_and_shows_the_queues(
    console: tuple[Browser, smq.Client],
) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    queue.send_batch([smq.SendEntry(str(i), "x") for i in range(3)])
    queue.receive(1)
    client.create_queue("billing.fifo")
    response = sign_in(browser)
    assert response.status == 303 and response.headers["Location"] == "/console"
    cookie_header = response.headers["Set-Cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="):
        assert attribute in cookie_header
    page = browser.request("GET", "/console")
    assert page.status == 200
    assert f"signed in as {KEY_ID}" in page.text
    assert '<a href="/console/queues/orders">orders</a>' in page.text
    assert row_cells(page.text, "orders")[1:4] == ["Standard", "2", "1"]
    assert row_cells(page.text, "billing.fifo")[1] == "FIFO"
    assert 'data-queue="billing.fifo"' in page.text
    filtered = browser.request("GET", "/console?prefix=bil")
    assert 'data-queue="billing.fifo"' in filtered.text and 'data-queue="orders"' not in filtered.text


def test_a_tenant_sees_only_its_own_account_s_queues(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    client.create_queue("orders")  # the server's own account
    assert sign_in(browser, OTHER_KEY, OTHER_SECRET).status == 303
    page = browser.request("GET", "/console")
    assert page.status == 200 and 'data-queue="orders"' not in page.text and "No queue" in page.text


def test_an_altered_or_expired_cookie_is_refused() -> None:
    now = [1_000_000.0]
    sessions = Sessions({KEY_ID: SECRET}, now=lambda: now[0])
    cookie = sessions.sign_in(KEY_ID, SECRET)
    assert cookie is not None and sessions.session(cookie) is not None
    version, key, expires, nonce, mac = cookie.split(".")
    longer = f"{version}.{key}.{int(expires) + 3600}.{nonce}.{mac}"
    assert sessions.session(longer) is None
    assert sessions.session(cookie[:-2] + ("A" if cookie[-2] != "A" else "B") + cookie[-1]) is None
    assert sessions.session("garbage") is None
    now[0] += 8 * 3600 + 1
    assert sessions.session(cookie) is None
    # A session ends when its key goes (or its secret changes).
    fresh = Sessions({KEY_ID: SECRET}).sign_in(KEY_ID, SECRET)
    assert Sessions({KEY_ID: "rotated"}).session(fresh) is None
    assert Sessions({"AKIDELSE": SECRET}).session(fresh) is None


def test_only_the_canonical_form_of_a_cookie_is_accepted() -> None:
    sessions = Sessions({KEY_ID: SECRET})
    cookie = sessions.sign_in(KEY_ID, SECRET)
    assert cookie is not None and sessions.session(cookie) is not None
    version, key, expires, nonce, mac = cookie.split(".")
    spellings = [
        f" {expires}",
        f"+{expires}",
        f"0{expires}",
        expires.translate(
            str.maketrans("0123456789", "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19")
        ),
        f"{expires[:3]}_{expires[3:]}",
    ]
    for spelled in spellings:
        assert int(spelled) == int(expires)  # the same number to int()
        assert sessions.session(f"{version}.{key}.{spelled}.{nonce}.{mac}") is None, spelled
    for key_spelled in (key + "=", key + "!", "\n" + key):
        assert sessions.session(f"{version}.{key_spelled}.{expires}.{nonce}.{mac}") is None, key_spelled


def test_sign_out_needs_the_csrf_token_and_ends_the_session(console: tuple[Browser, smq.Client]) -> None:
    browser, _ = console
    sign_in(browser)
    token = browser.csrf()
    refused = browser.request("POST", "/console/sign-out", {"csrf": "not-the-token"})
    assert refused.status == 403
    assert browser.request("GET", "/console").status == 200  # still signed in
    other_origin = browser.request("POST", "/console/sign-out", {"csrf": token}, Origin="http://evil.example")
    assert other_origin.status == 403
    assert browser.request("GET", "/console").status == 200
    response = browser.request("POST", "/console/sign-out", {"csrf": token})
    assert response.status == 303 and response.headers["Location"] == "/console/sign-in"
    assert browser.cookie == ""
    assert browser.request("GET", "/console").status == 303


def test_a_queue_name_is_shown_escaped(console: tuple[Browser, smq.Client]) -> None:
    # SQS names cannot hold markup; a prefix typed by the user can, and must come back inert.
    browser, _ = console
    sign_in(browser)
    page = browser.request("GET", "/console?prefix=" + urllib.parse.quote('"><script>x</script>'))
    assert "<script>x" not in page.text
    assert 'value="&quot;&gt;&lt;script&gt;x&lt;/script&gt;"' in page.text  # the filter field


def test_without_keys_the_console_is_open_but_changes_still_need_the_token(
    sqs_server: Any, core: smq.Client
) -> None:
    core.create_queue("open-queue")
    browser = Browser(sqs_server.url)
    page = browser.request("GET", "/console")
    assert page.status == 200 and 'data-queue="open-queue"' in page.text
    assert browser.cookie  # an anonymous session, for the CSRF token of later forms
    assert browser.request("GET", "/console/sign-in").status == 303
    assert (
        browser.request("POST", "/console/queues/open-queue/send", {"body": "x", "csrf": "forged"}).status
        == 403
    )
    assert core.get_queue("open-queue").attributes().visible == 0
    token = browser.csrf("/console/queues/open-queue")
    sent = browser.request("POST", "/console/queues/open-queue/send", {"body": "x", "csrf": token})
    assert sent.status == 303 and core.get_queue("open-queue").attributes().visible == 1


# -- the page of a queue --------------------------------------------------------------------------


def form_of(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the form posting to ``action`` (its CSRF token, a receipt)."""
    match = re.search(rf'<form[^>]* method=post action="{re.escape(action)}"[^>]*>(.*?)</form>', page, re.S)
    assert match, f"no form to {action}"
    return dict(re.findall(r'<input type=hidden name=(\w+) value="([^"]*)"', match.group(1)))


def test_the_queue_page_shows_counts_attributes_and_messages_escaped(
    console: tuple[Browser, smq.Client],
) -> None:
    browser, client = console
    queue = client.create_queue("orders", visibility_timeout=40)
    queue.send("<b>bold</b> & more")
    sign_in(browser)
    page = browser.request("GET", "/console/queues/orders")
    assert page.status == 200
    assert "data-count=visible>1<" in page.text
    assert 'name="VisibilityTimeout" value="40"' in page.text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in page.text and "<b>bold" not in page.text
    counts = browser.request("GET", "/console/api/queue/orders")
    assert counts.status == 200 and '"visible": 1' in counts.text
    missing = browser.request("GET", "/console/queues/no-such-queue")
    assert missing.status == 404 and "<a href=/console>All queues</a>" in missing.text


def test_send_from_the_form_and_not_without_the_token(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    sign_in(browser)
    token = form_of(browser.request("GET", "/console/queues/orders").text, "/console/queues/orders/send")
    refused = browser.request("POST", "/console/queues/orders/send", {"body": "forged", "csrf": "x"})
    assert refused.status == 403 and queue.attributes().visible == 0
    stranger = Browser(f"http://{browser.host}:{browser.port}")  # no session at all
    refused = stranger.request("POST", "/console/queues/orders/send", {"body": "forged", **token})
    assert refused.status == 403 and queue.attributes().visible == 0
    sent = browser.request("POST", "/console/queues/orders/send", {"body": "hello", "delay": "", **token})
    assert sent.status == 303 and sent.headers["Location"] == "/console/queues/orders?done=sent"
    (message,) = queue.receive(1)
    assert message.body == "hello"
    later = browser.request("POST", "/console/queues/orders/send", {"body": "later", "delay": "60", **token})
    assert later.status == 303 and queue.attributes().delayed == 1
    for delay in ("999", "soon"):
        bad = browser.request("POST", "/console/queues/orders/send", {"body": "x", "delay": delay, **token})
        assert bad.status == 400 and "DelaySeconds" in bad.text
    assert queue.attributes().delayed == 1


def test_release_and_delete_a_message_held_by_a_receipt(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    queue.send_batch([smq.SendEntry("a", "first"), smq.SendEntry("b", "second")])
    held = queue.receive(2, visibility_timeout=300)
    sign_in(browser)
    page = browser.request("GET", "/console/queues/orders?state=in_flight").text
    for message in held:
        assert message.receipt_handle in page  # which receipt holds it
    fields = form_of(page, "/console/queues/orders/message")
    receipt = fields["receipt"]
    released = browser.request("POST", "/console/queues/orders/message", {**fields, "op": "release"})
    assert released.status == 303
    assert queue.attributes().visible == 1
    others = [m for m in held if m.receipt_handle != receipt]
    fields = form_of(
        browser.request("GET", "/console/queues/orders?state=in_flight").text,
        "/console/queues/orders/message",
    )
    assert fields["receipt"] == others[0].receipt_handle
    deleted = browser.request("POST", "/console/queues/orders/message", {**fields, "op": "delete"})
    assert deleted.status == 303
    info = queue.attributes()
    assert (info.visible, info.in_flight) == (1, 0)


def test_attributes_save_with_the_api_s_validation(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    sign_in(browser)
    token = form_of(
        browser.request("GET", "/console/queues/orders").text, "/console/queues/orders/attributes"
    )
    saved = browser.request("POST", "/console/queues/orders/attributes", {**token, "VisibilityTimeout": "45"})
    assert saved.status == 303
    assert queue.attributes().config.visibility_timeout == 45
    refused = browser.request(
        "POST", "/console/queues/orders/attributes", {**token, "VisibilityTimeout": "99999"}
    )
    assert refused.status == 400 and "VisibilityTimeout" in refused.text
    assert queue.attributes().config.visibility_timeout == 45


def test_purge_asks_for_the_queue_s_name_first(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    queue.send_batch([smq.SendEntry(str(i), "x") for i in range(4)])
    sign_in(browser)
    token = form_of(browser.request("GET", "/console/queues/orders").text, "/console/queues/orders/purge")
    asked = browser.request("POST", "/console/queues/orders/purge", token)
    assert asked.status == 200 and "Type the queue's name" in asked.text
    wrong = browser.request("POST", "/console/queues/orders/purge", {**token, "confirm": "order"})
    assert wrong.status == 200 and queue.attributes().visible == 4
    done = browser.request("POST", "/console/queues/orders/purge", {**token, "confirm": "orders"})
    assert done.status == 303 and done.headers["Location"] == "/console/queues/orders?done=purged"
    deadline = time.monotonic() + 10
    while queue.attributes().visible and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queue.attributes().visible == 0


def test_a_tenant_cannot_open_another_account_s_queue(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    client.create_queue("orders")
    sign_in(browser, OTHER_KEY, OTHER_SECRET)
    assert browser.request("GET", "/console/queues/orders").status == 404
    assert browser.request("GET", "/console/api/queue/orders").status == 404


def dead_letter(client: smq.Client, count: int) -> tuple[smq.Queue, smq.Queue]:
    """(source, dead-letter queue): ``count`` messages of the source dead-lettered by receives."""
    dlq = client.create_queue("orders-dlq")
    source = client.create_queue("orders", redrive_policy=smq.RedrivePolicy("orders-dlq", 1))
    source.send_batch([smq.SendEntry(str(n), f"order {n}") for n in range(count)])
    while source.receive(10, visibility_timeout=0):
        pass
    return source, dlq


def test_redrive_a_dead_letter_queue_and_follow_its_progress(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    source, dlq = dead_letter(client, 6)
    assert dlq.attributes().visible == 6
    sign_in(browser)
    page = browser.request("GET", "/console/queues/orders-dlq").text
    assert "<progress data-task" in page
    assert "/console/queues/orders/redrive" not in browser.request("GET", "/console/queues/orders").text
    started = browser.request(
        "POST", "/console/queues/orders-dlq/redrive", form_of(page, "/console/queues/orders-dlq/redrive")
    )
    assert started.status == 303
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        counts = browser.request("GET", "/console/api/queue/orders-dlq").text
        if '"status": "COMPLETED"' in counts:
            break
        time.sleep(0.1)
    assert '"moved": 6' in counts and '"to_move": 6' in counts, counts
    assert source.attributes().visible == 6 and dlq.attributes().visible == 0


def test_the_table_shows_dead_letter_depth_fifo_groups_and_counters(
    console: tuple[Browser, smq.Client],
) -> None:
    browser, client = console
    dead_letter(client, 3)
    fifo = client.create_queue("tasks.fifo", fifo_queue=True, content_based_deduplication=True)
    fifo.send("a", message_group_id="g1")
    fifo.send("b", message_group_id="g2")
    fifo.receive(1)
    sign_in(browser)
    page = browser.request("GET", "/console").text
    # name, type, visible, in flight, delayed, age, dead letters, groups in flight
    assert row_cells(page, "orders")[:8] == ["orders", "Standard", "0", "0", "0", "", "3", ""]
    assert row_cells(page, "orders-dlq")[1] == "Standard DLQ"  # marked as a dead-letter queue
    assert 'data-queue="orders-dlq" class=alert' not in page  # no consumer: normal for a DLQ
    assert row_cells(page, "tasks.fifo")[7] == "1"  # one group in flight
    listed = json.loads(browser.request("GET", "/console/api/queues").text)
    by_name = {row["name"]: row for row in listed["queues"]}
    assert by_name["orders"]["counters"] == {"sent": 3, "received": 3, "deleted": 0}
    assert by_name["orders-dlq"]["dead_letters"] is None


def test_a_tenant_can_change_nothing_in_another_account_s_queue(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    source, dlq = dead_letter(client, 2)  # the server's own account
    (held,) = source.send_batch([smq.SendEntry("x", "held")]) and source.receive(1, visibility_timeout=300)
    sign_in(browser, OTHER_KEY, OTHER_SECRET)
    token = browser.csrf()
    attempts = {
        "send": {"body": "intruder"},
        "purge": {"confirm": "orders"},
        "attributes": {"VisibilityTimeout": "1"},
        "message": {"receipt": held.receipt_handle, "op": "delete"},
        "delete": {"confirm": "orders"},
    }
    one = dlq.peek(limit=1)[0]
    for op in ("delete", "redrive", "move"):
        fields = {"id": one.message_id, "near": "0", "op": op, "destination": "orders", "csrf": token}
        assert browser.request("POST", "/console/queues/orders-dlq/one", fields).status == 404, op
    assert browser.request("GET", "/console/api/queue/orders/history").status == 404
    for action, fields in attempts.items():
        response = browser.request("POST", f"/console/queues/orders/{action}", {**fields, "csrf": token})
        assert response.status == 404, (action, response.status)
    assert browser.request("POST", "/console/queues/orders-dlq/redrive", {"csrf": token}).status == 404
    info = source.attributes()
    assert (info.visible, info.in_flight, info.config.visibility_timeout) == (0, 1, 30)
    assert dlq.attributes().visible == 2


def test_changes_need_this_session_s_token_and_the_console_s_origin(
    console: tuple[Browser, smq.Client],
) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    other = Browser(browser_url(browser))
    sign_in(other)
    other_token = other.csrf()
    sign_in(browser)
    token = browser.csrf()
    assert other_token != token
    send = "/console/queues/orders/send"
    assert browser.request("POST", send, {"body": "x", "csrf": other_token}).status == 403
    assert (
        browser.request("POST", send, {"body": "x", "csrf": token}, Origin="http://evil.example").status
        == 403
    )
    assert queue.attributes().visible == 0
    assert (
        browser.request("POST", send, {"body": "x", "csrf": token}, Origin=browser_url(browser)).status == 303
    )


def test_a_form_that_is_not_utf_8_is_a_400_not_a_500(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    client.create_queue("orders")
    connection = http.client.HTTPConnection(browser.host, browser.port, timeout=10)
    connection.request(
        "POST",
        "/console/sign-in",
        body=b"key_id=%ff%fe&secret=x",
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    assert connection.getresponse().status in (400, 401)
    connection.close()


def test_a_policy_that_denies_the_key_hides_what_it_denies(
    console: tuple[Browser, smq.Client], keyed_server: tuple[Server, smq.Client]
) -> None:
    browser, client = console
    server, _ = keyed_server
    client.create_queue("open")
    client.create_queue("closed").send("secret")
    api = json_client(server.url)
    url = api.get_queue_url(QueueName="closed")["QueueUrl"]
    arn = api.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def deny(*actions: str) -> None:
        statement = {
            "Effect": "Deny",
            "Principal": "*",
            "Action": [f"SQS:{a}" for a in actions],
            "Resource": arn,
        }
        policy = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        api.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})

    sign_in(browser)
    deny("ReceiveMessage")
    page = browser.request("GET", "/console/queues/closed")
    assert page.status == 200 and "may not receive" in page.text and "secret" not in page.text
    deny("GetQueueAttributes")
    table = browser.request("GET", "/console")
    assert (
        table.status == 200 and 'data-queue="open"' in table.text and 'data-queue="closed"' not in table.text
    )
    assert browser.request("GET", "/console/queues/closed").status == 403
    assert browser.request("GET", "/console/api/queue/closed").status == 403


def browser_url(browser: Browser) -> str:
    return f"http://{browser.host}:{browser.port}"


def test_the_queue_page_counts_noisy_groups(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("shared", visibility_timeout=300)
    for start in range(0, 50, 10):
        queue.send_batch(
            [smq.SendEntry(str(i), f"n{start + i}", message_group_id="noisy") for i in range(10)]
        )
    for _ in range(4):
        queue.receive(10)  # 40 in flight: the group is noisy
    sign_in(browser)
    page = browser.request("GET", "/console/queues/shared")
    assert "data-count=noisy_groups>" in page.text and "Noisy groups" in page.text
    counts = json.loads(browser.request("GET", "/console/api/queue/shared").text)
    assert counts["noisy_groups"] == 1


def test_the_history_is_json_for_the_charts(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    queue.send("x")
    queue._sample()
    sign_in(browser)
    history = json.loads(browser.request("GET", "/console/api/queue/orders/history").text)
    assert history["step"] == 10 and history["fields"][:4] == ["at", "visible", "in_flight", "delayed"]
    assert history["samples"][-1][1:4] == [1, 0, 0] and abs(history["now"] - time.time()) < 60
    assert browser.request("GET", "/console/api/queue/no-such-queue/history").status == 404
    signed_out = Browser(browser_url(browser))
    assert signed_out.request("GET", "/console/api/queue/orders/history").status == 401


def test_create_a_queue_with_the_api_s_validation(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    client.create_queue("fresh-dlq")  # "fresh": a name no other test deletes (taken for 60 s after)
    sign_in(browser)
    page = browser.request("GET", "/console/create")
    assert "default-src 'self'" in page.headers["Content-Security-Policy"] and "nosniff" in str(page.headers)
    token = browser.csrf("/console/create")
    form = {"name": "fresh", "type": "standard", "VisibilityTimeout": "45", "dlq": "fresh-dlq"}
    assert browser.request("POST", "/console/create", {**form, "csrf": "forged"}).status == 403
    assert "fresh" not in client.list_queues()
    for bad, said in (
        ({"VisibilityTimeout": "43201"}, "VisibilityTimeout"),
        ({"name": "no spaces"}, "name"),
        ({"dlq": "missing"}, "The dead-letter queue missing does not exist."),
        ({"max_receive_count": "0"}, "maxReceiveCount"),
        ({"ContentBasedDeduplication": "true"}, "FIFO queues only"),
        ({"type": "fifo"}, "fifo"),
    ):
        refused = browser.request("POST", "/console/create", {**form, **bad, "csrf": token})
        assert refused.status == 400 and said in refused.text, (bad, refused.text[-600:])
        assert 'value="fresh-dlq"' in refused.text  # the form keeps what was typed
    assert client.list_queues() == ["fresh-dlq"]
    made = browser.request("POST", "/console/create", {**form, "max_receive_count": "4", "csrf": token})
    assert made.status == 303 and made.headers["Location"] == "/console/queues/fresh?done=created"
    config = client.queue("fresh").attributes().config
    assert config.visibility_timeout == 45 and config.redrive_policy == smq.RedrivePolicy("fresh-dlq", 4)
    again = browser.request("POST", "/console/create", {**form, "VisibilityTimeout": "46", "csrf": token})
    assert again.status == 400  # CreateQueue's rule: the same name with other attributes
    same = browser.request("POST", "/console/create", {**form, "max_receive_count": "4", "csrf": token})
    assert same.status == 303 and same.headers["Location"] == "/console/queues/fresh?done=exists"
    assert "exists already" in browser.request("GET", same.headers["Location"]).text


def test_a_tenant_creates_queues_in_its_own_account(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    sign_in(browser, OTHER_KEY, OTHER_SECRET)
    token = browser.csrf("/console/create")
    made = browser.request("POST", "/console/create", {"name": "mine", "type": "standard", "csrf": token})
    assert made.status == 303
    assert "mine" not in client.list_queues(qualified=False)
    (qualified,) = [name for name in client.list_queues() if name.endswith(":111111111111:mine")]
    # The tenant's table reads its own queue's details and history, and its page draws them.
    mine = client.queue(qualified)
    mine.send("x")
    mine._sample()
    listed = json.loads(browser.request("GET", "/console/api/queues?details=1").text)
    (row,) = listed["queues"]
    assert row["name"] == "mine" and [depth for _, depth in row["trend"]] == [1] and row["consumers"] == 0
    history = json.loads(browser.request("GET", "/console/api/queue/mine/history").text)
    assert [sample[1] for sample in history["samples"]] == [1]


def test_delete_a_queue_after_typing_its_name(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    client.create_queue("orders").send("x")
    sign_in(browser)
    token = browser.csrf("/console/queues/orders")
    assert (
        browser.request("POST", "/console/queues/orders/delete", {"csrf": "x", "confirm": "orders"}).status
        == 403
    )
    asked = browser.request("POST", "/console/queues/orders/delete", {"csrf": token})
    assert asked.status == 200 and "Type the queue's name" in asked.text
    wrong = browser.request("POST", "/console/queues/orders/delete", {"csrf": token, "confirm": "order"})
    assert wrong.status == 200 and client.list_queues() == ["orders"]
    assert "“order” is not the queue's name: nothing was done." in wrong.text
    done = browser.request("POST", "/console/queues/orders/delete", {"csrf": token, "confirm": "orders"})
    assert done.status == 303 and done.headers["Location"] == "/console?done=deleted"
    assert client.list_queues() == []
    assert "Queue deleted." in browser.request("GET", "/console?done=deleted").text


def test_messages_page_and_search_in_bounded_steps(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    queue = client.create_queue("orders")
    for first in range(0, 1200, 10):
        queue.send_batch([smq.SendEntry(str(i), f"order {i} <b>") for i in range(first, first + 10)])
    sign_in(browser)
    page = browser.request("GET", "/console/queues/orders?state=visible&offset=1150").text
    assert "Messages 1,151 to 1,200 of about 1,200" in page and "order 1150 &lt;b&gt;" in page
    assert "rel=next" not in page  # the end
    assert "Messages 1 to 50" in browser.request("GET", "/console/queues/orders?offset=-4").text
    assert "Messages 1 to 50" in browser.request("GET", "/console/queues/orders?offset=x").text
    numbered = browser.request("GET", "/console/queues/orders?state=visible&from=101").text  # the form's
    assert "Messages 101 to 150" in numbered and 'name=from type=number min=1 value="101"' in numbered
    # A search reads 1,000 messages at most, says so, and links to the next stretch.
    first = browser.request("GET", "/console/queues/orders?state=visible&q=order+1199&in=body").text
    assert "Searched visible messages 1 to 1,000 of about 1,200" in first and "0 found" in first
    link = re.search(r'<a rel=next href="([^"]+)">Look further</a>', first)
    assert link is not None and "offset=1000" in link.group(1)
    further = browser.request("GET", link.group(1).replace("&amp;", "&")).text
    assert "Searched visible messages 1,001 to 1,200" in further and "1 found" in further
    assert "order 1199 &lt;b&gt;" in further
    shown = browser.request("GET", "/console/queues/orders?q=%3Cscript%3E&in=body").text
    assert "&lt;script&gt;" in shown and "<script>" not in shown.split("</head>")[1]
    assert queue.attributes().visible == 1200 and queue.attributes().counters.get("received", 0) == 0


def test_one_dead_letter_needs_the_token_and_the_key_s_permissions(
    console: tuple[Browser, smq.Client], keyed_server: tuple[Server, smq.Client]
) -> None:
    browser, client = console
    server, _ = keyed_server
    source, dlq = dead_letter(client, 3)
    one, two, three = dlq.peek(limit=10)
    sign_in(browser)
    token = browser.csrf("/console/queues/orders-dlq")
    path = "/console/queues/orders-dlq/one"
    fields = {"id": one.message_id, "near": "0", "op": "delete"}
    assert browser.request("POST", path, {**fields, "csrf": "forged"}).status == 403
    assert browser.request("POST", path, {**fields, "near": "x", "csrf": token}).status == 400
    assert browser.request("POST", path, {**fields, "op": "explode", "csrf": token}).status == 400
    assert dlq.attributes().visible == 3
    done = browser.request("POST", path, {**fields, "csrf": token})
    assert done.status == 303 and "done=one-deleted" in done.headers["Location"]
    assert browser.request("POST", path, {**fields, "csrf": token}).status == 400  # gone already
    client.create_queue("orders-archive.fifo")
    for destination, said in (("orders-dlq", "already"), ("orders-archive.fifo", "only to a standard queue")):
        wrong = {"id": two.message_id, "near": "1", "op": "move", "destination": destination, "csrf": token}
        refused = browser.request("POST", path, wrong)
        assert refused.status == 400 and said in refused.text, refused.text[-400:]
    # A move needs SendMessage on where it goes: a policy that denies it refuses, nothing moves.
    api = json_client(server.url)
    url = api.get_queue_url(QueueName="orders")["QueueUrl"]
    arn = api.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    statement = {"Effect": "Deny", "Principal": "*", "Action": "SQS:SendMessage", "Resource": arn}
    api.set_queue_attributes(
        QueueUrl=url, Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [statement]})}
    )
    move = {"id": two.message_id, "near": "1", "op": "move", "destination": "orders", "csrf": token}
    assert browser.request("POST", path, move).status == 403
    assert dlq.attributes().visible == 2 and source.attributes().visible == 0
    api.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert browser.request("POST", path, move).status == 303
    assert [m.body for m in source.peek()] == [two.body]
    # A standard queue that is not a dead-letter queue offers no per-message actions.
    assert "/console/queues/orders/one" not in browser.request("GET", "/console/queues/orders").text


def test_the_table_pages_through_many_queues(console: tuple[Browser, smq.Client]) -> None:
    browser, client = console
    for i in range(105):
        client.create_queue(f"q{i:03}")
    sign_in(browser)
    first = browser.request("GET", "/console").text
    assert first.count("<tr data-queue=") == 100 and 'data-queue="q099"' in first
    link = re.search(r'<a rel=next href="([^"]+)">Next page</a>', first)
    assert link is not None
    second = browser.request("GET", link.group(1).replace("&amp;", "&")).text
    assert second.count("<tr data-queue=") == 5 and 'data-queue="q104"' in second and "First page" in second
    listed = json.loads(browser.request("GET", "/console/api/queues?details=1").text)
    assert len(listed["queues"]) == 100 and listed["next"]
    assert {"trend", "consumers", "dead_letter", "rates"} <= set(listed["queues"][0])


def test_a_sharded_queue_s_page_pages_searches_and_charts_it_whole(
    console: tuple[Browser, smq.Client],
) -> None:
    browser, client = console
    queue = client.create_queue("wide", shards=3)
    for first in range(0, 60, 10):
        queue.send_batch([smq.SendEntry(str(i), f"job {i}") for i in range(first, first + 10)])
    queue._sample()
    sign_in(browser)
    page = browser.request("GET", "/console/queues/wide").text
    assert page.count("<tr data-message=") == 50 and "of about 60" in page
    found = browser.request("GET", "/console/queues/wide?q=job+59").text
    assert "1 found" in found and "job 59" in found
    history = json.loads(browser.request("GET", "/console/api/queue/wide/history").text)
    assert history["samples"][-1][1] == 60  # the shards added up
