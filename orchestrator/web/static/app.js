// warden's run page. Every string from the server is put on the page with
// textContent (never as HTML): much of it was written inside a container. The
// server has already made controls, bidi overrides and invisible characters
// visible, as the terminal does. No third-party code, no build step.
"use strict";

const base = location.pathname.replace(/[^/]*$/, ""); // /s/SECRET/
const $ = (id) => document.getElementById(id);
let run = null;
let source = null;
let selectedTask = null;
let taskView = "events";
let auditCount = -1;
let taskEvents = -1;
const cards = new Map(); // question id -> its card (kept, so a typed reason survives updates)

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function call(path, options) {
  const response = await fetch(base + path, { cache: "no-store", ...options });
  let body = {};
  try { body = await response.json(); } catch (e) { /* an empty refusal */ }
  return { status: response.status, body };
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleTimeString() : ""; }
function pct(share) { return share === null || share === undefined ? "-" : Math.round(share * 100) + "%"; }

async function start() {
  // What the person types before the page has loaded is theirs: the remembered or
  // default name fills the field only while it is still empty.
  const field = $("user");
  field.addEventListener("change", () => localStorage.setItem("warden-user", field.value.trim()));
  if (!field.value.trim()) field.value = localStorage.getItem("warden-user") || "";
  const info = await call("api/info");
  if (!field.value.trim()) field.value = info.body.user || "";
  const runs = (await call("api/runs")).body.runs || [];
  for (const r of runs) {
    const option = el("option", r.run_id + " (" + r.status + ") " + r.prompt.slice(0, 60));
    option.value = r.run_id;
    $("run").append(option);
  }
  $("run").addEventListener("change", () => open($("run").value));
  for (const id of ["f-final", "f-decision", "f-tool", "f-task", "f-text"]) {
    $(id).addEventListener(id === "f-task" || id === "f-text" ? "input" : "change", loadAudit);
  }
  $("show-events").addEventListener("click", () => { taskView = "events"; loadTask(); });
  $("show-transcript").addEventListener("click", () => { taskView = "transcript"; loadTask(); });
  if (runs.length) open(info.body.run || runs[0].run_id);
}

function open(runId) {
  run = runId;
  $("run").value = runId;
  selectedTask = null;
  auditCount = -1;
  $("task-section").hidden = true;
  for (const card of cards.values()) card.remove();
  cards.clear();
  if (source) source.close();
  source = new EventSource(base + "api/runs/" + encodeURIComponent(runId) + "/stream");
  source.addEventListener("update", (e) => render(JSON.parse(e.data)));
  source.onopen = () => { $("live").textContent = "live"; };
  source.onerror = () => { $("live").textContent = "reconnecting…"; };
}

function render(snap) {
  $("run-status").textContent = snap.run.status;
  $("run-status").className = "status status-" + snap.run.status;
  renderQuestions(snap.questions, snap.answered);
  renderTree(snap.tasks);
  if (snap.audit_count !== auditCount) { auditCount = snap.audit_count; loadAudit(); }
  const task = snap.tasks.find((t) => t.task_id === selectedTask);
  if (task && task.events !== taskEvents) { taskEvents = task.events; loadTask(); }
}

function renderQuestions(open, answered) {
  const ids = new Set(open.map((q) => q.id));
  const who = new Map(answered.map((a) => [a.id, a.decided_by]));
  for (const [id, card] of cards) {
    if (!ids.has(id) && !card.classList.contains("settled")) {
      settle(card, "answered by " + (who.get(id) || "someone else"));
    }
  }
  for (const q of open) if (!cards.has(q.id)) $("questions").append(questionCard(q));
  $("question-count").textContent = open.length ? "(" + open.length + " waiting)" : "";
  $("no-questions").hidden = open.length > 0;
}

function settle(card, text) {
  card.classList.add("settled");
  for (const b of card.querySelectorAll("button, input")) b.disabled = true;
  card.querySelector(".note").textContent = text;
}

