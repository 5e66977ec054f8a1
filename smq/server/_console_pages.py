"""The console's pages: server-rendered HTML (every value escaped) and its one style sheet."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

STYLE = """
:root { color-scheme: light dark; font-family: system-ui, sans-serif; }
body { margin: 0 auto; max-width: 72rem; padding: 1rem; }
header { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; justify-content: space-between; }
h1 { font-size: 1.4rem; margin: 0; }
table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
th, td { padding: .4rem .6rem; border-bottom: 1px solid #8884; text-align: right; }
th:first-child, td:first-child { text-align: left; overflow-wrap: anywhere; }
form.inline { display: inline; }
label { display: block; margin-top: .8rem; }
input { font: inherit; padding: .3rem; max-width: 100%; }
button { font: inherit; padding: .3rem .8rem; margin-top: .8rem; }
.error { color: #c00; }
.muted { opacity: .7; }
@media (max-width: 40rem) { th:nth-child(4), td:nth-child(4) { display: none; } }
"""


# Keeps the queue table current: every 2 s (while the page is shown) it reads the table's lines
# as JSON and writes them in, as text (never as markup).
SCRIPT = """
"use strict";
(function () {
  const table = document.querySelector("table[data-live]");
  if (!table) { return; }
  const body = table.querySelector("tbody");
  const status = document.getElementById("live");
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };
  async function refresh() {
    if (document.hidden) { return; }
    try {
      const reply = await fetch(table.dataset.live, {credentials: "same-origin", cache: "no-store"});
      if (reply.status === 401) { window.location.assign("/console/sign-in"); return; }
      if (!reply.ok) { throw new Error(String(reply.status)); }
      const data = await reply.json();
      const rows = data.queues.map((q) => {
        const tr = document.createElement("tr");
        tr.dataset.queue = q.name;
        tr.append(cell(q.name), cell(String(q.visible)), cell(String(q.in_flight)),
          cell(String(q.delayed)), cell(q.oldest_age === null ? "" : q.oldest_age + " s"));
        return tr;
      });
      body.replaceChildren(...rows);
      status.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (error) {
      status.textContent = "not updated: " + error.message;
    }
  }
  setInterval(refresh, 2000);
})();
"""


@dataclass(frozen=True)
class QueueRow:
    """One line of the queue table."""

    name: str
    visible: int
    in_flight: int
    delayed: int
    oldest_age: int | None


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · smq</title>"
        '<link rel=stylesheet href="/console/style.css">'
        "<script src=/console/console.js defer></script></head>"
        f"<body>{body}</body></html>\n"
    )


def sign_in_page(error: str = "") -> str:
    """The sign-in form: an access key id and its secret."""
    shown = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return _page(
        "Sign in",
        "<main><h1>smq console</h1><p>Sign in with one of the server's access keys.</p>"
        f"{shown}<form method=post action=/console/sign-in>"
        "<label for=key_id>Access key id</label><input id=key_id name=key_id autocomplete=username required>"
        "<label for=secret>Secret access key</label>"
        "<input id=secret name=secret type=password autocomplete=current-password required>"
        "<div><button type=submit>Sign in</button></div></form></main>",
    )


def queues_page(
    rows: Sequence[QueueRow], prefix: str, who: str, csrf: str, more: bool, signs_out: bool
) -> str:
    """The table of queues whose names start with ``prefix``."""
    sign_out = (
        "<form class=inline method=post action=/console/sign-out>"
        f'<input type=hidden name=csrf value="{escape(csrf)}"><button type=submit>Sign out</button></form>'
        if signs_out
        else ""
    )
    lines = "".join(
        f'<tr data-queue="{escape(row.name)}"><td>{escape(row.name)}</td>'
        f"<td>{row.visible}</td><td>{row.in_flight}</td><td>{row.delayed}</td>"
        f"<td>{'' if row.oldest_age is None else f'{row.oldest_age} s'}</td></tr>"
        for row in rows
    )
    table = (
        f'<table data-live="/console/api/queues?prefix={escape(quote(prefix))}">'
        "<caption class=muted>Approximate counts, as the API reports them: "
        "<span id=live aria-live=polite></span></caption>"
        "<thead><tr><th scope=col>Queue</th><th scope=col>Visible</th><th scope=col>In flight</th>"
        "<th scope=col>Delayed</th><th scope=col>Oldest message</th></tr></thead>"
        f"<tbody>{lines}</tbody></table>"
        if rows
        else "<p>No queue" + (f" starting with “{escape(prefix)}”" if prefix else "") + ".</p>"
    )
    cut = "<p class=muted>Only the first queues are shown: narrow the prefix to see the others.</p>"
    return _page(
        "Queues",
        f"<header><h1>Queues</h1><span class=muted>{escape(who)}</span>{sign_out}</header>"
        "<main><form method=get action=/console><label for=prefix>Name starts with</label>"
        f'<input id=prefix name=prefix value="{escape(prefix)}"> <button type=submit>Filter</button></form>'
        f"{table}{cut if more else ''}</main>",
    )
