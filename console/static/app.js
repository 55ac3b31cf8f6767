// sluice console: one ES module, no dependencies, no build step.
// Every piece of data comes from the admin API (/admin/v1/); the token the
// operator enters is kept in sessionStorage (gone with the tab) and sent as
// a bearer token. See docs/console.md.

const TOKEN_KEY = "sluice.admin.token";
const REFRESH_MS = 2000;
const WINDOW_MS = 10 * 60 * 1000;
const MAX_CHARTS = 12;

// The admin API as the console uses it: one place to adapt to its contract.
const admin = {
  overview: () => call("GET", "/admin/v1/overview"),
  trace: (id) => call("GET", "/admin/v1/trace/" + encodeURIComponent(id)),
  aggregate: (type, id) => call("GET", "/admin/v1/aggregates/" + encodeURIComponent(type) + "/" + encodeURIComponent(id)),
  dlq: (topic, all) => call("GET", "/admin/v1/dlq" + query({ topic, all: all ? "true" : "" })),
  redrive: (topic, letter, dryRun) => call("POST", "/admin/v1/dlq/redrive", { topic, letter, dry_run: dryRun }),
  drop: (topic, letter, reason, dryRun) => call("POST", "/admin/v1/dlq/drop", { topic, letter, reason, dry_run: dryRun }),
};

const $ = (sel, root = document) => root.querySelector(sel);

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

class APIError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.error || body.title)) || "HTTP " + status);
    this.status = status;
    this.body = body;
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

function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  let msg = err.message || String(err);
  if (err.status === 401) msg = "401: the admin API wants a token — enter SLUICE_ADMIN_TOKEN or SLUICE_ADMIN_READ_TOKEN above. (" + msg + ")";
  else if (err.status === 403) msg = "403: this token may only read; actions need the operator token. (" + msg + ")";
  box.textContent = msg;
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

const series = new Map(); // name → [{t, v}]
let timer = null;

// lagFigures walks the overview for every number whose key says lag, named
// by its path (array items by their group, name or topic/partition).
function lagFigures(v, path = [], out = new Map()) {
  if (Array.isArray(v)) {
    v.forEach((x, i) => {
      let id = i;
      if (x && typeof x === "object") {
        id = x.group || x.name || x.handler || x.projection || (x.topic !== undefined && x.partition !== undefined ? x.topic + "[" + x.partition + "]" : x.topic) || i;
      }
      lagFigures(x, [...path, id], out);
    });
  } else if (v && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) {
      if (typeof x === "number" && /lag/i.test(k)) out.set([...path, k].join(" / "), x);
      else if (typeof x === "object") lagFigures(x, k === "partitions" ? path.concat("p") : [...path, k], out);
    }
  }
  return out;
}

// headline picks the numbers an operator reads first: every number at the
// first two levels of the overview.
function headline(ov) {
  const out = [];
  for (const [k, v] of Object.entries(ov || {})) {
    if (typeof v === "number") out.push([k, v]);
    else if (v && typeof v === "object" && !Array.isArray(v)) {
      for (const [k2, v2] of Object.entries(v)) if (typeof v2 === "number") out.push([k + " " + k2, v2]);
    }
  }
  return out;
}

function chart(name, points) {
  const now = Date.now();
  const w = 300, h = 60;
  const max = Math.max(1, ...points.map((p) => p.v));
  const xy = points.map((p) => [((p.t - (now - WINDOW_MS)) / WINDOW_MS) * w, h - (p.v / max) * (h - 4) - 2]);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", name);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", xy.map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" "));
  svg.append(line);
  const last = points.length ? points[points.length - 1].v : 0;
  return el("div", { class: "chart", "data-series": name },
    el("div", { class: "t" }, el("span", {}, name), el("b", { class: "lag-value" }, last.toLocaleString("en-US"))),
    svg,
    el("div", { class: "t muted" }, el("span", {}, "−10 min"), el("span", {}, "max " + max.toLocaleString("en-US"))));
}

async function refreshOverview() {
  try {
    const ov = await admin.overview();
    showError(null);
    const now = Date.now();
    for (const [name, v] of lagFigures(ov)) {
      const pts = series.get(name) || [];
      pts.push({ t: now, v });
      while (pts.length && pts[0].t < now - WINDOW_MS) pts.shift();
      series.set(name, pts);
    }
    $("#figures").replaceChildren(...headline(ov).map(([k, v]) =>
      el("div", { class: "figure", "data-key": k }, el("div", { class: "v" }, v.toLocaleString("en-US")), el("div", { class: "k" }, k))));
    const names = [...series.keys()].sort((a, b) => a.split("/").length - b.split("/").length || a.localeCompare(b)).slice(0, MAX_CHARTS);
    $("#charts").replaceChildren(...(names.length ? names.map((n) => chart(n, series.get(n))) : [el("p", { class: "muted" }, "no lag figures in the overview")]));
    $("#overview-body").replaceChildren(render(ov));
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    showError(err);
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
          el("span", { class: "muted" }, e.aggregate_type + " " + e.aggregate_id + " · slot " + e.sequence_number + " · ", el("code", {}, e.event_id)), " ",
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

// act runs an action as a dry run, shows its preview and runs it for real
// only when the operator confirms.
async function act(kind, topic, letter) {
  const dlg = $("#confirm");
  const needsReason = kind === "drop";
  try {
    const preview = kind === "redrive" ? await admin.redrive(topic, letter, true) : await admin.drop(topic, letter, "", true);
    showError(null);
    $("#confirm-title").textContent = (kind === "redrive" ? "Redrive " : "Drop ") + letter + " of " + topic + "?";
    $("#confirm-preview").textContent = JSON.stringify(preview, null, 2);
    $("#confirm-reason-label").hidden = !needsReason;
    $("#confirm-reason").value = "";
    dlg.returnValue = "";
    dlg.showModal();
    const answer = await new Promise((resolve) => dlg.addEventListener("close", () => resolve(dlg.returnValue), { once: true }));
    if (answer !== "ok") return;
    const done = kind === "redrive" ? await admin.redrive(topic, letter, false) : await admin.drop(topic, letter, $("#confirm-reason").value, false);
    await showDLQ();
    $("#dlq-body").prepend(el("div", { class: "result", "data-action": kind }, kind + " of " + letter + " done: " + summary(done)));
  } catch (err) {
    showError(err);
  }
}

function summary(r) {
  if (!r || typeof r !== "object") return String(r);
  const keys = ["redriven", "Redriven", "dropped", "Dropped", "skipped", "Skipped", "failed", "Failed"];
  const parts = keys.filter((k) => r[k] !== undefined).map((k) => k.toLowerCase() + " " + r[k]);
  return parts.length ? parts.join(", ") : JSON.stringify(r);
}

// ---- routing ----------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = ["overview", "trace", "aggregate", "dlq"].includes(parts[0]) ? parts[0] : "overview";
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "overview") startOverview(); else stopOverview();
  if (view === "trace") showTrace(parts.slice(1).join("/"));
  if (view === "aggregate") showAggregate(parts[1], parts.slice(2).join("/"));
  if (view === "dlq") showDLQ();
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
  window.addEventListener("hashchange", route);
  route();
}

init();
