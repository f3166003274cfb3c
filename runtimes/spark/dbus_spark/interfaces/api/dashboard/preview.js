// The dashboard's preview: pick a deployment, and the runtime runs its deployed and its
// previous version over the newest events it kept of the deployment's tables
// (GET /api/v1/preview/NAME?against=previous); each event's two outcomes are shown
// side by side, the changed ones first, under a summary of what changes.
"use strict";

(function () {
  const form = document.getElementById("preview-form");
  const select = document.getElementById("preview-deployment");
  const summary = document.getElementById("preview-summary");
  const table = document.getElementById("preview-events-table");
  const headers = token ? { Authorization: `Bearer ${token}` } : {};

  async function ask(path) {
    const answer = await fetch(path, { headers });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) throw new Error(body.detail || `${answer.status} ${answer.statusText}`);
    return body;
  }

  async function fillDeployments() {
    try {
      const deployments = await ask("api/v1/deployments");
      const chosen = select.value;
      select.replaceChildren(...deployments.map(d =>
        el("option", { value: d.name }, `${d.name} ${d.version}`)));
      if (chosen) select.value = chosen;
    } catch (error) {
      summary.textContent = `no deployments yet: ${error.message}`;
    }
  }

  function outcomeText(outcome) {
    if (!outcome.subscribed) return "not subscribed to this table";
    if (outcome.filtered && !outcome.sent.length) return "filtered out";
    if (!outcome.sent.length) return "sends nothing";
    return outcome.sent.map(s => s.dead_letter
      ? `dead letter to ${s.destination}: ${s.error}`
      : `${s.destination} ${JSON.stringify(s.row)}`).join("\n");
  }

  function summaryLines(comparison) {
    const s = comparison.summary;
    const lines = [`${s.changed} of ${s.events} events change (${comparison.left} → ${comparison.right})`];
    if (s.routes_appear.length) lines.push(`routes that appear: ${s.routes_appear.join(", ")}`);
    if (s.routes_vanish.length) lines.push(`routes that vanish: ${s.routes_vanish.join(", ")}`);
    if (s.fields_added.length) lines.push(`fields added: ${s.fields_added.join(", ")}`);
    if (s.fields_removed.length) lines.push(`fields removed: ${s.fields_removed.join(", ")}`);
    if (s.new_dead_letters) lines.push(`events newly dead-lettered: ${s.new_dead_letters}`);
    return lines;
  }

  function show(comparison) {
    summary.replaceChildren(...summaryLines(comparison).map(line => el("span", { class: "line" }, line, el("br"))));
    document.getElementById("preview-left").textContent = comparison.left;
    document.getElementById("preview-right").textContent = comparison.right;
    const rows = comparison.events.slice().sort((a, b) => b.changed - a.changed);
    table.tBodies[0].replaceChildren(...rows.map(({ event, changed, left, right }) => {
      const key = Object.entries(event.key).map(([k, v]) => `${k}=${v}`).join(",");
      return el("tr", { class: changed ? "changed" : "same", "data-event": event.id },
        el("td", {}, `${event.op} ${event.table} ${key}`),
        el("td", { class: "left" }, outcomeText(left)),
        el("td", { class: "right" }, outcomeText(right)));
    }));
    table.hidden = false;
  }

  form.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const limit = document.getElementById("preview-events").value || 100;
    summary.textContent = "running…";
    table.hidden = true;
    try {
      const answer = await ask(`api/v1/preview/${encodeURIComponent(select.value)}?against=previous&limit=${limit}`);
      if (!answer.events.length) {
        summary.textContent = `nothing to preview: ${answer.empty}`;
      } else if (!answer.previous || !answer.previous.comparison) {
        summary.textContent = `no previous version to compare with: ${answer.previous ? answer.previous.why_none : "none"}`;
      } else {
        show(answer.previous.comparison);
      }
    } catch (error) {
      summary.textContent = `preview failed: ${error.message}`;
    }
  });

  select.addEventListener("focus", fillDeployments);
  fillDeployments();
})();
