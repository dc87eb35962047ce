// Spec-Bench prompts: the loader's `turns` / `question_id` format on the real question file
// (experiments/prompts/spec_bench.jsonl), prompts.groups / per_category / categories / range
// selection and sharding, interleave and report.context, their errors and the resolved YAML.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "harness/experiment.h"
#include "harness/paths.h"
#include "harness/plan.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

using namespace specdec;
using namespace specdec::harness;
namespace fs = std::filesystem;

namespace {

std::string spec_bench_file() { return source_dir() + "/experiments/prompts/spec_bench.jsonl"; }

// An experiment over the real file with extra `prompts` keys (YAML flow-map entries).
std::string spec_bench_yaml(const std::string& prompt_keys, const std::string& extra = "") {
  return "models: {target: tiny-llama}\nstrategies: [greedy]\nprompts: {file: " + spec_bench_file() + ", chat: true" +
         (prompt_keys.empty() ? "" : ", " + prompt_keys) + "}\n" + extra;
}

ExperimentConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_experiment(yaml, "exp.yaml", overrides);
}

std::vector<std::string> ids(const std::vector<PromptItem>& prompts) {
  std::vector<std::string> out;
  for (const auto& p : prompts) out.push_back(p.id);
  return out;
}

std::map<std::string, int> count_by(const std::vector<PromptItem>& prompts, bool sub) {
  std::map<std::string, int> out;
  for (const auto& p : prompts) ++out[sub ? p.subcategory : p.category];
  return out;
}

// Position of each prompt of `part` in `whole` (by id); -1 when absent.
std::vector<int> positions(const std::vector<PromptItem>& whole, const std::vector<PromptItem>& part) {
  std::vector<int> out;
  for (const auto& p : part) {
    int at = -1;
    for (size_t i = 0; i < whole.size(); ++i)
      if (whole[i].id == p.id) at = static_cast<int>(i);
    out.push_back(at);
  }
  return out;
}

