// `specdec models`: the models of configs/models.yaml and whether their files are present.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "harness/model_catalog.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_models(const Args& args) {
  po::options_description opts("specdec models [options]\n\nLists the named models of the catalog "
                               "(configs/models.yaml): file, format, whether it is present,\nand the command that "
                               "fetches a missing one. tiny-llama / tiny-gpt2 are always available.\n\noptions");
  std::string catalog = harness::default_catalog_path();
  opts.add_options()("help,h", "show this help")("catalog", po::value(&catalog), "catalog file");
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
  const auto entries = harness::load_catalog(catalog);
  std::cout << std::left << std::setw(30) << "name" << std::setw(9) << "present" << std::setw(12) << "format"
            << "file / description\n";
  for (const auto& e : entries) {
    const std::filesystem::path file = std::filesystem::path(harness::repo_root()) / e.file;
    const bool present = std::filesystem::exists(file);
    std::cout << std::setw(30) << e.name << std::setw(9) << (present ? "yes" : "no") << std::setw(12) << e.format
              << e.file << "\n" << std::setw(51) << "" << e.description << "\n";
    if (!present) std::cout << std::setw(51) << "" << "fetch: scripts/fetch_models.sh " << e.name << "\n";
  }
  std::cout << std::setw(30) << "tiny-llama" << std::setw(9) << "yes" << std::setw(12) << "random"
            << "seeded random Llama (vocab 32) for tests\n";
  std::cout << std::setw(30) << "tiny-gpt2" << std::setw(9) << "yes" << std::setw(12) << "random"
            << "seeded random GPT-2 for tests\n";
  return 0;
}

}  // namespace specdec::cli
