// `specdec <command> [options]`: finds the command's function and turns what it throws into an
// exit code and a message on stderr. run_main (main.cpp's call) calls it; the bad-input tests
// call it in-process too (tests/unit/test_bad_inputs.cpp), so both see one code path.
#include <malloc.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <new>

#include "cli/commands.h"
#include "core/error.h"

namespace specdec::cli {
namespace {

struct Command {
  const char* name;
  const char* help;
  int (*fn)(const Args&);
};

const Command kCommands[] = {
    {"run", "run an experiment YAML and write results/<experiment>/<run-id>/", cmd_run},
    {"validate", "check an experiment YAML without running it and print the plan", cmd_validate},
    {"generate", "generate text from a model with a strategy, streaming tokens", cmd_generate},
    {"trace", "write an interactive HTML view of one generation (drafts, p and q, phases)", cmd_trace},
    {"train-drafter", "train an EAGLE or Medusa head on the target's own outputs (drafters eagle, medusa)",
     cmd_train_drafter},
    {"tokenize", "print the token ids of a text", cmd_tokenize},
    {"strategies", "list the registered decoding strategies and their parameters", cmd_strategies},
    {"models", "list the models of configs/models.yaml and whether their files are present", cmd_models},
    {"compare", "print a side-by-side table of two runs", cmd_compare},
    {"merge", "merge the shards of a prompt-interleaved run (e.g. Spec-Bench over machines)", cmd_merge},
};

void usage(std::ostream& os) {
  os << "usage: specdec <command> [options]   (specdec <command> --help for details)\n\ncommands:\n";
  for (const auto& c : kCommands) {
    const size_t len = std::strlen(c.name);
    os << "  " << c.name << std::string(len < 14 ? 15 - len : 1, ' ') << c.help << "\n";
  }
}

}  // namespace

int dispatch(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 1 : 0;
  }
  for (const auto& c : kCommands) {
    if (args[0] != c.name) continue;
    const Args rest(args.begin() + 1, args.end());
    try {
      return c.fn(rest);
    } catch (const CheckFailed& e) {
      std::cerr << "specdec " << c.name << ": check failed: " << e.what() << "\n";
      return 2;
    } catch (const std::bad_alloc&) {
      // Inputs are size-checked before allocation; this is the last resort, still exit 1.
      std::cerr << "specdec " << c.name << ": error: out of memory (std::bad_alloc): the input asks for more "
                << "memory than this machine has\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "specdec " << c.name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "specdec: unknown command '" << args[0] << "'\n";
  usage(std::cerr);
  return 1;
}

int run_main(int argc, char** argv) {
  // Keep large blocks (a forward's [B, T, V] logits: tens to hundreds of MB) in the heap for
  // reuse. By default glibc maps each one freshly and the kernel zeroes every page on first
  // touch: with the harness's batched distribution checks ~20% of the time went to page
  // faults (the quickstart's n-gram cell with 1000 first-token samples: 50 s -> 28 s).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return dispatch(Args(argv + 1, argv + argc));
}

}  // namespace specdec::cli
