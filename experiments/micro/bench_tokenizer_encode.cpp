// Encode/decode throughput of the SmolLM2 byte-level BPE on ~100 KB of C headers.
//   build-<you>/bench/bench_tokenizer_encode
// Counters: tokens/s (items) and input bytes/s. "Cold" clears the per-piece BPE cache before
// every iteration (first-time text); "Warm" keeps it (repeated vocabulary, the usual case).
#include <benchmark/benchmark.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tests/support/paths.h"

using specdec::testing_support::source_dir;

namespace {

using specdec::tokenizer::BpeTokenizer;
using specdec::tokenizer::Tokenizer;

const size_t kTextBytes = 100 * 1024;

const std::string& corpus() {
  static const std::string text = [] {
    std::string all;
    for (const char* f : {"/usr/include/stdio.h", "/usr/include/stdlib.h", "/usr/include/unistd.h"}) {
      std::ifstream in(f);
      std::stringstream ss;
      ss << in.rdbuf();
      all += ss.str();
    }
    if (all.size() < kTextBytes) {
      std::cerr << "bench_tokenizer_encode: need " << kTextBytes << " bytes of /usr/include headers\n";
      std::exit(1);
    }
    return all.substr(0, kTextBytes);  // the headers are ASCII: no split UTF-8 sequence
  }();
  return text;
}

const BpeTokenizer& tokenizer() {
  static const std::shared_ptr<Tokenizer> tok = [] {
    const std::string path = source_dir() + "/models/smollm2-135m-instruct.gguf";
    if (!std::ifstream(path).good()) {
      std::cerr << "missing " << path << ": run scripts/fetch_models.sh smollm2-135m\n";
      std::exit(1);
    }
    return Tokenizer::from_gguf(*specdec::io::GgufFile::open(path));
  }();
  return dynamic_cast<const BpeTokenizer&>(*tok);
}

void BM_EncodeCold(benchmark::State& state) {
  const auto& tok = tokenizer();
  const std::string& text = corpus();
  size_t n_tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    tok.clear_cache();
    state.ResumeTiming();
    auto ids = tok.encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations() * n_tokens));
  state.SetBytesProcessed(int64_t(state.iterations() * text.size()));
  state.counters["n_tokens"] = double(n_tokens);
}

void BM_EncodeWarm(benchmark::State& state) {
  const auto& tok = tokenizer();
  const std::string& text = corpus();
  size_t n_tokens = tok.encode(text).size();
  for (auto _ : state) {
    auto ids = tok.encode(text);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations() * n_tokens));
  state.SetBytesProcessed(int64_t(state.iterations() * text.size()));
}

void BM_Decode(benchmark::State& state) {
  const auto& tok = tokenizer();
  const auto ids = tok.encode(corpus());
  for (auto _ : state) {
    std::string s = tok.decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations() * ids.size()));
}

}  // namespace

BENCHMARK(BM_EncodeCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeWarm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
