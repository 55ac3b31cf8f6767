// sluice console: one ES module, no dependencies, no build step.
// Every piece of data comes from the admin API (/admin/v1/); the token the
// operator enters is kept in sessionStorage (gone with the tab) and sent as
// a bearer token. See docs/console.md.

const TOKEN_KEY = "sluice.admin.token";
const REFRESH_MS = 2000;
const WINDOW_MS = 10 * 60 * 1000;
const MAX_CHARTS = 12;

// seg encodes one path segment. A segment that is only "." or ".." cannot
// be sent from a browser: its URL parser (WHATWG URL, which fetch uses)
// resolves it away as a dot segment even as %2E or %2E%2E, and the request
// would name another resource. seg refuses it instead (docs/api.md).
const seg = (s) => {
  if (s === "." || s === "..") {
    throw new Error("the id " + JSON.stringify(s) + " cannot be named in a URL a browser sends (a dot segment); use the sluice CLI, the Go client or curl with %2E");
  }
  return encodeURIComponent(s);
};

// The admin API as the console uses it: one place to adapt to its contract.
const admin = {
  overview: () => call("GET", "/admin/v1/overview"),
  health: () => call("GET", "/admin/v1/health"),
  flow: () => call("GET", "/admin/v1/flow"),
  trace: (id) => call("GET", "/admin/v1/trace/" + seg(id)),
  aggregate: (type, id) => call("GET", "/admin/v1/aggregates/" + seg(type) + "/" + seg(id)),
  dlq: (topic, all) => call("GET", "/admin/v1/dlq" + query({ topic, all: all ? "true" : "" })),
  redrive: (topic, letter, dryRun) => call("POST", "/admin/v1/dlq/redrive", { topic, letter, dry_run: dryRun }),
  drop: (topic, letter, reason, dryRun) => call("POST", "/admin/v1/dlq/drop", { topic, letter, reason, dry_run: dryRun }),
  checkpoint: (target, dryRun) => call("POST", "/admin/v1/relay/checkpoint", { ...target, dry_run: dryRun }),
  parked: (state) => call("GET", "/admin/v1/relay/parked" + query({ state, limit: 100 })),
  parkedResolve: (position, kind, dryRun) => call("POST", "/admin/v1/relay/parked/" + seg(position) + "/" + kind, { dry_run: dryRun }),
  pause: (group, paused, reason, dryRun) => call("POST", "/admin/v1/consumers/" + seg(group) + (paused ? "/pause" : "/resume"), { reason, dry_run: dryRun }),
  reset: (group, body, dryRun) => call("POST", "/admin/v1/consumers/" + seg(group) + "/reset", { ...body, dry_run: dryRun }),
  rebuild: (name, body, dryRun) => call("POST", "/admin/v1/projections/" + seg(name) + "/rebuild", { ...body, dry_run: dryRun }),
  rollback: (name, body, dryRun) => call("POST", "/admin/v1/projections/" + seg(name) + "/rollback", { ...body, dry_run: dryRun }),
  verify: (body, dryRun) => call("POST", "/admin/v1/verify", { ...body, dry_run: dryRun }),
};

const $ = (sel, root = document) => root.querySelector(sel);

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

// APIError is a failed admin API call, from its problem+json body (code,
// detail) when it has one.
class APIError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.error || body.title)) || "HTTP " + status);
    this.status = status;
    this.body = body;
    this.code = (body && body.code) || "";
  }
}

async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

// el builds an element: el("td", {class: "num"}, "42", child, ...).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  return e;
}

// showError shows a failed call (what: the action it belongs to) with the
// status, code and detail of the problem+json answer; null hides it.
function showError(err, what) {
  const box = $("#error");
  delete box.dataset.from;
  if (!err) { box.hidden = true; box.textContent = ""; delete box.dataset.status; delete box.dataset.code; return; }
  let msg = err.message || String(err);
  if (err.status === 401) msg = "401: the admin API wants a token — enter SLUICE_ADMIN_TOKEN or SLUICE_ADMIN_READ_TOKEN above. (" + msg + ")";
  else if (err.status === 403) msg = "403: this token may only read; actions need the operator token. (" + msg + ")";
  else if (err.status) msg = err.status + (err.code ? " " + err.code : "") + ": " + msg;
  box.textContent = (what ? what + " — " : "") + msg;
  box.dataset.status = err.status || "";
  box.dataset.code = err.code || "";
  box.hidden = false;
}

// showResult shows what a confirmed action did, above every view.
function showResult(action, text) {
  const box = $("#result");
  box.dataset.action = action;
  box.textContent = text;
  box.hidden = false;
}

const fmtTime = (s) => {
  if (!s) return "";
  const d = new Date(s);
  return isNaN(d) ? String(s) : d.toISOString().replace("T", " ").replace("Z", "");
};
const badge = (state) => el("span", { class: "state " + String(state || "unknown") }, state || "unknown");

// render shows any JSON value: objects as key/value grids, arrays of
// objects as tables, scalars as text.
function render(v, depth = 0) {
  if (v === null || v === undefined) return el("span", { class: "muted" }, "—");
  if (Array.isArray(v)) {
    if (v.length === 0) return el("span", { class: "muted" }, "none");
    if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
      const cols = [...new Set(v.flatMap((x) => Object.keys(x)))];
      return el("table", {},
        el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))),
        el("tbody", {}, v.map((row) => el("tr", {}, cols.map((c) => cell(row[c], depth))))));
    }
    return el("span", {}, v.map((x) => (typeof x === "object" ? JSON.stringify(x) : String(x))).join(", "));
  }
  if (typeof v === "object") {
    if (depth > 3) return el("code", {}, JSON.stringify(v));
    return el("div", { class: "kv" }, Object.entries(v).flatMap(([k, x]) => [el("div", {}, k), el("div", {}, render(x, depth + 1))]));
  }
  if (typeof v === "string" && /^\d{4}-\d\d-\d\dT/.test(v)) return el("span", {}, fmtTime(v));
  return el("span", {}, String(v));
}

function cell(v, depth) {
  if (typeof v === "number") return el("td", { class: "num" }, v.toLocaleString("en-US"));
  if (v && typeof v === "object") return el("td", {}, render(v, depth + 1));
  if (typeof v === "string" && /^(done|pending|failed|dead|parked|processing|skipped|skipped_stale|unknown)$/.test(v)) return el("td", {}, badge(v));
  return el("td", {}, render(v, depth + 1));
}

// ---- overview ---------------------------------------------------------

const series = new Map(); // lag series: name → [{t, v}]
const flowSamples = []; // readings of /admin/v1/flow: {t, counters, latency}
const LATENCY_WINDOW_MS = 5 * 60 * 1000;
let timer = null;
let lastOverview = null;

