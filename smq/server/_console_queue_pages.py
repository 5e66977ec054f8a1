"""The console's page of one queue: counts and charts, attributes, messages, actions (HTML)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from .._peek import PeekedMessage
from ._console_pages import page

# The attributes the page edits, in order, with a hint; FIFO-only ones only on FIFO queues.
EDITABLE = (
    ("VisibilityTimeout", "seconds, 0 to 43,200"),
    ("DelaySeconds", "seconds, 0 to 900"),
    ("ReceiveMessageWaitTimeSeconds", "seconds, 0 to 20"),
    ("MessageRetentionPeriod", "seconds, 60 to 1,209,600"),
    ("MaximumMessageSize", "bytes, 1,024 to 1,048,576"),
    ("RedrivePolicy", 'JSON: {"deadLetterTargetArn": "...", "maxReceiveCount": 5}; empty: none'),
)
EDITABLE_FIFO = (
    ("ContentBasedDeduplication", "true or false"),
    ("DeduplicationScope", "messageGroup or queue"),
    ("FifoThroughputLimit", "perQueue or perMessageGroupId"),
)
NOTICES = {
    "sent": "Message sent.",
    "saved": "Attributes saved.",
    "purged": "Queue purged.",
    "deleted": "Message deleted.",
    "released": "Message released: visible again.",
    "redrive": "Redrive started.",
}
BODY_SHOWN = 300  # characters of a body in the message table
STATES = (("visible", "Visible"), ("in_flight", "In flight"), ("delayed", "Delayed"))


@dataclass(frozen=True)
class QueueView:
    """What the queue page shows, read through the API's actions."""

    name: str
    url: str
    attributes: Mapping[str, str]
    state: str
    messages: Sequence[PeekedMessage]
    dead_letter: bool  # another queue's redrive policy names it: it can be redriven
    csrf: str
    limit: int  # messages looked at, at most
    may_look: bool = True  # False: the queue's policy keeps this key from its messages


def _form(name: str, action: str, csrf: str, fields: str, button: str, extra: str = "") -> str:
    return (
        f'<form method=post action="/console/queues/{quote(name)}/{action}"{extra}>'
        f'<input type=hidden name=csrf value="{escape(csrf)}">{fields}{button}</form>'
    )


def _counts(view: QueueView) -> str:
    a = view.attributes
    cells = (
        ("visible", "Visible", a.get("ApproximateNumberOfMessages", "0")),
        ("in_flight", "In flight", a.get("ApproximateNumberOfMessagesNotVisible", "0")),
        ("delayed", "Delayed", a.get("ApproximateNumberOfMessagesDelayed", "0")),
        ("oldest_age", "Oldest message, s", ""),
        ("sent_rate", "Sent / s", ""),
        ("received_rate", "Received / s", ""),
        ("deleted_rate", "Deleted / s", ""),
        ("visibility_expired", "Lease expiries", ""),
        ("noisy_groups", "Noisy groups", ""),
    )
    items = "".join(
        f"<div><dt>{label}</dt><dd data-count={key}>{escape(value)}</dd></div>" for key, label, value in cells
    )
    return (
        f'<section aria-labelledby=counts-title data-live-queue="/console/api/queue/{quote(view.name)}">'
        "<h2 id=counts-title>Now</h2>"
        f"<dl class=counts>{items}</dl>"
        "<p class=muted>Lease expiries count visibility timeouts that ran out: many mean a timeout "
        "shorter than the work. Noisy groups are message groups whose messages wait while other "
        "groups' are visible (fair queues). <span id=live aria-live=polite></span></p>"
        '<figure><svg data-chart=depth viewBox="0 0 300 60" role=img aria-label="visible and in flight, '
        'last 5 minutes"></svg><figcaption>Visible (solid) and in flight (dashed), last 5 minutes'
        "</figcaption></figure>"
        '<figure><svg data-chart=rates viewBox="0 0 300 60" role=img aria-label="sent, received and '
        'deleted per second, last 5 minutes"></svg><figcaption>Sent (solid), received (dashed) and '
        "deleted (dotted) per second</figcaption></figure></section>"
    )


def _attributes(view: QueueView, fifo: bool) -> str:
    fields = []
    for attribute, hint in EDITABLE + (EDITABLE_FIFO if fifo else ()):
        value = view.attributes.get(attribute, "")
        fields.append(
            f"<label for=attr-{attribute}>{attribute} <span class=muted>({escape(hint)})</span></label>"
            f'<input id=attr-{attribute} name="{attribute}" value="{escape(value)}">'
            f'<input type=hidden name="was-{attribute}" value="{escape(value)}">'
        )
    shown = ("QueueArn", "CreatedTimestamp", "LastModifiedTimestamp", "FifoQueue")
    facts = "".join(
        f"<div><dt>{name}</dt><dd>{escape(view.attributes[name])}</dd></div>"
        for name in shown
        if name in view.attributes
    )
    return (
        "<section aria-labelledby=attributes-title><h2 id=attributes-title>Attributes</h2>"
        f"<dl class=facts>{facts}</dl>"
        + _form(view.name, "attributes", view.csrf, "".join(fields), "<button type=submit>Save</button>")
        + "</section>"
    )


def _when(at: float | None, now: float) -> str:
    if at is None:
        return ""
    seconds = round(at - now)
    return f"in {seconds} s" if seconds >= 0 else f"{-seconds} s ago"


