"""The console's message browser: pages of one state, and searches, in bounded work per request.

Messages are looked at with the core's peek (read-only: no receive count, counter or
visibility changes). A page is one peek of ``PAGE`` messages at any offset (reaching an
offset is cheap in Redis, see ``smq.operations._peek``). A search reads at most ``SEARCH_REACH``
messages from where it starts, in peeks of 100, and says which stretch it looked at, with a
link to look further: it never scans a whole queue in one request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote, urlencode

from ...operations._peek import MAX_PEEK, MAX_PEEK_OFFSET, PeekedMessage
from ._pages import when

PAGE = 50  # messages a page shows
SEARCH_REACH = 1000  # messages one search request looks at, at most
FOUND_SHOWN = 50  # matches one search request shows, at most
BODY_SHOWN = 300  # characters of a body in the table
STATES = (("visible", "Visible"), ("in_flight", "In flight"), ("delayed", "Delayed"))
FIELDS = (("body", "body contains"), ("id", "message id contains"), ("attribute", "attribute"))


@dataclass(frozen=True)
class Query:
    """What the browser is asked for: a state, where to start, and an optional search."""

    state: str = "visible"
    offset: int = 0
    text: str = ""  # what to search for; empty: a plain page
    field: str = "body"  # body, id or attribute

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Query:
        """The query of a page's URL; anything unreadable falls back to its default."""
        state = query.get("state", "visible")
        field = query.get("in", "body")
        try:
            if query.get("from", "").strip():  # the form's message number, counted from 1
                offset = int(query["from"]) - 1
            else:
                offset = int(query.get("offset", "0"))
        except ValueError:
            offset = 0
        offset = min(max(offset, 0), MAX_PEEK_OFFSET)
        return cls(
            state=state if state in dict(STATES) else "visible",
            offset=offset,
            text=query.get("q", "")[:200],
            field=field if field in dict(FIELDS) else "body",
        )

    def link(self, name: str, **changes: object) -> str:
        """The URL of the queue page ``name`` with this query, changed by ``changes``."""
        values = {"state": self.state, "offset": self.offset, "q": self.text, "in": self.field}
        values.update({"in" if key == "field" else key: value for key, value in changes.items()})
        kept = {key: value for key, value in values.items() if value not in ("", 0, "body")}
        kept.setdefault("state", values["state"])
        return f"/console/queues/{quote(name)}?{urlencode(kept)}"


@dataclass(frozen=True)
class Listed:
    """A message as the browser shows it, with where it was seen (a position in its state)."""

    position: int
    message: PeekedMessage


@dataclass(frozen=True)
class Looked:
    """What one request looked at: the messages shown and the stretch of the state read."""

    messages: Sequence[Listed]
    start: int  # the first position read
    end: int  # one past the last position read
    exhausted: bool  # the state has no messages past ``end`` (as far as this request saw)


Peek = Callable[[str, int, int], Sequence[PeekedMessage]]


def look(peek: Peek, query: Query) -> Looked:
    """A page (no search text) or a search's stretch, through ``peek(state, limit, offset)``."""
    if not query.text:
        page = peek(query.state, PAGE, query.offset)
        listed = [Listed(query.offset + i, message) for i, message in enumerate(page)]
        return Looked(listed, query.offset, query.offset + len(page), len(page) < PAGE)
    wanted = matcher(query)
    found: list[Listed] = []
    at = query.offset
    while at < query.offset + SEARCH_REACH and len(found) < FOUND_SHOWN:
        page = peek(query.state, MAX_PEEK, at)
        for i, message in enumerate(page):
            if wanted(message):
                found.append(Listed(at + i, message))
                if len(found) == FOUND_SHOWN:
                    return Looked(found, query.offset, at + i + 1, False)
        at += MAX_PEEK
        if len(page) < MAX_PEEK:
            # A short page: the end of the state (a ghost or two may hide a little more).
            return Looked(found, query.offset, at - MAX_PEEK + len(page), True)
    return Looked(found, query.offset, at, False)