// Human names of the overview's figures (their raw keys stay in data-key).
const LABELS = {
  "store head": ["Events stored", "last log position"],
  "relay checkpoint": ["Relay checkpoint", "last position published"],
  "relay lag": ["Relay backlog", "events stored, not yet published"],
  "relay epoch": ["Relay leader epoch", "leader changes so far"],
  "relay pending_gaps": ["Relay gaps pending", "positions reserved, not yet committed"],
  "registry in_progress": ["Events being handled", "claims in progress"],
  "registry expired": ["Expired claims", "leases that ran out"],
  "registry failed": ["Failed, to retry", "registry rows failed"],
  "registry dead": ["Dead", "gave up, in a DLQ"],
  "parked parked": ["Parked records", "the relay could not publish"],
};
const SERVICE_LABELS = { api: "API", relay: "Relay", "instance-worker": "Instance worker", "projection-worker": "Projection worker" };
const FLOW = [
  ["appended", "Appended", "events stored / s"],
  ["published", "Published", "records to Kafka / s"],
  ["applied", "Applied", "commands applied / s"],
  ["projected", "Projected", "domain events projected / s"],
];

const fmtNum = (v, digits = 0) => (v === null || v === undefined || Number.isNaN(v) ? "—" : Number(v).toLocaleString("en-US", { maximumFractionDigits: digits }));
const fmtMs = (s) => (s === null || s === undefined ? "—" : s < 1 ? Math.round(s * 1000) + " ms" : fmtNum(s, 2) + " s");

// PAUSE_TITLES explain each pause state (docs/console.md): what the
// group's workers have made of the operator's flag.
const PAUSE_TITLES = {
  running: "not paused",
  pausing: "paused by an operator; a worker still finishes what it fetched or has not read the flag yet",
  paused: "paused by an operator, and every worker seen has stopped: nothing is handled until the resume",
  resuming: "resumed by an operator; a worker has not restarted fetching yet",
  requested: "paused by an operator, but no worker of this group is visible to this api process (SLUICE_ADMIN_SERVICES): whether one still runs is unknown",
};

// pauseBadge shows a group's pause state: the operator's flag as its
// workers have taken it (unknown when the registry could not be read).
function pauseBadge(g) {
  if (g.paused === undefined || g.paused === null) return el("span", { class: "state unknown", title: g.pause_error || "" }, "unknown");
  const state = g.pause_state || (g.paused ? "requested" : "running");
  const w = g.pause_workers;
  const seen = w && w.seen ? " (" + w.paused + " of " + w.seen + " workers paused)" : "";
  return el("span", { class: "state " + state, title: (PAUSE_TITLES[state] || state) + seen }, state === "requested" ? "pause requested" : state);
}

const readyBadge = (ready) => el("span", { class: "state " + (ready === true ? "done" : ready === false ? "dead" : "unknown") },
  ready === true ? "ready" : ready === false ? "not ready" : "unknown");

// healthStrip shows every service, dependency and worker group, green or
// red with the reason its /readyz gives, and each group's pause state.
function healthStrip(h) {
  const row = (kind, name, label, ready, reason, extra) => el("div", {
    class: "health-row " + (ready === true ? "ok" : ready === false ? "bad" : "unknown"),
    "data-kind": kind, "data-name": name, "data-ready": ready === true ? "true" : ready === false ? "false" : "unknown",
  }, el("span", { class: "dot", "aria-hidden": "true" }), el("b", {}, label), readyBadge(ready), extra || null,
  el("span", { class: "reason" }, reason || (ready ? "all checks pass" : "")));
  const services = (h.services || []).map((s) => row("service", s.name, SERVICE_LABELS[s.name] || s.name, s.ready, s.reason,
    el("span", { class: "muted src" }, s.source === "this process" ? "" : s.source)));
  const deps = (h.dependencies || []).map((d) => row("dependency", d.name, d.name, d.ready, d.ready ? "answered in " + fmtNum(d.latency_ms, 1) + " ms" : d.reason));
  const groups = (h.groups || []).map((g) => row("group", g.group, "Group " + g.group, g.ready, g.reason, pauseBadge(g)));
  return [el("div", { class: "health-col" }, el("h4", {}, "Services"), ...services),
    el("div", { class: "health-col" }, el("h4", {}, "Dependencies"), ...deps),
    el("div", { class: "health-col" }, el("h4", {}, "Worker groups"), ...groups)];
}

const STATUS_TEXT = { running: "running", stopped: "stopped — no worker", "not running": "not running", unknown: "unknown" };

// groupsTable lists the worker groups with their status, lag and pause
// state, and the buttons to pause or resume each (dry run, then confirm).
function groupsTable(groups) {
  if (!groups.length) return el("p", { class: "muted" }, "no worker groups");
  return el("table", { class: "groups" },
    el("thead", {}, el("tr", {}, ["Group", "Handler", "Topic", "Status", "Backlog (records)", "Workers", "Pause", "Paused by · reason · since", ""].map((c) => el("th", {}, c)))),
    el("tbody", {}, groups.map((g) => el("tr", { "data-group": g.group, "data-status": g.status || "", "data-paused": g.paused === undefined ? "unknown" : String(g.paused),
      "data-pause-state": g.pause_state || "unknown" },
      el("td", {}, g.group), el("td", {}, g.handler), el("td", {}, g.topic),
      el("td", { class: "status" }, el("span", { class: "state " + (g.status === "running" ? "done" : g.status === "stopped" || g.status === "not running" ? "pending" : "unknown") }, STATUS_TEXT[g.status] || g.status || (g.error ? "error" : "")),
        g.note ? el("div", { class: "muted note" }, g.note) : null, g.error ? el("div", { class: "error-text" }, g.error) : null),
      el("td", { class: "num" }, g.status === "not running" ? el("span", { class: "muted" }, "not counted") : fmtNum(g.lag ?? 0)),
      el("td", { class: "num" }, g.members ?? 0),
      el("td", {}, pauseBadge(g)),
      el("td", {}, g.pause && g.pause.changed_at ? [g.pause.by || "", g.pause.reason ? " · " + g.pause.reason : "", " · " + fmtTime(g.pause.changed_at)] : el("span", { class: "muted" }, "—")),
      el("td", {},
        g.paused ? el("button", { class: "small resume", type: "button", onclick: () => pauseGroup(g.group, false) }, "Resume…")
          : el("button", { class: "small pause", type: "button", onclick: () => pauseGroup(g.group, true) }, "Pause…"))))));
}

// jobsView shows the rebuild and rollback jobs of this api process with
// their progress.
function jobsView(jobs) {
  if (!jobs.length) return el("p", { class: "muted" }, "no rebuild or rollback jobs in this api process");
  const progress = (j) => {
    const sum = j.summary;
    if (sum) {
      const lag = sum.lag || {};
      return "done: v" + sum.from + " → v" + sum.to + " · " + (lag.end || 0) + " records · " + Math.round((sum.elapsed_ns || 0) / 1e6) + " ms";
    }
    const p = j.progress;
    if (!p) return j.ended_at ? "" : "starting";
    const lag = p.lag || {};
    const pct = lag.end > 0 ? Math.round((100 * (lag.end - lag.lag)) / lag.end) : 100;
    return (p.phase || "") + " · " + (lag.end - lag.lag || 0) + "/" + (lag.end || 0) + " records (" + pct + "%) · lag " + (lag.lag || 0);
  };
  return el("table", { class: "jobs" },
    el("thead", {}, el("tr", {}, ["job", "kind", "projection", "started", "progress", "ended", "result"].map((c) => el("th", {}, c)))),
    el("tbody", {}, [...jobs].sort((a, b) => String(b.started_at).localeCompare(String(a.started_at))).map((j) =>
      el("tr", { "data-job": j.id, "data-state": j.error ? "failed" : j.ended_at ? "done" : "running" },
        el("td", {}, j.id), el("td", {}, j.kind), el("td", {}, j.projection + (j.version ? " v" + j.version : "")),
        el("td", {}, fmtTime(j.started_at)), el("td", {}, progress(j)), el("td", {}, fmtTime(j.ended_at)),
        el("td", {}, j.error ? el("span", { class: "error-text" }, j.error) : j.ended_at ? badge("done") : badge("processing"))))));
}

