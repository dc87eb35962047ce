// `specdec trace` and `generate --trace` as a user runs them (build/specdec on SmolLM2), and the
// page in a real browser: headless Chromium opens trace.html from disk. A copy of the page with
// a test script (the shipped page has none) records script errors, counts the rounds the page
// shows, clicks tokens and reads the DOM back through --dump-dom:
//  - no console error and no uncaught exception;
//  - as many rounds in the text as trace.json has (= the generation's n_rounds);
//  - a click on a token fills the detail panel with a probability table (p and q columns for
//    a draft, a residual table for a resampled token), and on a tree round draws its tree;
//  - bad flags and values are named errors with exit code 1.
// ctest-heavy: *
// (heavy since 2026-12-02, ~17 s with Chromium; the recorder's checks on SmolLM2 stay in the fast
// tier in test_harness_trace_smollm2.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "tests/support/command.h"
#include "tests/support/paths.h"

using specdec::testing_support::binary_dir;
using specdec::testing_support::source_dir;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kBin = binary_dir() + "/specdec";
const std::string kModel = source_dir() + "/models/smollm2-135m-instruct.gguf";
const std::string kPrompt = "Write two sentences about a lighthouse keeper.";

using specdec::testing_support::Output;
using specdec::testing_support::quote;
using specdec::testing_support::shell;

Output run(const std::vector<std::string>& args) { return shell(specdec::testing_support::command_line(kBin, args)); }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"})
    if (shell(std::string("command -v ") + name).code == 0) return name;
  return "";
}

// Runs before the page's own script: collects uncaught errors and console.error calls.
const char* kCatchErrors = R"JS(<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push("uncaught: " + e.message); });
var __consoleError = console.error;
console.error = function () { window.__errors.push("console.error: " + Array.prototype.join.call(arguments, " ")); __consoleError.apply(console, arguments); };
</script>)JS";

// Runs after it: counts, clicks and writes what it saw into <pre id="test-result">.
const char* kProbe = R"JS(<script>
(function () {
  var out = { errors: window.__errors };
  try {
    var data = JSON.parse(document.getElementById("trace-data").textContent);
    out.rounds = document.querySelectorAll("#text .round").length;
    out.tables_before = document.querySelectorAll("#detail table.probs").length;
    var acc = document.querySelector("#text .tok.accepted");
    if (acc) {
      acc.click();
      out.accepted_tables = document.querySelectorAll("#detail table.probs").length;
      out.accepted_header = Array.prototype.map.call(document.querySelectorAll("#detail table.probs th"),
                                                     function (h) { return h.textContent; });
      out.accepted_rows = document.querySelectorAll("#detail table.probs tr").length;
    }
    var cor = document.querySelector("#text .tok.corrected");
    if (cor) {
      cor.click();
      out.corrected_tables = document.querySelectorAll("#detail table.probs").length;
      out.corrected_detail = document.getElementById("detail").textContent;
    }
    var tree = -1;
    data.rounds.forEach(function (r, i) { if (tree < 0 && r.tree) tree = i; });
    if (tree >= 0) {
      document.querySelectorAll("#text .round")[tree].querySelector(".tok").click();
      out.tree_round = tree;
      out.tree_items = document.querySelectorAll("#tree li").length;
      out.tree_nodes = data.rounds[tree].nodes.length;
    }
    out.timeline_rows = document.querySelectorAll("#timeline .tl-row").length;
    out.position_rows = document.querySelectorAll("#positions .pos-row").length;
  } catch (e) {
    out.errors.push("probe: " + e.message);
  }
  var pre = document.createElement("pre");
  pre.id = "test-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>)JS";

std::string unescape_html(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  }
  return s;
}

struct BrowserView {
  json probe;           // what the probe script saw
  std::string console;  // Chromium's log (console messages among it)
};

// Opens a copy of `page` with the error catcher and the probe in headless Chromium.
BrowserView open_in_browser(const std::string& browser, const std::string& page, const std::string& dir) {
  std::string html = read(page);
  const size_t head = html.find("<head>");
  const size_t body_end = html.rfind("</body>");
  EXPECT_NE(head, std::string::npos);
  EXPECT_NE(body_end, std::string::npos);
  html.insert(body_end, kProbe);
  html.insert(head + 6, kCatchErrors);
  const std::string copy = dir + "/probe.html";
  std::ofstream(copy) << html;
  const Output o = shell(browser + " --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 "
                         "--user-data-dir=" + quote(dir + "/profile") + " --dump-dom " + quote("file://" + copy));
  EXPECT_EQ(o.code, 0) << o.text;
  BrowserView v;
  v.console = o.text;
  const std::string open_tag = "<pre id=\"test-result\">";
  const size_t a = o.text.find(open_tag), b = o.text.find("</pre>", a);
  if (a == std::string::npos || b == std::string::npos) {
    ADD_FAILURE() << "the probe wrote no result; Chromium said:\n" << o.text.substr(0, 4000);
    return v;
  }
  v.probe = json::parse(unescape_html(o.text.substr(a + open_tag.size(), b - a - open_tag.size())), nullptr, false);
  return v;
}

class TraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kModel)) << kModel << " is missing: run `scripts/fetch_models.sh smollm2-135m`";
    dir_ = (fs::temp_directory_path() / ("specdec_trace_" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

void expect_page_works(const std::string& page, const std::string& dir, bool expect_tree) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it): browser checks skipped";
  const json trace = json::parse(read(fs::path(page).replace_extension(".json").string()));
  const BrowserView v = open_in_browser(browser, page, dir);
  ASSERT_TRUE(v.probe.is_object()) << v.console.substr(0, 4000);
  EXPECT_TRUE(v.probe["errors"].empty()) << v.probe["errors"].dump();
  // Chromium prints console messages as "...:CONSOLE(line)] message"; an error-level one or an
  // uncaught exception from the page would show there too.
  EXPECT_EQ(v.console.find("Uncaught"), std::string::npos) << v.console.substr(0, 4000);
  EXPECT_EQ(v.console.find(":ERROR:CONSOLE"), std::string::npos) << v.console.substr(0, 4000);
  const size_t n_rounds = trace["rounds"].size();
  EXPECT_GT(n_rounds, 0u);
  EXPECT_EQ(v.probe["rounds"], n_rounds);
  EXPECT_EQ(v.probe["rounds"], trace["stats"]["n_rounds"]);
  EXPECT_EQ(v.probe["timeline_rows"], n_rounds);
  EXPECT_EQ(v.probe["tables_before"], 0);
  // A click on an accepted draft shows p and q side by side, top_k rows + the header.
  EXPECT_GE(v.probe["accepted_tables"].get<int>(), 1);
  const json header = v.probe["accepted_header"];
  EXPECT_NE(std::find(header.begin(), header.end(), "p"), header.end()) << header.dump();
  EXPECT_NE(std::find(header.begin(), header.end(), "q"), header.end()) << header.dump();
  EXPECT_GE(v.probe["accepted_rows"].get<int>(), 3);
  EXPECT_GT(v.probe["position_rows"].get<int>(), 0);
  if (expect_tree) {
    ASSERT_TRUE(v.probe.contains("tree_items")) << "no tree round in " << page;
    EXPECT_EQ(v.probe["tree_items"], v.probe["tree_nodes"]);
  } else {
    // A resampled token: the p/q table plus the residual it was drawn from.
    EXPECT_EQ(v.probe["corrected_tables"], 2) << v.probe.dump();
    EXPECT_NE(v.probe["corrected_detail"].get<std::string>().find("residual"), std::string::npos);
  }
}