def matcher(query: Query) -> Callable[[PeekedMessage], bool]:
    """Whether a message matches the search: a substring of its body or id (case-insensitive),
    or an attribute named ``name``, or ``name=value`` with that value."""
    text = query.text.strip()
    if query.field == "id":
        needle = text.lower()
        return lambda message: needle in message.message_id.lower()
    if query.field == "attribute":
        name, has_value, value = text.partition("=")
        name = name.strip()

        def attribute(message: PeekedMessage) -> bool:
            found = message.attributes.get(name)
            if found is None:
                return False
            return not has_value or str(found.value) == value.strip()

        return attribute
    needle = text.lower()
    return lambda message: needle in message.body.lower()


# -- HTML ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """How the table shows messages of one queue."""

    name: str
    csrf: str
    fifo: bool
    dead_letter: bool  # rows get per-message actions (visible messages of a standard DLQ)
    total: int  # approximately how many messages the state holds


def _form(name: str, action: str, csrf: str, fields: str, buttons: str) -> str:
    return (
        f'<form class=inline method=post action="/console/queues/{quote(name)}/{action}">'
        f'<input type=hidden name=csrf value="{escape(csrf)}">{fields}{buttons}</form>'
    )


def _actions(shown: Shown, query: Query, listed: Listed) -> str:
    message = listed.message
    if message.receipt_handle is not None:
        fields = f'<input type=hidden name=receipt value="{escape(message.receipt_handle)}">'
        buttons = (
            "<button name=op value=release>Release</button> <button name=op value=delete>Delete</button>"
        )
        return _form(shown.name, "message", shown.csrf, fields, buttons)
    if query.state != "visible" or not shown.dead_letter or shown.fifo:
        return ""
    fields = (
        f'<input type=hidden name=id value="{escape(message.message_id)}">'
        f"<input type=hidden name=near value={listed.position}>"
        f'<input type=hidden name=back value="{escape(query.link(shown.name))}">'
    )
    redrive = (
        f'<button name=op value=redrive title="back to {escape(message.origin)}">Redrive</button> '
        if message.origin
        else ""
    )
    move = (
        f'<label class=muted for="move-{listed.position}">to queue</label>'
        f'<input id="move-{listed.position}" name=destination list=queue-names size=14 autocomplete=off> '
        "<button name=op value=move>Move</button>"
    )
    return _form(
        shown.name, "one", shown.csrf, fields, f"<button name=op value=delete>Delete</button> {redrive}{move}"
    )


def _row(shown: Shown, query: Query, listed: Listed, now: float) -> str:
    message = listed.message
    body = message.body if len(message.body) <= BODY_SHOWN else message.body[:BODY_SHOWN] + "…"
    attributes = ", ".join(f"{name}={value.value!r}" for name, value in message.attributes.items())
    fifo = (
        f"<td class=t>{escape(message.message_group_id or '')}</td>"
        f"<td class=t><code>{escape(message.sequence_number or '')}</code></td>"
        f"<td class=t>{escape(message.deduplication_id or '')}</td>"
        if shown.fifo
        else ""
    )
    state = ""
    if query.state == "in_flight":
        receipt = message.receipt_handle or ""
        state = (
            f'<td class=t><code title="{escape(receipt)}">…{escape(receipt[-10:])}</code></td>'
            f"<td class=t>{when(message.visible_at, now)}</td>"
        )
    elif query.state == "delayed":
        state = f"<td class=t>{when(message.visible_at, now)}</td>"
    elif shown.dead_letter:
        state = f"<td class=t>{escape(message.origin or '')}</td>"
    actions = _actions(shown, query, listed)
    return (
        f'<tr data-message="{escape(message.message_id)}"><td class=n>{listed.position + 1:,}</td>'
        f"<td class=t><code>{escape(message.message_id)}</code></td>"
        f"<td class=t>{when(message.sent_at, now)}</td><td class=n>{message.receive_count}</td>{fifo}"
        f"<td class='t body'>{escape(body)}</td><td class=t>{escape(attributes)}</td>{state}"
        + (f"<td class=t>{actions}</td>" if actions or query.state == "in_flight" else "")
        + "</tr>"
    )


