// The dbus runtime dashboard: polls /api/v1/state and draws it. No build step, no
// dependencies. A token, when the runtime asks for one, is given as #token=... in the URL.
"use strict";

const POLL_MS = 2000;
const COLUMNS = ["source", "table", "deployment", "destination"];
const token = new URLSearchParams(location.hash.slice(1)).get("token");

function el(tag, attrs = {}, ...children) {
  const svg = ["svg", "g", "rect", "text", "path", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag)
                   : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function number(value) {
  if (value === null || value === undefined) return "–";
  if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (Math.abs(value) >= 1e4) return (value / 1e3).toFixed(1) + "k";
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 60) return value.toFixed(value < 10 ? 1 : 0) + " s";
  if (value < 3600) return (value / 60).toFixed(0) + " min";
  return (value / 3600).toFixed(1) + " h";
}

function drawFlow(topology) {
  const svg = document.getElementById("flow");
  svg.replaceChildren();
  const width = svg.clientWidth || 900;
  const nodeWidth = Math.min(220, width / 4 - 40);
  const rowHeight = 46;
  const place = {};
  let rows = 1;
  COLUMNS.forEach((kind, column) => {
    const nodes = topology.nodes.filter((node) => node.kind === kind);
    rows = Math.max(rows, nodes.length);
    nodes.forEach((node, row) => {
      place[node.id] = { x: 10 + column * (width - nodeWidth - 20) / 3, y: 10 + row * rowHeight };
    });
  });
  svg.setAttribute("height", String(20 + rows * rowHeight));
  for (const edge of topology.edges) {
    const from = place[edge.source], to = place[edge.target];
    if (!from || !to) continue;
    const x1 = from.x + nodeWidth, y1 = from.y + 16, x2 = to.x, y2 = to.y + 16;
    const mid = (x1 + x2) / 2;
    const rate = edge.rate ?? 0;
    const path = el("path", {
      class: rate > 0 ? "edge" : "edge idle",
      d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
      "stroke-width": String(1.5 + Math.min(8, Math.log10(1 + rate) * 2.5)),
      "data-edge": `${edge.source}->${edge.target}`,
    }, el("title", {}, `${number(edge.count)} since start`));
    svg.append(path);
    svg.append(el("text", {
      class: "rate", x: String(mid - 20), y: String((y1 + y2) / 2 - 4),
      "data-edge": `${edge.source}->${edge.target}`, "data-rate": String(rate),
    }, edge.rate === null ? "" : `${number(edge.rate)}/s`));
  }
  for (const node of topology.nodes) {
    const at = place[node.id];
    if (!at) continue;
    const label = node.label.length > 30 ? node.label.slice(0, 29) + "…" : node.label;
    svg.append(el("g", { class: `node ${node.kind}`, "data-id": node.id,
                         transform: `translate(${at.x},${at.y})` },
      el("rect", { width: String(nodeWidth), height: "32" }),
      el("text", { x: "10", y: "20" }, label),
      el("title", {}, `${node.kind} ${node.label}`)));
  }
}

function drawSources(sources) {
  const body = document.querySelector("#sources tbody");
  body.replaceChildren(...sources.map((s) => {
    const lag = s.lag_seconds;
    const state = !s.up ? "bad" : lag === null ? "" : lag > 60 ? "bad" : lag > 5 ? "warn" : "ok";
    return el("tr", { "data-source": s.name },
      el("td", {}, s.name),
      el("td", { class: "in-cluster", "data-field": "owner" }, s.owner ?? "–"),
      el("td", { class: `num ${state}`, "data-field": "lag_seconds" },
         s.up ? seconds(lag) : "down"),
      el("td", { class: "num", "data-field": "lag_bytes" },
         s.lag_bytes === null ? "–" : `${number(s.lag_bytes)} B`),
      el("td", { class: "muted" }, s.position ?? "–"),
      el("td", { class: "num" }, number(s.rows)));
  }));
}

function drawSinks(sinks) {
  const body = document.querySelector("#sinks tbody");
  body.replaceChildren(...sinks.map((s) => {
    const sent = Object.values(s.messages).reduce((a, b) => a + b, 0);
    return el("tr", { "data-sink": s.name },
      el("td", {}, s.name),
      el("td", { class: "num" }, number(sent)),
      el("td", { class: `num ${s.in_flight > 0 ? "warn" : ""}`, "data-field": "in_flight" },
         number(s.in_flight)),
      el("td", { class: `num ${s.retries > 0 ? "warn" : ""}`, "data-field": "retries" },
         number(s.retries)),
      el("td", { class: `num ${s.errors > 0 ? "bad" : ""}`, "data-field": "errors" },
         number(s.errors)));
  }));
}

// Where a deployment stands in its sources' streams: with them, or detached (why,
// and how far behind), catching up or paused (see dbus_spark.state.progress).
function pace(d) {
  const state = d.state || "with-stream";
  const look = { "with-stream": "ok", "catching-up": "warn", detached: "bad", paused: "muted" };
  const lag = d.lag_seconds === null || d.lag_seconds === undefined ? "" : ` ${seconds(d.lag_seconds)} behind`;
  const why = (d.pace || []).map((p) => p.reason).filter(Boolean).join("; ");
  return el("span", { class: `pace ${look[state] || ""}`, "data-field": "state", "data-state": state,
                      title: why },
    state === "with-stream" ? "with the stream" : `${state}${lag}`);
}