// lagSeries are the backlogs the charts follow: the relay's and each
// listed group's (a group not running has none).
function lagSeries(ov) {
  const out = new Map();
  if (ov.relay) out.set("relay / lag", ["Relay", "events stored, not yet published", ov.relay.lag || 0]);
  for (const g of ov.groups || []) {
    if (g.status === "not running" || g.status === "unknown") continue;
    out.set(g.group + " / lag", [g.group, "records not yet handled (" + (g.status || "") + ")", g.lag || 0]);
  }
  return out;
}

// headline picks the numbers an operator reads first, with human labels.
function headline(ov) {
  const out = [];
  for (const [k, v] of Object.entries(ov || {})) {
    if (v && typeof v === "object" && !Array.isArray(v)) {
      for (const [k2, v2] of Object.entries(v)) {
        const key = k + " " + k2;
        if (typeof v2 === "number" && LABELS[key]) out.push([key, v2]);
      }
    }
  }
  // A store of several shards: one figure per shard's head.
  for (const sh of (ov && ov.store && ov.store.shards) || []) {
    const key = "store shard " + sh.shard;
    LABELS[key] = ["Shard " + sh.shard + " head", "last position of the shard"];
    out.push([key, sh.head]);
  }
  const open = (ov.dlq || []).reduce((n, c) => n + (c.open || 0), 0);
  out.push(["dlq open", open]);
  return out;
}
LABELS["dlq open"] = ["Dead letters open", "in the DLQ topics, not yet handled"];

// chart draws points over the last WINDOW_MS as an SVG line with its axes:
// the y axis from 0 to the window's maximum (with its unit), the x axis
// from −10 min to now, so an idle stack shows a flat line at 0.
function chart(id, title, unit, points, opts = {}) {
  const now = Date.now();
  const w = 320, h = 90, left = 34, bottom = 14, top = 4;
  const vals = points.filter((p) => p.v !== null && p.v !== undefined);
  const max = Math.max(opts.min || 1, ...vals.map((p) => p.v));
  // The x axis spans the readings so far (at least 30 s), up to WINDOW_MS:
  // a page open for a minute shows that minute across the whole width.
  const first = points.length ? Math.min(...points.map((p) => p.t)) : now;
  const span = Math.max(30000, Math.min(WINDOW_MS, now - first));
  const x = (t) => left + ((t - (now - span)) / span) * (w - left - 2);
  const y = (v) => top + (h - top - bottom) * (1 - v / max);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  add("line", { class: "axis", x1: left, y1: h - bottom, x2: w - 2, y2: h - bottom });
  add("line", { class: "axis", x1: left, y1: top, x2: left, y2: h - bottom });
  add("line", { class: "grid", x1: left, y1: y(max), x2: w - 2, y2: y(max) });
  add("text", { class: "tick", x: left - 3, y: h - bottom, "text-anchor": "end" }, "0");
  add("text", { class: "tick", x: left - 3, y: top + 8, "text-anchor": "end" }, opts.fmtAxis ? opts.fmtAxis(max) : fmtNum(max, 1));
  add("text", { class: "tick", x: left, y: h - 2 }, "−" + (span < 120000 ? Math.round(span / 1000) + " s" : Math.round(span / 60000) + " min"));
  add("text", { class: "tick", x: w - 2, y: h - 2, "text-anchor": "end" }, "now");
  const line = add("polyline", { points: vals.map((p) => x(p.t).toFixed(1) + "," + y(p.v).toFixed(1)).join(" ") });
  if (opts.cls) line.setAttribute("class", opts.cls);
  for (const extra of opts.extra || []) {
    const xs = extra.points.filter((p) => p.v !== null && p.v !== undefined);
    add("polyline", { class: extra.cls, points: xs.map((p) => x(p.t).toFixed(1) + "," + y(p.v).toFixed(1)).join(" ") });
  }
  if (!vals.length && opts.empty) add("text", { class: "tick empty", x: (w + left) / 2, y: h / 2, "text-anchor": "middle" }, opts.empty);
  const last = vals.length ? vals[vals.length - 1].v : null;
  return el("div", { class: "chart", "data-series": id, "data-points": vals.length },
    el("div", { class: "t" }, el("span", {}, title), el("b", { class: "lag-value value" }, opts.fmtValue ? opts.fmtValue(last) : fmtNum(last, 1))),
    svg,
    el("div", { class: "t muted" }, el("span", {}, unit), el("span", {}, opts.legend || "max " + (opts.fmtAxis ? opts.fmtAxis(max) : fmtNum(max, 1)))));
}

// rates turns the cumulative counters into per-second rates between
// consecutive readings (a counter that went down restarted from 0).
function rates(key) {
  const out = [];
  for (let i = 1; i < flowSamples.length; i++) {
    const a = flowSamples[i - 1], b = flowSamples[i];
    const dt = (b.t - a.t) / 1000;
    if (dt <= 0) continue;
    let d = (b.counters[key] || 0) - (a.counters[key] || 0);
    if (d < 0) d = b.counters[key] || 0;
    out.push({ t: b.t, v: d / dt });
  }
  return out;
}

// quantile estimates the q-quantile from the bucket counts observed
// between two readings, interpolating in the bucket (as Prometheus's
// histogram_quantile); null when no command was applied in between.
function quantile(q, from, to) {
  const base = new Map((from ? from.buckets : []).map((b) => [b.le, b.count]));
  const total = to.count - (from ? from.count : 0);
  if (total <= 0) return null;
  const rank = q * total;
  let prevLE = 0, prevN = 0;
  for (const b of to.buckets) {
    const n = b.count - (base.get(b.le) || 0);
    if (n >= rank) return prevLE + (b.le - prevLE) * ((rank - prevN) / Math.max(n - prevN, 1e-9));
    prevLE = b.le; prevN = n;
  }
  return prevLE; // in the +Inf bucket: at least the largest bound
}