TEST_F(TraceCli, ChainPageRendersInChromium) {
  const std::string page = dir_ + "/trace.html";
  const Output o = run({"trace", "--model", "smollm2-135m", "--strategy", "speculative", "--set", "drafter=layer_skip",
                        "--set", "skip_layers=10,13,16,19,22", "--set", "temperature=0.8", "--seed", "3", "--chat",
                        "--prompt", kPrompt, "--max-new-tokens", "48", "--out", page});
  ASSERT_EQ(o.code, 0) << o.text;
  ASSERT_TRUE(fs::exists(page));
  ASSERT_TRUE(fs::exists(dir_ + "/trace.json"));
  EXPECT_NE(o.text.find("trace: wrote"), std::string::npos) << o.text;
  // The page is self-contained: no URL is fetched from it.
  const std::string html = read(page);
  for (const char* ref : {"http://", "https://", "src=", "<link"}) EXPECT_EQ(html.find(ref), std::string::npos) << ref;
  expect_page_works(page, dir_, false);
}

TEST_F(TraceCli, TreePageFromGenerateTrace) {
  const std::string page = dir_ + "/tree.html";
  // The model as its own draft: the tree drafter needs one, and the catalog has one SmolLM2.
  const Output o = run({"generate", "--model", "smollm2-135m", "--draft", "smollm2-135m", "--strategy", "speculative",
                        "--set", "drafter=tree", "--set", "tree_branching=2,2,1", "--set", "temperature=0.8", "--chat",
                        "--prompt", kPrompt, "--max-new-tokens", "24", "--trace", page});
  ASSERT_EQ(o.code, 0) << o.text;
  expect_page_works(page, dir_, true);
}

TEST_F(TraceCli, GreedyStrategyIsTracedStepByStep) {
  const std::string page = dir_ + "/greedy.html";
  const Output o = run({"trace", "--model", "smollm2-135m", "--strategy", "greedy", "--prompt", "The sky is",
                        "--max-new-tokens", "8", "--out", page});
  ASSERT_EQ(o.code, 0) << o.text;
  const json trace = json::parse(read(dir_ + "/greedy.json"));
  EXPECT_EQ(trace["rounds"].size(), trace["tokens"].size());
  EXPECT_EQ(trace["strategy"], "greedy");
}

TEST_F(TraceCli, BadFlagsAreNamedErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"trace", "--model", "smollm2-135m", "--prompt", "x"}, "--out is required"},
      {{"trace", "--model", "smollm2-135m", "--prompt", "x", "--out"}, "--out needs a file name"},
      {{"trace", "--model", "smollm2-135m", "--prompt", "x", "--out", dir_ + "/t.json"}, "ends in .json"},
      {{"trace", "--model", "smollm2-135m", "--prompt", "x", "--out", dir_}, "is a directory"},
      {{"trace", "--model", "smollm2-135m", "--prompt", "x", "--trace", "t.html"}, "takes --out, not --trace"},
      {{"trace", "--model", "smollm2-135m", "--prompt", "x", "--out", dir_ + "/no/such/dir/t.html",
        "--max-new-tokens", "2"}, "does not exist"},
      {{"trace", "--model", "smollm2-135m", "--strategy", "beam", "--prompt", "x", "--out", dir_ + "/b.html",
        "--max-new-tokens", "2"}, "beam: --trace is not supported"},
      {{"trace", "--model", "smollm2-135m", "--strategy", "nope", "--prompt", "x", "--out", dir_ + "/n.html"}, "nope"},
  };
  for (const auto& [args, message] : cases) {
    const Output o = run(args);
    EXPECT_EQ(o.code, 1) << o.text;
    EXPECT_NE(o.text.find(message), std::string::npos) << "expected '" << message << "' in:\n" << o.text;
  }
  EXPECT_EQ(run({"trace", "--help"}).code, 0);
}

}  // namespace
