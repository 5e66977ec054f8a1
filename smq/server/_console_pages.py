"""The console's pages: server-rendered HTML (every value escaped) and its one style sheet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from urllib.parse import quote

STYLE = """
:root { color-scheme: light dark; font-family: system-ui, sans-serif; }
body { margin: 0 auto; max-width: 72rem; padding: 1rem; }
header { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; justify-content: space-between; }
h1 { font-size: 1.4rem; margin: 0; }
table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
th, td { padding: .4rem .6rem; border-bottom: 1px solid #8884; text-align: right; }
th:first-child, td:first-child { text-align: left; overflow-wrap: anywhere; min-width: 8rem; }
form.inline { display: inline; }
label { display: block; margin-top: .8rem; }
input { font: inherit; padding: .3rem; max-width: 100%; }
button { font: inherit; padding: .3rem .8rem; margin-top: .8rem; }
.error { color: #c00; }
.muted { opacity: .7; }
svg.trend { width: 4rem; height: 1rem; border: 0; }
@media (max-width: 48rem) {
  table.queues th:nth-child(n+4), table.queues td:nth-child(n+4) { display: none; }
  table.queues th:nth-child(11), table.queues td:nth-child(11) { display: table-cell; }
}
section { margin-top: 1.5rem; }
h2 { font-size: 1.15rem; }
h3 { font-size: 1rem; }
dl.counts, dl.facts { display: grid; gap: .5rem; }
dl.counts { grid-template-columns: repeat(auto-fill, minmax(9rem, 1fr)); }
dl.facts { grid-template-columns: repeat(auto-fill, minmax(16rem, 1fr)); }
dt { font-size: .85rem; opacity: .75; }
dd { margin: 0; font-size: 1.2rem; overflow-wrap: anywhere; }
figure { margin: .5rem 0; }
svg { width: 100%; max-width: 40rem; height: 4rem; border: 1px solid #8884; }
svg polyline { fill: none; stroke: currentColor; stroke-width: 1.5; }
textarea { font: inherit; width: 100%; max-width: 40rem; }
table.messages td { text-align: left; vertical-align: top; }
td.body { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 30rem; }
nav.tabs a { margin-right: 1rem; }
nav.tabs a[aria-current] { font-weight: bold; }
.notice { color: #080; }
progress { width: 16rem; max-width: 100%; }
.table-wrap { overflow-x: auto; }
"""


# Keeps pages current while they are shown: every 2 s the queue table reads its lines, and a
# queue's page its counts (drawing 5 minutes of them) and its redrive's progress, as JSON;
# everything fetched is written as text, never as markup.
SCRIPT = """
"use strict";
(function () {
  const HISTORY = 150;
  const status = document.getElementById("live");
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };
  async function read(url) {
    const reply = await fetch(url, {credentials: "same-origin", cache: "no-store"});
    if (reply.status === 401) { window.location.assign("/console/sign-in"); return null; }
    if (!reply.ok) { throw new Error(String(reply.status)); }
    return reply.json();
  }
  function every(seconds, work) {
    async function tick() {
      if (document.hidden) { return; }
      try {
        await work();
        if (status) { status.textContent = "updated " + new Date().toLocaleTimeString(); }
      } catch (error) {
        if (status) { status.textContent = "not updated: " + error.message; }
      }
    }
    setInterval(tick, seconds * 1000);
  }

  function sparkline(values, points) {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 60 16");
    svg.setAttribute("class", "trend");
    svg.setAttribute("aria-hidden", "true");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    const top = Math.max(1, ...values);
    const step = 60 / (points - 1);
    const start = points - values.length;
    line.setAttribute("points", values.map((v, j) =>
      ((start + j) * step).toFixed(1) + "," + (15 - 14 * v / top).toFixed(1)).join(" "));
    svg.append(line);
    return svg;
  }

  const table = document.querySelector("table[data-live]");
  if (table) {
    const body = table.querySelector("tbody");
    const POINTS = 60;
    const seen = new Map();  // queue name -> {at, counters, depths}
    const blank = (value) => value === null || value === undefined ? "" : String(value);
    every(2, async () => {
      const data = await read(table.dataset.live);
      if (!data || !body) { return; }
      const now = Date.now() / 1000;
      body.replaceChildren(...data.queues.map((q) => {
        const before = seen.get(q.name);
        const depths = before ? before.depths : [];
        depths.push(q.visible + q.in_flight);
        if (depths.length > POINTS) { depths.shift(); }
        const rate = (key) => before
          ? Math.max(0, ((q.counters[key] || 0) - (before.counters[key] || 0)) / (now - before.at)).toFixed(1)
          : "";
        seen.set(q.name, {at: now, counters: q.counters, depths: depths});
        const tr = document.createElement("tr");
        tr.dataset.queue = q.name;
        const name = document.createElement("td");
        const link = document.createElement("a");
        link.href = "/console/queues/" + encodeURIComponent(q.name);
        link.textContent = q.name;
        name.append(link);
        const trend = document.createElement("td");
        trend.append(sparkline(depths, POINTS));
        tr.append(name, cell(String(q.visible)), cell(String(q.in_flight)), cell(String(q.delayed)),
          cell(q.oldest_age === null ? "" : q.oldest_age + " s"), cell(blank(q.dead_letters)),
          cell(blank(q.groups_in_flight)), cell(rate("sent")), cell(rate("received")),
          cell(rate("deleted")), trend);
        return tr;
      }));
    });
  }

  const queue = document.querySelector("[data-live-queue]");
  if (queue) {
    const history = [];
    let last = null;
    const show = (key, value) => {
      const target = queue.querySelector(`[data-count="${key}"]`);
      if (target) { target.textContent = value; }
    };
    function draw(name, series) {
      const svg = queue.querySelector(`svg[data-chart="${name}"]`);
      if (!svg) { return; }
      const top = Math.max(1, ...series.flat());
      const dashes = ["", "4 3", "1 3"];
      svg.replaceChildren(...series.map((values, i) => {
        const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
        const step = 300 / (HISTORY - 1);
        const start = HISTORY - values.length;
        line.setAttribute("points", values.map((v, j) =>
          ((start + j) * step).toFixed(1) + "," + (58 - 56 * v / top).toFixed(1)).join(" "));
        if (dashes[i]) { line.setAttribute("stroke-dasharray", dashes[i]); }
        return line;
      }));
    }
    every(2, async () => {
      const data = await read(queue.dataset.liveQueue);
      if (!data) { return; }
      const now = Date.now() / 1000;
      const counters = data.counters;
      for (const key of ["visible", "in_flight", "delayed"]) { show(key, String(data[key])); }
      show("oldest_age", data.oldest_age === null ? "" : String(data.oldest_age));
      show("visibility_expired", String(counters.visibility_expired || 0));
      show("noisy_groups", String(data.noisy_groups || 0));
      const rates = {};
      for (const key of ["sent", "received", "deleted"]) {
        const before = last ? (last.counters[key] || 0) : null;
        rates[key] = before === null ? 0 : Math.max(0, ((counters[key] || 0) - before) / (now - last.at));
        show(key + "_rate", last ? rates[key].toFixed(1) : "");
      }
      last = {at: now, counters: counters};
      history.push({visible: data.visible, in_flight: data.in_flight, rates: rates});
      if (history.length > HISTORY) { history.shift(); }
      draw("depth", [history.map((h) => h.visible), history.map((h) => h.in_flight)]);
      draw("rates", ["sent", "received", "deleted"].map((k) => history.map((h) => h.rates[k])));
      const progress = document.querySelector("progress[data-task]");
      const text = document.querySelector("[data-task-text]");
      if (progress && data.task) {
        const total = Math.max(data.task.to_move, data.task.moved, 1);
        progress.max = total;
        progress.value = data.task.moved;
        text.textContent = data.task.moved + " of " + data.task.to_move + " moved: " + data.task.status;
      }
    });
  }
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
    dead_letters: int | None = None  # its dead-letter queue's messages; None: it has none
    groups_in_flight: int | None = None  # FIFO queues only
    counters: Mapping[str, int] = field(default_factory=dict)  # sent, received, deleted: for rates


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
        f'<tr data-queue="{escape(row.name)}">'
        f'<td><a href="/console/queues/{quote(row.name)}">{escape(row.name)}</a></td>'
        f"<td>{row.visible}</td><td>{row.in_flight}</td><td>{row.delayed}</td>"
        f"<td>{'' if row.oldest_age is None else f'{row.oldest_age} s'}</td>"
        f"<td>{'' if row.dead_letters is None else row.dead_letters}</td>"
        f"<td>{'' if row.groups_in_flight is None else row.groups_in_flight}</td>"
        "<td></td><td></td><td></td><td></td></tr>"
        for row in rows
    )
    table = (
        f'<table class=queues data-live="/console/api/queues?prefix={escape(quote(prefix))}">'
        "<caption class=muted>Approximate counts, as the API reports them: "
        "<span id=live aria-live=polite></span></caption>"
        "<thead><tr><th scope=col>Queue</th><th scope=col>Visible</th><th scope=col>In flight</th>"
        "<th scope=col>Delayed</th><th scope=col>Oldest message</th><th scope=col>Dead letters</th>"
        "<th scope=col>FIFO groups in flight</th><th scope=col>Sent / s</th>"
        "<th scope=col>Received / s</th><th scope=col>Deleted / s</th>"
        "<th scope=col>Trend (2 min)</th></tr></thead>"
        f"<tbody>{lines}</tbody></table>"
        if rows
        else "<p>No queue" + (f" starting with “{escape(prefix)}”" if prefix else "") + ".</p>"
    )
    cut = "<p class=muted>Only the first queues are shown: narrow the prefix to see the others.</p>"
    return page(
        "Queues",
        f"<header><h1>Queues</h1><span class=muted>{escape(who)}</span>{sign_out}</header>"
        "<main><form method=get action=/console><label for=prefix>Name starts with</label>"
        f'<input id=prefix name=prefix value="{escape(prefix)}"> <button type=submit>Filter</button></form>'
        f"{table}{cut if more else ''}</main>",
    )
