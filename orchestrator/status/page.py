"""The live status page: one self-contained HTML document (no CDN, no build step).

Served at ``/`` by every sidecar and by ``catalog-upgrade status --serve``. Its script polls
``status`` every second (and ``status?coverage`` and ``history`` every ten), renders the catalog,
each process with the timeline of states and phases this page has seen it pass through, the
refusals and failures with their rule, field path and suggested fix, migration entries, coverage
and history. Everything is built with DOM calls and ``textContent``: values from ZooKeeper are
never parsed as HTML.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BEARER_SCRIPT", "STATUS_PAGE"]

#: The pages' one way to call their server: ``get(path)`` sends the bearer token the operator
#: typed into the ``#auth`` form (kept in the tab's memory only) and shows the form again on a
#: 401 or 403.
BEARER_SCRIPT: Final = """// The bearer token, if the server asks for one: in memory only.
let token = null;
const auth = document.getElementById("auth");
// A 401 or 403: the prompt is the whole answer, no error banner beside it.
class NeedsToken extends Error {}
auth.addEventListener("submit", (event) => {
  event.preventDefault();
  const field = document.getElementById("token");
  token = field.value.trim() || null;
  field.value = "";
  auth.hidden = true;
  document.dispatchEvent(new Event("token-given"));  // the page asks again at once
});
async function get(path) {
  const headers = token ? {"Authorization": "Bearer " + token} : {};
  const answer = await fetch(path, {cache: "no-store", headers: headers});
  if (answer.status === 401 || answer.status === 403) {
    token = null;
    auth.hidden = false;
    throw new NeedsToken(path + ": HTTP " + answer.status);
  }
  if (!answer.ok) throw new Error(path + ": HTTP " + answer.status);
  return answer.json();
}
// poll() once now and then every `every` ms, and at once when a token is given; `down` names
// what is unavailable in the banner.
function every(ms, poll, down) {
  let timer = null, running = false;
  async function run() {
    clearTimeout(timer);
    running = true;
    const banner = document.getElementById("banner");
    try {
      await poll();
      banner.className = ""; banner.textContent = "";
    } catch (err) {
      const asked = err instanceof NeedsToken;
      banner.className = asked ? "" : "down";
      banner.textContent = asked ? "" : down + " unavailable: " + err.message;
    } finally {
      running = false;
    }
    timer = setTimeout(run, ms);
  }
  document.addEventListener("token-given", () => { if (!running) run(); });
  run();
}
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>catalog-upgrade status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d232a; background: #fafbfc; }
  h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; width: 100%; background: #fff; }
  th, td { border: 1px solid #dde2e8; padding: .3em .5em; text-align: left; vertical-align: top; }
  th { background: #eef1f5; font-weight: 600; }
  .muted { color: #6a737d; } .mono { font-family: ui-monospace, monospace; font-size: 12px; }
  .state { font-weight: 600; padding: 0 .4em; border-radius: 3px; }
  .serving { background: #c9f2d0; } .ready { background: #dff6e3; }
  .checking { background: #d9ecff; } .migrating { background: #fff1c2; }
  .fenced { background: #f3d9f7; } .failed { background: #ffd6d6; }
  .starting { background: #eceff3; }
  .chip { display: inline-block; margin: 0 .3em .2em 0; padding: 0 .4em; border-radius: 3px;
          background: #eef1f5; font-size: 12px; }
  .bad { color: #b00020; } .ok { color: #137333; }
  #banner { padding: .4em .7em; border-radius: 4px; margin: .6em 0; display: none; }
  #banner.down { display: block; background: #ffd6d6; }
  .refusal { background: #fff4f4; border: 1px solid #f3c2c2; padding: .5em .8em; margin: .4em 0; }
  .refusal b { display: inline-block; min-width: 6.5em; }
  .step { margin-top: .3em; font-size: 12px; }
  .lead { font-size: 1.15em; margin: .5em 0; } .lead code { background: #eef1f5; padding: 0 .3em; }
  .bar { height: .6em; background: #eef1f5; border-radius: 3px; overflow: hidden; width: 14em; }
  .bar > div { height: 100%; background: #4c8bf5; } .bar.paused > div { background: #c9a227; }
</style>
</head>
<body>
<h1>catalog-upgrade <span id="env" class="muted"></span></h1>
<div id="upgrade" class="lead"></div>
<div id="headline"></div>
<div id="banner"></div>
<div id="warnings"></div>
<div id="finalization"></div>
<form id="auth" hidden>This sidecar needs a token to show its status:
  <input type="password" id="token" autocomplete="off" placeholder="read or write token">
  <button type="submit">show</button>
  <span class="muted">(kept in this tab's memory only)</span></form>
<h2>Processes</h2><div id="processes"></div>
<h2>Refusals and failures</h2><div id="refusals"><span class="muted">none</span></div>
<h2>Lazy-migration coverage</h2><div id="coverage"><span class="muted">loading</span></div>
<h2>Upgrade history</h2><div id="history"><span class="muted">loading</span></div>
<h2>Migration entries</h2><div id="entries"></div>
<p class="muted">updated <span id="updated">never</span>; polls every second</p>
<script>
"use strict";
const seen = {};  // process id -> [[label, time first seen]]
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function table(headers, rows) {
  if (!rows.length) return el("span", "none", "muted");
  const t = el("table"), head = el("tr");
  headers.forEach(h => head.appendChild(el("th", h)));
  t.appendChild(head);
  rows.forEach(cells => {
    const tr = el("tr");
    cells.forEach(c => { const td = el("td"); if (c instanceof Node) td.appendChild(c);
                         else td.textContent = c === null || c === undefined ? "-" : String(c);
                         tr.appendChild(td); });
    t.appendChild(tr);
  });
  return t;
}
function put(id, node) { const box = document.getElementById(id); box.replaceChildren(node); }
function ago(t) {
  if (!t) return "-";
  const s = Math.max(0, Date.now() / 1000 - t);
  return s < 60 ? s.toFixed(0) + "s ago" : s < 3600 ? (s / 60).toFixed(0) + "m ago"
       : (s / 3600).toFixed(1) + "h ago";
}
function stateCell(state) { return el("span", state || "-", "state " + (state || "")); }
function timeline(p) {
  const label = p.state + (p.phase && p.phase !== p.state ? ": " + p.phase : "");
  const list = seen[p.id] = seen[p.id] || [];
  if (!list.length || list[list.length - 1][0] !== label) list.push([label, p.phase_since]);
  const box = el("div");
  list.forEach(([text, at]) => box.appendChild(el("span",
      text + (at ? " (" + new Date(at * 1000).toLocaleTimeString() + ")" : ""), "chip")));
  return box;
}
function rowCount(n) { return n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e3
    ? (n / 1e3).toFixed(1) + "k" : String(Math.round(n)); }
function step(p) {
  // A long step (a REWRITE copy): a bar, rows done of the total, the rate and an ETA.
  const box = el("div", p.phase || "-");
  const g = p.progress;
  if (!g) return box;
  const part = g.rows_total ? Math.min(1, g.rows_done / g.rows_total) : 0;
  const bar = el("div", null, "bar" + (g.paused ? " paused" : ""));
  const fill = el("div"); fill.style.width = (part * 100).toFixed(1) + "%"; bar.appendChild(fill);
  const line = el("div", g.step + " of " + g.collection + ": " + (part * 100).toFixed(0) + "% (" +
      rowCount(g.rows_done) + " of " + rowCount(g.rows_total || 0) + " rows" +
      (g.tasks_total ? ", " + g.tasks_done + " of " + g.tasks_total + " tasks" : "") + "), " +
      (g.paused
      ? "PAUSED" : rowCount(g.rate) + " rows/s" + (g.eta_seconds != null ? ", ETA " +
        (g.eta_seconds < 90 ? g.eta_seconds.toFixed(0) + " s" : (g.eta_seconds / 60).toFixed(0) +
         " min") : "")) + (g.limit ? ", limit " + rowCount(g.limit) + " rows/s" : ""), "step");
  line.insertBefore(bar, line.firstChild);
  box.appendChild(line);
  return box;
}
function refusal(who, error) {
  const box = el("div", null, "refusal");
  const line = (name, value) => { if (value === undefined || value === null || value === "") return;
    const row = el("div"); row.appendChild(el("b", name)); row.appendChild(el("span", value));
    box.appendChild(row); };
  line("who", who);
  line("error", (error.error || "") + ": " + (error.message || ""));
  line("rule", error.rule || error.reason);
  line("field path", error.path || (error.collections || []).join(", ") || error.collection);
  line("versions", error.from_version && error.to_version
       ? error.from_version + " -> " + error.to_version : undefined);
  line("fix", error.suggestion);
  return box;
}
function finalization(f) {
  if (!f) return el("span");
  if (f.state === "final") {
    const d = f.finalized;
    return el("div", "final" + (d ? " since generation " + d.deploy_generation + " (" +
        new Date(d.at * 1000).toLocaleString() + ", by " + d.by + ")" : ""), "muted");
  }
  const u = f.upgrade || {};
  const came = u.from_version + " (generation " + u.from_generation + ")";
  if (f.state === "finalizing")
    return el("div", "finalizing " + u.version + ": " + came + " can no longer be promoted back",
              "refusal");
  const until = u.finalize_at
      ? "finalizes by itself at " + new Date(u.finalize_at * 1000).toLocaleString()
      : "finalizes only with `catalog-upgrade finalize`";
  return el("div", "upgrade to " + u.version + " PENDING since " + ago(u.since) + ": " + came +
      " may be promoted back (rollback); " + until, "refusal");
}
function upgrade(u) {
  // Where the upgrade is: from which version to which, its stage, its long step, what to run.
  const box = el("div");
  if (!u) return box;
  const versions = [u.from_version, u.to_version].filter(v => v).join(" \u2192 ");
  box.appendChild(el("strong", (versions ? versions + ": " : "") + u.stage));
  if (u.step) box.appendChild(step({phase: u.step.step, progress: u.step}));
  const next = el("div", u.next ? "next: " : u.stage === "final" ? "nothing to do"
      : u.stage === "refused" ? "fix the release: its refusal below names the rule and the fix"
      : "nothing to run: it goes on by itself");
  if (u.next) next.appendChild(el("code", u.next));
  if (u.why) box.appendChild(el("div", "why: " + u.why + (u.rule ? " (" + u.rule + ")" : ""),
      "refusal"));
  if (u.fix) box.appendChild(el("div", "fix: " + u.fix));
  box.appendChild(next);
  if (u.rollback) {
    const back = el("div", "or roll back: ");
    u.rollback.forEach((line, i) => {
      if (i) back.appendChild(document.createTextNode(" then "));
      back.appendChild(el("code", line));
    });
    box.appendChild(back);
  }
  return box;
}
// Global ids in their natural order: s2 before s10.
const natural = new Intl.Collator(undefined, {numeric: true});
function render(s) {
  document.getElementById("env").textContent = s.environment || "";
  put("upgrade", upgrade(s.upgrade));
  const c = s.catalog || {}, leader = s.leader;
  put("headline", el("div", "catalog " + (c.version || "not bootstrapped") + ", generation " +
      (c.deploy_generation ?? "-") + ", epoch " + (c.epoch ?? "-") + "; promotion target " +
      (c.promotion_target ?? "-") + "; leader " + (leader ? leader.id + " (epoch " + leader.epoch +
      ")" : "none") + "; " + (s.collections || []).length + " collections"));
  put("finalization", finalization(s.finalization));
  const warned = el("div");  // what processes report: a store out or full, a clock off, drift
  (s.warnings || []).forEach(w => warned.appendChild(el("div", "warning: " + w, "refusal")));
  put("warnings", warned);
  const procs = s.processes || [];
  put("processes", table(["id", "version", "gen", "mode", "state", "phase", "since", "timeline"],
    procs.map(p => [p.id, p.version, p.deploy_generation, p.mode, stateCell(p.state), step(p),
                    ago(p.phase_since), timeline(p)])));
  const box = el("div");
  procs.filter(p => p.error).forEach(p => box.appendChild(refusal(p.id, p.error)));
  // A process fenced by a promotion is the upgrade working, not a failure; and a failure of a
  // generation the catalog has reached since (a later process of it serves, or a newer one
  // does) is over: only those of generations still ahead of the catalog are shown.
  const reached = (s.catalog || {}).deploy_generation ?? 0;
  (s.events || []).filter(e => e.error && e.kind !== "fenced" &&
      (e.deploy_generation ?? 0) > reached).slice(-10).forEach(e =>
      box.appendChild(refusal((e.process_id || "") + " (" + e.kind + ", " + (e.version || "") +
                              " generation " + (e.deploy_generation ?? "-") + ")", e.error)));
  put("refusals", box.childNodes.length ? box : el("span", "none", "muted"));
  // Each entry under its collection's name, the collections in order, ids naturally.
  const names = new Map((s.collections || []).map(c => [c.global_id, c.name]));
  const named = e => names.get(e.global_id) || "";
  put("entries", table(["collection", "global id", "version", "generation", "shard"],
    (s.migration_entries || []).slice().sort((a, b) => named(a).localeCompare(named(b))
        || natural.compare(a.global_id, b.global_id) || a.deploy_generation - b.deploy_generation)
      .map(e => [named(e) || "-", e.global_id, e.version, e.deploy_generation, e.shard_id])));
}
function renderCoverage(cov) {
  if (!cov) return;
  const rows = (cov.collections || []).slice().sort((a, b) => (b.old_batches - a.old_batches)
      || a.name.localeCompare(b.name)).slice(0, 50);
  const wrap = el("div");
  wrap.appendChild(el("p", cov.pending_collections +
      " collection(s) hold data under an old schema; " + cov.retirable_schemas +
      " old schema(s) can retire", "muted"));
  wrap.appendChild(table(["collection", "latest", "stored by schema (batches/rows)", "can retire"],
    rows.map(r => [r.name, r.latest_schema_id, r.schemas.filter(u => u.batches)
      .map(u => u.schema_id + ": " + u.batches + "/" + u.rows +
           ((u.narrower || []).length ? " (narrower " + u.narrower.join(", ") + ")" : "") +
           ((u.renamed || []).length ? " (old names " + u.renamed.join(", ") + ")" : ""))
      .join(", ") || "-",
      r.retirable.join(", ") || "-"])));
  put("coverage", wrap);
}
function renderHistory(rows) {
  put("history", table(["generation", "from", "to", "promoted by", "leader", "phases", "took",
                        "outcome"],
    rows.map(r => [r.deploy_generation, r.from_version, r.to_version, r.promoted_by, r.leader,
      (r.phases || []).map(p => p.name + " " + p.seconds.toFixed(2) + "s").join(", "),
      r.seconds === null ? "-" : r.seconds.toFixed(2) + "s",
      el("span", r.outcome + (r.rule ? " (" + r.rule + ")" : ""),
         ["completed", "bootstrapped", "pending", "rollback"].includes(r.outcome) ? "ok"
         : "bad")])));
}
@@BEARER@@// Coverage and history every 10th poll, and on the first that succeeds.
let slowDone = 0;
async function poll() {
  const slow = slowDone % 10 === 0;
  const s = await get(slow ? "status?coverage" : "status");
  render(s);
  if (slow) { renderCoverage(s.coverage); renderHistory(await get("history")); }
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  slowDone += 1;
}
every(1000, poll, "status");
</script>
</body>
</html>
"""

STATUS_PAGE: Final = _PAGE.replace("@@BEARER@@", BEARER_SCRIPT)