function questionCard(q) {
  if (q.kind === "apply_review") return reviewCard(q);
  const card = el("div", null, "question");
  card.dataset.id = q.id;
  card.append(el("div", "warden: approval needed", "who"));
  card.append(el("pre", q.text, "text"));
  const details = el("details");
  details.append(el("summary", "view the whole input"));
  details.append(el("pre", q.full_input, "full-input"));
  card.append(details);
  const answers = el("div", null, "answers");
  const button = (label, cls, choice, extra) => {
    const b = el("button", label, cls);
    b.type = "button";
    b.addEventListener("click", () => answer(card, q, choice, extra ? extra() : {}));
    answers.append(b);
    return b;
  };
  button("Allow once", "allow-once", "once");
  button("Allow this exact input for the rest of this run", "allow-session", "session");
  if (q.always_rule) {
    const always = el("button", "Always allow: add " + q.always_rule_shown + " to " + q.always_file + "…", "allow-always");
    always.type = "button";
    const confirm = el("button", "Yes, write " + q.always_rule_shown + " to " + q.always_file, "confirm-always");
    confirm.type = "button";
    confirm.hidden = true;
    always.addEventListener("click", () => { confirm.hidden = false; });
    confirm.addEventListener("click", () => answer(card, q, "always", { rule: q.always_rule }));
    answers.append(always, confirm);
  }
  const reason = el("input", null, "reason");
  reason.placeholder = "reason (told to the agent)";
  reason.maxLength = 2000;
  answers.append(reason);
  button("Deny", "deny", "deny", () => ({ reason: reason.value }));
  card.append(answers);
  card.append(el("div", "", "note"));
  cards.set(q.id, card);
  return card;
}

// An apply review: the change set's summary at once, its diff fetched on its own;
// yes or no, each naming the change set's hash the card shows (a stale one is
// refused by the server). Names and lines are text (already escaped by warden).
const MARKS = { context: " ", added: "+", removed: "-", hunk: "", note: "" };

function reviewCard(q) {
  const card = el("div", null, "question review");
  card.dataset.id = q.id;
  card.append(el("div", "warden: review a subagent's changes before they reach the workspace", "who"));
  card.append(el("pre", q.text, "text"));
  const diff = el("div", "loading the diff…", "diff");
  card.append(diff);
  const answers = el("div", null, "answers");
  const yes = el("button", "Yes, apply change set " + q.sha256.slice(0, 16) + "…", "apply-yes");
  yes.type = "button";
  yes.disabled = true; // until the diff it applies is on screen
  const reason = el("input", null, "reason");
  reason.placeholder = "reason (told to the agent)";
  reason.maxLength = 2000;
  const no = el("button", "No", "apply-no");
  no.type = "button";
  answers.append(yes, reason, no);
  card.append(answers);
  card.append(el("div", "", "note"));
  cards.set(q.id, card);
  let shown = q.sha256;
  yes.addEventListener("click", () => answer(card, q, "once", { change_set: shown }));
  no.addEventListener("click", () => answer(card, q, "deny", { change_set: shown, reason: reason.value }));
  loadReview(q).then((review) => {
    if (!review) { diff.textContent = "the diff could not be loaded"; return; }
    shown = review.sha256;
    diff.replaceChildren(...review.files.map(fileBlock));
    if (!card.classList.contains("settled")) yes.disabled = false;
  });
  return card;
}

async function loadReview(q) {
  const path = "api/runs/" + encodeURIComponent(run) + "/questions/" + encodeURIComponent(q.id) + "/review";
  const { status, body } = await call(path);
  return status === 200 ? body : null;
}

function fileBlock(f) {
  const block = el("div", null, "file");
  block.append(el("div", "── " + f.path, "file-path"));
  block.append(el("div", f.summary, "file-summary"));
  if (f.path_ascii) block.append(el("div", "! name in ASCII: " + f.path_ascii, "file-note"));
  for (const note of f.notes) block.append(el("div", "! " + note, "file-note"));
  if (f.lines.length) {
    const lines = el("div", null, "lines");
    for (const [tag, text] of f.lines) lines.append(el("div", MARKS[tag] + text, "line line-" + tag));
    block.append(lines);
  }
  if (f.cut) block.append(el("div", "[" + f.cut + "]", "file-cut"));
  return block;
}

