// `specdec strategies`: the registered decoding strategies, their parameters and defaults.
#include <boost/program_options.hpp>
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "strategies/registry.h"

namespace po = boost::program_options;

namespace specdec::cli {
namespace {

void print_param(const strategies::ParamSpec& p) {
  std::cout << "    " << std::left << std::setw(22) << (p.name + "=" + p.default_value) << std::setw(8) << p.type
            << p.help << "\n";
}

}  // namespace

int cmd_strategies(const Args& args) {
  po::options_description opts("specdec strategies [--name NAME]");
  opts.add_options()("help,h", "show this help")("name", po::value<std::string>(), "show one strategy only");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << "\nUse a strategy with: specdec generate --strategy NAME [--set key=value ...]\n";
    return 0;
  }
  std::vector<strategies::StrategyInfo> shown;
  if (vm.count("name")) shown.push_back(strategies::find(vm["name"].as<std::string>()));
  else shown = strategies::all();
  for (const auto& info : shown) {
    std::cout << info.name << (info.needs_draft_model ? " (needs --draft)" : "") << ": " << info.description << "\n";
    for (const auto& p : info.params) print_param(p);
  }
  std::cout << "\nlogits processors (every strategy; HF order: repetition penalty, temperature, top-k, top-p, min-p):\n";
  for (const auto& p : strategies::processor_params()) print_param(p);
  return 0;
}

}  // namespace specdec::cli
