// The trace page template: plain HTML, CSS and JS, no network. harness/trace.cpp puts the
// trace's JSON where @TRACE_JSON@ stands. Every piece of model text reaches the page through
// textContent, never innerHTML, so token text cannot inject markup.
namespace specdec::harness {

extern const char* const k_trace_page;
const char* const k_trace_page = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>specdec trace</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { padding: 10px 18px; background: #263238; color: #eceff1; }
header h1 { font-size: 18px; margin: 0 0 4px 0; }
header .meta { font-size: 12px; color: #b0bec5; white-space: pre-wrap; overflow-wrap: anywhere; }
main { display: grid; grid-template-columns: minmax(0, 1.4fr) minmax(320px, 1fr); gap: 14px; padding: 14px 18px; }
section { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 10px 12px; margin-bottom: 14px; }
h2 { font-size: 14px; margin: 0 0 8px 0; color: #37474f; }
.legend span { display: inline-block; margin-right: 10px; font-size: 12px; }
#text { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px; line-height: 1.9; }
.prompt { color: #90a4ae; }
.round { border-bottom: 3px solid #cfd8dc; padding: 1px 0; }
.round.odd { border-bottom-color: #90a4ae; }
.round.sel { background: #fff8e1; }
.tok { cursor: pointer; border-radius: 3px; padding: 0 1px; }
.tok:hover { outline: 1px solid #555; }
.tok.on { outline: 2px solid #000; }
.accepted { background: #c8e6c9; }
.corrected { background: #ffcc80; }
.bonus { background: #90caf9; }
.target, .step { background: #e0e0e0; }
.rejected { background: #ffcdd2; text-decoration: line-through; color: #b71c1c; }
.skipped { background: #f5f5f5; text-decoration: line-through; color: #9e9e9e; }
#detail .facts { font-family: ui-monospace, monospace; font-size: 12px; margin-bottom: 6px; }
table.probs { border-collapse: collapse; font-family: ui-monospace, monospace; font-size: 12px; width: 100%; margin-bottom: 8px; }
table.probs th, table.probs td { border-bottom: 1px solid #eee; padding: 1px 4px; text-align: left; }
table.probs td.num { text-align: right; }
table.probs tr.x td { font-weight: bold; background: #fff3e0; }
.bar { display: inline-block; height: 10px; background: #546e7a; vertical-align: middle; }
.bar.q { background: #ab47bc; }
#tree ul { list-style: none; padding-left: 16px; margin: 0; border-left: 1px dotted #bbb; }
#tree li { margin: 1px 0; font-family: ui-monospace, monospace; font-size: 12px; }
.tl-row { display: flex; align-items: center; font-size: 11px; cursor: pointer; }
.tl-row.sel { background: #fff8e1; }
.tl-row .lbl { width: 42px; color: #607d8b; flex: none; }
.tl-row .track { flex: 1; display: flex; height: 11px; }
.tl-row .ms { width: 64px; text-align: right; color: #607d8b; flex: none; }
.ph-draft { background: #7e57c2; } .ph-verify { background: #26a69a; } .ph-sample { background: #ffa726; }
.ph-accept { background: #66bb6a; } .ph-rollback { background: #ef5350; } .ph-logits_copy { background: #8d6e63; }
.ph-other { background: #bdbdbd; } .ph-draft_catchup { background: #b39ddb; }
.pos-row { display: flex; align-items: center; font-size: 12px; font-family: ui-monospace, monospace; }
.pos-row .lbl { width: 48px; } .pos-row .track { width: 60%; background: #eceff1; height: 12px; margin-right: 8px; }
.pos-row .fill { background: #43a047; height: 12px; }
.muted { color: #90a4ae; font-size: 12px; }
</style>
</head>
<body>
<header><h1>specdec trace</h1><div class="meta" id="meta"></div></header>
<main>
<div>
<section><h2>Text by round</h2>
<div class="legend"><span class="accepted">accepted draft</span><span class="corrected">corrected</span><span class="bonus">bonus</span><span class="target">target / step</span><span class="rejected">rejected draft</span><span class="skipped">not verified (draft panel)</span></div>
<div class="muted">Each underlined run is one round (one target forward). Click a token.</div>
<div id="text"></div></section>
<section><h2>Phases per round (ms)</h2><div class="legend" id="tl-legend"></div><div id="timeline"></div></section>
<section><h2>Acceptance per draft position</h2><div id="positions"></div></section>
</div>
<div>
<section><h2>Detail</h2><div id="detail" class="muted">Click a token in the text.</div></section>
<section><h2>Draft (tree or chain) of the selected round</h2><div id="tree" class="muted">Select a round.</div></section>
</div>
</main>
<script type="application/json" id="trace-data">@TRACE_JSON@</script>
<script>
(function () {
  "use strict";
  var T = JSON.parse(document.getElementById("trace-data").textContent);
  var R = T.rounds;
  var PHASES = ["draft", "verify", "sample", "accept", "rollback", "logits_copy", "other"];

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function fmt(x, d) { return x === undefined || x === null ? "-" : Number(x).toFixed(d === undefined ? 4 : d); }
  function show(piece) { return JSON.stringify(piece); }

  // ---- header
  var s = T.stats || {};
  document.getElementById("meta").textContent =
    "model " + T.model + (T.draft ? "   draft " + T.draft : "") + "   strategy " + T.strategy +
    "   " + Object.keys(T.params_set || {}).map(function (k) { return k + "=" + T.params_set[k]; }).join(" ") +
    (T.seed ? "   seed " + T.seed : "") + "\n" + R.length + " rounds, " + (T.tokens || []).length +
    " tokens (" + T.finish + ")" + (s.n_drafted ? ", alpha " + fmt(s.alpha, 3) + ", tau " + fmt(s.tau, 3) : "") +
    ", " + fmt(s.ms_total, 1) + " ms (prefill " + fmt(T.prefill_ms, 1) + " ms)";

  // ---- text by round
  var text = document.getElementById("text");
  var selectedTok = null, selectedRound = -1;
  text.appendChild(el("span", "prompt", T.prompt));
  R.forEach(function (r, i) {
    var span = el("span", "round" + (i % 2 ? " odd" : ""));
    span.title = "round " + (i + 1);
    span.dataset.round = i;
    function tok(piece, cls, target) {
      var t = el("span", "tok " + cls, piece);
      t.addEventListener("click", function () { select(i, target, t); });
      span.appendChild(t);
    }
    var em = r.emitted, nAcc = Math.min(r.path.length, em.length);
    for (var j = 0; j < nAcc; ++j) tok(em[j].piece, "accepted", { emit: j });
    r.nodes.forEach(function (n, k) {  // the drafts the verifier refused (the rest: draft panel)
      if (n.status === "rejected") tok(n.piece, n.status, { node: k });
    });
    for (var j2 = nAcc; j2 < em.length; ++j2) tok(em[j2].piece, em[j2].kind, { emit: j2 });
    text.appendChild(span);
  });

  // ---- detail panel
  function probTable(title, left, right, x, leftName, rightName) {
    var wrap = el("div");
    wrap.appendChild(el("div", "muted", title));
    var tab = el("table", "probs");
    var head = el("tr");
    ["#", leftName + " token", leftName, "", rightName ? rightName + " token" : "", rightName || "", ""].forEach(
      function (h) { head.appendChild(el("th", null, h)); });
    tab.appendChild(head);
    var n = Math.max(left.length, right ? right.length : 0);
    for (var i = 0; i < n; ++i) {
      var tr = el("tr");
      var a = left[i], b = right ? right[i] : null;
      if ((a && a[0] === x) || (b && b[0] === x)) tr.className = "x";
      tr.appendChild(el("td", "num", i + 1));
      tr.appendChild(el("td", null, a ? show(a[2]) : ""));
      tr.appendChild(el("td", "num", a ? fmt(a[1]) : ""));
      var c1 = el("td"); if (a) { var b1 = el("span", "bar"); b1.style.width = (60 * a[1]).toFixed(1) + "px"; c1.appendChild(b1); }
      tr.appendChild(c1);
      tr.appendChild(el("td", null, b ? show(b[2]) : ""));
      tr.appendChild(el("td", "num", b ? fmt(b[1]) : ""));
      var c2 = el("td"); if (b) { var b2 = el("span", "bar q"); b2.style.width = (60 * b[1]).toFixed(1) + "px"; c2.appendChild(b2); }
      tr.appendChild(c2);
      tab.appendChild(tr);
    }
    wrap.appendChild(tab);
    return wrap;
  }

  function detailOf(i, target) {
    var r = R[i], box = el("div"), node = null, e = null;
    if (target.node !== undefined) node = r.nodes[target.node];
    else {
      e = r.emitted[target.emit];
      if (e.kind === "accepted") node = r.nodes[e.node];
    }
    var kind = node ? node.status + " draft" : e.kind + " token";
    var piece = node ? node.piece : e.piece;
    box.appendChild(el("div", null, "Round " + (i + 1) + " of " + R.length + ": " + kind + " " + show(piece) +
      " (id " + (node ? node.token : e.token) + ")"));
    var facts = el("div", "facts");
    if (node) {
      facts.textContent = "depth " + node.depth + "   p(x) = " + fmt(node.p) + "   q(x) = " + fmt(node.q) +
        "   min(1, p/q) = " + fmt(node.accept_prob) + (r.has_q ? "" : "   (drafter without a distribution: accepted iff the target's token equals it)");
      box.appendChild(facts);
      box.appendChild(probTable("target p (after the processors) and draft q at this position, top " + T.top_k,
        r.p_top[node.row] || [], node.q_top || null, node.token, "p", node.q_top ? "q" : null));
    } else {
      // the corrected / bonus / plain token: p of its row, q of the draft it replaced
      var rejected = r.nodes.filter(function (n) { return n.row === e.row; });
      facts.textContent = "p(x) = " + fmt(e.p) + (rejected.length ? "   replaced draft " + show(rejected[0].piece) +
        " (min(1, p/q) = " + fmt(rejected[0].accept_prob) + ")" : "");
      box.appendChild(facts);
      var q = rejected.length && rejected[0].q_top ? rejected[0].q_top : null;
      box.appendChild(probTable("target p at this position" + (q ? " and the rejected draft's q" : "") + ", top " + T.top_k,
        r.p_top[e.row] || [], q, e.token, "p", q ? "q" : null));
      if (e.residual_top)
        box.appendChild(probTable("resampled from the residual norm(max(0, p - q)), top " + T.top_k,
          e.residual_top, null, e.token, "residual", null));
      else if (e.kind === "corrected")
        box.appendChild(el("div", "muted", r.has_q ? "greedy or block verification: no token-wise residual" :
          "no draft distribution: the token was drawn from p"));
    }
    var ph = el("div", "facts");
    ph.textContent = "phases (ms): " + PHASES.map(function (p) { return p + " " + fmt(r.phases_ms[p], 2); }).join("  ");
    box.appendChild(ph);
    return box;
  }

  function select(i, target, tokEl) {
    if (selectedTok) selectedTok.classList.remove("on");
    selectedTok = tokEl;
    if (tokEl) tokEl.classList.add("on");
    var d = document.getElementById("detail");
    d.className = "";
    d.replaceChildren(detailOf(i, target));
    selectRound(i);
  }

  // ---- draft tree
  function selectRound(i) {
    selectedRound = i;
    document.querySelectorAll(".round, .tl-row").forEach(function (e) {
      e.classList.toggle("sel", Number(e.dataset.round) === i);
    });
    var r = R[i], box = document.getElementById("tree");
    box.className = "";
    if (!r.nodes.length) {
      box.replaceChildren(el("div", "muted", "Round " + (i + 1) + ": no drafts"));
      return;
    }
    var lists = { "-1": el("ul") };
    r.nodes.forEach(function (n, k) {
      var li = el("li");
      var t = el("span", "tok " + n.status, show(n.piece));
      t.addEventListener("click", function () { select(i, { node: k }, null); });
      li.appendChild(t);
      li.appendChild(el("span", "muted", "  p " + fmt(n.p, 3) + (n.q !== undefined ? "  q " + fmt(n.q, 3) : "")));
      var sub = el("ul");
      li.appendChild(sub);
      lists[k] = sub;
      lists[n.parent].appendChild(li);
    });
    box.replaceChildren(el("div", "muted", "Round " + (i + 1) + ": " + (r.tree ? "a tree of " : "a chain of ") +
      r.nodes.length + " drafts, " + r.path.length + " accepted"), lists["-1"]);
  }

  // ---- timeline
  var tl = document.getElementById("timeline"), legend = document.getElementById("tl-legend");
  PHASES.forEach(function (p) { legend.appendChild(el("span", "ph-" + p, " " + p + " ")); });
  var totals = R.map(function (r) { return PHASES.reduce(function (a, p) { return a + (r.phases_ms[p] || 0); }, 0); });
  var maxTotal = Math.max.apply(null, totals.concat([1e-9]));
  R.forEach(function (r, i) {
    var row = el("div", "tl-row");
    row.dataset.round = i;
    row.appendChild(el("span", "lbl", "r" + (i + 1)));
    var track = el("span", "track");
    PHASES.forEach(function (p) {
      var seg = el("span", "ph-" + p);
      seg.style.width = (100 * (r.phases_ms[p] || 0) / maxTotal).toFixed(2) + "%";
      seg.title = p + " " + fmt(r.phases_ms[p], 3) + " ms";
      track.appendChild(seg);
    });
    row.appendChild(track);
    row.appendChild(el("span", "ms", fmt(totals[i], 2)));
    row.addEventListener("click", function () { selectRound(i); });
    tl.appendChild(row);
  });

  // ---- acceptance per draft position (depth), over the rounds that drafted that deep
  var drafted = [], accepted = [];
  R.forEach(function (r) {
    var depth = r.nodes.reduce(function (a, n) { return Math.max(a, n.depth); }, 0);
    for (var d = 0; d < depth; ++d) {
      drafted[d] = (drafted[d] || 0) + 1;
      accepted[d] = (accepted[d] || 0) + (d < r.path.length ? 1 : 0);
    }
  });
  var pos = document.getElementById("positions");
  if (!drafted.length) pos.appendChild(el("div", "muted", "No drafts in this generation."));
  drafted.forEach(function (n, d) {
    var row = el("div", "pos-row");
    row.appendChild(el("span", "lbl", "pos " + (d + 1)));
    var track = el("span", "track"), fill = el("span", "fill");
    fill.style.display = "block";
    fill.style.width = (100 * accepted[d] / n).toFixed(1) + "%";
    track.appendChild(fill);
    row.appendChild(track);
    row.appendChild(el("span", null, accepted[d] + " / " + n + " (" + (100 * accepted[d] / n).toFixed(0) + "%)"));
    pos.appendChild(row);
  });

  // trace.html#round=N opens round N (1-based) with its last token selected: a link to a round.
  var m = /^#round=(\d+)$/.exec(location.hash);
  if (m && Number(m[1]) >= 1 && Number(m[1]) <= R.length) {
    var toks = document.querySelectorAll("#text .round")[Number(m[1]) - 1].querySelectorAll(".tok");
    toks[toks.length - 1].click();
    toks[toks.length - 1].scrollIntoView({ block: "nearest" });
  }
})();
</script>
</body>
</html>
)PAGE";

}  // namespace specdec::harness