def _head(shown: Shown, query: Query, with_actions: bool) -> str:
    columns = [("#", "n"), ("Message id", "t"), ("Sent", "t"), ("Receives", "n")]
    if shown.fifo:
        columns += [("Group", "t"), ("Sequence number", "t"), ("Deduplication id", "t")]
    columns += [("Body", "t"), ("Attributes", "t")]
    if query.state == "in_flight":
        columns += [("Held by", "t"), ("Visible again", "t")]
    elif query.state == "delayed":
        columns += [("Due", "t")]
    elif shown.dead_letter:
        columns += [("Came from", "t")]
    if with_actions:
        columns += [("Actions", "t")]
    return "".join(f"<th scope=col class={kind}>{label}</th>" for label, kind in columns)


def _pages(shown: Shown, query: Query, looked: Looked) -> str:
    links = []
    if query.offset > 0:
        links.append(f'<a href="{escape(query.link(shown.name, offset=0))}">First</a>')
        back = max(0, query.offset - (SEARCH_REACH if query.text else PAGE))
        links.append(f'<a rel=prev href="{escape(query.link(shown.name, offset=back))}">Previous</a>')
    if not looked.exhausted and (query.text or shown.total > looked.end):
        label = "Look further" if query.text else "Next"
        links.append(f'<a rel=next href="{escape(query.link(shown.name, offset=looked.end))}">{label}</a>')
        if not query.text and shown.total > looked.end:
            last = max(0, shown.total - PAGE)
            links.append(f'<a href="{escape(query.link(shown.name, offset=last))}">Last</a>')
    return f"<nav class=pages aria-label='message pages'>{' '.join(links)}</nav>"


def _summary(shown: Shown, query: Query, looked: Looked) -> str:
    state = dict(STATES)[query.state].lower()
    if query.text:
        what = dict(FIELDS)[query.field]
        return (
            f"<p role=status data-searched>Searched {state} messages {looked.start + 1:,} to "
            f"{max(looked.end, looked.start):,} of about {shown.total:,} for {escape(what)} "
            f"“{escape(query.text)}”: {len(looked.messages)} found"
            + (
                " (the end of the messages)."
                if looked.exhausted
                else ". One search looks at "
                f"{SEARCH_REACH:,} messages at most: look further for the next ones."
            )
            + "</p>"
        )
    if not looked.messages:
        return ""
    expired = (
        " A message whose timeout has run out stays listed here, as stored, until a receive takes it "
        "back: it counts as visible already."
        if query.state == "in_flight"
        else ""
    )
    return (
        f"<p class=muted>Messages {looked.start + 1:,} to {looked.end:,} of about {shown.total:,} "
        f"{state}, in the order {'receives take them' if query.state == 'visible' else 'they fall due'}."
        f"{expired}</p>"
    )


def search_form(shown: Shown, query: Query) -> str:
    """The search form over one state."""
    fields = "".join(
        f"<option value={field}{' selected' if field == query.field else ''}>{label}</option>"
        for field, label in FIELDS
    )
    return (
        f'<form class=search method=get action="/console/queues/{quote(shown.name)}" role=search>'
        f'<input type=hidden name=state value="{query.state}">'
        f"<div><label for=search-in>Search</label><select id=search-in name=in>{fields}</select></div>"
        f"<div><label for=search-q>for <span class=muted>(attribute: name or name=value)</span></label>"
        f'<input id=search-q name=q value="{escape(query.text)}" size=24></div>'
        "<div><label for=go-to>from message number</label>"
        f'<input id=go-to name=from type=number min=1 value="{query.offset + 1}"></div>'
        "<button type=submit>Look</button></form>"
    )


def messages_table(shown: Shown, query: Query, looked: Looked, now: float) -> str:
    """The table of the messages looked at, with its summary and page links."""
    with_actions = query.state == "in_flight" or (
        query.state == "visible" and shown.dead_letter and not shown.fifo
    )
    if looked.messages:
        rows = "".join(_row(shown, query, listed, now) for listed in looked.messages)
        table = (
            "<div class=table-wrap><table class=messages><thead><tr>"
            f"{_head(shown, query, with_actions)}</tr></thead><tbody>{rows}</tbody></table></div>"
        )
    else:
        table = "" if query.text else "<p>None.</p>"
    return _summary(shown, query, looked) + table + _pages(shown, query, looked)
