"""The console's page of one queue: counts and charts, attributes, messages, actions (HTML)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote

from ._messages import STATES, Looked, Query, Shown, messages_table, search_form
from ._pages import page, span

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
    "created": "Queue created.",
    "exists": "The queue exists already, with these attributes: nothing was changed.",
    "one-deleted": "Message deleted.",
    "one-moved": "Message moved.",
}


@dataclass(frozen=True)
class QueueView:
    """What the queue page shows, read through the API's actions."""

    name: str
    url: str
    attributes: Mapping[str, str]
    query: Query
    looked: Looked
    dead_letter: bool  # another queue's redrive policy names it: it can be redriven
    csrf: str
    may_look: bool = True  # False: the queue's policy keeps this key from its messages
    names: Sequence[str] = ()  # the key's queues, for the forms that name one
    consumers: Sequence[Mapping[str, Any]] = field(default_factory=list)  # as consumer_json makes them

    @property
    def fifo(self) -> bool:
        return self.attributes.get("FifoQueue") == "true"

    def count(self, state: str) -> int:
        attribute = {
            "visible": "ApproximateNumberOfMessages",
            "in_flight": "ApproximateNumberOfMessagesNotVisible",
            "delayed": "ApproximateNumberOfMessagesDelayed",
        }[state]
        return int(self.attributes.get(attribute, "0") or 0)


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
        ("oldest_age", "Oldest message", ""),
        ("consumers", "Consumers", str(sum(1 for c in view.consumers if c["live"]))),
        ("sent_rate", "Sent / s", ""),
        ("received_rate", "Received / s", ""),
        ("deleted_rate", "Deleted / s", ""),
        ("visibility_expired", "Lease expiries", ""),
        ("noisy_groups", "Noisy groups", ""),
    )
    items = "".join(
        f"<div><dt>{label}</dt><dd data-count={key}>{escape(value)}</dd></div>" for key, label, value in cells
    )
    charts = "".join(
        f'<figure data-chart={kind}><svg class=chart viewBox="0 0 600 190" role=img tabindex=0 '
        f'aria-label="{label}, last hour; arrow keys step through the samples"></svg>'
        f"<p class=readout aria-live=off></p><figcaption>{legend}, last hour</figcaption></figure>"
        for kind, label, legend in (
            (
                "depth",
                "messages visible, in flight and delayed",
                "<span class='key s0'>visible</span> <span class='key s1'>in flight</span> "
                "<span class='key s2'>delayed</span>",
            ),
            (
                "rates",
                "messages sent, received and deleted per second",
                "<span class='key s0'>sent</span> <span class='key s1'>received</span> "
                "<span class='key s2'>deleted</span> per second",
            ),
        )
    )
    return (
        f'<section aria-labelledby=counts-title data-live-queue="/console/api/queue/{quote(view.name)}" '
        f'data-history="/console/api/queue/{quote(view.name)}/history">'
        "<h2 id=counts-title>Now</h2>"
        f"<dl class=counts>{items}</dl>"
        "<p class=muted>Lease expiries count visibility timeouts that ran out: many mean a timeout "
        "shorter than the work. Noisy groups are message groups whose messages wait while other "
        "groups' are visible (fair queues). <span id=live aria-live=polite></span></p>"
        f"<div class=charts>{charts}</div>"
        "<p class=muted>Charts: a sample every 10 s kept by <code>smq serve</code> for the last hour; "
        "point at a chart, or focus it and use the arrow keys, for its values.</p></section>"
    )


def _consumers(view: QueueView) -> str:
    rows = "".join(
        f'<tr data-consumer="{escape(c["id"])}"><td class=t>{escape(c["kind"])}</td>'
        f"<td class=t>{escape(c['who'])}</td><td class=t>{escape(c['detail'])}</td>"
        f"<td class=n>{escape(span(-c['age']))}</td>"
        + ("<td class=t>receiving</td></tr>" if c["live"] else "<td class='t warn'>silent</td></tr>")
        for c in view.consumers
    )
    live = any(c["live"] for c in view.consumers)
    idle = view.count("visible") > 0 and not live
    return (
        "<section aria-labelledby=consumers-title><h2 id=consumers-title>Consumers</h2>"
        f"<p class=warn role=alert data-idle{'' if idle else ' hidden'}>Backlog without consumers: "
        "messages are waiting and no worker or SQS client has received in the last minute.</p>"
        "<div class=table-wrap><table class=consumers><thead><tr><th scope=col class=t>Kind</th>"
        "<th scope=col class=t>Who</th><th scope=col class=t>Details</th>"
        "<th scope=col class=n>Last heartbeat</th><th scope=col class=t>State</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
        f"<p data-no-consumers{' hidden' if view.consumers else ''}>No consumer seen in the last hour.</p>"
        "<p class=muted><code>smq worker</code> processes say who they are every 15 s; SQS clients "
        "(SDKs, the AWS CLI) are noted by the <code>smq serve</code> that answered their receives, by "
        "access key, agent and address. A client using the Python API directly is not listed.</p>"
        "</section>"
    )


