// greedy_tokens: greedy decoding through llama.cpp's public C API (llama.h), for the
// greedy-equality check of scripts/peer_llamacpp.sh. Our own small tool, compiled by that
// script against a llama.cpp build outside the repository; it is not part of specdec's build.
//
//   greedy_tokens --model FILE.gguf (--ids 1,2,3 | --ids-file F) [--text-file T] [-n 64] [-t 2]
//
// Feeds the prompt ids as given (no template, no BOS added), then picks argmax of the logits
// for n tokens (lowest id on ties; no sampler, no randomness), stopping early at an
// end-of-generation token, which is kept as the last token as specdec does. With --text-file it
// also tokenizes that text with llama.cpp's tokenizer (add_special, parse_special: what
// llama-completion does with a raw prompt) and reports whether the ids equal --ids.
// Prints one JSON line: {"n_prompt", "tokens", "eog", "text_ids_equal", "text_ids", "ms_prefill",
// "ms_decode", "n_vocab"}.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "greedy_tokens: %s\n", msg.c_str());
  std::exit(1);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "1,2, 3" or "[1, 2, 3]" (also newline separated) -> ids.
std::vector<llama_token> parse_ids(const std::string& s) {
  std::vector<llama_token> ids;
  std::string cur;
  for (char c : s + ",") {
    if (c >= '0' && c <= '9') {
      cur += c;
    } else if (c == '-') {
      die("negative token id in --ids");
    } else if (!cur.empty()) {
      ids.push_back(llama_token(std::stol(cur)));
      cur.clear();
    }
  }
  return ids;
}

std::string json_ids(const std::vector<llama_token>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, ids_arg, ids_file, text_file;
  int n_new = 64, n_threads = 2;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--model" || a == "-m") model_path = next();
    else if (a == "--ids") ids_arg = next();
    else if (a == "--ids-file") ids_file = next();
    else if (a == "--text-file") text_file = next();
    else if (a == "-n" || a == "--n-new") n_new = std::atoi(next().c_str());
    else if (a == "-t" || a == "--threads") n_threads = std::atoi(next().c_str());
    else if (a == "-v" || a == "--verbose") verbose = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s --model FILE.gguf (--ids 1,2,3 | --ids-file F) [--text-file T] [-n N] [-t T] [-v]\n",
                  argv[0]);
      return 0;
    } else {
      die("unknown argument '" + a + "' (see --help)");
    }
  }
  if (model_path.empty()) die("--model is required");
  if (ids_arg.empty() == ids_file.empty()) die("give exactly one of --ids and --ids-file");
  const std::vector<llama_token> prompt = parse_ids(ids_file.empty() ? ids_arg : read_file(ids_file));
  if (prompt.empty()) die("empty prompt");
  if (n_new < 1) die("-n must be >= 1");

  if (!verbose) llama_log_set(quiet_log, nullptr);
  llama_backend_init();

  llama_model_params mparams = llama_model_default_params();
  mparams.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mparams);
  if (!model) die("cannot load model '" + model_path + "'");
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token id : prompt)
    if (id < 0 || id >= n_vocab) die("prompt id " + std::to_string(id) + " outside the vocabulary");

  // Optional: llama.cpp's own tokenization of the text, to compare with the given ids.
  std::string text_ids_json = "null", text_equal_json = "null";
  if (!text_file.empty()) {
    const std::string text = read_file(text_file);
    int32_t n = -llama_tokenize(vocab, text.data(), int32_t(text.size()), nullptr, 0, true, true);
    std::vector<llama_token> ids(size_t(n > 0 ? n : 0));
    if (n > 0 && llama_tokenize(vocab, text.data(), int32_t(text.size()), ids.data(), n, true, true) < 0)
      die("llama_tokenize failed");
    text_ids_json = json_ids(ids);
    text_equal_json = ids == prompt ? "true" : "false";
  }

  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = uint32_t(prompt.size() + size_t(n_new) + 16);
  cparams.n_batch = uint32_t(prompt.size() + 16);
  cparams.n_ubatch = cparams.n_batch;
  cparams.n_threads = n_threads;
  cparams.n_threads_batch = n_threads;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (!ctx) die("cannot create a context");

  std::vector<llama_token> out;
  std::vector<llama_token> step(prompt);  // llama_batch_get_one wants a mutable pointer
  bool eog = false;
  double ms_prefill = 0, ms_decode = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_new; ++i) {
    // Positions are tracked by llama_decode for llama_batch_get_one; only the last row's logits
    // are produced.
    if (llama_decode(ctx, llama_batch_get_one(step.data(), int32_t(step.size()))) != 0)
      die("llama_decode failed at step " + std::to_string(i));
    const float* logits = llama_get_logits_ith(ctx, -1);  // [n_vocab]
    if (!logits) die("no logits");
    llama_token best = 0;
    for (llama_token v = 1; v < n_vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    if (i == 0) {
      ms_prefill = ms_since(t0);
      t0 = std::chrono::steady_clock::now();
    }
    out.push_back(best);
    if (llama_vocab_is_eog(vocab, best)) {
      eog = true;
      break;
    }
    step.assign(1, best);
  }
  ms_decode = ms_since(t0);

  std::printf(
      "{\"n_prompt\": %zu, \"tokens\": %s, \"eog\": %s, \"text_ids_equal\": %s, \"text_ids\": %s, "
      "\"ms_prefill\": %.1f, \"ms_decode\": %.1f, \"n_vocab\": %d}\n",
      prompt.size(), json_ids(out).c_str(), eog ? "true" : "false", text_equal_json.c_str(),
      text_ids_json.c_str(), ms_prefill, ms_decode, n_vocab);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
