// `specdec trace`: `specdec generate` with --out for the trace page. It takes generate's
// options (one parser, one generation path) and writes trace.html plus trace.json beside it.
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"

namespace specdec::cli {

int cmd_trace(const Args& args) {
  Args forwarded;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << "specdec trace --model T [--draft D] --strategy S [--set key=value ...] --prompt TEXT [--chat]\n"
                   "              [--max-new-tokens N] [--seed N] --out trace.html\n\n"
                   "Runs one generation like `specdec generate` and writes an interactive view of it: one\n"
                   "self-contained HTML page (no network) and its data as JSON beside it (trace.json; schema in\n"
                   "configs/README.md). Beam search cannot be traced.\n\n"
                   "  --out FILE   the page to write (required); the JSON goes to FILE with .json\n\n"
                   "All other options are those of specdec generate:\n\n";
      return cmd_generate({"--help"});
    }
    SD_CHECK(a != "--trace" && a.rfind("--trace=", 0) != 0, "specdec trace takes --out, not --trace");
    if (a == "--out") {
      SD_CHECK(i + 1 < args.size(), "--out needs a file name (e.g. --out trace.html)");
      out = args[++i];
    } else if (a.rfind("--out=", 0) == 0) {
      out = a.substr(6);
    } else {
      forwarded.push_back(a);
    }
  }
  SD_CHECK(!out.empty(), "--out is required: the HTML page to write, e.g. --out trace.html (see specdec trace --help)");
  forwarded.push_back("--trace");
  forwarded.push_back(out);
  return cmd_generate(forwarded);
}

}  // namespace specdec::cli