void expect_error(const std::string& yaml, const std::vector<std::string>& fragments,
                  const std::vector<std::string>& overrides = {}) {
  try {
    parse(yaml, overrides);
    FAIL() << "no error for:\n" << yaml;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

// A scratch folder with JSONL files, removed at the end of the test.
struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::temp_directory_path() /
          ("specdec_spec_bench_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

std::string file_yaml(const std::string& path, const std::string& prompt_keys = "") {
  return "models: {target: x}\nstrategies: [greedy]\nprompts: {file: " + path +
         (prompt_keys.empty() ? "" : ", " + prompt_keys) + "}\n";
}

const std::vector<std::string> k_mt_bench = {"writing", "roleplay",   "reasoning", "math",
                                             "coding",  "extraction", "stem",      "humanities"};
const std::vector<std::string> k_groups = {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag"};

}  // namespace

TEST(SpecBenchPrompts, LoaderReadsTheQuestionFile) {
  const auto prompts = load_prompts_jsonl(spec_bench_file(), true);
  ASSERT_EQ(prompts.size(), 480u);
  EXPECT_EQ(prompts[0].id, "81");  // question_id, an integer in the file
  EXPECT_EQ(prompts[0].category, "writing");
  EXPECT_TRUE(prompts[0].subcategory.empty());  // no grouping asked
  std::set<std::string> unique_ids;
  int with_follow_up = 0;
  for (const auto& p : prompts) {
    unique_ids.insert(p.id);
    EXPECT_FALSE(p.text.empty());
    EXPECT_TRUE(p.chat);
    const bool mt = std::find(k_mt_bench.begin(), k_mt_bench.end(), p.category) != k_mt_bench.end();
    EXPECT_EQ(p.follow_ups.size(), mt ? 1u : 0u) << p.id << " " << p.category;
    if (!p.follow_ups.empty()) {
      EXPECT_FALSE(p.follow_ups[0].empty());
      EXPECT_NE(p.follow_ups[0], p.text);
      ++with_follow_up;
    }
  }
  EXPECT_EQ(unique_ids.size(), 480u);
  EXPECT_EQ(with_follow_up, 80);
  const auto fine = count_by(prompts, false);
  EXPECT_EQ(fine.size(), 13u);
  for (const auto& c : k_mt_bench) EXPECT_EQ(fine.at(c), 10) << c;
  for (const auto& c : {"translation", "summarization", "qa", "math_reasoning", "rag"}) EXPECT_EQ(fine.at(c), 80) << c;
}

TEST(SpecBenchPrompts, GroupsMapToSpecBenchsSixColumns) {
  const auto c = parse(spec_bench_yaml("groups: spec_bench"));
  ASSERT_EQ(c.prompts.size(), 480u);
  const auto groups = count_by(c.prompts, false);
  ASSERT_EQ(groups.size(), 6u);
  for (const auto& g : k_groups) EXPECT_EQ(groups.at(g), 80) << g;
  // Groups appear in Spec-Bench's column order (the report orders columns by first appearance).
  std::vector<std::string> order;
  for (const auto& p : c.prompts)
    if (std::find(order.begin(), order.end(), p.category) == order.end()) order.push_back(p.category);
  EXPECT_EQ(order, k_groups);
  std::map<std::string, int> mt_sub;
  for (const auto& p : c.prompts) {
    if (p.category == "multi_turn") {
      EXPECT_EQ(p.follow_ups.size(), 1u) << p.id;
      ++mt_sub[p.subcategory];
    } else {
      EXPECT_TRUE(p.follow_ups.empty()) << p.id;
      EXPECT_EQ(p.subcategory, p.category) << p.id;  // a one-category group
    }
  }
  ASSERT_EQ(mt_sub.size(), 8u);
  for (const auto& s : k_mt_bench) EXPECT_EQ(mt_sub.at(s), 10) << s;
}

TEST(SpecBenchPrompts, PerCategoryIsSeededAndKeepsFileOrder) {
  const auto all = parse(spec_bench_yaml("groups: spec_bench")).prompts;
  const auto a = parse(spec_bench_yaml("groups: spec_bench, per_category: 5")).prompts;
  const auto b = parse(spec_bench_yaml("groups: spec_bench, per_category: 5, seed: 0")).prompts;
  const auto other = parse(spec_bench_yaml("groups: spec_bench, per_category: 5, seed: 1")).prompts;
  ASSERT_EQ(a.size(), 30u);
  for (const auto& [g, n] : count_by(a, false)) EXPECT_EQ(n, 5) << g;
  EXPECT_EQ(count_by(a, false).size(), 6u);
  EXPECT_EQ(ids(a), ids(b));  // seed 0 is the default; same selection on every load
  EXPECT_EQ(ids(parse(spec_bench_yaml("groups: spec_bench, per_category: 5")).prompts), ids(a));
  ASSERT_EQ(other.size(), 30u);
  EXPECT_NE(ids(other), ids(a));
  for (const auto& sel : {a, other}) {
    const auto pos = positions(all, sel);
    for (int p : pos) EXPECT_GE(p, 0);
    EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end())) << "not in file order";
    EXPECT_EQ(std::set<int>(pos.begin(), pos.end()).size(), pos.size());
  }
  // The selection is fixed by the algorithm (mt19937_64 + explicit Fisher-Yates), not by the
  // standard library: these ids are what experiments/spec_bench.yaml measures (cross-checked
  // with an independent Python mt19937_64).
  EXPECT_EQ(ids(a), (std::vector<std::string>{"110", "126", "129", "135", "154", "188", "213", "217", "229", "237",
                                              "255", "264", "300", "310", "320", "340", "341", "357", "377", "387",
                                              "410", "437", "445", "453", "471", "532", "533", "535", "544", "560"}));
  EXPECT_EQ(ids(other),
            (std::vector<std::string>{"98",  "99",  "109", "133", "134", "162", "167", "200", "211", "222",
                                      "244", "265", "272", "314", "318", "321", "338", "372", "389", "396",
                                      "418", "421", "426", "463", "466", "536", "545", "551", "558", "560"}));
  // 0 keeps everything; more than a category has keeps all of it.
  EXPECT_EQ(parse(spec_bench_yaml("groups: spec_bench, per_category: 0")).prompts.size(), 480u);
  EXPECT_EQ(ids(parse(spec_bench_yaml("groups: spec_bench, per_category: 80")).prompts), ids(all));
  // Without groups the fine categories count: 13 x 2.
  EXPECT_EQ(parse(spec_bench_yaml("per_category: 2")).prompts.size(), 26u);
}

TEST(SpecBenchPrompts, CategoriesAndRangeShardTheSelection) {
  const std::string base = "groups: spec_bench, per_category: 5";
  const auto whole = parse(spec_bench_yaml(base)).prompts;
  ASSERT_EQ(whole.size(), 30u);

  const auto qa = parse(spec_bench_yaml(base + ", categories: [qa]")).prompts;
  ASSERT_EQ(qa.size(), 5u);
  for (const auto& p : qa) EXPECT_EQ(p.category, "qa");
  const auto two = parse(spec_bench_yaml(base), {"prompts.categories=[rag, multi_turn]"}).prompts;
  ASSERT_EQ(two.size(), 10u);
  EXPECT_EQ(two[0].category, "multi_turn");  // file order, not the order asked
  EXPECT_EQ(two[9].category, "rag");

  // Shards by category: their union, put back in file order, is the unsharded selection.
  std::vector<PromptItem> by_category;
  for (const auto& g : k_groups)
    for (auto& p : parse(spec_bench_yaml(base), {"prompts.categories=[" + g + "]"}).prompts) by_category.push_back(p);
  auto pos = positions(whole, by_category);
  std::sort(pos.begin(), pos.end());
  std::vector<int> expected(whole.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int>(i);
  EXPECT_EQ(pos, expected);

  // Shards by range: concatenated they are the unsharded selection, in order.
  std::vector<std::string> by_range;
  for (const char* r : {"0:7", "7:20", "20:"})
    for (const auto& id : ids(parse(spec_bench_yaml(base), {std::string("prompts.range=") + r}).prompts))
      by_range.push_back(id);
  EXPECT_EQ(by_range, ids(whole));
  const auto mid = parse(spec_bench_yaml(base + ", range: \"3:5\"")).prompts;
  EXPECT_EQ(ids(mid), (std::vector<std::string>{whole[3].id, whole[4].id}));
  EXPECT_EQ(parse(spec_bench_yaml(base + ", range: \"25:1000\"")).prompts.size(), 5u);  // B past the end
  EXPECT_EQ(parse(spec_bench_yaml(base + ", range: \":4\"")).prompts.size(), 4u);

  // The full file in question-range shards of 100 (the last one runs to the end).
  std::vector<std::string> full;
  for (int lo = 0; lo < 480; lo += 100)
    for (const auto& id : ids(parse(spec_bench_yaml("groups: spec_bench"),
                                    {"prompts.range=" + std::to_string(lo) + ":" + std::to_string(lo + 100)})
                                  .prompts))
      full.push_back(id);
  EXPECT_EQ(full, ids(parse(spec_bench_yaml("groups: spec_bench")).prompts));

  // Order: categories before range, range before limit.
  const auto qa_range =
      parse(spec_bench_yaml("groups: spec_bench, categories: [qa], range: \"10:20\", limit: 3")).prompts;
  const auto qa_all = parse(spec_bench_yaml("groups: spec_bench, categories: [qa]")).prompts;
  ASSERT_EQ(qa_range.size(), 3u);
  EXPECT_EQ(qa_range[0].id, qa_all[10].id);
}

TEST(SpecBenchPrompts, InlineTurnsAndDefaultIdsSurviveSelection) {
  const auto c = parse(R"(
models: {target: tiny-llama}
strategies: [greedy]
prompts:
  chat: true
  range: "1:"
  inline:
    - {text: "one", category: a}
    - {turns: ["two", "and then?"], category: b}
    - "three"
)");
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[0].id, "p1");  // ids are numbered before the selection: stable across shards
  EXPECT_EQ(c.prompts[0].text, "two");
  EXPECT_EQ(c.prompts[0].follow_ups, std::vector<std::string>{"and then?"});
  EXPECT_EQ(c.prompts[1].id, "p2");
}

TEST(SpecBenchPrompts, InterleaveAndReportContext) {
  const std::string minimal = "models: {target: tiny-llama}\nprompts: [hi]\nstrategies: [greedy]\n";
  EXPECT_EQ(parse(minimal).interleave, "cell");
  EXPECT_TRUE(parse(minimal).report_context.empty());
  EXPECT_EQ(parse(minimal + "interleave: prompt\n").interleave, "prompt");
  EXPECT_EQ(parse(minimal + "interleave: cell\n").interleave, "cell");
  EXPECT_EQ(parse(minimal, {"interleave=prompt"}).interleave, "prompt");
  const std::string ctx = source_dir() + "/experiments/spec_bench_leaderboard.md";
  ASSERT_TRUE(fs::exists(ctx));
  const auto c = parse(minimal + "report: {context: " + ctx + "}\n");
  EXPECT_EQ(c.report_context, ctx);  // kept as written, like prompts.file
  // A relative path resolves like prompts.file (here: from the repository root) and is kept
  // relative, so a run's config.yaml is the same on every checkout.
  const auto rel = parse_experiment(minimal + "report: {context: experiments/spec_bench_leaderboard.md}\n",
                                    "/nonexistent/dir/exp.yaml");
  EXPECT_EQ(rel.report_context, "experiments/spec_bench_leaderboard.md");
  EXPECT_TRUE(fs::equivalent(resolve_data_path(rel.report_context, "/nonexistent/dir/exp.yaml"), ctx));
}

TEST(SpecBenchPrompts, ResolvedYamlCarriesTurnsSubcategoryInterleaveAndContext) {
  const std::string ctx = source_dir() + "/experiments/spec_bench_leaderboard.md";
  const auto c = parse(
      spec_bench_yaml("groups: spec_bench, per_category: 2", "interleave: prompt\nreport: {context: " + ctx + "}\n"));
  const std::string y = to_yaml(c);
  EXPECT_NE(y.find("turns:"), std::string::npos);
  ASSERT_FALSE(c.prompts[0].subcategory.empty());
  EXPECT_NE(y.find("subcategory: " + c.prompts[0].subcategory), std::string::npos) << y.substr(0, 2000);
  EXPECT_NE(y.find("category: multi_turn"), std::string::npos);
  EXPECT_NE(y.find("interleave: prompt"), std::string::npos);
  EXPECT_NE(y.find("context: " + c.report_context), std::string::npos);
  // Fixed point: the resolved config parses back to itself, turns and all.
  const auto c2 = parse_experiment(y, "resolved.yaml");
  EXPECT_EQ(to_yaml(c2), y);
  ASSERT_EQ(c2.prompts.size(), c.prompts.size());
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    EXPECT_EQ(c2.prompts[i].id, c.prompts[i].id);
    EXPECT_EQ(c2.prompts[i].text, c.prompts[i].text);
    EXPECT_EQ(c2.prompts[i].follow_ups, c.prompts[i].follow_ups);
    EXPECT_EQ(c2.prompts[i].category, c.prompts[i].category);
    EXPECT_EQ(c2.prompts[i].subcategory, c.prompts[i].subcategory);
  }
  EXPECT_EQ(c2.interleave, "prompt");
  EXPECT_EQ(c2.report_context, c.report_context);

  // Each feature changes the text (a --resume across a change is refused).
  ExperimentConfig d = c;
  d.interleave = "cell";
  EXPECT_NE(to_yaml(d), y);
  d = c;
  d.report_context.clear();
  EXPECT_NE(to_yaml(d), y);
  d = c;
  d.prompts[0].follow_ups.push_back("more");
  EXPECT_NE(to_yaml(d), y);
  d = c;
  d.prompts[0].follow_ups.clear();
  EXPECT_NE(to_yaml(d), y);
  d = c;
  d.prompts[0].subcategory = "roleplay";
  EXPECT_NE(to_yaml(d), y);

  // A config without these features writes none of their keys.
  const auto plain =
      to_yaml(parse("models: {target: tiny-llama}\nprompts: [{text: hi, category: c}]\nstrategies: [greedy]\n"));
  for (const char* key : {"turns", "follow_ups", "subcategory", "interleave", "report", "context"})
    EXPECT_EQ(plain.find(key), std::string::npos) << key << " in:\n" << plain;
  EXPECT_NE(plain.find("text: hi"), std::string::npos);
}

