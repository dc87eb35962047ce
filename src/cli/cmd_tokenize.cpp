// specdec tokenize --model NAME --text TEXT [--json] [--no-special]
// Prints the token ids of a text with the model's own tokenizer (no weights are loaded).
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "harness/model_catalog.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specdec::cli {

namespace po = boost::program_options;

namespace {

std::shared_ptr<tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
  SD_CHECK(path.rfind("tiny-", 0) != 0, "model '", path, "' is a random test model without a tokenizer");
  if (std::filesystem::is_directory(path)) return tokenizer::Tokenizer::from_hf_json(path + "/tokenizer.json");
  return tokenizer::Tokenizer::from_gguf(*io::GgufFile::open(path));
}

}  // namespace

int cmd_tokenize(const Args& args) {
  po::options_description opts("specdec tokenize: print the token ids of a text");
  opts.add_options()
      ("help,h", "show this help")
      ("model,m", po::value<std::string>()->required(), "model name (configs/models.yaml) or path")
      ("text,t", po::value<std::string>()->required(), "text to tokenize")
      ("no-special", "do not add BOS/special tokens the model adds by default")
      ("json", "print {\"ids\": [...], \"tokens\": [...]} as JSON");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);

  const auto spec = harness::resolve_model(vm["model"].as<std::string>());
  const auto tok = load_tokenizer(spec.path);
  const Tokens ids = tok->encode(vm["text"].as<std::string>(), !vm.count("no-special"));
  if (vm.count("json")) {
    nlohmann::json j;
    j["ids"] = ids;
    auto& pieces = j["tokens"] = nlohmann::json::array();
    for (TokenId id : ids) pieces.push_back(tok->token_string(id));
    // A vocabulary entry need not be valid UTF-8 (GGUF stores raw bytes): show U+FFFD there.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return 0;
}

}  // namespace specdec::cli
