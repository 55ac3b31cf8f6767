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
  checkpoint: (target, dryRun) => call("POST", "/admin/v1/relay/checkpoint", { ...target, dry_run: dryRun }),
  parked: (state) => call("GET", "/admin/v1/relay/parked" + query({ state, limit: 100 })),
  parkedResolve: (position, kind, dryRun) => call("POST", "/admin/v1/relay/parked/" + encodeURIComponent(position) + "/" + kind, { dry_run: dryRun }),
  pause: (group, paused, reason, dryRun) => call("POST", "/admin/v1/consumers/" + encodeURIComponent(group) + (paused ? "/pause" : "/resume"), { reason, dry_run: dryRun }),
  reset: (group, body, dryRun) => call("POST", "/admin/v1/consumers/" + encodeURIComponent(group) + "/reset", { ...body, dry_run: dryRun }),
  rebuild: (name, body, dryRun) => call("POST", "/admin/v1/projections/" + encodeURIComponent(name) + "/rebuild", { ...body, dry_run: dryRun }),
  rollback: (name, body, dryRun) => call("POST", "/admin/v1/projections/" + encodeURIComponent(name) + "/rollback", { ...body, dry_run: dryRun }),
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

const series = new Map(); // name → [{t, v}]
let timer = null;
let lastOverview = null;

// pauseBadge shows a group's operator pause flag (unknown when the
// registry could not be read).
function pauseBadge(g) {
  if (g.paused === undefined || g.paused === null) return el("span", { class: "state unknown", title: g.pause_error || "" }, "unknown");
  return el("span", { class: "state " + (g.paused ? "paused" : "running") }, g.paused ? "paused" : "running");
}

// groupsTable lists the worker groups with their lag and pause state, and
// the buttons to pause or resume each (dry run, then confirm).
function groupsTable(groups) {
  if (!groups.length) return el("p", { class: "muted" }, "no worker groups");
  return el("table", { class: "groups" },
    el("thead", {}, el("tr", {}, ["group", "handler", "topic", "lag", "members", "state", "pause", "paused by / reason / since", ""].map((c) => el("th", {}, c)))),
    el("tbody", {}, groups.map((g) => el("tr", { "data-group": g.group, "data-paused": g.paused === undefined ? "unknown" : String(g.paused) },
      el("td", {}, g.group), el("td", {}, g.handler), el("td", {}, g.topic), el("td", { class: "num" }, (g.lag ?? 0).toLocaleString("en-US")),
      el("td", { class: "num" }, g.members ?? 0), el("td", {}, g.state || (g.error ? "error" : "")),
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
      const lag = sum.Lag || {};
      return "done: v" + sum.From + " → v" + sum.To + " · " + (lag.End || 0) + " records · " + Math.round((sum.Elapsed || 0) / 1e6) + " ms";
    }
    const p = j.progress;
    if (!p) return j.ended_at ? "" : "starting";
    const lag = p.Lag || {};
    const pct = lag.End > 0 ? Math.round((100 * (lag.End - lag.Lag)) / lag.End) : 100;
    return (p.Phase || "") + " · " + (lag.End - lag.Lag || 0) + "/" + (lag.End || 0) + " records (" + pct + "%) · lag " + (lag.Lag || 0);
  };
  return el("table", { class: "jobs" },
    el("thead", {}, el("tr", {}, ["job", "kind", "projection", "started", "progress", "ended", "result"].map((c) => el("th", {}, c)))),
    el("tbody", {}, [...jobs].sort((a, b) => String(b.started_at).localeCompare(String(a.started_at))).map((j) =>
      el("tr", { "data-job": j.id, "data-state": j.error ? "failed" : j.ended_at ? "done" : "running" },
        el("td", {}, j.id), el("td", {}, j.kind), el("td", {}, j.projection + (j.version ? " v" + j.version : "")),
        el("td", {}, fmtTime(j.started_at)), el("td", {}, progress(j)), el("td", {}, fmtTime(j.ended_at)),
        el("td", {}, j.error ? el("span", { class: "error-text" }, j.error) : j.ended_at ? badge("done") : badge("processing"))))));
}

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
    lastOverview = ov;
    $("#groups").replaceChildren(groupsTable(ov.groups || []));
    $("#overview-jobs").replaceChildren(jobsView(ov.jobs || []));
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
      return "would roll back to the previous version; indices now: " + (r.indices || []).map((i) => i.Index + " v" + i.Version + (i.Live ? " (live)" : "")).join(", ");
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
async function showActions() {
  try {
    const ov = await admin.overview();
    lastOverview = ov;
    showError(null);
    fillSelect($("#group-name"), (ov.groups || []).map((g) => [g.group, g.group + " (" + (g.paused ? "paused" : "running") + ", lag " + (g.lag ?? 0) + ")"]));
    fillSelect($("#proj-name"), (ov.projections || []).map((p) => [p.name, p.name + " (live v" + p.live + ", code v" + p.code_version + ")"]));
    const proj = (ov.projections || []).find((p) => p.name === $("#proj-name").value);
    if (proj && !$("#proj-version").value) $("#proj-version").value = Math.max(proj.code_version, ...(proj.versions || [0])) + 1;
    if (!$("#cp-position").value && !$("#cp-time").value && ov.relay) $("#cp-position").placeholder = "now " + ov.relay.checkpoint + ", head " + (ov.store ? ov.store.head : "?");
    $("#jobs").replaceChildren(jobsView(ov.jobs || []));
    followJobs((ov.jobs || []).some((j) => !j.ended_at));
  } catch (err) {
    showError(err);
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
        await showActions(); // the projections' versions after the switch
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
      el("tbody", {}, list.map((p) => el("tr", { "data-position": p.Position, "data-state": p.State },
        el("td", { class: "num" }, p.Position), el("td", {}, p.EventID ? el("a", { href: "#/trace/" + encodeURIComponent(p.EventID) }, p.EventID) : ""),
        el("td", {}, p.Topic), el("td", {}, p.Reason), el("td", {}, String(p.Error || "").slice(0, 160)), el("td", { class: "num" }, p.Attempts),
        el("td", {}, fmtTime(p.ParkedAt)), el("td", {}, badge(p.State)),
        el("td", {}, p.State === "parked" ? [
          el("button", { class: "small republish", type: "button", onclick: () => resolveParked(p.Position, "republish") }, "Republish…"), " ",
          el("button", { class: "small drop", type: "button", onclick: () => resolveParked(p.Position, "drop") }, "Drop…")] : "")))))
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
  const view = ["overview", "trace", "aggregate", "dlq", "actions"].includes(parts[0]) ? parts[0] : "overview";
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "overview") startOverview(); else stopOverview();
  if (view === "trace") showTrace(parts.slice(1).join("/"));
  if (view === "aggregate") showAggregate(parts[1], parts.slice(2).join("/"));
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
  window.addEventListener("hashchange", route);
  route();
}

init();