def _message_rows(view: QueueView) -> str:
    now = time.time()
    rows = []
    for message in view.messages:
        body = message.body if len(message.body) <= BODY_SHOWN else message.body[:BODY_SHOWN] + "…"
        attributes = ", ".join(f"{name}={value.value!r}" for name, value in message.attributes.items())
        held = ""
        if message.receipt_handle is not None:
            receipt = escape(message.receipt_handle)
            fields = f'<input type=hidden name=receipt value="{receipt}">'
            buttons = (
                "<button name=op value=release>Release</button> <button name=op value=delete>Delete</button>"
            )
            held = (
                f'<td><code title="{receipt}">…{escape(message.receipt_handle[-10:])}</code>'
                f"<br>expires {_when(message.visible_at, now)}</td>"
                f"<td>{_form(view.name, 'message', view.csrf, fields, buttons)}</td>"
            )
        elif message.state == "delayed":
            held = f"<td>due {_when(message.visible_at, now)}</td>"
        rows.append(
            f'<tr data-message="{escape(message.message_id)}">'
            f"<td><code>{escape(message.message_id)}</code></td>"
            f"<td>{_when(message.sent_at, now)}</td><td>{message.receive_count}</td>"
            f"<td class=body>{escape(body)}</td><td>{escape(attributes)}</td>{held}</tr>"
        )
    return "".join(rows)


def _messages(view: QueueView) -> str:
    tabs = " ".join(
        f'<a href="/console/queues/{quote(view.name)}?state={state}"'
        + (' aria-current="page"' if state == view.state else "")
        + f">{label}</a>"
        for state, label in STATES
    )
    extra = {
        "in_flight": "<th scope=col>Held by</th><th scope=col>Actions</th>",
        "delayed": "<th scope=col>Due</th>",
    }
    if not view.may_look:
        table = "<p>This access key may not receive this queue's messages, so it cannot look at them.</p>"
    elif view.messages:
        table = (
            "<div class=table-wrap><table class=messages><thead><tr>"
            "<th scope=col>Message id</th><th scope=col>Sent</th>"
            "<th scope=col>Receives</th><th scope=col>Body</th><th scope=col>Attributes</th>"
            f"{extra.get(view.state, '')}</tr></thead><tbody>{_message_rows(view)}</tbody></table></div>"
        )
    else:
        table = "<p>None.</p>"
    return (
        "<section aria-labelledby=messages-title><h2 id=messages-title>Messages</h2>"
        f"<nav class=tabs>{tabs}</nav><p class=muted>Looked at, not received: nothing changes "
        f"(the first {view.limit} at most).</p>{table}</section>"
    )


def _send(view: QueueView, fifo: bool) -> str:
    fields = (
        "<label for=send-body>Body</label><textarea id=send-body name=body rows=3 required></textarea>"
        "<label for=send-delay>Delay, seconds</label>"
        '<input id=send-delay name=delay inputmode=numeric placeholder="the queue\'s">'
    )
    if fifo:
        fields += (
            "<label for=send-group>Message group id</label><input id=send-group name=group required>"
            "<label for=send-dedup>Deduplication id</label><input id=send-dedup name=dedup>"
        )
    return (
        "<section aria-labelledby=send-title><h2 id=send-title>Send a message</h2>"
        + _form(view.name, "send", view.csrf, fields, "<button type=submit>Send</button>")
        + "</section>"
    )


def _dangerous(view: QueueView) -> str:
    redrive = ""
    if view.dead_letter:
        redrive = (
            "<h3>Redrive</h3><p>Move this dead-letter queue's messages back to the queues they came from.</p>"
            + _form(view.name, "redrive", view.csrf, "", "<button type=submit>Redrive</button>")
            + '<p><progress data-task max=1 value=0 aria-label="redrive progress"></progress> '
            "<span data-task-text class=muted></span></p>"
        )
    purge = _form(
        view.name,
        "purge",
        view.csrf,
        "",
        "<button type=submit>Purge…</button>",
    )
    return (
        "<section aria-labelledby=actions-title><h2 id=actions-title>Queue actions</h2>"
        f"<h3>Purge</h3><p>Delete every message of the queue. You confirm on the next page.</p>{purge}"
        f"{redrive}</section>"
    )


def queue_page(view: QueueView, notice: str = "", error: str = "") -> str:
    """The page of one queue."""
    fifo = view.attributes.get("FifoQueue") == "true"
    said = ""
    if notice in NOTICES:
        said = f"<p class=notice role=status>{NOTICES[notice]}</p>"
    if error:
        said += f"<p class=error role=alert>{escape(error)}</p>"
    return page(
        view.name,
        f"<header><h1>{escape(view.name)}</h1><a href=/console>All queues</a></header><main>{said}"
        + _counts(view)
        + _messages(view)
        + _send(view, fifo)
        + _attributes(view, fifo)
        + _dangerous(view)
        + "</main>",
    )


def purge_confirm_page(name: str, csrf: str) -> str:
    """The confirmation a purge asks for: type the queue's name."""
    fields = (
        f"<p>Purging deletes every message of <strong>{escape(name)}</strong>, visible, in flight "
        "and delayed. It cannot be undone.</p>"
        "<label for=confirm>Type the queue's name to confirm</label>"
        "<input id=confirm name=confirm autocomplete=off required>"
    )
    return page(
        f"Purge {name}",
        f"<main><h1>Purge {escape(name)}?</h1>"
        + _form(name, "purge", csrf, fields, "<button type=submit>Purge the queue</button>")
        + f'<p><a href="/console/queues/{quote(name)}">Keep the messages</a></p></main>',
    )
