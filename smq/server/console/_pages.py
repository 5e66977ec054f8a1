"""The console's pages: server-rendered HTML (every value escaped), and its style sheet and script."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from importlib.resources import files
from urllib.parse import quote


@functools.cache
def asset(name: str) -> str:
    """The console's style sheet or script (``console.css``, ``console.js``), read at first use."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class QueueRow:
    """One line of the queue table."""

    name: str
    fifo: bool
    visible: int
    in_flight: int
    delayed: int
    oldest_age: int | None
    dead_letters: int | None = None  # its dead-letter queue's messages; None: it has none
    groups_in_flight: int | None = None  # FIFO queues only
    counters: Mapping[str, int] = field(default_factory=dict)  # sent, received, deleted: for rates


@dataclass(frozen=True)
class RowDetails:
    """What the table reads of a queue less often than its counts (every 10 s)."""

    dead_letter: bool  # another queue's redrive policy names it
    consumers: int | None  # consumers seen in the last minute; None: not readable
    trend: Sequence[tuple[float, int]]  # (time, visible + in flight), a point a minute, the last hour
    now: float  # the time the trend ends at (Redis's clock)
    rates: Mapping[str, float] | None  # sent, received, deleted per second, from the history


def page(title: str, body: str) -> str:
    """A whole console page around ``body``."""
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · smq</title>"
        '<link rel=stylesheet href="/console/style.css">'
        "<script src=/console/console.js defer></script></head>"
        f"<body>{body}</body></html>\n"
    )


def when(at: float | None, now: float | None = None) -> str:
    """A time as people read it ("3 min ago", "in 20 s"), the exact one on hover."""
    if at is None:
        return ""
    now = time.time() if now is None else now
    exact = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d} UTC"
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
    return f'<time datetime="{iso}" title="{exact}">{span(at - now)}</time>'


def span(seconds: float) -> str:
    """``seconds`` from now in words: "3 min ago", "in 20 s"."""
    size = abs(seconds)
    if size < 120:
        text = f"{round(size)} s"
    elif size < 7200:
        text = f"{round(size / 60)} min"
    elif size < 172_800:
        text = f"{round(size / 3600)} h"
    else:
        text = f"{round(size / 86_400)} d"
    return f"in {text}" if seconds > 0.5 else f"{text} ago"


def duration(seconds: float | None) -> str:
    """An age as people read it: "45 s", "12 min"."""
    return "" if seconds is None else span(-seconds).removesuffix(" ago")


def sign_in_page(error: str = "") -> str:
    """The sign-in form: an access key id and its secret."""
    shown = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return page(
        "Sign in",
        "<main><h1>smq console</h1><p>Sign in with one of the server's access keys.</p>"
        f"{shown}<form method=post action=/console/sign-in>"
        "<label for=key_id>Access key id</label><input id=key_id name=key_id autocomplete=username required>"
        "<label for=secret>Secret access key</label>"
        "<input id=secret name=secret type=password autocomplete=current-password required>"
        "<div><button type=submit>Sign in</button></div></form></main>",
    )


_COLUMNS = (
    ("Queue", "t"),
    ("Type", "t"),
    ("Visible", "n"),
    ("In flight", "n"),
    ("Delayed", "n wide"),
    ("Oldest", "n wide"),
    ("Dead letters", "n wide"),
    ("Groups busy", "n wide"),
    ("Consumers", "n"),
    ("Sent/s", "n wide"),
    ("Received/s", "n wide"),
    ("Deleted/s", "n wide"),
    ("Last hour", "t wide"),
)
TABLE_NOTICES = {"deleted": "Queue deleted."}


def _row(row: QueueRow, details: RowDetails | None) -> str:
    badge = " <span class=badge>DLQ</span>" if details and details.dead_letter else ""
    consumers = "" if details is None or details.consumers is None else str(details.consumers)
    # A dead-letter queue normally has no consumer: not a backlog to flag.
    idle = details is not None and details.consumers == 0 and row.visible > 0 and not details.dead_letter
    cells = (
        f'<td class=n>{row.visible}</td><td class=n>{row.in_flight}</td><td class="n wide">{row.delayed}</td>'
        f'<td class="n wide">{duration(row.oldest_age)}</td>'
        f'<td class="n wide">{"" if row.dead_letters is None else row.dead_letters}</td>'
        f'<td class="n wide">{"" if row.groups_in_flight is None else row.groups_in_flight}</td>'
        + ('<td class="n warn">none</td>' if idle else f"<td class=n>{consumers}</td>")
        + '<td class="n wide"></td>' * 3
        + '<td class="t wide"></td>'
    )
    return (
        f'<tr data-queue="{escape(row.name)}"{" class=alert" if idle else ""}>'
        f'<td><a href="/console/queues/{quote(row.name)}">{escape(row.name)}</a></td>'
        f"<td class=t>{'FIFO' if row.fifo else 'Standard'}{badge}</td>{cells}</tr>"
    )


def queues_page(
    rows: Sequence[QueueRow],
    details: Mapping[str, RowDetails],
    prefix: str,
    who: str,
    csrf: str,
    *,
    after: str,
    next_page: str | None,
    signs_out: bool,
    notice: str = "",
) -> str:
    """The table of queues whose names start with ``prefix``, a page at a time."""
    sign_out = (
        "<form class=inline method=post action=/console/sign-out>"
        f'<input type=hidden name=csrf value="{escape(csrf)}"><button type=submit>Sign out</button></form>'
        if signs_out
        else ""
    )
    lines = "".join(_row(row, details.get(row.name)) for row in rows)
    head = "".join(f'<th scope=col class="{kind}">{label}</th>' for label, kind in _COLUMNS)
    live = f"/console/api/queues?prefix={quote(prefix)}&after={quote(after)}"
    table = (
        f'<div class=table-wrap><table class=queues data-live="{escape(live)}">'
        "<caption class=muted>Approximate counts, as the API reports them; consumers seen in the "
        "last minute. <span id=live aria-live=polite></span></caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table></div>"
        if rows
        else "<p>No queue" + (f" starting with “{escape(prefix)}”" if prefix else "") + ".</p>"
    )
    pages = []
    if after:
        pages.append(f'<a href="/console?prefix={escape(quote(prefix))}">First page</a>')
    if next_page:
        link = f"/console?prefix={quote(prefix)}&after={quote(next_page)}"
        pages.append(f'<a rel=next href="{escape(link)}">Next page</a>')
    said = f"<p class=notice role=status>{TABLE_NOTICES[notice]}</p>" if notice in TABLE_NOTICES else ""
    return page(
        "Queues",
        f"<header><h1>Queues</h1><span class=muted>{escape(who)}</span>{sign_out}</header>"
        f"<main>{said}<p><a href=/console/create>Create queue</a></p>"
        "<form method=get action=/console><label for=prefix>Name starts with</label>"
        f'<input id=prefix name=prefix value="{escape(prefix)}"> <button type=submit>Filter</button></form>'
        f"{table}<nav class=pages aria-label=pages>{' '.join(pages)}</nav></main>",
    )
