"""The report's inline CSS and JavaScript (kept here so html.py reads as Python).

The script renders the trajectory viewer from the JSON block `#trajectory-data`. It only
ever puts model and env text into the page with `textContent` and `setAttribute`, never as
markup, so an action such as `<script>...</script>` shows as text. When it has rendered,
it marks `<body>` with `data-rendered`, the number of tokens drawn and how many of them are
coloured, and `data-errors` counts uncaught errors: the headless-browser tests (and anyone
debugging a report) read these from the DOM.
"""

CSS = r"""
:root { --fg:#1f2328; --muted:#656d76; --line:#d0d7de; --bg:#ffffff; --soft:#f6f8fa;
        --won:#1a7f37; --lost:#cf222e; --err:#8250df; --trunc:#9a6700; --ctx:#0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
header { padding: 16px 24px 8px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 20px; }
header .sub { color: var(--muted); margin: 0; }
nav a { margin-right: 14px; color: var(--ctx); text-decoration: none; }
section { padding: 8px 24px 16px; }
h2 { font-size: 17px; margin: 16px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 18px; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid var(--line); border-radius: 6px; background: #fff; }
table.data { border-collapse: collapse; margin: 6px 0 12px; }
table.data th, table.data td { border: 1px solid var(--line); padding: 3px 8px; text-align: left;
                               vertical-align: top; }
table.data th { background: var(--soft); }
.warn { color: var(--lost); }
details.config pre { background: var(--soft); padding: 8px; border-radius: 6px; max-height: 420px;
                     overflow: auto; font-size: 12px; }
img.plot { max-width: 100%; border: 1px solid var(--line); border-radius: 6px; }
.controls { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; padding: 8px 0; }
.controls label { color: var(--muted); }
.controls select { max-width: 420px; }
.filters label { margin-right: 8px; color: var(--fg); }
.legend { display: flex; align-items: center; gap: 6px; font-size: 12px; color: var(--muted); }
.legend .bar { width: 160px; height: 12px; border: 1px solid var(--line); border-radius: 3px; }
.tokinfo { position: sticky; top: 0; z-index: 2; background: var(--soft); border: 1px solid var(--line);
           border-radius: 6px; padding: 4px 8px; font: 12px ui-monospace, monospace; min-height: 24px; }
.note { color: var(--muted); font-size: 12px; }
.episodes { display: grid; grid-auto-flow: column; grid-auto-columns: minmax(300px, 1fr);
            gap: 10px; overflow-x: auto; padding-bottom: 8px; }
.episode { border: 1px solid var(--line); border-radius: 6px; padding: 8px; min-width: 0; }
.episode h3 { font-size: 14px; margin: 0 0 4px; }
.episode .meta { color: var(--muted); font-size: 12px; margin-bottom: 6px; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; color: #fff;
         background: var(--muted); margin-left: 4px; }
.badge.won { background: var(--won); } .badge.lost { background: var(--lost); }
.badge.env_error { background: var(--err); } .badge.truncated { background: var(--trunc); }
.badge.context_limit { background: var(--ctx); }
.badge.status-ok { background: #8c959f; } .badge.status-invalid { background: var(--trunc); }
.badge.status-truncated { background: var(--lost); } .badge.status-env_error { background: var(--err); }
.obs { background: var(--soft); border-radius: 4px; padding: 4px 6px; font: 12px/1.4 ui-monospace, monospace;
       max-height: 220px; overflow: auto; }
.turn { border-top: 1px dashed var(--line); margin-top: 6px; padding-top: 6px; }
.turn-head { font-size: 12px; color: var(--muted); margin-bottom: 3px; }
.turn-head b { color: var(--fg); }
.action { font: 13px/1.9 ui-monospace, monospace; white-space: pre-wrap; word-break: break-word; }
.tok { border-radius: 3px; padding: 1px 0; margin-right: 1px; box-shadow: inset 0 -1px 0 #c8ccd1;
       cursor: default; }
.tok:hover { outline: 2px solid #0969da; }
.tok.masked { color: #6e7781; text-decoration: line-through; background-image:
       repeating-linear-gradient(135deg, rgba(0,0,0,0.08) 0 2px, transparent 2px 5px);
       box-shadow: inset 0 -1px 0 #8c959f; }
.tok.partial { color: #8c959f; }
.sent { font-size: 12px; color: var(--muted); margin: 2px 0 4px; }
.sent code { color: var(--fg); background: var(--soft); padding: 0 3px; border-radius: 3px; }
.error { color: var(--err); font-size: 12px; }
"""