// latencies are p50 and p99 at each reading, over the readings of the
// LATENCY_WINDOW_MS before it.
function latencies() {
  const p50 = [], p99 = [];
  for (let i = 1; i < flowSamples.length; i++) {
    const b = flowSamples[i];
    let j = 0;
    while (j < i - 1 && flowSamples[j].t < b.t - LATENCY_WINDOW_MS) j++;
    const a = flowSamples[j];
    const reset = b.latency.count < a.latency.count;
    p50.push({ t: b.t, v: quantile(0.5, reset ? null : a.latency, b.latency) });
    p99.push({ t: b.t, v: quantile(0.99, reset ? null : a.latency, b.latency) });
  }
  return [p50, p99];
}

function flowCharts() {
  const charts = FLOW.map(([key, title, unit]) => chart("flow " + key, title, unit, rates(key), { min: 1, fmtValue: (v) => fmtNum(v, 1) + " /s" }));
  const [p50, p99] = latencies();
  charts.push(chart("latency", "Request → readable", "p50 (line) and p99 (dashed) over the last " + LATENCY_WINDOW_MS / 60000 + " min", p50, {
    min: 0.01, cls: "p50", extra: [{ cls: "p99", points: p99 }], fmtAxis: fmtMs,
    fmtValue: () => "p50 " + fmtMs(p50.length ? p50[p50.length - 1].v : null) + " · p99 " + fmtMs(p99.length ? p99[p99.length - 1].v : null),
    legend: "accept → instance document written",
    empty: flowSamples.length < 2 ? "gathering…" : "no command applied in the last " + LATENCY_WINDOW_MS / 60000 + " min",
  }));
  return charts;
}

async function refreshOverview() {
  try {
    const [ov, health, flow] = await Promise.all([admin.overview(), admin.health(), admin.flow()]);
    // A refresh clears only the error a refresh showed: an action's
    // message (a failure, "another action is in progress") stays until
    // the operator's next action, however late this refresh lands.
    if ($("#error").dataset.from === "overview") showError(null);
    const now = Date.now();
    for (const [name, [, , v]] of lagSeries(ov)) {
      const pts = series.get(name) || [];
      pts.push({ t: now, v });
      series.set(name, pts);
    }
    for (const [name, pts] of series) {
      while (pts.length && pts[0].t < now - WINDOW_MS) pts.shift();
      if (!pts.length) series.delete(name);
    }
    flowSamples.push({ t: now, counters: flow.counters || {}, latency: flow.latency || { buckets: [], count: 0 } });
    while (flowSamples.length > 2 && flowSamples[0].t < now - WINDOW_MS - REFRESH_MS) flowSamples.shift();
    $("#health").replaceChildren(...healthStrip(health));
    $("#figures").replaceChildren(...headline(ov).map(([k, v]) =>
      el("div", { class: "figure", "data-key": k }, el("div", { class: "v" }, fmtNum(v)), el("div", { class: "k" }, LABELS[k][0]), el("div", { class: "muted small" }, LABELS[k][1]))));
    $("#flow").replaceChildren(...flowCharts());
    const bad = (flow.sources || []).filter((s) => s.error);
    $("#flow-sources").textContent = "From the series of: " + (flow.sources || []).map((s) => s.name).join(", ") + (bad.length ? " — unreadable: " + bad.map((s) => s.name + " (" + s.error + ")").join("; ") : "");
    const names = lagSeries(ov);
    const shown = [...series.keys()].filter((n) => names.has(n)).slice(0, MAX_CHARTS);
    $("#charts").replaceChildren(...(shown.length ? shown.map((n) => chart(n, names.get(n)[0], names.get(n)[1], series.get(n), { min: 1, fmtValue: (v) => fmtNum(v) + " behind" }))
      : [el("p", { class: "muted" }, "no group is running")]));
    lastOverview = ov;
    $("#groups").replaceChildren(groupsTable(ov.groups || []));
    $("#overview-jobs").replaceChildren(jobsView(ov.jobs || []));
    if ($("#details").open) $("#overview-body").replaceChildren(render({ overview: ov, health, flow }));
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    showError(err);
    $("#error").dataset.from = "overview";
  }
}

function startOverview() {
  stopOverview();
  refreshOverview();
  if ($("#auto").checked) timer = setInterval(refreshOverview, REFRESH_MS);
}
function stopOverview() {
  if (timer) clearInterval(timer);
  timer = null;
}

// ---- trace ------------------------------------------------------------

function stepDetail(s) {
  const bits = [];
  if (s.topic) bits.push(s.topic + (s.partition !== undefined ? "[" + s.partition + "]" : "") + (s.offset !== undefined ? " @ offset " + s.offset : ""));
  if (s.position) bits.push("position " + s.position);
  if (s.sequence && s.step === "appended") bits.push("sequence " + s.sequence);
  if (s.handler) bits.push(s.handler);
  if (s.group) bits.push("group " + s.group);
  if (s.status) bits.push("status " + s.status);
  if (s.attempts) bits.push(s.attempts + (s.attempts === 1 ? " attempt" : " attempts"));
  if (s.outcome) bits.push("outcome " + s.outcome);
  if (s.version !== undefined) bits.push("version " + s.version);
  if (s.committed_offset !== undefined) bits.push("committed " + s.committed_offset);
  if (s.index) bits.push(s.index + "/" + s.doc_id);
  return [el("div", {}, bits.join(" · ")), s.detail ? el("div", { class: "muted" }, s.detail) : null,
    s.error ? el("div", { class: "error-text" }, "error: " + s.error) : null];
}

async function showTrace(id) {
  $("#trace-id").value = id;
  const body = $("#trace-body");
  if (!id) { body.replaceChildren(); return; }
  body.replaceChildren(el("p", { class: "muted" }, "tracing " + id + " …"));
  try {
    const tr = await admin.trace(id);
    showError(null);
    body.replaceChildren(
      ...(tr.warnings && tr.warnings.length ? [el("div", { class: "error" }, "Some sources could not be read: " + tr.warnings.join("; "))] : []),
      ...tr.events.map((e) => el("section", { class: "event", "data-event-id": e.event_id, "data-kind": e.kind },
        el("h3", {}, e.kind + " " + e.event_type + " ",
          el("span", { class: "muted" }, e.aggregate_type + " " + e.aggregate_id + " · slot " + e.sequence_number + (e.principal ? " · by " + e.principal : "") + " · ", el("code", {}, e.event_id)), " ",
          el("a", { href: "#/aggregate/" + encodeURIComponent(e.aggregate_type) + "/" + encodeURIComponent(e.aggregate_id) }, "aggregate →")),
        el("ol", { class: "timeline" }, e.steps.map((s) => el("li", { "data-step": s.step, "data-state": s.state, "data-handler": s.group || s.handler || "" },
          el("b", {}, s.step), el("span", {}, badge(s.state)), el("span", { class: "at" }, fmtTime(s.at)), el("div", {}, stepDetail(s))))))));
  } catch (err) {
    body.replaceChildren();
    showError(err);
  }
}

// ---- aggregate --------------------------------------------------------

