// `specdec generate`: one prompt, one strategy; streams text, then prints one stats line
// (or a JSON object with --json).
#include <boost/program_options.hpp>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "harness/model_catalog.h"
#include "model/causal_lm.h"
#include "strategies/registry.h"
#include "strategies/speculative.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace specdec::cli {
namespace {

struct GenerateOptions {
  std::string model, draft, strategy = "greedy", prompt, prompt_file, dtype = "float32";
  std::vector<std::string> sets, stops;
  int64_t max_new_tokens = 128;
  uint64_t seed = 0;
  int threads = 2;
  double timeout_s = 0;
  bool chat = false, json = false;
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
  std::ifstream in(o.prompt_file, std::ios::binary);
  SD_CHECK(in.good(), "cannot read prompt file '", o.prompt_file, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

model::LoadedModel load_model(const std::string& name, const GenerateOptions& o) {
  model::ModelSpec spec = harness::resolve_model(name);
  spec.threads = o.threads;
  spec.dtype = o.dtype;
  return model::load(spec);
}

nlohmann::json stats_json(const strategies::Result& r, const std::string& strategy) {
  const auto& s = r.stats;
  const double ms_decode = s.ms_total - s.ms_prefill;
  nlohmann::json j = {
      {"strategy", strategy}, {"finish", strategies::to_string(r.finish)}, {"n_prompt", s.n_prompt},
      {"n_generated", s.n_generated}, {"n_target_forwards", s.n_target_forwards},
      {"n_draft_forwards", s.n_draft_forwards}, {"n_drafted", s.n_drafted}, {"n_accepted", s.n_accepted},
      {"n_rounds", s.n_rounds}, {"alpha", s.alpha()}, {"tau", s.tau()},
      {"accepted_per_position", s.accepted_per_position}, {"drafted_per_position", s.drafted_per_position},
      {"ms_prefill", s.ms_prefill}, {"ms_draft", s.ms_draft}, {"ms_verify", s.ms_verify},
      {"ms_sample", s.ms_sample}, {"ms_rollback", s.ms_rollback}, {"ms_total", s.ms_total},
      {"ms_first_token", s.ms_first_token},
      {"ms_per_token", s.n_generated ? ms_decode / double(s.n_generated) : 0.0},
      {"tokens_per_s", ms_decode > 0 ? 1000.0 * double(s.n_generated) / ms_decode : 0.0}};
  return {{"tokens", r.tokens}, {"text", r.text}, {"stats", j}};
}

void print_stats_line(const strategies::Result& r, const std::string& strategy) {
  const auto& s = r.stats;
  const double ms_decode = s.ms_total - s.ms_prefill;
  std::cout << std::fixed << std::setprecision(1) << "[" << strategy << "] " << s.n_generated << " tokens ("
            << strategies::to_string(r.finish) << ") | prefill " << s.ms_prefill << " ms (" << s.n_prompt
            << " tokens) | decode " << std::setprecision(2) << (s.n_generated ? ms_decode / s.n_generated : 0.0)
            << " ms/token | " << (ms_decode > 0 ? 1000.0 * s.n_generated / ms_decode : 0.0) << " tok/s";
  if (s.n_rounds > 0) std::cout << " | alpha " << std::setprecision(3) << s.alpha() << " tau " << s.tau();
  std::cout << "\n";
}

int run_generate(const GenerateOptions& o) {
  model::set_threads(o.threads);
  const strategies::Params params = parse_sets(o.sets);
  auto strategy = strategies::create(o.strategy, params);  // fails early on bad names/params
  const model::LoadedModel tgt = load_model(o.model, o);
  SD_CHECK(tgt.tokenizer != nullptr, "model '", o.model, "' has no tokenizer; generate needs one");
  strategies::Request req;
  req.target = tgt.model;
  req.tokenizer = tgt.tokenizer;
  if (!o.draft.empty()) {
    const model::LoadedModel dft = load_model(o.draft, o);
    req.draft = dft.model;
    req.draft_tokenizer = dft.tokenizer;
    if (dft.tokenizer) strategies::check_tokenizers_compatible(*tgt.tokenizer, *dft.tokenizer);
  }
  SD_CHECK(!strategies::find(o.strategy).needs_draft_model || req.draft, "strategy '", o.strategy,
           "' needs --draft");
  std::string text = read_prompt(o);
  if (o.chat) text = tgt.tokenizer->apply_chat_template({{"user", text}}, true);
  req.prompt = tgt.tokenizer->encode(text, /*add_special=*/true);
  req.stop.eos_ids = tgt.tokenizer->eos_ids();
  req.stop.max_new_tokens = o.max_new_tokens;
  req.stop.stop_strings = o.stops;
  req.stop.timeout_s = o.timeout_s;
  req.seed = o.seed;
  // Text streams as it becomes final; with --json it goes to stderr so stdout is one JSON line.
  std::ostream& stream = o.json ? std::cerr : std::cout;
  const strategies::Result r = strategy->generate(req, [&stream](const Tokens&, const std::string& chunk) {
    stream << chunk << std::flush;
  });
  stream << "\n";
  // Invalid UTF-8 (a generation cut inside a multi-byte character) becomes U+FFFD.
  if (o.json) std::cout << stats_json(r, o.strategy).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else print_stats_line(r, o.strategy);
  return 0;
}

}  // namespace

int cmd_generate(const Args& args) {
  GenerateOptions o;
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
      ("threads", po::value(&o.threads)->default_value(2), "LibTorch intra-op threads")
      ("dtype", po::value(&o.dtype)->default_value("float32"), "weights of linear layers: float32 | bfloat16")
      ("stop", po::value(&o.stops)->composing(), "stop string, cut from the output (repeatable)")
      ("timeout", po::value(&o.timeout_s)->default_value(0), "wall-clock limit in seconds (0 = none)")
      ("json", po::bool_switch(&o.json), "print {\"tokens\": [...], \"text\": ..., \"stats\": {...}} as one JSON line");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what(), " (see specdec generate --help)");
  }
  if (vm.count("help")) {
    std::cout << opts << "\nexample: specdec generate --model smollm2-135m --strategy speculative "
                         "--set drafter=ngram --set temperature=0 --chat --prompt \"...\"\n";
    return 0;
  }
  SD_CHECK(!o.model.empty(), "--model is required (see specdec generate --help)");
  return run_generate(o);
}

}  // namespace specdec::cli
