// `specdec models`: the models of configs/models.yaml and whether their files are present.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "core/timer.h"
#include "harness/load.h"
#include "harness/model_catalog.h"
#include "model/causal_lm.h"

namespace specdec::cli {

namespace po = boost::program_options;

namespace {

std::string megabytes(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / 1e6 << " MB";
  return s.str();
}

// Loads one model and prints what it holds in memory: its weights (resident), what a decoded
// token reads (streamed) and how much this process's resident set grew.
void print_loaded(const std::string& name, const std::string& dtype, int threads) {
  model::ModelSpec spec = harness::resolve_model(name);
  spec.dtype = dtype;
  spec.threads = threads;
  model::set_threads(threads);
  const harness::MemoryUsage before = harness::read_memory_usage();
  Stopwatch clock;
  const model::LoadedModel m = model::load(spec);
  const double load_s = clock.ms() / 1000.0;
  const harness::MemoryUsage after = harness::read_memory_usage();
  std::cout << std::setw(51) << "" << "loaded as " << m.spec.dtype << " in " << std::setprecision(2) << std::fixed << load_s
            << " s: weights resident " << megabytes(m.model->resident_weight_bytes()) << ", streamed per token "
            << megabytes(m.model->weight_bytes()) << ", process RSS +" << megabytes(after.rss_bytes - before.rss_bytes)
            << " (peak so far " << megabytes(after.peak_rss_bytes) << ")\n";
}

}  // namespace

int cmd_models(const Args& args) {
  po::options_description opts("specdec models [options]\n\nLists the named models of the catalog "
                               "(configs/models.yaml): file, format, whether it is present,\nand the command that "
                               "fetches a missing one. tiny-llama / tiny-gpt2 are always available.\n\noptions");
  std::string catalog = harness::default_catalog_path(), dtype = "auto";
  int threads = 0;
  opts.add_options()("help,h", "show this help")("catalog", po::value(&catalog), "catalog file")(
      "load", "also load each present model, one at a time, and print its resident weight bytes, the bytes "
              "it streams per decoded token and the growth of this process's RSS")(
      "dtype", po::value(&dtype), "with --load: auto | float32 | bfloat16 | native | native_q8 | q4_1 (default auto: native for GGUF files)")(
      "threads", po::value(&threads), "with --load: engine threads (default 0: all cores)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "specdec models: " << e.what() << "\n" << opts;
    return 1;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (!vm.count("load") && (vm.count("dtype") || vm.count("threads"))) {
    std::cerr << "specdec models: error: --dtype and --threads apply to --load only\n";
    return 1;
  }
  const auto entries = harness::load_catalog(catalog);
  std::cout << std::left << std::setw(30) << "name" << std::setw(9) << "present" << std::setw(12) << "format"
            << "file / description\n";
  for (const auto& e : entries) {
    const std::filesystem::path file = std::filesystem::path(harness::repo_root()) / e.file;
    const bool present = std::filesystem::exists(file);
    std::cout << std::setw(30) << e.name << std::setw(9) << (present ? "yes" : "no") << std::setw(12) << e.format
              << e.file << "\n" << std::setw(51) << "" << e.description << "\n";
    if (!present) std::cout << std::setw(51) << "" << "fetch: scripts/fetch_models.sh " << e.name << "\n";
    if (present && vm.count("load")) print_loaded(e.name, dtype, threads);
  }
  std::cout << std::setw(30) << "tiny-llama" << std::setw(9) << "yes" << std::setw(12) << "random"
            << "seeded random Llama (vocab 32) for tests\n";
  std::cout << std::setw(30) << "tiny-gpt2" << std::setw(9) << "yes" << std::setw(12) << "random"
            << "seeded random GPT-2 for tests\n";
  return 0;
}

}  // namespace specdec::cli
