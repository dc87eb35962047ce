// The `specdec` command: dispatches to one function per subcommand.
#include <malloc.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <new>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  const char* help;
  int (*fn)(const specdec::cli::Args&);
};

const Command kCommands[] = {
    {"run", "run an experiment YAML and write results/<experiment>/<run-id>/", specdec::cli::cmd_run},
    {"validate", "check an experiment YAML without running it and print the plan", specdec::cli::cmd_validate},
    {"generate", "generate text from a model with a strategy, streaming tokens", specdec::cli::cmd_generate},
    {"trace", "write an interactive HTML view of one generation (drafts, p and q, phases)", specdec::cli::cmd_trace},
    {"train-drafter", "train an EAGLE or Medusa head on the target's own outputs (drafters eagle, medusa)",
     specdec::cli::cmd_train_drafter},
    {"tokenize", "print the token ids of a text", specdec::cli::cmd_tokenize},
    {"strategies", "list the registered decoding strategies and their parameters", specdec::cli::cmd_strategies},
    {"models", "list the models of configs/models.yaml and whether their files are present", specdec::cli::cmd_models},
    {"compare", "print a side-by-side table of two runs", specdec::cli::cmd_compare},
    {"merge", "merge the shards of a prompt-interleaved run (e.g. Spec-Bench over machines)", specdec::cli::cmd_merge},
};

void usage(std::ostream& os) {
  os << "usage: specdec <command> [options]   (specdec <command> --help for details)\n\ncommands:\n";
  for (const auto& c : kCommands) {
    const size_t len = std::strlen(c.name);
    os << "  " << c.name << std::string(len < 14 ? 15 - len : 1, ' ') << c.help << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Keep large blocks (a forward's [B, T, V] logits: tens to hundreds of MB) in the heap for
  // reuse. By default glibc maps each one freshly and the kernel zeroes every page on first
  // touch: with the harness's batched distribution checks ~20% of the time went to page
  // faults (the quickstart's n-gram cell with 1000 first-token samples: 50 s -> 28 s).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 1 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    specdec::cli::Args args(argv + 2, argv + argc);
    try {
      return c.fn(args);
    } catch (const specdec::CheckFailed& e) {
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
  std::cerr << "specdec: unknown command '" << argv[1] << "'\n";
  usage(std::cerr);
  return 1;
}
