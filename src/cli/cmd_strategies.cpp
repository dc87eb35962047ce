// `specdec strategies`: the registered decoding strategies and drafters, their parameters and
// defaults, and which need a draft model.
#include <boost/program_options.hpp>
#include <iomanip>
#include <iostream>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"

namespace po = boost::program_options;

namespace specdec::cli {
namespace {

void print_param(const strategies::ParamSpec& p) {
  // The trailing space keeps a long name=default apart from its type.
  std::cout << "    " << std::left << std::setw(24) << (p.name + "=" + p.default_value + " ") << std::setw(8) << p.type
            << p.help << "\n";
}

// Drafter parameters join the speculative schema; they are listed once, under their drafter.
void print_strategy(const strategies::StrategyInfo& info) {
  std::set<std::string> drafter_keys;
  for (const auto& p : strategies::drafter_params()) drafter_keys.insert(p.name);
  const bool needs_draft = strategies::strategy_needs(info, strategies::resolve(info, {}), false).draft_model;
  std::cout << info.name << (needs_draft ? " (needs --draft)" : "") << ": " << info.description << "\n";
  bool takes_drafter_params = false;
  for (const auto& p : info.params) {
    if (drafter_keys.count(p.name)) takes_drafter_params = true;
    else print_param(p);
  }
  if (takes_drafter_params) std::cout << "    + the parameters of the drafters below\n";
}

void print_drafter(const strategies::DrafterInfo& d) {
  std::cout << "  " << d.name << (d.needs_draft_model ? " (needs --draft)" : "") << ": " << d.description << "\n";
  for (const auto& p : d.params) print_param(p);
}

}  // namespace

int cmd_strategies(const Args& args) {
  po::options_description opts("specdec strategies [--name NAME]");
  opts.add_options()("help,h", "show this help")("name", po::value<std::string>(),
                                                 "show one strategy or one drafter only");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << "\nUse a strategy with: specdec generate --strategy NAME [--set key=value ...]\n"
              << "and a drafter with:  specdec generate --strategy speculative --set drafter=NAME\n";
    return 0;
  }
  const std::string name = vm.count("name") ? vm["name"].as<std::string>() : "";
  if (!name.empty()) {
    for (const auto& d : strategies::all_drafters())
      if (d.name == name) {
        std::cout << "drafter (speculative --set drafter=" << d.name << "):\n";
        print_drafter(d);
        return 0;
      }
    std::string drafters;
    for (const auto& d : strategies::all_drafters()) drafters += (drafters.empty() ? "" : ", ") + d.name;
    try {
      print_strategy(strategies::find(name));
    } catch (const Error& e) {
      fail(e.what(), "; valid drafters: ", drafters);
    }
    return 0;
  }
  for (const auto& info : strategies::all()) print_strategy(info);
  std::cout << "\ndrafters (speculative --set drafter=NAME; drafter=auto: model with --draft, else ngram):\n";
  for (const auto& d : strategies::all_drafters()) print_drafter(d);
  std::cout << "\nlogits processors (every strategy; HF order: repetition penalty, temperature, top-k, top-p, min-p):\n";
  for (const auto& p : strategies::processor_params()) print_param(p);
  return 0;
}

}  // namespace specdec::cli