async function showAggregate(type, id) {
  $("#agg-type").value = type || "Instance";
  $("#agg-id").value = id || "";
  const body = $("#agg-body");
  if (!id) { body.replaceChildren(); return; }
  try {
    const v = await admin.aggregate(type, id);
    showError(null);
    const events = el("table", { class: "events" },
      el("thead", {}, el("tr", {}, ["slot", "kind", "type", "position", "occurred", "handlers", "data", ""].map((c) => el("th", {}, c)))),
      el("tbody", {}, v.events.map((e) => el("tr", { "data-seq": e.sequence_number, "data-kind": e.kind },
        el("td", { class: "num" }, e.sequence_number), el("td", {}, e.kind), el("td", {}, e.event_type), el("td", { class: "num" }, e.position),
        el("td", {}, fmtTime(e.occurred_at)),
        el("td", {}, e.handlers.length ? e.handlers.map((h) => el("div", {}, h.handler + " ", badge(h.status), h.attempts > 1 ? " ×" + h.attempts : "", h.error ? " " + h.error : "")) : el("span", { class: "muted" }, "not handled yet")),
        el("td", {}, el("code", {}, e.data ? JSON.stringify(e.data).slice(0, 120) : "")),
        el("td", {}, el("a", { href: "#/trace/" + encodeURIComponent(e.event_id) }, "trace"))))));
    const guards = v.guards.length ? el("table", { class: "guards" },
      el("thead", {}, el("tr", {}, ["handler", "last finished slot", "behind", "moved"].map((c) => el("th", {}, c)))),
      el("tbody", {}, v.guards.map((g) => el("tr", { "data-handler": g.handler }, el("td", {}, g.handler), el("td", { class: "num" }, g.last_sequence),
        el("td", { class: "num" }, g.behind), el("td", {}, fmtTime(g.updated_at))))))
      : el("p", { class: "muted" }, "no handler has finished an event of this aggregate");
    const doc = v.document ? el("div", { class: "document" },
      el("h3", {}, "Read model ", el("span", { class: "muted" }, v.document.index + "/" + v.document.id)),
      v.document.found ? [el("div", { class: "kv" }, el("div", {}, "version"), el("div", { class: "doc-version" }, v.document.version),
        el("div", {}, "last slot"), el("div", {}, v.last_sequence)), el("pre", {}, JSON.stringify(v.document.source, null, 2))]
        : el("p", { class: "muted" }, "no document"))
      : el("div", {}, el("p", { class: "muted" }, "no read-model document for this aggregate type"));
    body.replaceChildren(
      el("p", {}, v.aggregate_type + " ", el("code", {}, v.aggregate_id), " · last slot " + v.last_sequence + " · showing slots " + v.from_seq + "–" + Math.min(v.to_seq, v.last_sequence) + " · registry key ", el("code", {}, v.key)),
      el("div", { class: "cols" }, el("div", {}, el("h3", {}, "Events"), events, el("h3", {}, "Sequence guards"), guards), doc));
  } catch (err) {
    body.replaceChildren();
    showError(err);
  }
}

// ---- streams ----------------------------------------------------------

const API_TOKEN_KEY = "sluice.api.token";
let streamPages = []; // the from_sequence of each page read, for "previous"
let follow = null; // {abort: AbortController}

// v1 calls the event API with the API token of this tab, if any
// (SLUICE_API_TOKENS; the admin token is not one).
async function v1(path, init = {}) {
  const headers = { Accept: "application/json", ...(init.headers || {}) };
  const token = sessionStorage.getItem(API_TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  return fetch(path, { ...init, headers, cache: "no-store" });
}

async function v1JSON(path) {
  const res = await v1(path);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

// eventRow is one event of a stream page or of the live log: a summary
// row that opens to the whole envelope, with a link to its trace.
function eventRows(e, cls) {
  const detail = el("tr", { class: "event-detail", hidden: true },
    el("td", { colspan: 7 }, el("pre", {}, JSON.stringify(e, null, 2))));
  const open = el("button", { class: "small open", type: "button", onclick: () => { detail.hidden = !detail.hidden; } }, "Open");
  return [el("tr", { class: cls, "data-seq": e.sequence_number, "data-position": e.position, "data-type": e.event_type, "data-event-id": e.event_id },
    el("td", { class: "num" }, e.sequence_number), el("td", { class: "num" }, e.position), el("td", {}, e.kind), el("td", {}, e.event_type),
    el("td", {}, e.aggregate_type + " ", el("code", {}, e.aggregate_id)), el("td", {}, fmtTime(e.occurred_at)),
    el("td", {}, open, " ", el("a", { class: "trace-link", href: "#/trace/" + encodeURIComponent(e.event_id) }, "trace →"))), detail];
}

const eventHead = () => el("thead", {}, el("tr", {}, ["Seq", "Position", "Kind", "Event type", "Aggregate", "Occurred", ""].map((c) => el("th", {}, c))));

// showStream reads one page of a stream: from (a sequence) in the
// direction chosen, paging with next_from_sequence.
async function showStream(type, id, from) {
  $("#stream-type").value = type || $("#stream-type").value || "Instance";
  $("#stream-id").value = id || "";
  const body = $("#stream-body");
  if (!id) { body.replaceChildren(); return; }
  const dir = $("#stream-dir").value;
  const limit = Number($("#stream-limit").value) || 20;
  try {
    const page = await v1JSON("/v1/streams/" + seg(type) + "/" + seg(id) + "/events" +
      query({ direction: dir, limit, from_sequence: from || "" }));
    showError(null);
    const evs = (page.events || []).map((e) => (typeof e === "string" ? JSON.parse(e) : e));
    const prev = streamPages.length > 1;
    body.replaceChildren(
      el("p", { class: "stream-summary" }, page.aggregate_type + " ", el("code", {}, page.aggregate_id), " · " + page.last_sequence + " events in the stream · showing " +
        evs.length + " " + (dir === "forward" ? "oldest first" : "newest first") + (evs.length ? ", sequences " + evs[0].sequence_number + "–" + evs[evs.length - 1].sequence_number : ""), " ",
        el("a", { href: "#/aggregate/" + encodeURIComponent(page.aggregate_type) + "/" + encodeURIComponent(page.aggregate_id) }, "aggregate view →")),
      el("table", { class: "stream-events" }, eventHead(), el("tbody", {}, evs.flatMap((e) => eventRows(e, "stream-event")))),
      el("div", { class: "pager" },
        el("button", { type: "button", id: "stream-prev", disabled: !prev, onclick: () => { streamPages.pop(); const f = streamPages.pop(); streamPages.push(f); showStream(type, id, f); } }, "← Previous page"), " ",
        el("button", { type: "button", id: "stream-next", disabled: page.next_from_sequence === undefined || page.next_from_sequence === null,
          onclick: () => { streamPages.push(page.next_from_sequence); showStream(type, id, page.next_from_sequence); } }, "Next page →")));
  } catch (err) {
    body.replaceChildren();
    showError(err, "read stream");
  }
}

// followLog subscribes to the log (SSE over fetch, so that the API token
// can be sent) and shows the newest 200 events whose type matches.
async function followLog() {
  stopFollow();
  const ctl = new AbortController();
  follow = { abort: ctl };
  const want = $("#follow-type").value.trim().toUpperCase();
  const from = $("#follow-from").value.trim();
  const aggType = $("#follow-agg").value.trim();
  const tbody = el("tbody", {});
  let seen = 0, shown = 0;
  const state = $("#follow-state");
  const stateText = () => { state.textContent = "following" + (want ? " " + want : " every type") + " · " + seen + " events received, " + shown + " shown"; };
  $("#follow-body").replaceChildren(el("table", { class: "follow-events" }, eventHead(), tbody));
  $("#follow-start").disabled = true;
  $("#follow-stop").disabled = false;
  state.dataset.state = "connecting";
  state.textContent = "connecting…";
  try {
    const res = await v1("/v1/log/subscribe" + query({ from_position: from, aggregate_type: aggType }), { headers: { Accept: "text/event-stream" }, signal: ctl.signal });
    if (!res.ok) {
      let data = null;
      try { data = await res.json(); } catch { /* not JSON */ }
      throw new APIError(res.status, data);
    }
    state.dataset.state = "following";
    stateText();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        const kind = (frame.split("\n").find((l) => l.startsWith("event:")) || "").slice(6).trim();
        if (!data) continue;
        if (kind === "error") { showError(new APIError(0, JSON.parse(data)), "follow the log"); continue; }
        const e = JSON.parse(data);
        seen++;
        if (!want || e.event_type === want) {
          shown++;
          tbody.prepend(...eventRows(e, "follow-event"));
          while (tbody.rows.length > 400) tbody.lastElementChild.remove();
        }
        stateText();
      }
    }
    state.dataset.state = "ended";
    state.textContent = "the stream ended (" + seen + " events received); press Follow to resume";
  } catch (err) {
    if (err.name === "AbortError") return;
    state.dataset.state = "failed";
    state.textContent = "not following";
    showError(err, "follow the log");
  } finally {
    if (follow && follow.abort === ctl) {
      follow = null;
      $("#follow-start").disabled = false;
      $("#follow-stop").disabled = true;
    }
  }
}

