"""The fleet page: one self-contained HTML document (no CDN, no build step).

Served at ``/`` by ``catalog-upgrade fleet --serve``. Its script polls ``status`` (the ``fleet
--json`` document) every two seconds and shows the counts by state and version at the top and
one row per environment, sortable by any column (click its header) and filtered by a text, a
state and "stuck only". Each environment links to its leader sidecar's own page when the leader
registered an HTTP address, and otherwise shows the ``status`` command that answers for it.
Everything is built with DOM calls and ``textContent``: values from ZooKeeper are never parsed
as HTML.
"""

from __future__ import annotations

from typing import Final

from orchestrator.status.page import BEARER_SCRIPT

__all__ = ["FLEET_PAGE"]

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>catalog-upgrade fleet</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d232a; background: #fafbfc; }
  h1 { font-size: 1.4em; margin: 0 0 .4em; }
  table { border-collapse: collapse; width: 100%; background: #fff; }
  th, td { border: 1px solid #dde2e8; padding: .25em .5em; text-align: left; vertical-align: top; }
  th { background: #eef1f5; font-weight: 600; cursor: pointer; user-select: none; }
  th.sorted::after { content: " \\25B4"; } th.sorted.down::after { content: " \\25BE"; }
  .muted { color: #6a737d; } .mono { font-family: ui-monospace, monospace; font-size: 12px; }
  .count { display: inline-block; margin: 0 .5em .4em 0; padding: .2em .6em; border-radius: 4px;
           background: #eef1f5; cursor: pointer; }
  .count b { font-size: 1.2em; }
  .state { font-weight: 600; padding: 0 .4em; border-radius: 3px; }
  .ok { background: #c9f2d0; } .pending, .finalizing { background: #fff1c2; }
  .green-waiting, .migrating { background: #d9ecff; } .empty { background: #eceff3; }
  .failed, .no-leader, .unreadable, .unreachable { background: #ffd6d6; }
  .stuck { color: #b00020; font-size: 12px; }
  #banner { padding: .4em .7em; border-radius: 4px; margin: .6em 0; display: none; }
  #banner.down { display: block; background: #ffd6d6; }
  #controls { margin: .6em 0; } #controls > * { margin-right: .8em; }
</style>
</head>
<body>
<h1>catalog-upgrade fleet <span id="total" class="muted"></span></h1>
<div id="banner"></div>
<form id="auth" hidden>This fleet page needs a token:
  <input type="password" id="token" autocomplete="off" placeholder="read or write token">
  <button type="submit">show</button>
  <span class="muted">(kept in this tab's memory only)</span></form>
<div id="states"></div>
<div id="versions"></div>
<div id="ensembles"></div>
<div id="controls">
  <input id="search" type="search" placeholder="filter: environment, version, leader">
  <select id="state"><option value="">every state</option></select>
  <label><input id="stuckonly" type="checkbox"> stuck only</label>
  <span id="shown" class="muted"></span>
</div>
<table id="fleet"><thead><tr></tr></thead><tbody></tbody></table>
<p class="muted">updated <span id="updated">never</span></p>
<script>
"use strict";
const COLUMNS = [
  ["environment", r => r.name], ["version", r => r.version || ""],
  ["gen", r => r.deploy_generation ?? -1], ["state", r => STATES.indexOf(r.state)],
  ["leader", r => r.leaderText], ["green", r => r.greenText],
  ["finalization", r => r.finalText], ["age", r => r.finalAge ?? -1],
  ["notes", r => r.notes.join("; ")],
];
const STATES = ["unreachable", "unreadable", "failed", "no-leader", "empty", "migrating",
                "green-waiting", "finalizing", "pending", "ok"];
let sortBy = 0, sortDown = false, last = null;
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function ago(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor(s % 86400 / 3600) + "h";
}
function rowsOf(doc) {
  const zk = Object.fromEntries(doc.ensembles.map(e => [e.name, e.zk]));
  return doc.environments.map(e => {
    const leader = e.leader;
    const final = e.finalization || {};
    const notes = [...e.stuck, ...(e.error ? [e.error] : []), ...e.errors, ...e.warnings];
    if (e.overdue) notes.unshift("finalization overdue");
    return {
      raw: e, state: e.state, version: e.version, deploy_generation: e.deploy_generation,
      name: e.ensemble + "/" + (e.environment ?? "*"), stuck: e.stuck.length > 0,
      shown: doc.ensembles.length > 1 || !e.environment ? e.ensemble + "/" +
        (e.environment ?? "*") : e.environment,
      leaderText: leader ? (leader.id || "-") + " " + (leader.registered
        ? (leader.state || "") + (leader.phase && leader.phase !== leader.state
          ? " / " + leader.phase : "") : "(gone)") : "none",
      greenText: e.green.map(g => "g" + g.deploy_generation + " " + g.version +
        (g.promoted ? " promoted" : " waiting " + ago(doc.read_at - (g.since || doc.read_at))) +
        (g.paused ? " PAUSED" : "")).join(", "),
      finalText: final.state ? final.state + (final.version && final.state !== "final"
        ? " " + final.from_version + " -> " + final.version : "") : "-",
      finalAge: final.since ? doc.read_at - final.since : null,
      notes: notes,
      link: leader && leader.registered && leader.http ? "http://" + leader.http + "/" : null,
      command: e.environment ? "catalog-upgrade status --zk " + zk[e.ensemble] +
        " --env " + e.environment : null,
    };
  });
}
function counts(target, title, entries, onClick, nameFirst) {
  const box = document.getElementById(target);
  box.replaceChildren(el("span", title + ": ", "muted"));
  for (const [key, value] of entries) {
    const chip = el("span", null, "count " + key);
    if (nameFirst) chip.append(el("b", key), " " + value);
    else chip.append(el("b", value), " " + key);
    if (onClick) chip.addEventListener("click", () => onClick(key));
    box.append(chip);
  }
}
function render(doc) {
  last = doc;
  const s = doc.summary;
  document.getElementById("total").textContent = s.environments + " environments on " +
    doc.ensembles.length + " ensemble(s)";
  counts("states", "by state", Object.entries(s.by_state), key => {
    document.getElementById("state").value = key; draw(); });
  counts("versions", "by version", Object.entries(s.by_version), key => {
    document.getElementById("search").value = key; draw(); });
  const bad = doc.ensembles.filter(e => e.error);
  counts("ensembles", "stuck " + s.stuck + ", pending " + s.pending + ", overdue " +
    s.finalization_overdue + "; ensembles", doc.ensembles.map(e => [e.name,
      e.error ? "unreachable" : e.environments + " environments in " + e.seconds + " s"]),
    null, true);
  if (bad.length) document.getElementById("ensembles").classList.add("failed");
  draw();
}
function draw() {
  if (!last) return;
  const text = document.getElementById("search").value.trim().toLowerCase();
  const state = document.getElementById("state").value;
  const stuckOnly = document.getElementById("stuckonly").checked;
  let rows = rowsOf(last).filter(r =>
    (!state || r.state === state) && (!stuckOnly || r.stuck) &&
    (!text || [r.name, r.version, r.leaderText, r.greenText].join(" ").toLowerCase()
      .includes(text)));
  const key = COLUMNS[sortBy][1];
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const order = x < y ? -1 : x > y ? 1 : 0;
    return sortDown ? -order : order;
  });
  const head = document.querySelector("#fleet thead tr");
  head.replaceChildren(...COLUMNS.map(([name], i) => {
    const th = el("th", name, i === sortBy ? "sorted" + (sortDown ? " down" : "") : "");
    th.addEventListener("click", () => {
      if (sortBy === i) sortDown = !sortDown; else { sortBy = i; sortDown = false; }
      draw();
    });
    return th;
  }));
  const body = document.querySelector("#fleet tbody");
  body.replaceChildren(...rows.map(r => {
    const tr = el("tr");
    tr.dataset.environment = r.name;
    tr.dataset.state = r.state;
    const name = el("td");
    if (r.link) {
      const a = el("a", r.shown); a.href = r.link; name.append(a);
    } else {
      name.append(el("span", r.shown));
    }
    if (r.command) name.title = r.command;
    const notes = el("td");
    for (const note of r.notes) notes.append(el("div", note, r.stuck ? "stuck" : "muted"));
    tr.append(name, el("td", r.version || "-", "mono"), el("td", r.deploy_generation ?? "-"),
      (() => { const td = el("td"); td.append(el("span", r.state, "state " + r.state));
               return td; })(),
      el("td", r.leaderText, "mono"), el("td", r.greenText || "-"),
      el("td", r.finalText), el("td", ago(r.finalAge)), notes);
    return tr;
  }));
  document.getElementById("shown").textContent = rows.length + " shown";
}
const select = document.getElementById("state");
for (const state of STATES) select.append(new Option(state, state));
for (const id of ["search", "state", "stuckonly"]) {
  document.getElementById(id).addEventListener("input", draw);
}
@@BEARER@@async function poll() {
  render(await get("status"));
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}
every(2000, poll, "fleet");
</script>
</body>
</html>
"""

FLEET_PAGE: Final = _PAGE.replace("@@BEARER@@", BEARER_SCRIPT)