function drawDeployments(deployments) {
  const box = document.getElementById("deployments");
  box.replaceChildren(...deployments.map((d) => el("div", { class: "deployment", "data-name": d.name },
    el("div", {}, el("strong", {}, d.name), " ", el("span", { class: "muted" }, d.version || ""),
       " ", pace(d)),
    el("div", { class: "counts" },
      el("span", {}, "events ", el("b", { "data-field": "events" }, number(d.events))),
      el("span", {}, "delivered ", el("b", { "data-field": "delivered" }, number(d.delivered))),
      el("span", {}, "filtered ", el("b", { "data-field": "filtered" }, number(d.filtered))),
      el("span", { class: d.dead_letters ? "bad" : "" }, "dead letters ",
         el("b", { "data-field": "dead_letters" }, number(d.dead_letters)))),
    el("table", {},
      el("thead", {}, el("tr", {}, ...["function", "kind", "calls", "mean", "dead letters", "last error"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, ...d.functions.map((f) => el("tr", { "data-function": f.name },
        el("td", {}, f.name), el("td", { class: "muted" }, f.kind),
        el("td", { class: "num" }, number(f.calls)),
        el("td", { class: "num" }, f.calls ? `${(1e6 * f.seconds / f.calls).toFixed(0)} µs` : "–"),
        el("td", { class: `num ${f.dead_letters ? "bad" : ""}`, "data-field": "dead_letters" },
           number(f.dead_letters)),
        el("td", { class: "error", "data-field": "last_error" },
           f.last_error ? `${clock(f.last_error.at)} ${f.last_error.error}` : ""))))),
    ...recentErrors(d))));
}

function clock(at) {
  return new Date(at * 1000).toLocaleTimeString();
}

function recentErrors(deployment) {
  const errors = deployment.functions
    .flatMap((f) => (f.recent_errors ?? []).map((e) => ({ ...e, function: f.name })))
    .sort((a, b) => b.at - a.at);
  if (!errors.length) return [];
  const details = el("details", { class: "recent", "data-field": "recent_errors" },
    el("summary", {}, `recent dead letters (${errors.length})`),
    el("ul", {}, ...errors.map((e) => el("li", {},
      el("span", { class: "muted" }, `${clock(e.at)} ${e.function} · ${e.table} @ ${e.position} `),
      el("span", { class: "error" }, e.error)))));
  details.open = openRecent.has(deployment.name);
  details.addEventListener("toggle", () => {
    if (details.open) openRecent.add(deployment.name); else openRecent.delete(deployment.name);
  });
  return [details];
}

const openRecent = new Set();

function drawCluster(cluster) {
  document.body.classList.toggle("cluster", Boolean(cluster));
  document.getElementById("cluster").hidden = !cluster;
  if (!cluster) return;
  const answering = cluster.runtimes.filter((r) => r.answered).length;
  document.getElementById("cluster-summary").textContent =
    `${answering} of ${cluster.runtimes.length} answering · leader ${cluster.leader ?? "none"}` +
    ` · assignment epoch ${cluster.epoch}`;
  document.querySelector("#runtimes tbody").replaceChildren(...cluster.runtimes.map((r) =>
    el("tr", { "data-runtime": r.id },
      el("td", {}, r.id, r.id === cluster.leader ? el("span", { class: "muted" }, " leader") : ""),
      el("td", { class: "muted" }, `${r.host} pid ${r.pid}`),
      el("td", {}, r.sources.join(", ") || "–"),
      el("td", { class: "num" }, number(r.batches)),
      el("td", { class: "num" }, r.last_batch ? `${seconds(Date.now() / 1000 - r.last_batch)} ago` : "–"),
      el("td", { class: r.answered ? "ok" : "bad", "data-field": "answered" },
         r.answered ? "answering" : r.problem ?? "not answering"))));
}

function drawHistory(history) {
  if (!history.length) return;
  const box = document.getElementById("history");
  box.replaceChildren(...history.map((h) => {
    const of = Math.max(h.estimated_rows, h.rows, 1);
    const share = h.done ? 100 : Math.min(99, (100 * h.rows) / of);
    return el("div", { class: "task", "data-task": `${h.deployment}:${h.table}` },
      el("div", {}, `${h.kind} of ${h.table} for ${h.deployment}: ${number(h.rows)}`,
         h.done ? " rows, done" : ` of ~${number(h.estimated_rows)} rows`,
         el("span", { class: "muted" }, ` (${h.chunks} chunks)`)),
      el("div", { class: "bar" }, el("div", { style: `width:${share.toFixed(1)}%` })));
  }));
}

function drawHeader(state) {
  const age = state.last_batch ? Date.now() / 1000 - state.last_batch : null;
  document.getElementById("runtime").textContent =
    `${state.runtime || "runtime"} · up ${seconds(Date.now() / 1000 - state.started)} · ` +
    `${number(state.batches)} batches` + (age === null ? "" : ` · last ${seconds(age)} ago`);
  const lagging = state.sources.some((s) => !s.up || (s.lag_seconds ?? 0) > 60);
  const retrying = state.sinks.some((s) => s.in_flight > 0 && s.retries > 0);
  const pill = document.getElementById("status");
  const silent = (state.cluster?.runtimes ?? []).some((r) => !r.answered);
  pill.className = `pill ${lagging ? "bad" : retrying || silent ? "warn" : "ok"}`;
  pill.textContent = lagging ? "lagging" : retrying ? "sink retrying"
    : silent ? "a runtime is not answering" : "live";
}

async function poll() {
  try {
    const answer = await fetch("api/v1/state", {
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    });
    if (!answer.ok) throw new Error(`${answer.status} ${answer.statusText}`);
    const state = await answer.json();
    drawHeader(state);
    drawCluster(state.cluster);
    drawFlow(state.topology);
    drawSources(state.sources);
    drawSinks(state.sinks);
    drawDeployments(state.deployments);
    drawHistory(state.history);
    document.body.dataset.polled = String(Date.now());
  } catch (error) {
    const pill = document.getElementById("status");
    pill.className = "pill bad";
    pill.textContent = `unreachable: ${error.message}`;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
