// The `specdec` command: dispatch.cpp finds the subcommand's function (one per cmd_<name>.cpp).
#include <malloc.h>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Keep large blocks (a forward's [B, T, V] logits: tens to hundreds of MB) in the heap for
  // reuse. By default glibc maps each one freshly and the kernel zeroes every page on first
  // touch: with the harness's batched distribution checks ~20% of the time went to page
  // faults (the quickstart's n-gram cell with 1000 first-token samples: 50 s -> 28 s).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return specdec::cli::dispatch(specdec::cli::Args(argv + 1, argv + argc));
}