def _attributes(view: QueueView) -> str:
    fields = []
    for attribute, hint in EDITABLE + (EDITABLE_FIFO if view.fifo else ()):
        value = view.attributes.get(attribute, "")
        fields.append(
            f"<label for=attr-{attribute}>{attribute} <span class=muted>({escape(hint)})</span></label>"
            f'<input id=attr-{attribute} name="{attribute}" value="{escape(value)}">'
            f'<input type=hidden name="was-{attribute}" value="{escape(value)}">'
        )
    facts = [
        f"<div><dt>{name}</dt><dd>{escape(view.attributes[name])}</dd></div>"
        for name in ("QueueArn", "FifoQueue")
        if name in view.attributes
    ]
    for name in ("CreatedTimestamp", "LastModifiedTimestamp"):
        if view.attributes.get(name, "").isdigit():
            at = int(view.attributes[name])
            exact = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
            iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
            facts.append(
                f"<div><dt>{name}</dt><dd><time datetime={iso} "
                f'title="{exact} ({at})">{escape(span(at - time.time()))}</time></dd></div>'
            )
    return (
        "<section aria-labelledby=attributes-title><h2 id=attributes-title>Attributes</h2>"
        f"<dl class=facts>{''.join(facts)}</dl>"
        + _form(view.name, "attributes", view.csrf, "".join(fields), "<button type=submit>Save</button>")
        + "</section>"
    )


def _messages(view: QueueView) -> str:
    query = view.query
    tabs = " ".join(
        f'<a href="{escape(Query(state=state).link(view.name))}"'
        + (' aria-current="page"' if state == query.state else "")
        + f">{label} ({view.count(state):,})</a>"
        for state, label in STATES
    )
    shown = Shown(view.name, view.csrf, view.fifo, view.dead_letter, view.count(query.state))
    if not view.may_look:
        body = "<p>This access key may not receive this queue's messages, so it cannot look at them.</p>"
    else:
        body = search_form(shown, query) + messages_table(shown, query, view.looked, time.time())
    return (
        "<section aria-labelledby=messages-title><h2 id=messages-title>Messages</h2>"
        f"<nav class=tabs>{tabs}</nav><p class=muted>Looked at, not received: nothing changes.</p>"
        f"{body}</section>"
    )


def _send(view: QueueView) -> str:
    fields = (
        "<label for=send-body>Body</label><textarea id=send-body name=body rows=3 required></textarea>"
        "<label for=send-delay>Delay, seconds</label>"
        '<input id=send-delay name=delay inputmode=numeric placeholder="the queue\'s">'
    )
    if view.fifo:
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
        fields = (
            "<label for=redrive-to>Move them to <span class=muted>(empty: back to the queues they came "
            "from)</span></label>"
            "<input id=redrive-to name=destination list=queue-names autocomplete=off>"
        )
        redrive = (
            "<h3>Redrive</h3><p>Move this dead-letter queue's messages back to the queues they came from, "
            "or all of them to one queue.</p>"
            + _form(view.name, "redrive", view.csrf, fields, "<div><button>Redrive</button></div>")
            + '<p><progress data-task max=1 value=0 aria-label="redrive progress"></progress> '
            "<span data-task-text class=muted></span></p>"
        )
    purge = _form(view.name, "purge", view.csrf, "", "<button type=submit>Purge…</button>")
    delete = _form(view.name, "delete", view.csrf, "", "<button type=submit>Delete queue…</button>")
    return (
        "<section aria-labelledby=actions-title><h2 id=actions-title>Queue actions</h2>"
        f"{redrive}<h3>Purge</h3><p>Delete every message of the queue. You confirm on the next page.</p>"
        f"{purge}<h3>Delete</h3><p>Delete the queue and every message in it. You confirm on the next "
        f"page.</p>{delete}</section>"
    )


def queue_page(view: QueueView, notice: str = "", error: str = "") -> str:
    """The page of one queue."""
    said = ""
    if notice in NOTICES:
        said = f"<p class=notice role=status>{NOTICES[notice]}</p>"
    if error:
        said += f"<p class=error role=alert>{escape(error)}</p>"
    kind = "FIFO queue" if view.fifo else "Standard queue"
    if view.dead_letter:
        kind += " <span class=badge>DLQ</span>"
    names = "".join(f'<option value="{escape(name)}"></option>' for name in view.names)
    return page(
        view.name,
        f"<header><h1>{escape(view.name)}</h1><span class=muted>{kind}</span>"
        f"<a href=/console>All queues</a></header><main>{said}"
        + _counts(view)
        + _consumers(view)
        + _messages(view)
        + _send(view)
        + _attributes(view)
        + _dangerous(view)
        + f"<datalist id=queue-names>{names}</datalist></main>",
    )


def confirm_page(name: str, csrf: str, action: str, typed: str | None = None) -> str:
    """The confirmation a purge or a delete asks for: type the queue's name (``typed``: what was
    typed instead, said back)."""
    what = {
        "purge": (
            f"Purge {name}?",
            "Purging deletes every message of <strong>{}</strong>, visible, in flight and delayed.",
            "Purge the queue",
            "Keep the messages",
        ),
        "delete": (
            f"Delete {name}?",
            "Deleting removes the queue <strong>{}</strong> and every message in it; for 60 seconds no "
            "queue of this name can be created.",
            "Delete the queue",
            "Keep the queue",
        ),
    }[action]
    title, warning, button, keep = what
    fields = (
        f"<p>{warning.format(escape(name))} It cannot be undone.</p>"
        "<label for=confirm>Type the queue's name to confirm</label>"
        "<input id=confirm name=confirm autocomplete=off required>"
    )
    return page(
        title,
        f"<main><h1>{escape(title)}</h1>"
        + (
            f"<p class=error role=alert>“{escape(typed)}” is not the queue's name: nothing was done.</p>"
            if typed is not None
            else ""
        )
        + _form(name, action, csrf, fields, f"<button type=submit>{button}</button>")
        + f'<p><a href="/console/queues/{quote(name)}">{keep}</a></p></main>',
    )