TEST(SpecBenchPrompts, JsonlErrorsNameFileLineAndValue) {
  TempDir t;
  const auto bad = [&](const std::string& line, const std::vector<std::string>& fragments,
                       const std::string& keys = "chat: true") {
    const std::string path = t.write("bad.jsonl", "{\"text\": \"fine\"}\n" + line + "\n");
    std::vector<std::string> all = {"bad.jsonl:2"};
    all.insert(all.end(), fragments.begin(), fragments.end());
    expect_error(file_yaml(path, keys), all);
  };
  bad(R"({"turns": "just one"})", {"\"turns\"", "non-empty list", "just one"});
  bad(R"({"turns": []})", {"\"turns\"", "non-empty list", "[]"});
  bad(R"({"turns": ["first", ""]})", {"\"turns\"[1]", "non-empty string", "\"\""});
  bad(R"({"turns": ["first", 7]})", {"\"turns\"[1]", "7"});
  bad(R"({"text": "a", "turns": ["b"]})", {"both", "\"text\"", "\"turns\""});
  bad(R"({"category": "qa"})", {"\"text\"", "\"turns\""});
  bad(R"({"text": 5})", {"\"text\"", "5"});
  bad(R"({"turns": ["a", "b"]})", {"follow-up turns need chat: true"}, "chat: false");
  bad(R"({"turns": ["a", "b"], "chat": false})", {"follow-up turns need chat: true"});
  bad(R"({"text": "a", "question_id": 1.5})", {"\"question_id\"", "1.5"});
  bad(R"({"text": "a", "question_id": 1, "id": "x"})", {"both", "\"id\"", "\"question_id\""});
  // A one-turn line needs no chat; a string question_id is taken as is.
  const std::string ok = t.write("ok.jsonl", R"({"turns": ["solo"], "question_id": "q7"})"
                                             "\n");
  const auto c = parse(file_yaml(ok));
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].id, "q7");
  EXPECT_EQ(c.prompts[0].text, "solo");
  EXPECT_FALSE(c.prompts[0].chat);
}

