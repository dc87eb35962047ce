#pragma once
// Command-line parsing shared by the subcommands that take positional arguments.
#include <boost/program_options.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace specdec::cli {

// Parses args against `opts` plus `n_positional` positional arguments collected in
// `positional`. Returns an exit code when the command should stop here: 0 after printing
// --help, 1 after a usage error (printed with the options); std::nullopt to go on.
std::optional<int> parse_command(const std::string& command, const Args& args,
                                 const boost::program_options::options_description& opts, int n_positional,
                                 const std::string& positional_usage, std::vector<std::string>& positional,
                                 boost::program_options::variables_map& vm);

}  // namespace specdec::cli