async function answer(card, q, choice, extra) {
  const user = $("user").value.trim();
  if (!user) { card.querySelector(".note").textContent = "Give your name first (answering as)."; return; }
  localStorage.setItem("warden-user", user);
  const { status, body } = await call(
    "api/runs/" + encodeURIComponent(run) + "/questions/" + encodeURIComponent(q.id),
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ choice, user, ...extra }) },
  );
  if (status === 200 || status === 409) settle(card, "answered by " + body.answered_by);
  else card.querySelector(".note").textContent = "not answered: " + (body.error || status);
}

function treeOrder(tasks) {
  const known = new Set(tasks.map((t) => t.task_id));
  const children = new Map();
  for (const t of tasks) {
    const key = known.has(t.parent_id) ? t.parent_id : null;
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(t);
  }
  const out = [];
  const walk = (parent, level) => {
    for (const t of children.get(parent) || []) { out.push([level, t]); walk(t.task_id, level + 1); }
  };
  walk(null, 0);
  return out;
}

function renderTree(tasks) {
  const body = $("tree").tBodies[0];
  body.replaceChildren();
  for (const [level, t] of treeOrder(tasks)) {
    const row = el("tr", null, "task" + (t.task_id === selectedTask ? " selected" : ""));
    row.dataset.task = t.task_id;
    const name = el("td");
    name.append(el("span", "\u00a0\u00a0".repeat(level) + t.task_id + " "), el("span", t.description, "description"));
    const tools = Object.entries(t.tools).map(([k, n]) => k + "×" + n).join(" ");
    row.append(name, el("td", t.agent_type), el("td", t.status, "status-" + t.status),
      el("td", t.elapsed_s + "s"), el("td", t.tokens), el("td", pct(t.cache_share)), el("td", tools),
      el("td", t.current || t.error), el("td", t.denials || ""), el("td", t.asked || ""));
    row.addEventListener("click", () => { selectedTask = t.task_id; taskEvents = t.events; loadTask(); renderTree(tasks); });
    body.append(row);
  }
}

async function loadTask() {
  if (!selectedTask) return;
  $("task-section").hidden = false;
  $("task-title").textContent = selectedTask + " (" + taskView + ")";
  const path = "api/runs/" + encodeURIComponent(run) + "/tasks/" + encodeURIComponent(selectedTask) + "/" + taskView;
  const { body } = await call(path);
  const out = el("div");
  if (body.earlier) out.append(el("p", body.earlier + " earlier entries not shown", "quiet"));
  if (taskView === "events") {
    const table = el("table");
    for (const e of body.events || []) {
      const row = el("tr");
      row.append(el("td", when(e.time)), el("td", e.kind), el("td", e.text));
      table.append(row);
    }
    out.append(table);
  } else {
    for (const m of body.messages || []) {
      const message = el("div", null, "message");
      message.append(el("div", m.role, "role"));
      for (const part of m.parts) message.append(el("pre", part));
      out.append(message);
    }
  }
  $("task-detail").replaceChildren(out);
}

async function loadAudit() {
  if (!run) return;
  const query = new URLSearchParams();
  for (const [key, id] of [["final", "f-final"], ["decision", "f-decision"], ["tool", "f-tool"], ["task", "f-task"], ["text", "f-text"]]) {
    const value = $(id).value.trim();
    if (value) query.set(key, value);
  }
  const { body } = await call("api/runs/" + encodeURIComponent(run) + "/audit?" + query);
  const tools = $("f-tool");
  const chosen = tools.value;
  tools.replaceChildren(el("option", "any"));
  tools.options[0].value = "";
  for (const name of body.tools || []) tools.append(el("option", name));
  tools.value = chosen;
  $("audit-count").textContent = "(" + body.matching + " of " + body.total + ")";
  const rows = $("audit").tBodies[0];
  rows.replaceChildren();
  for (const r of body.records || []) {
    const row = el("tr");
    row.append(el("td", when(r.time)), el("td", r.task_id || "parent"), el("td", r.tool_name),
      el("td", r.input), el("td", r.decision), el("td", r.final, "final-" + r.final),
      el("td", r.decided_by), el("td", r.reason));
    rows.append(row);
  }
}

start();
