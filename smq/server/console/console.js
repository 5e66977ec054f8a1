"use strict";
// Keeps the console's pages current while they are shown. Every 2 s the queue table reads its
// lines and a queue's page its counts; every 10 s they read the history smq serve keeps (one
// sample per 10 s, the last hour) and draw it. Everything fetched is written as text or as SVG
// attributes, never as markup.
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const HOUR = 3600;
  const status = document.getElementById("live");

  async function read(url) {
    const reply = await fetch(url, {credentials: "same-origin", cache: "no-store"});
    if (reply.status === 401) { window.location.assign("/console/sign-in"); return null; }
    if (!reply.ok) { throw new Error(String(reply.status)); }
    return reply.json();
  }

  // Runs work now and every `seconds` while the page is shown; `tick` counts the calls.
  function every(seconds, work) {
    let tick = 0;
    async function run() {
      if (document.hidden) { return; }
      try {
        await work(tick++);
        if (status) { status.textContent = "updated " + new Date().toLocaleTimeString(); }
      } catch (error) {
        if (status) { status.textContent = "not updated: " + error.message; }
      }
    }
    run();
    setInterval(run, seconds * 1000);
  }

  function svg(name, attributes, text) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes || {})) { node.setAttribute(key, String(value)); }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function cell(text, kind) {
    const td = document.createElement("td");
    td.textContent = text;
    if (kind) { td.className = kind; }
    return td;
  }

  // 1234 -> "1.2k", 0.25 -> "0.25": short labels for axes and cells.
  function short(value) {
    const size = Math.abs(value);
    if (size >= 1e9) { return (value / 1e9).toFixed(1).replace(/\.0$/, "") + "G"; }
    if (size >= 1e6) { return (value / 1e6).toFixed(1).replace(/\.0$/, "") + "M"; }
    if (size >= 1e4) { return (value / 1e3).toFixed(0) + "k"; }
    if (size >= 1e3) { return (value / 1e3).toFixed(1).replace(/\.0$/, "") + "k"; }
    if (size > 0 && size < 10 && value % 1 !== 0) { return value.toFixed(size < 1 ? 2 : 1); }
    return String(Math.round(value));
  }

  function age(seconds) {
    if (seconds === null || seconds === undefined) { return ""; }
    if (seconds < 120) { return Math.round(seconds) + " s"; }
    if (seconds < 7200) { return Math.round(seconds / 60) + " min"; }
    if (seconds < 172800) { return Math.round(seconds / 3600) + " h"; }
    return Math.round(seconds / 86400) + " d";
  }

  const clock = (at, seconds) => new Date(at * 1000).toLocaleTimeString([],
    seconds ? {hour: "2-digit", minute: "2-digit", second: "2-digit"} : {hour: "2-digit", minute: "2-digit"});

  // The smallest of 1, 2, 2.5 or 5 times a power of ten at or above `value` (no 2.5 for
  // counts: their axis shows whole numbers).
  function roundUp(value, whole) {
    if (!(value > 0)) { return 1; }
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const m of whole ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10]) {
      if (m * power >= value * 0.9999) { return m * power; }
    }
    return 10 * power;
  }

  // Series of a history: depths as they are, counters as rates between two samples.
  function seriesOf(history, names, rates) {
    const fields = history.fields;
    const samples = history.samples;
    const index = names.map((name) => fields.indexOf(name));
    const out = names.map(() => []);
    for (let i = rates ? 1 : 0; i < samples.length; i++) {
      const at = samples[i][0];
      if (rates) {
        const apart = at - samples[i - 1][0];
        if (apart <= 0 || apart > history.step * 2.5) { continue; }  // a gap: no rate across it
        index.forEach((k, s) => out[s].push([at, Math.max(0, samples[i][k] - samples[i - 1][k]) / apart]));
      } else {
        index.forEach((k, s) => out[s].push([at, samples[i][k]]));
      }
    }
    return out;
  }

  // Draws one chart of the last hour: a time axis, a value axis with its unit, a line per
  // series (broken where samples are missing), and the values under the pointer.
  function drawChart(figure, history, series, labels, unit, whole) {
    const W = 600, H = 190, L = 50, R = 10, T = 24, B = 24;
    const plot = figure.querySelector("svg.chart");
    const readout = figure.querySelector(".readout");
    const end = history.now;
    const start = end - HOUR;
    const shown = series.map((points) => points.filter((p) => p[0] >= start - history.step));
    let top = roundUp(Math.max(0, ...shown.flat().map((p) => p[1])), whole);
    if (whole && top % 2) { top += 1; }  // counts: whole numbers on the middle line too
    const x = (at) => L + (at - start) / HOUR * (W - L - R);
    const y = (value) => T + (1 - value / top) * (H - T - B);
    const parts = [svg("text", {x: 4, y: 11}, unit)];
    for (const value of [0, top / 2, top]) {
      parts.push(svg("line", {class: "grid", x1: L, x2: W - R, y1: y(value), y2: y(value)}));
      parts.push(svg("text", {x: L - 6, y: y(value) + 4, "text-anchor": "end"}, short(value)));
    }
    for (let at = Math.ceil(start / 900) * 900; at <= end; at += 900) {
      parts.push(svg("line", {class: "grid", x1: x(at), x2: x(at), y1: H - B, y2: H - B + 4}));
      parts.push(svg("text", {x: x(at), y: H - 6, "text-anchor": "middle"}, clock(at)));
    }
    shown.forEach((points, s) => {
      let run = [];
      const flush = () => {
        if (run.length) {
          parts.push(svg("polyline", {class: "s" + s, points: run.join(" ")}));
        }
        run = [];
      };
      points.forEach((p, i) => {
        if (i > 0 && p[0] - points[i - 1][0] > history.step * 2.5) { flush(); }
        run.push(x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1));
      });
      if (run.length === 1) { run.push((parseFloat(run[0]) + 1).toFixed(1) + "," + run[0].split(",")[1]); }
      flush();
    });
    const cursor = svg("line", {class: "cursor", x1: -10, x2: -10, y1: T, y2: H - B});
    const hover = svg("rect", {class: "hover", x: L, y: T, width: W - L - R, height: H - T - B});
    parts.push(cursor, hover);
    plot.replaceChildren(...parts);

    const times = shown[0].map((p) => p[0]);
    function say(i) {
      if (i < 0) {
        readout.textContent = "No samples yet: smq serve keeps one every " + history.step + " s.";
        return;
      }
      const values = shown.map((points, s) => labels[s] + " " + short(points[i] ? points[i][1] : 0));
      readout.textContent = clock(times[i], true) + ": " + values.join(", ") + " " + unit;
    }
    say(times.length - 1);
    let pointed = times.length - 1;
    // The sample looked at (by pointer or keys) is kept by its time across redraws.
    function point(i) {
      pointed = Math.max(0, Math.min(times.length - 1, i));
      cursor.setAttribute("x1", x(times[pointed]));
      cursor.setAttribute("x2", x(times[pointed]));
      figure.dataset.pointedAt = String(times[pointed]);
      say(pointed);
    }
    function leave() {
      cursor.setAttribute("x1", -10);
      cursor.setAttribute("x2", -10);
      delete figure.dataset.pointedAt;
      say(times.length - 1);
    }
    const kept = Number(figure.dataset.pointedAt);
    if (kept && times.length) {
      let best = 0;
      times.forEach((t, i) => { if (Math.abs(t - kept) < Math.abs(times[best] - kept)) { best = i; } });
      point(best);
    }
    hover.addEventListener("pointermove", (event) => {
      if (!times.length) { return; }
      const box = plot.getBoundingClientRect();
      const at = start + ((event.clientX - box.left) * W / box.width - L) / (W - L - R) * HOUR;
      let best = 0;
      times.forEach((t, i) => { if (Math.abs(t - at) < Math.abs(times[best] - at)) { best = i; } });
      point(best);
    });
    hover.addEventListener("pointerleave", leave);
    // The keyboard reads the chart too: arrows step through the samples, Home and End jump.
    plot.onkeydown = (event) => {
      const moves = {ArrowLeft: -1, ArrowRight: 1, PageUp: -30, PageDown: 30};
      if (!times.length) { return; }
      if (event.key in moves) { point(pointed + moves[event.key]); } else if (event.key === "Home") {
        point(0);
      } else if (event.key === "End") { point(times.length - 1); } else { return; }
      event.preventDefault();
    };
    plot.onblur = () => { if (!plot.matches(":hover")) { leave(); } };
  }

  // The last hour of (time, depth) points, each at its time: a queue sampled for ten minutes
  // draws in the last sixth of the width. Its peak is in the tooltip.
  function sparkline(points, now) {
    const line = svg("svg", {viewBox: "0 0 60 16", class: "trend", role: "img"});
    if (!points.length) { return line; }
    const top = Math.max(1, ...points.map((p) => p[1]));
    const x = (at) => Math.max(0, 60 - (now - at) / HOUR * 60);
    const drawn = points.map((p) => x(p[0]).toFixed(1) + "," + (15 - 14 * p[1] / top).toFixed(1));
    if (drawn.length === 1) { drawn.push("60," + drawn[0].split(",")[1]); }
    line.append(svg("title", {}, "last hour: at most " + short(top) + " visible and in flight"));
    line.append(svg("polyline", {points: drawn.join(" ")}));
    return line;
  }

  // -- the queue table -------------------------------------------------------------------------
  const table = document.querySelector("table[data-live]");
  if (table) {
    const body = table.querySelector("tbody");
    const seen = new Map();  // queue name -> {at, counters, trend, consumers, rates}
    const blank = (value) => value === null || value === undefined ? "" : String(value);
    every(2, async (tick) => {
      const details = tick % 5 === 0;
      const data = await read(table.dataset.live + (details ? "&details=1" : ""));
      if (!data || !body) { return; }
      const now = Date.now() / 1000;
      const rows = data.queues.map((q) => {
        const before = seen.get(q.name) || {};
        const kept = {
          at: now, counters: q.counters,
          trend: q.trend || before.trend || [],
          now: q.now || before.now || Date.now() / 1000,
          consumers: q.consumers === undefined ? before.consumers : q.consumers,
          dead_letter: q.dead_letter === undefined ? before.dead_letter : q.dead_letter,
        };
        // Rates from two readings of this page; until it has two, from the server's history.
        const rate = (key) => {
          if (before.counters) {
            return Math.max(0, ((q.counters[key] || 0) - (before.counters[key] || 0)) / (now - before.at));
          }
          return q.rates ? q.rates[key] : null;
        };
        seen.set(q.name, kept);
        const tr = document.createElement("tr");
        tr.dataset.queue = q.name;
        const name = document.createElement("td");
        const link = document.createElement("a");
        link.href = "/console/queues/" + encodeURIComponent(q.name);
        link.textContent = q.name;
        name.append(link);
        const type = cell(q.fifo ? "FIFO" : "Standard", "t");
        if (kept.dead_letter) {
          const badge = document.createElement("span");
          badge.className = "badge";
          badge.textContent = "DLQ";
          type.append(badge);
        }
        const idle = kept.consumers === 0 && q.visible > 0 && !kept.dead_letter;  // a DLQ: no one, normally
        const consumers = cell(kept.consumers === undefined || kept.consumers === null ? "" : String(kept.consumers), "n");
        if (idle) { consumers.textContent = "none"; consumers.className = "n warn"; tr.className = "alert"; }
        const trend = cell("", "t wide");
        trend.append(sparkline(kept.trend, kept.now));
        const shown = (key) => { const r = rate(key); return r === null || r === undefined ? "" : short(r); };
        tr.append(name, type, cell(String(q.visible), "n"), cell(String(q.in_flight), "n"),
          cell(String(q.delayed), "n wide"), cell(age(q.oldest_age), "n wide"),
          cell(blank(q.dead_letters), "n wide"), cell(blank(q.groups_in_flight), "n wide"), consumers,
          cell(shown("sent"), "n wide"), cell(shown("received"), "n wide"), cell(shown("deleted"), "n wide"),
          trend);
        return tr;
      });
      // The same queues as shown: update the cells in place (a link being clicked stays put);
      // others: the new rows.
      const shown = Array.from(body.children);
      const same = shown.length === rows.length && rows.every((tr, i) => shown[i].dataset.queue === tr.dataset.queue);
      if (!same) { body.replaceChildren(...rows); return; }
      rows.forEach((tr, i) => {
        const old = shown[i];
        old.className = tr.className;
        Array.from(tr.children).forEach((td, j) => {
          if (j > 0) { old.children[j].replaceWith(td); }
        });
      });
    });
  }

  // -- the page of a queue ---------------------------------------------------------------------
  const queue = document.querySelector("[data-live-queue]");
  if (queue) {
    let last = null;
    let history = null;
    const show = (key, value) => {
      const target = queue.querySelector(`[data-count="${key}"]`);
      if (target) { target.textContent = value; }
    };
    function consumers(list, visible) {
      const tbody = document.querySelector("table.consumers tbody");
      const alarm = document.querySelector("[data-idle]");
      const live = list.filter((c) => c.live).length;
      if (alarm) { alarm.hidden = !(visible > 0 && live === 0); }
      show("consumers", String(live));
      if (!tbody) { return; }
      tbody.replaceChildren(...list.map((c) => {
        const tr = document.createElement("tr");
        tr.dataset.consumer = c.id;
        tr.append(cell(c.kind, "t"), cell(c.who, "t"), cell(c.detail, "t"),
          cell(age(c.age) + " ago", "n"), cell(c.live ? "receiving" : "silent", c.live ? "t" : "t warn"));
        return tr;
      }));
      const none = document.querySelector("[data-no-consumers]");
      if (none) { none.hidden = list.length > 0; }
    }
    function rates(history) {
      const s = history.samples;
      if (s.length < 2) { return null; }
      const [a, b] = [s[s.length - 2], s[s.length - 1]];
      const apart = b[0] - a[0];
      const out = {};
      for (const key of ["sent", "received", "deleted"]) {
        const k = history.fields.indexOf(key);
        out[key] = apart > 0 ? Math.max(0, b[k] - a[k]) / apart : 0;
      }
      return out;
    }
    every(2, async (tick) => {
      const data = await read(queue.dataset.liveQueue);
      if (!data) { return; }
      const now = Date.now() / 1000;
      const counters = data.counters;
      for (const key of ["visible", "in_flight", "delayed"]) { show(key, String(data[key])); }
      show("oldest_age", age(data.oldest_age));
      show("visibility_expired", String(counters.visibility_expired || 0));
      show("noisy_groups", String(data.noisy_groups || 0));
      if (tick % 5 === 0) {
        history = await read(queue.dataset.history);
        if (history) {
          for (const figure of document.querySelectorAll("figure[data-chart]")) {
            const kind = figure.dataset.chart;
            const names = kind === "depth" ? ["visible", "in_flight", "delayed"] : ["sent", "received", "deleted"];
            const labels = kind === "depth" ? ["visible", "in flight", "delayed"] : ["sent", "received", "deleted"];
            drawChart(figure, history, seriesOf(history, names, kind === "rates"), labels,
              kind === "depth" ? "messages" : "messages / s", kind === "depth");
          }
        }
      }
      const fromHistory = history ? rates(history) : null;
      for (const key of ["sent", "received", "deleted"]) {
        let value = null;
        if (last) {
          value = Math.max(0, ((counters[key] || 0) - (last.counters[key] || 0)) / (now - last.at));
        } else if (fromHistory) {
          value = fromHistory[key];
        }
        show(key + "_rate", value === null ? "" : short(value));
      }
      last = {at: now, counters: counters};
      if (data.consumers) { consumers(data.consumers, data.visible); }
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
