#pragma once
// Command-line parsing shared by the subcommands that take positional arguments.
#include <boost/program_options.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "harness/experiment.h"
#include "harness/plan.h"

namespace specdec::cli {

// Parses args against `opts` plus `n_positional` positional arguments (a negative count:
// at least -n_positional) collected in `positional`. Returns an exit code when the command should stop here: 0 after printing
// --help, 1 after a usage error (printed with the options); std::nullopt to go on.
std::optional<int> parse_command(const std::string& command, const Args& args,
                                 const boost::program_options::options_description& opts, int n_positional,
                                 const std::string& positional_usage, std::vector<std::string>& positional,
                                 boost::program_options::variables_map& vm);

// Constructs every planned cell's strategy once, so checks that live in a strategy's
// constructor (speculative: gamma <= 256, drafter, adaptive_gamma, n-gram sizes) fail in
// `validate` and before `run` creates its run folder. Errors name the file and the cell.
void check_plan_strategies(const harness::ExperimentConfig& cfg, const harness::Plan& plan);

}  // namespace specdec::cli
