// `specdec generate`: one prompt, one strategy; streams text, then prints one stats line
// (or a JSON object with --json), and with --stats the time per phase.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "harness/metrics.h"
#include "harness/model_catalog.h"
#include "harness/trace.h"
#include "model/causal_lm.h"
#include "sampling/grammar.h"
#include "strategies/common.h"
#include "strategies/registry.h"
#include "speculative/proposer.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace specdec::cli {
namespace {

struct GenerateOptions {
  std::string model, draft, strategy = "greedy", prompt, prompt_file, draft_dtype, trace;
  // Both models' options (--dtype, --threads, --threads-oversubscribe, --device, --engine,
  // --graphs; the draft's dtype is --draft-dtype when given). Its seed stays 0: --seed is the
  // request's.
  model::ModelOptions models;
  std::vector<std::string> sets, stops;
  int64_t max_new_tokens = 128;
  int64_t seed = 0;  // read signed so that a negative value is an error, not a wrapped 2^64 - 1
  double timeout_s = 0;
  bool chat = false, json = false, stats = false;
};

strategies::Params parse_sets(const std::vector<std::string>& sets) {
  strategies::Params p;
  for (const auto& s : sets) {
    const size_t eq = s.find('=');
    SD_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '", s, "'");
    p.set(s.substr(0, eq), s.substr(eq + 1));
  }
  return p;
}

std::string read_prompt(const GenerateOptions& o) {
  SD_CHECK(o.prompt.empty() != o.prompt_file.empty(), "give exactly one of --prompt and --prompt-file");
  if (!o.prompt.empty()) return o.prompt;
  SD_CHECK(!std::filesystem::is_directory(o.prompt_file), "--prompt-file '", o.prompt_file,
           "' is a directory, not a file");
  std::ifstream in(o.prompt_file, std::ios::binary);
  SD_CHECK(in.good(), "cannot read prompt file '", o.prompt_file, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

model::LoadedModel load_model(const std::string& name, const std::string& dtype, const GenerateOptions& o) {
  model::ModelSpec spec = harness::resolve_model(name);
  spec.options() = o.models;
  spec.dtype = dtype;
  return model::load(spec);
}

void print_stats_line(const strategies::Result& r, const std::string& strategy) {
  const auto& s = r.stats;
  const double ms_decode = s.ms_total - s.phase_ms.prefill;
  std::cout << std::fixed << std::setprecision(1) << "[" << strategy << "] " << s.n_generated << " tokens ("
            << strategies::to_string(r.finish) << ") | prefill " << s.phase_ms.prefill << " ms (" << s.n_prompt
            << " tokens) | decode " << std::setprecision(2) << (s.n_generated ? ms_decode / s.n_generated : 0.0)
            << " ms/token | " << (ms_decode > 0 ? 1000.0 * s.n_generated / ms_decode : 0.0) << " tok/s";
  if (s.n_rounds > 0) std::cout << " | alpha " << std::setprecision(3) << s.alpha() << " tau " << s.tau();
  if (s.n_forced > 0)  // structured output: the share of the output the grammar forced
    std::cout << " | forced " << std::setprecision(1) << 100.0 * s.n_forced / s.n_generated << " %";
  if (s.n_jump_drafted > 0)  // and the share its jump-forward tokens took, of those drafted
    std::cout << " | jump " << std::setprecision(1) << 100.0 * s.n_jump / s.n_generated << " % (" << s.n_jump << " of "
              << s.n_jump_drafted << " accepted)";
  std::cout << "\n";
}

// --stats: one line per phase with ms, % of wall and ms per round, then their sum.
void print_phase_table(const strategies::Stats& s) {
  const harness::PhaseBreakdown p = harness::phase_breakdown(s);
  char line[160];
  std::snprintf(line, sizeof line, "%-16s %10s %8s %10s\n", "phase", "ms", "% wall", "ms/round");
  std::cout << line;
  std::string parent;  // a sub-figure (indented) is part of the summed phase above it
  for (const auto& f : strategies::PhaseTimes::fields()) {
    if (f.summed) parent = f.name;
    const std::string name = f.summed ? f.name : "  " + std::string(f.name);
    const std::string note = f.summed ? "" : "  (part of " + parent + ")";
    std::snprintf(line, sizeof line, "%-16s %10.2f %7.1f%% %10.3f%s\n", name.c_str(), p.ms.*f.ms,
                  100 * p.fraction(f.ms), p.per_round(f.ms), note.c_str());
    std::cout << line;
  }
  const double sum = s.phase_ms.sum();
  std::snprintf(line, sizeof line, "%-16s %10.2f %7.1f%%\n%-16s %10.2f %7.1f%%   (%lld rounds)\n", "sum of phases", sum,
                s.ms_total > 0 ? 100 * sum / s.ms_total : 0.0, "wall", s.ms_total, 100.0,
                static_cast<long long>(p.n_rounds));
  std::cout << line;
}

// trace.json: what was run, then (harness/trace.h) the result, its stats and the rounds.
nlohmann::json trace_json(const GenerateOptions& o, const strategies::Params& params, const strategies::Params& resolved,
                          const std::string& prompt,
                          const strategies::Request& req, const strategies::Result& r) {
  const nlohmann::json what = {{"model", o.model}, {"draft", o.draft}, {"strategy", o.strategy},
                               {"params", resolved.values()}, {"params_set", params.values()}, {"seed", o.seed},
                               {"prompt", prompt}, {"n_prompt", req.prompt.size()}};
  return harness::trace_document(what, r, o.strategy, *req.trace);
}

int run_generate(const GenerateOptions& o) {
  SD_CHECK(o.seed >= 0, "--seed must be >= 0, got ", o.seed);  // before loading any model
  if (!o.trace.empty()) harness::trace_json_path(o.trace);      // a bad --trace path, too
  model::set_threads(o.models.threads, o.models.threads_oversubscribe);
  const strategies::Params params = parse_sets(o.sets);
  // Resolved once (a constraint parsed once); fails early on bad names/params.
  const strategies::Params resolved = strategies::resolve(o.strategy, params);
  auto strategy = strategies::create(o.strategy, resolved);
  const strategies::StrategyNeeds needs = strategies::strategy_needs(o.strategy, resolved, !o.draft.empty());
  SD_CHECK(!needs.draft_model || !o.draft.empty(), "strategy '", o.strategy, "'",
           needs.drafter.empty() ? "" : " with drafter '" + needs.drafter + "'", " needs --draft");
  const model::LoadedModel tgt = load_model(o.model, o.models.dtype, o);
  SD_CHECK(tgt.tokenizer != nullptr, "model '", o.model, "' has no tokenizer; generate needs one");
  strategies::Request req;
  req.target = tgt.model;
  req.tokenizer = tgt.tokenizer;
  if (!o.draft.empty()) {
    const model::LoadedModel dft = load_model(o.draft, o.draft_dtype.empty() ? o.models.dtype : o.draft_dtype, o);
    req.draft = dft.model;
    req.draft_tokenizer = dft.tokenizer;
    if (dft.tokenizer) strategies::check_tokenizers_compatible(*tgt.tokenizer, *dft.tokenizer);
  }
  std::string text = read_prompt(o);
  if (o.chat) text = tgt.tokenizer->apply_chat_template({{"user", text}}, true);
  req.prompt = tgt.tokenizer->encode(text, /*add_special=*/true);
  req.stop.eos_ids = tgt.tokenizer->eos_ids();
  req.stop.max_new_tokens = o.max_new_tokens;
  req.stop.stop_strings = o.stops;
  req.stop.timeout_s = o.timeout_s;
  req.seed = static_cast<uint64_t>(o.seed);
  if (!o.trace.empty()) req.trace = std::make_shared<strategies::TraceRecorder>(tgt.tokenizer, resolved);
  // A grammar compiles once per schema and tokenizer, before the clock starts: as in the harness,
  // and as a server compiles a schema once for its requests. Its time is reported on its own.
  double ms_compile = -1;
  if (const auto c = strategies::constraint_for(req, resolved.constraint())) {
    const Stopwatch clock;
    c->compile(tgt.tokenizer.get(), tgt.model->config().n_vocab, req.stop.eos_ids);
    ms_compile = clock.ms();
  }
  // Text streams as it becomes final; with --json it goes to stderr so stdout is one JSON line.
  std::ostream& stream = o.json ? std::cerr : std::cout;
  const parallel::StepCounts steps0 = parallel::step_counts();
  const strategies::Result r = strategy->generate(req, [&stream](const Tokens&, const std::string& chunk) {
    stream << chunk << std::flush;
  });
  stream << "\n";
  // Invalid UTF-8 (a generation cut inside a multi-byte character) becomes U+FFFD.
  if (o.json) {
    nlohmann::json j = harness::generation_json(r, o.strategy);
    // Which mode parallel::Step chose for the generation's forwards (prefill included).
    const parallel::StepCounts steps = parallel::step_counts();
    j["parallel"] = {{"steps_pool", steps.pool - steps0.pool},
                     {"steps_alone", steps.alone - steps0.alone},
                     {"flips", steps.flips - steps0.flips},
                     {"steps_starved", steps.starved - steps0.starved}};
    if (ms_compile >= 0) j["ms_grammar_compile"] = ms_compile;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  else {
    print_stats_line(r, o.strategy);
    if (ms_compile >= 0)
      std::cout << std::fixed << std::setprecision(1) << "grammar compiled in " << ms_compile
                << " ms, before the generation\n";
  }
  if (o.stats && !o.json) print_phase_table(r.stats);
  if (!r.stats.synthetic_acceptance.empty())
    std::cerr << "synthetic_acceptance=" << nlohmann::json(r.stats.synthetic_acceptance).dump()
              << ": benchmarking the loop; drafts were accepted at random, the tokens are NOT the target's\n";
  if (!o.trace.empty()) {
    const std::string json_path = harness::write_trace(o.trace, trace_json(o, params, resolved, text, req, r));
    std::cerr << "trace: wrote " << o.trace << " and " << json_path << " (" << req.trace->n_rounds() << " rounds)\n";
  }
  return 0;
}

}  // namespace

int cmd_generate(const Args& args) {
  GenerateOptions o;
  std::vector<std::string> extra;  // the structured-output flags, as --set key=value
  po::options_description opts(
      "specdec generate --model M [--strategy NAME] [--draft M2] [--set key=value ...] --prompt TEXT");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&o.model), "target: catalog name, .gguf file, HF directory or tiny-llama")
      ("draft", po::value(&o.draft), "draft model for --strategy speculative (same forms as --model)")
      ("strategy", po::value(&o.strategy)->default_value("greedy"), "strategy name (see `specdec strategies`)")
      ("set", po::value(&o.sets)->composing(), "strategy parameter key=value (repeatable)")
      ("prompt", po::value(&o.prompt), "prompt text")
      ("prompt-file", po::value(&o.prompt_file), "read the prompt from a file")
      ("chat", po::bool_switch(&o.chat), "wrap the prompt in the model's chat template (user turn)")
      ("max-new-tokens", po::value(&o.max_new_tokens)->default_value(128), "generated tokens at most")
      ("seed", po::value(&o.seed)->default_value(0), "random seed (sampling, speculative sampling)")
      ("threads", po::value(&o.models.threads)->default_value(o.models.threads), "engine threads (0 = all cores; at most the cores this process may use)")
      ("threads-oversubscribe", po::bool_switch(&o.models.threads_oversubscribe), "allow more threads than cores (slower on a memory-bound engine)")
      ("dtype", po::value(&o.models.dtype)->default_value(o.models.dtype), "weights of linear layers: auto (native for a GGUF file, else float32) | "
       "float32 | bfloat16 | native (a GGUF file's own blocks; logits bit-identical to float32) | native_q8 (the same with "
       "int8 activations, as llama.cpp: faster, not identical) | q4_1 (every weight matrix requantised to Q4_1 at load, int8 "
       "activations: lossy, a cheaper draft)")
      ("draft-dtype", po::value(&o.draft_dtype), "dtype of the --draft model (default: --dtype)")
      ("device", po::value(&o.models.device)->default_value(o.models.device), "where the models run: cpu | cuda | cuda:N (CUDA: needs a LibTorch "
       "with CUDA)")
      ("engine", po::value(&o.models.engine)->default_value(o.models.engine), "model engine: auto (packed on cpu, aten elsewhere) | packed (the "
       "CPU kernels) | aten (LibTorch ops on the device; on cpu: the GPU path's CPU twin)")
      ("graphs", po::value(&o.models.graphs)->default_value(o.models.graphs), "engine aten: fixed-shape steps captured as CUDA graphs "
       "(auto: on for cuda | on: also on cpu, uncaptured, the GPU path's twin | off)")
      ("stop", po::value(&o.stops)->composing(), "stop string, cut from the output (repeatable)")
      ("json-schema", po::value<std::string>()->notifier([&extra](const std::string& v) { extra.push_back("json_schema=" + v); }),
       "structured output: a JSON Schema, inline or a file (= --set json_schema=...)")
      ("regex", po::value<std::string>()->notifier([&extra](const std::string& v) { extra.push_back("regex=" + v); }),
       "structured output: the whole output matches this regular expression (= --set regex=...)")
      ("grammar", po::value<std::string>()->notifier([&extra](const std::string& v) { extra.push_back("grammar=" + v); }),
       "structured output: an EBNF/GBNF grammar (root ::= ...), inline or a file (= --set grammar=...)")
      ("response-format", po::value<std::string>()->notifier([&extra](const std::string& v) { extra.push_back("response_format=" + v); }),
       "structured output: json (any JSON value) | text (= --set response_format=...)")
      ("timeout", po::value(&o.timeout_s)->default_value(0), "wall-clock limit in seconds (0 = none)")
      ("json", po::bool_switch(&o.json), "print {\"tokens\": [...], \"text\": ..., \"stats\": {...}} as one JSON line")
      ("stats", po::bool_switch(&o.stats),
       "after the stats line, print where the time went: ms, % of wall and ms per round for each phase "
       "(with --json: always in stats.phases)")
      ("trace", po::value(&o.trace), "also write an HTML view of this generation to this file (e.g. trace.html) and "
       "its data beside it (trace.json); see `specdec trace`");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what(), " (see specdec generate --help)");
  }
  o.sets.insert(o.sets.end(), extra.begin(), extra.end());  // --json-schema etc. after --set's
  if (vm.count("help")) {
    std::cout << opts << "\nexample: specdec generate --model smollm2-135m --strategy speculative "
                         "--set drafter=ngram --set temperature=0 --chat --prompt \"...\"\n";
    return 0;
  }
  SD_CHECK(!o.model.empty(), "--model is required (see specdec generate --help)");
  return run_generate(o);
}

}  // namespace specdec::cli