function stopFollow() {
  if (!follow) return;
  follow.abort.abort();
  follow = null;
  $("#follow-start").disabled = false;
  $("#follow-stop").disabled = true;
  const state = $("#follow-state");
  state.dataset.state = "stopped";
  state.textContent = "stopped";
}

function initStreams() {
  $("#api-token").value = sessionStorage.getItem(API_TOKEN_KEY) || "";
  $("#api-token").addEventListener("change", () => {
    const t = $("#api-token").value.trim();
    if (t) sessionStorage.setItem(API_TOKEN_KEY, t); else sessionStorage.removeItem(API_TOKEN_KEY);
  });
  $("#stream-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    streamPages = [""];
    const h = "#/streams/" + encodeURIComponent($("#stream-type").value.trim()) + "/" + encodeURIComponent($("#stream-id").value.trim());
    if (location.hash === h) showStream($("#stream-type").value.trim(), $("#stream-id").value.trim()); else location.hash = h;
  });
  $("#follow-start").addEventListener("click", followLog);
  $("#follow-stop").addEventListener("click", stopFollow);
}

// ---- dead letters -----------------------------------------------------

function letterID(l) {
  if (l.id) return l.id;
  if (l.letter) return l.letter;
  return l.partition + ":" + l.offset;
}

async function showDLQ() {
  const body = $("#dlq-body");
  const sel = $("#dlq-topic");
  try {
    if (sel.options.length === 0) {
      // The dead-letter topics and their open letters, from the overview.
      const ov = await admin.overview();
      const topics = Array.isArray(ov.dlq) ? ov.dlq : [];
      sel.replaceChildren(...topics.map((c) => el("option", { value: c.topic }, c.topic + " (" + (c.open ?? c.total ?? 0) + " open)")));
      const open = topics.find((c) => c.open > 0);
      if (open) sel.value = open.topic;
    }
    const res = await admin.dlq(sel.value, $("#dlq-all").checked);
    showError(null);
    if (Array.isArray(res.topics) && sel.options.length === 0) {
      sel.replaceChildren(...res.topics.map((t) => el("option", { value: t.topic || t }, (t.topic || t) + (t.count !== undefined ? " (" + t.count + ")" : ""))));
    }
    const topic = res.topic || sel.value;
    const letters = res.letters || [];
    body.replaceChildren(
      el("p", { class: "muted" }, (topic ? topic + ": " : "") + letters.length + " letters shown" + (res.hidden ? ", " + res.hidden + " handled hidden" : "")),
      letters.length ? el("table", { class: "letters" },
        el("thead", {}, el("tr", {}, ["letter", "state", "handler", "event", "class", "attempts", "error", "failed at", ""].map((c) => el("th", {}, c)))),
        el("tbody", {}, letters.map((l) => {
          const r = l.record || l;
          const id = letterID(l);
          return el("tr", { "data-letter": id, "data-state": l.state || "" },
            el("td", {}, id), el("td", {}, badge(l.state || "dead")), el("td", {}, r.handler || ""),
            el("td", {}, r.event_id ? el("a", { href: "#/trace/" + encodeURIComponent(r.event_id) }, r.event_id) : ""),
            el("td", {}, r.error_class || r.reason || ""), el("td", { class: "num" }, r.attempts ?? ""),
            el("td", {}, String(r.error || r.last_error || "").slice(0, 160)),
            el("td", {}, fmtTime(r.failed_at || l.produced_at)),
            el("td", {},
              el("button", { class: "small redrive", type: "button", onclick: () => act("redrive", topic, id) }, "Redrive…"), " ",
              el("button", { class: "small drop", type: "button", onclick: () => act("drop", topic, id) }, "Drop…")));
        }))) : el("p", {}, "No dead letters."));
  } catch (err) {
    body.replaceChildren();
    showError(err);
  }
}

// act redrives or drops a dead letter: dry run, preview, confirm.
function act(kind, topic, letter) {
  return confirmAction({
    action: kind,
    title: (kind === "redrive" ? "Redrive " : "Drop ") + letter + " of " + topic + "?",
    reason: kind === "drop",
    dryRun: () => (kind === "redrive" ? admin.redrive(topic, letter, true) : admin.drop(topic, letter, "", true)),
    run: (reason) => (kind === "redrive" ? admin.redrive(topic, letter, false) : admin.drop(topic, letter, reason, false)),
    done: async (res) => {
      await showDLQ();
      $("#dlq-body").prepend(el("div", { class: "result", "data-action": kind }, kind + " of " + letter + " done: " + summary(res)));
    },
  });
}

// confirmAction runs an action as a dry run, shows its preview (a sentence
// and the API's answer) and runs it for real only when the operator
// presses Confirm; a failure of either call is shown from its
// problem+json body. reason asks for a reason in the dialog.
//
// One action at a time: a second button pressed while an action is in its
// dry run, its dialog or its real call is refused with a message, so that
// one Confirm can never run an action whose preview was not the one shown.
async function confirmAction(opts) {
  const dlg = $("#confirm");
  if (dlg.dataset.busy === "1") {
    showError(new Error("another action is in progress: finish or cancel it first"), opts.title.replace(/\?$/, ""));
    return;
  }
  dlg.dataset.busy = "1";
  try {
    await confirmOne(dlg, opts);
  } finally {
    delete dlg.dataset.busy;
  }
}