TEST(SpecBenchPrompts, ConfigErrorsNameKeyAndValue) {
  const std::string prompts_head = "models: {target: x}\nstrategies: [greedy]\n";
  // Inline turns.
  expect_error(prompts_head + "prompts: [{turns: one, chat: true}]\n", {"exp.yaml", "prompts[0].turns", "'one'"});
  expect_error(prompts_head + "prompts: [{turns: [], chat: true}]\n", {"prompts[0].turns", "non-empty list"});
  expect_error(prompts_head + "prompts: [{turns: [a, \"\"], chat: true}]\n", {"prompts[0].turns[1]", "empty turn"});
  expect_error(prompts_head + "prompts: [{text: a, turns: [b]}]\n", {"prompts[0]", "both", "text", "turns"});
  expect_error(prompts_head + "prompts: [{turns: [a, b]}]\n", {"prompts[0]", "follow-up turns need chat: true"});
  expect_error(prompts_head + "prompts: {chat: false, inline: [{turns: [a, b]}]}\n",
               {"prompts[0]", "follow-up turns need chat: true"});
  // Groups.
  expect_error(spec_bench_yaml("groups: mt_bench"), {"exp.yaml", "prompts.groups", "'mt_bench'", "spec_bench"});
  expect_error(
      prompts_head +
          "prompts: {groups: spec_bench, inline: [{text: a, category: qa}, {text: b, id: poem, category: poetry}]}\n",
      {"prompts.groups", "'poem'", "'poetry'", "writing", "rag"});
  expect_error(prompts_head + "prompts: {groups: spec_bench, inline: [b]}\n", {"prompts.groups", "'p0'", "'default'"});
  // per_category / seed.
  expect_error(spec_bench_yaml("per_category: -1"), {"prompts.per_category", "out of range"});
  expect_error(spec_bench_yaml("per_category: some"), {"prompts.per_category", "'some'"});
  expect_error(spec_bench_yaml("seed: x"), {"prompts.seed", "'x'"});
  // Ranges.
  expect_error(spec_bench_yaml("range: \"5:2\""), {"exp.yaml", "prompts.range", "'5:2'", "empty range"});
  expect_error(spec_bench_yaml("range: \"5:5\""), {"prompts.range", "'5:5'", "empty range"});
  expect_error(spec_bench_yaml("range: x"), {"prompts.range", "'x'", "A:B"});
  expect_error(spec_bench_yaml("range: \"5\""), {"prompts.range", "'5'"});
  expect_error(spec_bench_yaml("range: \"-1:4\""), {"prompts.range", "'-1:4'"});
  expect_error(spec_bench_yaml("range: \"a:b\""), {"prompts.range", "'a:b'"});
  expect_error(spec_bench_yaml("range: [0, 4]"), {"prompts.range", "[0, 4]"});
  expect_error(spec_bench_yaml("range: \"480:\""), {"prompts.range", "'480:'", "selects no prompts", "480"});
  expect_error(spec_bench_yaml(""), {"prompts.range", "'x'"}, {"prompts.range=x"});
  // Categories.
  expect_error(spec_bench_yaml("groups: spec_bench, categories: [qa, poetry]"),
               {"exp.yaml", "prompts.categories", "'poetry'", "multi_turn", "translation", "rag"});
  expect_error(spec_bench_yaml("categories: [multi_turn]"), {"prompts.categories", "'multi_turn'", "writing"});
  expect_error(spec_bench_yaml("categories: []"), {"prompts.categories", "empty"});
  expect_error(spec_bench_yaml("bogus: 1"), {"prompts.bogus", "unknown key", "per_category", "range"});
  // interleave and report.
  const std::string minimal = "models: {target: x}\nprompts: [hi]\nstrategies: [greedy]\n";
  expect_error(minimal + "interleave: bogus\n", {"exp.yaml", "interleave", "'bogus'", "cell", "prompt"});
  expect_error(minimal + "interleave: [cell]\n", {"interleave", "[cell]"});
  expect_error(minimal + "report: {context: nowhere.md}\n", {"exp.yaml", "report.context", "nowhere.md", "not found"});
  expect_error(minimal + "report: {colour: red}\n", {"report.colour", "unknown key", "context"});
  expect_error(minimal + "report: notes.md\n", {"report", "mapping", "'notes.md'"});
  expect_error(minimal + "reprot: {}\n", {"reprot", "unknown key", "interleave", "report"});
}

TEST(SpecBenchPrompts, ShippedExperimentsParse) {
  // Every shipped experiment parses and plans; the Spec-Bench ones select evenly over the six
  // groups (or over the groups they pick: the batched runs, batch_scaling*.yaml and
  // trained_drafters_batch_smollm2.yaml, take four single-turn ones).
  int n_spec_bench = 0;
  for (const auto& e : fs::directory_iterator(source_dir() + "/experiments")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    ExperimentConfig c;
    ASSERT_NO_THROW(c = load_experiment(e.path().string()));
    EXPECT_NO_THROW(make_plan(c, false));
    if (c.prompts_file.find("spec_bench.jsonl") == std::string::npos) continue;
    ++n_spec_bench;
    const auto groups = count_by(c.prompts, false);
    EXPECT_EQ(groups.size(), c.name.find("batch") != std::string::npos ? 4u : 6u);
    for (const auto& [g, n] : groups) EXPECT_EQ(n, groups.begin()->second) << g;
  }
  EXPECT_GE(n_spec_bench, 1);
}
