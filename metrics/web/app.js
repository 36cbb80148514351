// gossiptrain dashboard: polls ./dashboard.json every second and draws the
// members, the ring, the test curves, the throughput and the events.
// Plain JavaScript and SVG, no library: the page works offline.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#3461c1", "#e07b39", "#2a9d5c", "#c2372f", "#8a5cc2", "#8c6d3f", "#d45a9e", "#5f6b7a",
  "#b0a21e", "#1fa3b5", "#6d8f2e", "#a33f6e"];

const state = {
  evals: [],      // every evaluation point so far
  evalSeq: 0,     // the last evaluation received
  eventSeq: 0,    // the last event received
  events: [],
  rates: {},      // peer id -> [[t, examples/s]]
  colors: {},     // peer id -> colour, stable for the page's life
  x: "examples",  // the test curves' x axis
  last: null,     // the last view
  failures: 0,
};

function colorOf(id) {
  if (!(id in state.colors)) {
    state.colors[id] = PALETTE[Object.keys(state.colors).length % PALETTE.length];
  }
  return state.colors[id];
}

function short(id) { return id && id.length > 12 ? "…" + id.slice(-8) : id; }

function human(n, unit) {
  unit = unit || "";
  if (!isFinite(n)) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + " G" + unit;
  if (a >= 1e6) return (n / 1e6).toFixed(2) + " M" + unit;
  if (a >= 1e3) return (n / 1e3).toFixed(1) + " k" + unit;
  return n.toFixed(a >= 100 || a === 0 ? 0 : 1) + (unit ? " " + unit : "");
}

// count formats a count: 38, 1.9 k, 2.35 M.
function count(n) { return Math.abs(n) < 1000 ? String(Math.round(n)) : human(n); }