async function confirmOne(dlg, { action, title, dryRun, run, reason = false, done }) {
  let preview;
  try {
    preview = await dryRun();
  } catch (err) {
    showError(err, title.replace(/\?$/, "") + " (dry run)");
    return;
  }
  showError(null);
  $("#result").hidden = true;
  dlg.dataset.action = action;
  $("#confirm-title").textContent = title;
  $("#confirm-summary").textContent = describe(action, preview);
  $("#confirm-preview").textContent = JSON.stringify(preview, null, 2);
  $("#confirm-reason-label").hidden = !reason;
  $("#confirm-reason").value = "";
  dlg.returnValue = "";
  dlg.showModal();
  const answer = await new Promise((resolve) => dlg.addEventListener("close", () => resolve(dlg.returnValue), { once: true }));
  if (answer !== "ok") return;
  try {
    const res = await run($("#confirm-reason").value.trim());
    showError(null);
    if (done) await done(res);
    else showResult(action, title.replace(/\?$/, "") + " — done: " + describe(action, res));
  } catch (err) {
    showError(err, title.replace(/\?$/, ""));
  }
}

// describe says in one sentence what a dry run would do (or an action did).
function describe(action, r) {
  if (!r || typeof r !== "object") return String(r);
  const would = r.dry_run ? "would " : "";
  switch (action) {
    case "relay.checkpoint.set": {
      const p = r.plan || {};
      return (r.moved ? "moved" : "would move") + " the relay checkpoint from " + r.from + " to " + r.to + " (head " + p.head +
        "): republish " + (p.republish || 0) + ", skip " + (p.skip || 0) + ", drop " + (p.dropped_gaps || 0) + " pending gaps";
    }
    case "consumer.pause":
    case "consumer.resume": {
      const verb = action === "consumer.pause" ? "pause" : "resume";
      if (!r.changed) return "no change: " + r.group + " is already " + (r.before && r.before.paused ? "paused" : "running");
      const was = r.before && r.before.paused ? "paused" : "running";
      return r.dry_run ? "would " + verb + " " + r.group + " (now " + was + ")" : verb + "d " + r.group + " (was " + was + ")";
    }
    case "consumer.reset": {
      const ps = (r.partitions || []).map((p) => JSON.stringify(p)).join("; ");
      return (r.committed ? "reset" : "would reset") + " " + r.group + " to " + r.to + " on " + (r.partitions || []).length + " partitions" +
        ((r.members || []).length ? "; live members: " + r.members.join(", ") : "") + (ps ? " — " + ps : "");
    }
    case "relay.parked.republish":
    case "relay.parked.drop":
      return would + (action.endsWith("republish") ? "republish" : "drop") + " parked position " + r.position + " (" + r.topic + ", " + r.reason + ")" +
        (r.republished ? ": republished" : r.dropped ? ": dropped" : "");
    case "projection.rebuild":
      if (r.job) return "started job " + r.job + " (progress below)";
      return "would build " + (r.plan ? r.plan.projection + " v" + r.plan.version + " into " + (r.plan.indices || []).join(", ") + " with group " + r.plan.group : "");
    case "projection.rollback":
      if (r.job) return "started job " + r.job + " (progress below)";
      return "would roll back from v" + r.from + " to v" + r.to + "; indices now: " + (r.indices || []).map((i) => i.index + " v" + i.version + (i.live ? " (live)" : "")).join(", ");
    case "verify":
      if (r.dry_run) return "would compare " + r.compares;
      return "verified " + r.db + "/" + r.class + " against " + r.index + ": " + r.instances + " instances, " + r.ok + " ok, " + r.missing + " missing, " +
        r.stale + " stale, " + r.extra + " extra, " + r.mismatch + " mismatched (" + r.duration_ms + " ms)";
  }
  return summary(r);
}

function summary(r) {
  if (!r || typeof r !== "object") return String(r);
  const keys = ["redriven", "Redriven", "dropped", "Dropped", "skipped", "Skipped", "failed", "Failed"];
  const parts = keys.filter((k) => r[k] !== undefined).map((k) => k.toLowerCase() + " " + r[k]);
  return parts.length ? parts.join(", ") : JSON.stringify(r);
}

// ---- actions ----------------------------------------------------------

let jobsTimer = null;

// pauseGroup pauses or resumes a worker group: dry run, preview, confirm
// (with a reason), then the overview shows the new state.
function pauseGroup(group, paused) {
  const action = paused ? "consumer.pause" : "consumer.resume";
  return confirmAction({
    action,
    title: (paused ? "Pause " : "Resume ") + group + "?",
    reason: paused,
    dryRun: () => admin.pause(group, paused, "", true),
    run: (reason) => admin.pause(group, paused, reason, false),
    done: async (res) => {
      showResult(action, describe(action, res));
      if (!$("#view-overview").hidden) await refreshOverview();
      if (!$("#view-actions").hidden) await showActions();
    },
  });
}

function checkpointTarget() {
  const pos = $("#cp-position").value.trim();
  const time = $("#cp-time").value.trim();
  return pos !== "" ? { position: Number(pos) } : time !== "" ? { time } : {};
}

function resetBody() {
  const body = { to: $("#reset-to").value.trim(), force: $("#reset-force").checked };
  const g = ((lastOverview && lastOverview.groups) || []).find((x) => x.group === $("#group-name").value);
  if (g && g.topic) body.topic = g.topic;
  return body;
}

function switchBody(rebuild) {
  const body = {};
  const settle = $("#proj-settle").value.trim();
  if (settle) body.settle = settle;
  if (rebuild) body.version = Number($("#proj-version").value || 0);
  return body;
}

function verifyBody() {
  const body = { db: $("#verify-db").value.trim(), class: $("#verify-class").value.trim() };
  const v = $("#verify-version").value.trim();
  if (v) body.index_version = Number(v);
  return body;
}

// showActions fills the selects from the overview, lists the parked
// records and follows the jobs while one runs.
// refresh is true when the jobs timer calls it: like the overview's
// refresh, it then clears only an error it showed itself, never an
// action's message.
async function showActions(refresh) {
  try {
    const ov = await admin.overview();
    lastOverview = ov;
    if (!refresh || $("#error").dataset.from === "actions") showError(null);
    fillSelect($("#group-name"), (ov.groups || []).map((g) => [g.group, g.group + " (" + (g.pause_state || (g.paused ? "paused" : "running")) + ", lag " + (g.lag ?? 0) + ")"]));
    fillSelect($("#proj-name"), (ov.projections || []).map((p) => [p.name, p.name + " (live v" + p.live + ", code v" + p.code_version + ")"]));
    const proj = (ov.projections || []).find((p) => p.name === $("#proj-name").value);
    if (proj && !$("#proj-version").value) $("#proj-version").value = Math.max(proj.code_version, ...(proj.versions || [0])) + 1;
    if (!$("#cp-position").value && !$("#cp-time").value && ov.relay) $("#cp-position").placeholder = "now " + ov.relay.checkpoint + ", head " + (ov.store ? ov.store.head : "?");
    $("#jobs").replaceChildren(jobsView(ov.jobs || []));
    followJobs((ov.jobs || []).some((j) => !j.ended_at));
  } catch (err) {
    showError(err);
    $("#error").dataset.from = "actions";
  }
  await showParked();
}