JS = r"""
(function () {
  "use strict";
  var body = document.body;
  var errorCount = 0;
  window.addEventListener("error", function () {
    errorCount += 1;
    body.setAttribute("data-errors", String(errorCount));
  });
  body.setAttribute("data-errors", "0");

  // Lone surrogates (undecodable model or env bytes) become U+FFFD before they reach the
  // DOM; the report builder does this already, this keeps the page safe on its own.
  // Control characters (an env's ANSI escapes) show as their Unicode control pictures.
  function wf(text) {
    var s = String(text);
    s = s.toWellFormed ? s.toWellFormed() : s;
    return s.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, function (c) {
      return String.fromCharCode(c === "\x7f" ? 0x2421 : 0x2400 + c.charCodeAt(0));
    });
  }
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = wf(text); }
    return node;
  }
  function fmt(x, digits) {
    if (x === null || x === undefined || Number.isNaN(x)) { return "n/a"; }
    return Number(x).toFixed(digits === undefined ? 3 : digits);
  }
  function signed(x) { return (x > 0 ? "+" : "") + fmt(x); }

  var holder = document.getElementById("trajectory-data");
  var viewer = document.getElementById("viewer");
  if (!holder || !viewer) { body.setAttribute("data-rendered", "1"); return; }
  var DATA = JSON.parse(holder.textContent);
  var OUTCOME_LABEL = {won: "won", lost: "lost", env_error: "env error", truncated: "truncated",
                       context_limit: "context limit"};
  var state = {set: 0, group: null, colour: null, filters: {}};
  DATA.outcomes.forEach(function (o) { state.filters[o] = true; });

  function outcomeOf(end) {
    if (end === "won" || end === "lost" || end === "env_error") { return end; }
    if (end.indexOf("context") >= 0) { return "context_limit"; }
    return "truncated";
  }
  function visible(ep) { return state.filters[outcomeOf(ep.end)] !== false; }
  function currentSet() { return DATA.sets[state.set]; }
  function groupsOf(set) {
    var groups = {}, order = [];
    set.episodes.forEach(function (ep) {
      if (!(ep.group_id in groups)) { groups[ep.group_id] = []; order.push(ep.group_id); }
      groups[ep.group_id].push(ep);
    });
    order.sort(function (a, b) { return a - b; });
    return {byId: groups, order: order};
  }
  function eachToken(set, fn) {
    set.episodes.forEach(function (ep) {
      ep.turns.forEach(function (turn) {
        var t = turn.tokens;
        for (var i = 0; i < t.ids.length; i++) { fn(t, i); }
      });
    });
  }
  function colourModes(set) {
    var has = {advantage: false, gap: false};
    eachToken(set, function (t, i) {
      if (t.advantages && t.advantages[i] !== null) { has.advantage = true; }
      if (t.trainer_logprobs && t.trainer_logprobs[i] !== null) { has.gap = true; }
    });
    var modes = [];
    if (has.advantage) { modes.push(["advantage", "advantage"]); }
    modes.push(["prob", "sampling probability"]);
    if (has.gap) { modes.push(["gap", "trainer - sampling logprob"]); }
    return modes;
  }
  function tokenValue(t, i, mode) {
    if (mode === "advantage") { return t.advantages ? t.advantages[i] : null; }
    if (mode === "gap") {
      if (!t.trainer_logprobs || t.trainer_logprobs[i] === null || t.logprobs[i] === null) { return null; }
      return t.trainer_logprobs[i] - t.logprobs[i];
    }
    return t.logprobs[i] === null ? null : Math.exp(t.logprobs[i]);
  }
  function scaleOf(set, mode) {
    if (mode === "prob") { return 1; }
    var m = 0;
    eachToken(set, function (t, i) {
      var v = tokenValue(t, i, mode);
      if (v !== null && Math.abs(v) > m) { m = Math.abs(v); }
    });
    return m;
  }
  // Diverging green (+) / red (-) for advantages and logprob gaps; orange for unlikely
  // samples in probability mode. null means "no colour" (a zero or missing value).
  function colour(v, mode, scale) {
    if (v === null || Number.isNaN(v)) { return null; }
    if (mode === "prob") {
      var a = Math.min(1, Math.max(0, 1 - v));
      return a < 0.02 ? null : "rgba(247,129,102," + (0.10 + 0.65 * a).toFixed(3) + ")";
    }
    if (!(scale > 0) || Math.abs(v) < 1e-9) { return null; }
    var x = Math.max(-1, Math.min(1, v / scale));
    var alpha = (0.10 + 0.65 * Math.abs(x)).toFixed(3);
    return x > 0 ? "rgba(26,127,55," + alpha + ")" : "rgba(207,34,46," + alpha + ")";
  }

  var tokinfo = el("div", "tokinfo", "hover a token to see its id, logprobs, advantage and loss mask");
  var controls = el("div", "controls");
  var legend = el("div", "legend");
  var note = el("div", "note");
  var episodesBox = el("div", "episodes");
  viewer.appendChild(controls);
  viewer.appendChild(legend);
  viewer.appendChild(tokinfo);
  viewer.appendChild(note);
  viewer.appendChild(episodesBox);

  function labelled(text, node) {
    var wrap = el("span");
    var lab = el("label", null, text + " ");
    wrap.appendChild(lab);
    wrap.appendChild(node);
    return wrap;
  }
  function option(value, text, selected) {
    var o = el("option", null, text);
    o.value = String(value);
    if (selected) { o.selected = true; }
    return o;
  }

  function renderControls() {
    controls.textContent = "";
    var set = currentSet();
    var setSel = el("select");
    setSel.id = "set-select";
    DATA.sets.forEach(function (s, i) {
      setSel.appendChild(option(i, s.label + " (" + s.episodes.length + " episodes)", i === state.set));
    });
    setSel.addEventListener("change", function () {
      state.set = Number(setSel.value); state.group = null; state.colour = null; render();
    });
    controls.appendChild(labelled("iteration", setSel));

    var groups = groupsOf(set);
    var shown = groups.order.filter(function (g) { return groups.byId[g].some(visible); });
    if (state.group === null || shown.indexOf(state.group) < 0) { state.group = shown.length ? shown[0] : null; }
    var groupSel = el("select");
    groupSel.id = "group-select";
    shown.forEach(function (g) {
      var eps = groups.byId[g];
      var won = eps.filter(function (e) { return e.won; }).length;
      var rewards = eps.map(function (e) { return fmt(e.turns.reduce(function (s, t) { return s + (t.reward || 0); }, 0), 2); });
      groupSel.appendChild(option(g, "group " + g + " \u00b7 game " + eps[0].game_index + " \u00b7 " +
        won + "/" + eps.length + " won \u00b7 returns " + rewards.join(" "), g === state.group));
    });
    groupSel.addEventListener("change", function () { state.group = Number(groupSel.value); render(); });
    controls.appendChild(labelled("group", groupSel));
    var prev = el("button", null, "\u25c0"), next = el("button", null, "\u25b6");
    prev.title = "previous group"; next.title = "next group";
    function step(d) {
      var i = shown.indexOf(state.group) + d;
      if (i >= 0 && i < shown.length) { state.group = shown[i]; render(); }
    }
    prev.addEventListener("click", function () { step(-1); });
    next.addEventListener("click", function () { step(1); });
    controls.appendChild(prev); controls.appendChild(next);

    var filters = el("span", "filters");
    filters.appendChild(el("label", null, "show:"));
    DATA.outcomes.forEach(function (o) {
      var n = set.episodes.filter(function (e) { return outcomeOf(e.end) === o; }).length;
      var box = el("input");
      box.type = "checkbox"; box.checked = state.filters[o] !== false; box.id = "filter-" + o;
      box.addEventListener("change", function () { state.filters[o] = box.checked; render(); });
      var lab = el("label");
      lab.appendChild(box);
      lab.appendChild(document.createTextNode(" " + OUTCOME_LABEL[o] + " (" + n + ")"));
      filters.appendChild(lab);
    });
    controls.appendChild(filters);

    var modes = colourModes(set);
    if (!modes.some(function (m) { return m[0] === state.colour; })) { state.colour = modes[0][0]; }
    var colSel = el("select");
    colSel.id = "colour-select";
    modes.forEach(function (m) { colSel.appendChild(option(m[0], m[1], m[0] === state.colour)); });
    colSel.addEventListener("change", function () { state.colour = colSel.value; render(); });
    controls.appendChild(labelled("colour by", colSel));
    return groups;
  }

  function renderLegend(scale) {
    legend.textContent = "";
    var bar = el("span", "bar");
    var lo, hi;
    if (state.colour === "prob") {
      bar.style.background = "linear-gradient(90deg, rgba(247,129,102,0.9), rgba(247,129,102,0))";
      lo = "p = 0"; hi = "p = 1";
    } else {
      bar.style.background = "linear-gradient(90deg, rgba(207,34,46,0.9), rgba(255,255,255,0), rgba(26,127,55,0.9))";
      lo = "-" + fmt(scale); hi = "+" + fmt(scale);
    }
    legend.appendChild(el("span", null, lo));
    legend.appendChild(bar);
    legend.appendChild(el("span", null, hi));
    var masked = el("span", "tok masked", "masked");
    legend.appendChild(el("span", null, "\u00a0\u00a0"));
    legend.appendChild(masked);
    legend.appendChild(el("span", null, "= outside the loss"));
  }

  function tokenTitle(t, i) {
    var lines = ["token " + t.ids[i] + "  " + JSON.stringify(t.text[i])];
    var lp = t.logprobs[i];
    lines.push("sampling logprob " + fmt(lp) + (lp === null ? "" : " (p " + fmt(Math.exp(lp)) + ")"));
    if (t.trainer_logprobs) { lines.push("trainer logprob " + fmt(t.trainer_logprobs[i])); }
    if (t.advantages) { lines.push("advantage " + (t.advantages[i] === null ? "n/a" : signed(t.advantages[i]))); }
    lines.push("loss mask " + t.loss_mask[i] + (t.loss_mask[i] ? " (trained)" : " (not trained)"));
    return lines.join("\n");
  }

  var counts = {tokens: 0, coloured: 0};
  function renderTokens(t, scale) {
    var box = el("div", "action");
    for (var i = 0; i < t.ids.length; i++) {
      var piece = t.text[i];
      var span = el("span", "tok", piece === "" ? "\u00b7" : piece.replace(/\n/g, "\u21b5\n"));
      if (piece === "") { span.className += " partial"; }
      if (!t.loss_mask[i]) { span.className += " masked"; }
      // Masked tokens are hatched and grey instead of coloured: they carry no gradient,
      // and the colour would hide the hatching (their numbers stay in the tooltip).
      var c = t.loss_mask[i] ? colour(tokenValue(t, i, state.colour), state.colour, scale) : null;
      if (c) { span.style.backgroundColor = c; counts.coloured += 1; }
      var title = tokenTitle(t, i);
      span.setAttribute("title", wf(title));
      span.setAttribute("data-info", wf(title.replace(/\n/g, "  \u00b7  ")));
      counts.tokens += 1;
      box.appendChild(span);
    }
    return box;
  }

  function renderTurn(turn, k, scale) {
    var div = el("div", "turn");
    var head = el("div", "turn-head");
    head.appendChild(el("b", null, "turn " + (k + 1)));
    head.appendChild(el("span", "badge status-" + turn.status, turn.status));
    head.appendChild(document.createTextNode("  reward " + fmt(turn.reward, 3)));
    div.appendChild(head);
    div.appendChild(renderTokens(turn.tokens, scale));
    var sent = el("div", "sent", "sent to env: ");
    sent.appendChild(el("code", null, turn.action));
    div.appendChild(sent);
    if (turn.observation) { div.appendChild(el("pre", "obs", turn.observation)); }
    return div;
  }

  function renderEpisode(ep, scale) {
    var card = el("div", "episode");
    var h = el("h3", null, "episode " + ep.episode_id);
    h.appendChild(el("span", "badge " + outcomeOf(ep.end), ep.end));
    card.appendChild(h);
    var total = ep.turns.reduce(function (s, t) { return s + (t.reward || 0); }, 0);
    card.appendChild(el("div", "meta", ep.env_id + " [" + ep.split + "] game " + ep.game_index +
      " \u00b7 seed " + ep.sample_seed + " \u00b7 " + ep.turns.length + " turns \u00b7 return " + fmt(total, 3)));
    if (ep.error) { card.appendChild(el("pre", "error", ep.error)); }
    var obj = el("details");
    obj.appendChild(el("summary", null, "objective"));
    obj.appendChild(el("pre", "obs", ep.objective));
    card.appendChild(obj);
    card.appendChild(el("pre", "obs", ep.first_observation));
    ep.turns.forEach(function (turn, k) { card.appendChild(renderTurn(turn, k, scale)); });
    return card;
  }

  function render() {
    counts = {tokens: 0, coloured: 0};
    var groups = renderControls();
    var set = currentSet();
    var scale = scaleOf(set, state.colour);
    renderLegend(scale);
    episodesBox.textContent = "";
    var eps = state.group === null ? [] : groups.byId[state.group];
    var shown = eps.filter(visible);
    note.textContent = state.group === null ? "no episode matches the filters" :
      "group " + state.group + ": showing " + shown.length + " of " + eps.length +
      " episodes (" + set.file + ")";
    shown.forEach(function (ep) { episodesBox.appendChild(renderEpisode(ep, scale)); });
    body.setAttribute("data-tokens", String(counts.tokens));
    body.setAttribute("data-coloured", String(counts.coloured));
    body.setAttribute("data-episodes", String(shown.length));
  }

  episodesBox.addEventListener("mouseover", function (e) {
    var info = e.target && e.target.getAttribute ? e.target.getAttribute("data-info") : null;
    if (info) { tokinfo.textContent = wf(info); }
  });
  // A link can open a view: #set=2&group=5&hide=lost,truncated&colour=prob (set is the
  // index in the iteration list, group a group id, hide a list of outcome filters).
  function fromHash() {
    (location.hash || "").replace(/^#/, "").split("&").forEach(function (item) {
      var kv = item.split("=");
      var key = decodeURIComponent(kv[0] || ""), value = decodeURIComponent(kv[1] || "");
      if (key === "set" && DATA.sets[Number(value)]) { state.set = Number(value); }
      else if (key === "group" && value !== "") { state.group = Number(value); }
      else if (key === "colour") { state.colour = value; }
      else if (key === "hide") {
        value.split(",").forEach(function (o) { if (o in state.filters) { state.filters[o] = false; } });
      }
    });
  }
  if (DATA.sets.length === 0) {
    viewer.textContent = "no trajectory records in this run (see docs/report.md)";
  } else {
    state.set = DATA.initial || 0;
    fromHash();
    render();
  }
  body.setAttribute("data-render-ms", performance.now().toFixed(0));
  body.setAttribute("data-rendered", "1");
})();
"""