// secs formats seconds on an axis whose range is span.
function secs(v, span) { return (span < 10 ? v.toFixed(1) : Math.round(v)) + " s"; }

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function poll() {
  try {
    const r = await fetch("dashboard.json?evals=" + state.evalSeq + "&events=" + state.eventSeq, { cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + r.statusText);
    const v = await r.json();
    state.failures = 0;
    absorb(v);
    render(v);
    document.getElementById("live").className = "live";
  } catch (e) {
    state.failures++;
    const live = document.getElementById("live");
    live.className = "live off";
    live.title = "no answer from the peer: " + e.message + " (it may have finished)";
  }
  setTimeout(poll, 1000);
}

function absorb(v) {
  for (const p of v.evals) {
    if (p.seq > state.evalSeq) { state.evals.push(p); state.evalSeq = p.seq; }
  }
  for (const e of v.events) {
    if (e.seq > state.eventSeq) { state.events.push(e); state.eventSeq = e.seq; }
  }
  if (state.events.length > 500) state.events = state.events.slice(-500);
  const t = Date.parse(v.time) / 1000;
  for (const p of v.peers) {
    if (p.state !== "training" && p.state !== "waiting" && p.state !== "done") continue;
    const s = state.rates[p.peer_id] || (state.rates[p.peer_id] = []);
    s.push([t, p.examples_per_sec || 0]);
    if (s.length > 1800) s.shift();
  }
  state.last = v;
}

function render(v) {
  const self = v.peers.find(p => p.peer_id === v.peer_id) || {};
  document.getElementById("run").textContent =
    `job ${v.job || "?"} · ${v.topology || "?"}${v.mode ? ", " + v.mode : ""} · this peer ${short(v.peer_id)} · ` +
    `membership epoch ${v.epoch}${v.agreed ? " (agreed)" : " (agreeing…)"} · up ${Math.round(v.uptime_seconds)} s`;
  renderCards(v, self);
  renderMembers(v);
  renderRing(v);
  renderCurves();
  renderRate();
  renderEvents();
}

function renderCards(v, self) {
  const live = v.peers.filter(p => p.state === "training" || p.state === "waiting" || p.state === "done");
  const sum = k => live.reduce((a, p) => a + (p[k] || 0), 0);
  const last = state.evals[state.evals.length - 1];
  const rejected = live.reduce((a, p) => a + Object.values(p.rejected || {}).reduce((x, y) => x + y, 0), 0);
  const cards = [
    ["members", v.members.length],
    ["examples/s (all)", human(sum("examples_per_sec"))],
    ["examples (all)", human(sum("examples"))],
    ["rounds", count(self.rounds || 0)],
    ["test log-loss", last ? last.logloss.toFixed(4) : "–"],
    ["test error", last ? last.error.toFixed(4) : "–"],
    ["test AUC", last && last.auc !== null ? last.auc.toFixed(4) : "–"],
    ["repaired", count(sum("repaired"))],
    ["rejected", count(rejected)],
  ];
  const box = document.getElementById("cards");
  box.replaceChildren(...cards.map(([k, val]) => {
    const c = el("div", { class: "card" });
    c.append(el("div", { class: "v" }, String(val)), el("div", { class: "k" }, k));
    return c;
  }));
}

function renderMembers(v) {
  const counts = {};
  for (const i of v.ring) if (i >= 0) counts[v.members[i]] = (counts[v.members[i]] || 0) + 1;
  const tb = document.querySelector("#members tbody");
  tb.replaceChildren(...v.peers.map(p => {
    const member = v.members.includes(p.peer_id);
    const tr = el("tr", { "data-peer": p.peer_id, class: (member ? "member" : "gone") + (p.peer_id === v.peer_id ? " self" : "") });
    const sw = el("span", { class: "swatch" });
    sw.style.background = member ? colorOf(p.peer_id) : "#ccc";
    const rej = Object.values(p.rejected || {}).reduce((a, b) => a + b, 0);
    const cells = [
      [[sw], ""], [p.peer_id === v.peer_id ? short(p.peer_id) + " (this peer)" : short(p.peer_id), ""],
      [p.state, "state-" + (p.state || "").replace(" ", "-")], [p.link || "", "link-" + (p.link || "")],
      [member ? String(counts[p.peer_id] || 0) : "", "n"], [member ? count(p.rounds || 0) : "", "n"],
      [member ? human(p.examples_per_sec || 0) : "", "n"], [member ? (p.cpu_percent || 0).toFixed(0) : "", "n"],
      [member ? human(p.rss_bytes || 0, "B") : "", "n"], [member ? human(p.sent_bytes_per_sec || 0, "B/s") : "", "n"],
      [member ? human(p.recv_bytes_per_sec || 0, "B/s") : "", "n"],
      [member ? Math.round(100 * (p.wait_share || 0)) + "%" : "", "n"],
      [member ? count(p.repaired || 0) : "", "n"], [member ? count(rej) : "", "n"],
    ];
    for (const [c, cls] of cells) {
      const td = el("td", cls ? { class: cls } : {});
      if (Array.isArray(c)) td.append(...c); else td.textContent = c;
      tr.append(td);
    }
    if (p.error) tr.title = p.error;
    return tr;
  }));
  document.getElementById("members-count").textContent = `${v.members.length} in the view`;
}

function renderRing(v) {
  const svg = document.getElementById("ring");
  const n = v.ring.length;
  document.getElementById("ring-info").textContent = n ? `${n} shards, coloured by primary owner` : "no ring yet";
  const parts = [];
  const R = 100, r = 62;
  for (let s = 0; s < n; s++) {
    const a0 = 2 * Math.PI * s / n - Math.PI / 2, a1 = 2 * Math.PI * (s + 1) / n - Math.PI / 2;
    const large = a1 - a0 > Math.PI ? 1 : 0;
    const p = (rad, a) => `${(rad * Math.cos(a)).toFixed(2)} ${(rad * Math.sin(a)).toFixed(2)}`;
    const d = `M ${p(R, a0)} A ${R} ${R} 0 ${large} 1 ${p(R, a1)} L ${p(r, a1)} A ${r} ${r} 0 ${large} 0 ${p(r, a0)} Z`;
    const owner = v.ring[s] >= 0 ? v.members[v.ring[s]] : null;
    const path = el("svg:path", { d: d, fill: owner ? colorOf(owner) : "#ddd" });
    path.append(el("svg:title", {}, `shard ${s}: ${owner ? short(owner) : "no owner"}`));
    parts.push(path);
  }
  parts.push(el("svg:text", { x: 0, y: -4 }, `${v.members.length} members`));
  parts.push(el("svg:text", { x: 0, y: 14 }, `epoch ${v.epoch}`));
  svg.replaceChildren(...parts);
}

// chart draws series ([{name, color, points: [[x, y]]}]) into svg.
function chart(svg, series, opts) {
  const W = svg.clientWidth || 400, H = svg.clientHeight || 220;
  const m = { l: 52, r: 12, t: 10, b: 30 };
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const all = series.flatMap(s => s.points);
  svg.setAttribute("data-points", String(all.length));
  if (all.length === 0) {
    svg.replaceChildren(el("svg:text", { x: W / 2, y: H / 2, class: "empty", "text-anchor": "middle" }, opts.empty));
    return;
  }
  let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
  let y0 = Math.min(...all.map(p => p[1])), y1 = Math.max(...all.map(p => p[1]));
  if (opts.y0 !== undefined) y0 = Math.min(y0, opts.y0);
  if (x1 === x0) { x1 = x0 + 1; }
  if (y1 === y0) { y1 = y0 + (Math.abs(y0) || 1) * 0.1; y0 -= (Math.abs(y0) || 1) * 0.1; }
  const pad = (y1 - y0) * 0.08; y1 += pad; if (opts.y0 === undefined) y0 -= pad;
  const X = x => m.l + (x - x0) / (x1 - x0) * (W - m.l - m.r);
  const Y = y => H - m.b - (y - y0) / (y1 - y0) * (H - m.t - m.b);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const yv = y0 + (y1 - y0) * i / 4, yy = Y(yv);
    parts.push(el("svg:line", { x1: m.l, x2: W - m.r, y1: yy, y2: yy, class: "grid" }));
    parts.push(el("svg:text", { x: m.l - 5, y: yy + 3, "text-anchor": "end" }, opts.fy(yv)));
    const xv = x0 + (x1 - x0) * i / 4, xx = X(xv);
    parts.push(el("svg:text", { x: xx, y: H - m.b + 14, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, opts.fx(xv, x1 - x0)));
  }
  parts.push(el("svg:line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "axis" }));
  parts.push(el("svg:line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "axis" }));
  parts.push(el("svg:text", { x: W - m.r, y: H - 3, "text-anchor": "end" }, opts.xlabel));
  let ly = m.t + 10;
  for (const s of series) {
    if (s.points.length === 0) continue;
    const pts = s.points.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
    parts.push(el("svg:polyline", { points: pts, class: "series", stroke: s.color }));
    if (opts.dots) {
      for (const p of s.points) parts.push(el("svg:circle", { cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 2.5, fill: s.color }));
    }
    if (series.length > 1) {
      const t = el("svg:text", { x: W - m.r - 4, y: ly, "text-anchor": "end" }, s.name);
      t.style.fill = s.color;
      parts.push(t);
      ly += 12;
    }
  }
  svg.replaceChildren(...parts);
}

function renderCurves() {
  const x = state.x;
  const xv = p => x === "examples" ? p.examples : p.seconds;
  const fx = x === "examples" ? v => human(v) : secs;
  const xlabel = x === "examples" ? "this peer's training examples" : "seconds since start";
  chart(document.getElementById("chart-loss"),
    [{ name: "log-loss", color: "#3461c1", points: state.evals.map(p => [xv(p), p.logloss]) }],
    { fx, fy: v => v.toFixed(3), xlabel, dots: true, empty: "no evaluation yet (--test, --eval-every)" });
  const auc = state.evals.filter(p => p.auc !== null).map(p => [xv(p), p.auc]);
  chart(document.getElementById("chart-error"),
    [{ name: "error", color: "#c2372f", points: state.evals.map(p => [xv(p), p.error]) },
     { name: "AUC", color: "#2a9d5c", points: auc }],
    { fx, fy: v => v.toFixed(3), xlabel, dots: true, empty: "no evaluation yet" });
}

function renderRate() {
  const series = Object.keys(state.rates).map(id => ({
    name: short(id), color: colorOf(id), points: state.rates[id].map(([t, r]) => [t, r]),
  }));
  const t0 = Math.min(...series.flatMap(s => s.points.map(p => p[0])));
  for (const s of series) s.points = s.points.map(([t, r]) => [t - t0, r]);
  chart(document.getElementById("chart-rate"), series,
    { fx: secs, fy: v => human(v), xlabel: "seconds since this page opened", y0: 0, empty: "waiting for figures" });
}

function renderEvents() {
  const ol = document.getElementById("events");
  ol.replaceChildren(...state.events.slice().reverse().map(e => {
    const li = el("li", { "data-kind": e.kind });
    li.append(el("span", { class: "t" }, new Date(e.time).toLocaleTimeString()),
      el("span", { class: "kind kind-" + e.kind }, e.kind), document.createTextNode(" " + e.text));
    return li;
  }));
}

document.querySelectorAll(".axis-switch a").forEach(a => a.addEventListener("click", ev => {
  ev.preventDefault();
  state.x = a.dataset.x;
  document.querySelectorAll(".axis-switch a").forEach(b => b.classList.toggle("on", b === a));
  renderCurves();
}));
window.addEventListener("resize", () => { if (state.last) { renderCurves(); renderRate(); } });
poll();