// fillSelect replaces a select's options, keeping the chosen value.
function fillSelect(sel, options) {
  const keep = sel.value;
  sel.replaceChildren(...options.map(([v, label]) => el("option", { value: v }, label)));
  if (options.some(([v]) => v === keep)) sel.value = keep;
}

// followJobs refreshes the jobs every REFRESH_MS while one runs and the
// actions view is open.
function followJobs(running) {
  if (jobsTimer || !running) return;
  jobsTimer = setInterval(async () => {
    if ($("#view-actions").hidden) { clearInterval(jobsTimer); jobsTimer = null; return; }
    try {
      const ov = await admin.overview();
      $("#jobs").replaceChildren(jobsView(ov.jobs || []));
      if (!(ov.jobs || []).some((j) => !j.ended_at)) {
        clearInterval(jobsTimer);
        jobsTimer = null;
        await showActions(true); // the projections' versions after the switch
      }
    } catch (err) {
      showError(err);
    }
  }, REFRESH_MS);
}

async function showParked() {
  const body = $("#parked-body");
  try {
    const list = (await admin.parked($("#parked-state").value)) || [];
    body.replaceChildren(list.length ? el("table", { class: "parked" },
      el("thead", {}, el("tr", {}, ["position", "event", "topic", "reason", "error", "attempts", "parked at", "state", ""].map((c) => el("th", {}, c)))),
      el("tbody", {}, list.map((p) => el("tr", { "data-position": p.position, "data-state": p.state },
        el("td", { class: "num" }, p.position), el("td", {}, p.event_id ? el("a", { href: "#/trace/" + encodeURIComponent(p.event_id) }, p.event_id) : ""),
        el("td", {}, p.topic), el("td", {}, p.reason), el("td", {}, String(p.error || "").slice(0, 160)), el("td", { class: "num" }, p.attempts),
        el("td", {}, fmtTime(p.parked_at)), el("td", {}, badge(p.state)),
        el("td", {}, p.state === "parked" ? [
          el("button", { class: "small republish", type: "button", onclick: () => resolveParked(p.position, "republish") }, "Republish…"), " ",
          el("button", { class: "small drop", type: "button", onclick: () => resolveParked(p.position, "drop") }, "Drop…")] : "")))))
      : el("p", { class: "muted" }, "No parked records."));
  } catch (err) {
    body.replaceChildren();
    showError(err);
  }
}

function resolveParked(position, kind) {
  const action = "relay.parked." + kind;
  return confirmAction({
    action,
    title: (kind === "republish" ? "Republish" : "Drop") + " parked position " + position + "?",
    dryRun: () => admin.parkedResolve(position, kind, true),
    run: () => admin.parkedResolve(position, kind, false),
    done: async (res) => { showResult(action, describe(action, res)); await showParked(); },
  });
}

function initActions() {
  $("#checkpoint-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const target = checkpointTarget();
    confirmAction({
      action: "relay.checkpoint.set",
      title: "Set the relay checkpoint to " + (target.position ?? target.time ?? "?") + "?",
      dryRun: () => admin.checkpoint(target, true),
      run: () => admin.checkpoint(target, false),
    });
  });
  $("#group-pause").addEventListener("click", () => pauseGroup($("#group-name").value, true));
  $("#group-resume").addEventListener("click", () => pauseGroup($("#group-name").value, false));
  $("#group-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const group = $("#group-name").value;
    const body = resetBody();
    confirmAction({
      action: "consumer.reset",
      title: "Reset " + group + " to " + body.to + "?",
      dryRun: () => admin.reset(group, body, true),
      run: () => admin.reset(group, body, false),
    });
  });
  for (const rebuild of [true, false]) {
    $(rebuild ? "#proj-rebuild" : "#proj-rollback").addEventListener("click", () => {
      const name = $("#proj-name").value;
      const body = switchBody(rebuild);
      const action = rebuild ? "projection.rebuild" : "projection.rollback";
      confirmAction({
        action,
        title: (rebuild ? "Rebuild " + name + " as v" + body.version : "Roll back " + name) + "?",
        dryRun: () => (rebuild ? admin.rebuild(name, body, true) : admin.rollback(name, body, true)),
        run: () => (rebuild ? admin.rebuild(name, body, false) : admin.rollback(name, body, false)),
        done: async (res) => { showResult(action, describe(action, res)); await showActions(); },
      });
    });
  }
  $("#verify-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = verifyBody();
    confirmAction({
      action: "verify",
      title: "Verify " + body.db + "/" + body.class + "?",
      dryRun: () => admin.verify(body, true),
      run: () => admin.verify(body, false),
      done: (res) => {
        showResult("verify", describe("verify", res));
        $("#verify-result").replaceChildren(el("div", { class: "verify-report", "data-db": res.db, "data-class": res.class }, render(res)));
      },
    });
  });
  $("#parked-state").addEventListener("change", showParked);
  $("#parked-refresh").addEventListener("click", showParked);
  $("#proj-name").addEventListener("change", () => { $("#proj-version").value = ""; showActions(); });
}

// ---- routing ----------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = ["overview", "trace", "aggregate", "streams", "dlq", "actions"].includes(parts[0]) ? parts[0] : "overview";
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "overview") startOverview(); else stopOverview();
  if (view === "trace") showTrace(parts.slice(1).join("/"));
  if (view === "aggregate") showAggregate(parts[1], parts.slice(2).join("/"));
  if (view === "streams") { streamPages = [""]; showStream(parts[1], parts.slice(2).join("/")); } else stopFollow();
  if (view === "dlq") showDLQ();
  if (view === "actions") showActions();
}

function tokenState() {
  $("#whoami").textContent = sessionStorage.getItem(TOKEN_KEY) ? "token set for this tab" : "no token";
}

function init() {
  $("#token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  tokenState();
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("#token").value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    tokenState();
    route();
  });
  $("#auto").addEventListener("change", () => startOverview());
  $("#period").textContent = REFRESH_MS / 1000;
  $("#window").textContent = WINDOW_MS / 60000;
  $("#trace-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = "#/trace/" + encodeURIComponent($("#trace-id").value.trim());
  });
  $("#agg-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = "#/aggregate/" + encodeURIComponent($("#agg-type").value.trim()) + "/" + encodeURIComponent($("#agg-id").value.trim());
  });
  $("#dlq-refresh").addEventListener("click", showDLQ);
  $("#dlq-topic").addEventListener("change", showDLQ);
  $("#dlq-all").addEventListener("change", showDLQ);
  initActions();
  initStreams();
  $("#details").addEventListener("toggle", () => { if ($("#details").open) refreshOverview(); });
  window.addEventListener("hashchange", route);
  route();
}

init();
