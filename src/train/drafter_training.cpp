// Self-distilled training of EAGLE and Medusa heads (see drafter_training.h).
#include "train/drafter_training.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "io/safetensors.h"
#include "strategies/registry.h"

namespace specdec::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t k_eval_depth = 4;  // evaluate(): the EAGLE chain depths it measures

void check_training_options(const TrainOptions& opt) {
  SD_CHECK(opt.batch_seqs >= 1 && opt.epochs > 0 && opt.lr > 0, "train-drafter: need --batch >= 1, --epochs > 0 "
           "and --lr > 0, got ", opt.batch_seqs, ", ", opt.epochs, ", ", opt.lr);
  SD_CHECK(opt.unroll >= 1 && opt.unroll <= 16, "train-drafter: --unroll must be in [1, 16], got ", opt.unroll);
  SD_CHECK(opt.loss_vocab == "topk" || opt.loss_vocab == "draft", "train-drafter: --loss-vocab must be topk or draft, "
           "got '", opt.loss_vocab, "'");
  SD_CHECK(opt.w_cls >= 0 && opt.feature_noise >= 0, "train-drafter: --w-cls and --feature-noise must be >= 0, got ",
           opt.w_cls, " and ", opt.feature_noise);
}

bool is_text_file(const fs::path& p) {
  static const char* exts[] = {".py", ".txt", ".md", ".rst", ".c", ".h", ".cpp"};
  const std::string e = p.extension().string();
  return std::any_of(std::begin(exts), std::end(exts), [&](const char* x) { return e == x; });
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Files under paths, in an order that mixes directories (by a hash of the path) but is the same
// on every machine with the same files.
std::vector<std::string> list_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    SD_CHECK(fs::exists(p), "train-drafter: corpus path '", p, "' does not exist");
    if (fs::is_regular_file(p)) {
      files.push_back(p);
      continue;
    }
    for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (it->is_directory() && (name == "test" || name == "tests" || name == "__pycache__" ||
                                 name == "site-packages" || name == "dist-packages" || name[0] == '.')) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_text_file(it->path())) files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    const uint64_t ha = fnv1a(a), hb = fnv1a(b);
    return ha != hb ? ha < hb : a < b;
  });
  SD_CHECK(!files.empty(), "train-drafter: no text files (*.py *.txt *.md *.rst *.c *.h *.cpp) under the corpus");
  return files;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Linear warm-up over the first 5% of the steps, then a cosine down to 10% of the peak.
double learning_rate(const TrainOptions& opt, int64_t step, int64_t n_steps) {
  const double warm = std::max<double>(1.0, 0.05 * n_steps);
  if (step < warm) return opt.lr * (step + 1) / warm;
  const double t = (step - warm) / std::max(1.0, n_steps - warm);
  return opt.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * std::min(1.0, t))));
}

// Soft-label cross-entropy over the target's candidates: logits [n, c], p [n, c] (rows need not
// sum to 1: renormalised). Agreement: the head's argmax is the target's best candidate.
at::Tensor distill(const at::Tensor& logits, const at::Tensor& p, const at::Tensor& best, Metrics* m) {
  const at::Tensor q = p / p.sum(-1, true).clamp_min(1e-20);
  if (m) {
    m->top1 += logits.argmax(-1).eq(best).sum().item<double>();
    m->n += logits.size(0);
  }
  return -(q * at::log_softmax(logits, -1)).sum(-1).mean();
}

}  // namespace

OutputRows output_rows(const model::CausalLM& target, const model::DraftHeadConfig& head) {
  const at::Tensor all = target.head_rows(at::arange(target.config().n_vocab, at::kLong)).to(at::kCPU, at::kFloat);
  if (head.draft_vocab.empty()) return {all, all};
  return {all, all.index_select(0, at::tensor(head.draft_vocab, at::kLong)).contiguous()};
}

namespace {

// Logits of predicted features pred [n, d] and the target's distribution as the label, both over
// the target's top-k candidates at rows `row0..` of s (loss_vocab = topk, topk > 0), or over the
// head's whole draft vocabulary (rows.draft: loss_vocab = draft, or topk = 0), where the label is
// the target's own softmax over those ids, remade exactly from its stored features f_{row0+i}.
at::Tensor token_loss(const at::Tensor& pred, const Sequence& s, int64_t row0, const OutputRows& rows,
                      const TrainOptions& opt, Metrics* m) {
  const int64_t n = pred.size(0), d = pred.size(1);
  if (opt.topk > 0 && opt.loss_vocab == "topk") {
    const at::Tensor ids = s.top_ids.narrow(0, row0, n);  // [n, k]
    const at::Tensor w = rows.all.index_select(0, ids.reshape({-1})).view({n, ids.size(1), d});
    const at::Tensor logits = at::bmm(w, pred.unsqueeze(2)).squeeze(2);  // [n, k]
    return distill(logits, s.top_p.narrow(0, row0, n), at::zeros({n}, at::kLong), m);
  }
  at::Tensor p;
  {
    at::NoGradGuard no_grad;
    p = at::softmax(at::matmul(s.feat.narrow(0, row0, n), rows.draft.t()), -1);  // [n, Vd]
  }
  return distill(at::matmul(pred, rows.draft.t()), p, p.argmax(-1), m);
}

json data_options(const TrainOptions& opt, const model::HeadTarget& target, const Corpus& c) {
  json j = {{"tokens", opt.tokens},      {"held_out_tokens", opt.held_out_tokens}, {"seq_len", opt.seq_len},
          {"topk", opt.topk},          {"fingerprint", target.fingerprint},      {"n_vocab", target.n_vocab},
          {"files", c.files.size()},   {"first_file", c.files.empty() ? "" : c.files.front()}};
  if (opt.data != "text") j["data"] = opt.data;  // (checkpoints from before data = chat have no key)
  return j;
}

// Features of `seqs`, 64 sequences per shard file under dir (prefix_NNNN.safetensors): shards
// already on disk are read back, missing ones are made and written.
// prepare (may be empty) turns a shard's corpus sequences into the sequences trained on.
Dataset features_for(model::CausalLM& target, const std::vector<Tokens>& seqs,
                     const std::function<std::vector<Tokens>(const std::vector<Tokens>&)>& prepare, int64_t topk,
                     const std::string& dir, const std::string& prefix, const std::function<void(int64_t)>& progress,
                     int64_t& from_disk) {
  constexpr int64_t per_shard = 64;
  Dataset out;
  for (int64_t s0 = 0; s0 < static_cast<int64_t>(seqs.size()); s0 += per_shard) {
    const int64_t n = std::min<int64_t>(per_shard, seqs.size() - s0);
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%04lld.safetensors", prefix.c_str(), static_cast<long long>(s0 / per_shard));
    const std::string path = dir + "/" + name;
    Dataset shard;
    if (fs::exists(path)) {
      const auto f = io::SafetensorsFile::open(path);
      const auto get = [&](const std::string& key) {
        const io::SafetensorsTensorInfo* info = f->find(key);
        SD_CHECK(info, "train-drafter: checkpoint shard ", path, " lacks '", key, "' (delete it to remake it)");
        at::Tensor t = at::empty(info->shape, at::kFloat);
        f->read_f32(*info, t.data_ptr<float>());
        return t;
      };
      for (int64_t i = 0; i < n; ++i) {
        const std::string k = std::to_string(i);
        shard.push_back({get("ids." + k).to(at::kLong), get("feat." + k), get("top_ids." + k).to(at::kLong),
                         get("top_p." + k)});
      }
      from_disk += n;
    } else {
      std::vector<at::Tensor> keep;
      std::vector<io::SafetensorsF32> tensors;
      std::vector<Tokens> part(seqs.begin() + s0, seqs.begin() + s0 + n);
      if (prepare) part = prepare(part);
      for (int64_t i = 0; i < n; ++i) {
        shard.push_back(target_features(target, part[i], topk));
        const Sequence& s = shard.back();
        const std::string k = std::to_string(i);
        for (const auto& [key, t] : {std::pair<std::string, at::Tensor>{"ids." + k, s.ids}, {"feat." + k, s.feat},
                                     {"top_ids." + k, s.top_ids}, {"top_p." + k, s.top_p}}) {
          keep.push_back(t.to(at::kFloat).contiguous());
          tensors.push_back({key, keep.back().sizes().vec(), keep.back().data_ptr<float>()});
        }
        if (progress) progress(s0 + i + 1);
      }
      io::write_safetensors(path, tensors);
    }
    for (auto& s : shard) out.push_back(std::move(s));
    if (progress) progress(s0 + n);
  }
  return out;
}

class ProgressLine {
 public:
  explicit ProgressLine(bool on) : on_(on), tty_(isatty(2)) {}
  void show(const std::string& what, double done, double total, const std::string& extra) {
    if (!on_) return;
    const int pct = total > 0 ? static_cast<int>(100.0 * done / total) : 100;
    if (!tty_ && pct < next_pct_ && done < total) return;  // logs: every 10%
    next_pct_ = (pct / 10 + 1) * 10;
    const int width = 24, fill = std::min(width, pct * width / 100);
    std::fprintf(stderr, "%s%-9s [%s%s] %3d%% %s  %.0f s%s", tty_ ? "\r" : "", what.c_str(),
                 std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(), pct, extra.c_str(),
                 clock_.ms() / 1000.0, tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
  void done() {
    if (on_ && tty_) std::fprintf(stderr, "\n");
    next_pct_ = 0;
  }

 private:
  bool on_, tty_;
  int next_pct_ = 0;
  Stopwatch clock_;
};

// The engine's pool at n threads (0: all cores) for the training steps, restored after. LibTorch
// stays single-threaded: the pool runs a batch's sequences side by side (train_head).
class TrainingThreads {
 public:
  explicit TrainingThreads(int n) : before_(parallel::num_threads()) {
    parallel::set_num_threads(n > 0 ? n : parallel::hardware_threads(), /*allow_oversubscribe=*/true);
    at::set_num_threads(1);
  }
  ~TrainingThreads() { parallel::set_num_threads(before_, /*allow_oversubscribe=*/true); }
  TrainingThreads(const TrainingThreads&) = delete;
  TrainingThreads& operator=(const TrainingThreads&) = delete;

 private:
  int before_;
};

}  // namespace

std::vector<std::string> default_corpus() {
  std::vector<std::string> found;
  if (fs::is_directory("/usr/lib"))
    for (const auto& e : fs::directory_iterator("/usr/lib")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("python3.", 0) == 0 && fs::exists(e.path() / "os.py")) found.push_back(e.path().string());
    }
  SD_CHECK(!found.empty(), "train-drafter: no default corpus (Python's standard library, /usr/lib/python3.*/ from "
                           "Debian's python3): pass --corpus DIR_OR_FILE");
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // python3.9 < python3.11
  });
  return {found.back()};
}

Corpus read_corpus(const std::vector<std::string>& paths, const tokenizer::Tokenizer& tok, int64_t seq_len,
                   int64_t train_tokens, int64_t held_out_tokens) {
  SD_CHECK(seq_len >= 16 && seq_len <= 4096, "train-drafter: --seq-len must be in [16, 4096], got ", seq_len);
  SD_CHECK(train_tokens >= seq_len, "train-drafter: --tokens (", train_tokens, ") must be at least --seq-len (",
           seq_len, ")");
  SD_CHECK(held_out_tokens >= seq_len, "train-drafter: --held-out-tokens (", held_out_tokens,
           ") must be at least --seq-len (", seq_len, ")");
  Corpus c;
  Tokens stream[2];  // train, held out
  const int64_t want[2] = {train_tokens, held_out_tokens};
  for (const std::string& file : list_files(paths)) {
    const int split = fnv1a("held-out:" + file) % 16 == 0 ? 1 : 0;  // 1 file in 16 is held out
    if (static_cast<int64_t>(stream[split].size()) >= want[split]) {
      if (static_cast<int64_t>(stream[1 - split].size()) >= want[1 - split]) break;
      continue;
    }
    const Tokens ids = tok.encode(read_text(file), /*add_special=*/false);
    stream[split].insert(stream[split].end(), ids.begin(), ids.end());
    c.files.push_back(file);
  }
  for (int split = 0; split < 2; ++split) {
    std::vector<Tokens>& out = split == 0 ? c.train : c.held_out;
    const int64_t n = std::min<int64_t>(want[split], stream[split].size()) / seq_len;
    for (int64_t i = 0; i < n; ++i)
      out.emplace_back(stream[split].begin() + i * seq_len, stream[split].begin() + (i + 1) * seq_len);
  }
  SD_CHECK(!c.train.empty() && !c.held_out.empty(), "train-drafter: the corpus gave ", stream[0].size(),
           " training and ", stream[1].size(), " held-out tokens, fewer than one --seq-len (", seq_len,
           ") sequence each: pass a larger --corpus");
  return c;
}

std::vector<Tokens> chat_sequences(const std::vector<Tokens>& corpus_seqs,
                                   const std::shared_ptr<model::CausalLM>& target,
                                   const std::shared_ptr<tokenizer::Tokenizer>& tok) {
  static const char* const asks[] = {"Explain what this code does.", "Review this code and point out any problems.",
                                     "Add docstrings and type hints to this code.", "Write unit tests for this code."};
  constexpr int k_turns = 4;
  const size_t n = corpus_seqs.size();
  std::vector<std::vector<tokenizer::ChatMessage>> conv(n);
  std::vector<Tokens> out(n);
  std::vector<bool> full(n, false);
  const std::unique_ptr<strategies::Strategy> greedy = strategies::create("greedy", strategies::Params());
  for (int turn = 0; turn < k_turns; ++turn) {
    std::vector<strategies::Request> reqs;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      if (full[i]) continue;
      const Tokens& src = corpus_seqs[i];
      const int64_t len = static_cast<int64_t>(src.size()), q = std::max<int64_t>(1, len / k_turns);
      const Tokens piece(src.begin() + std::min(len, turn * q), src.begin() + std::min(len, (turn + 1) * q));
      conv[i].push_back({"user", std::string(asks[(i + turn) % 4]) + "\n\n```\n" + tok->decode(piece) + "\n```"});
      Tokens prompt = tok->encode(tok->apply_chat_template(conv[i], true), true);
      if (static_cast<int64_t>(prompt.size()) + 1 >= len) {  // no room for an answer
        out[i] = Tokens(prompt.begin(), prompt.begin() + std::min<int64_t>(len, prompt.size()));
        full[i] = true;
        continue;
      }
      strategies::Request r;
      r.stop.max_new_tokens = len - static_cast<int64_t>(prompt.size());
      r.prompt = std::move(prompt);
      r.target = target;
      r.tokenizer = tok;
      r.stop.eos_ids = tok->eos_ids();
      reqs.push_back(std::move(r));
      who.push_back(i);
    }
    if (reqs.empty()) break;
    strategies::BatchOptions batch;
    batch.batch_size = 8;
    const std::vector<strategies::Result> res = greedy->generate_batch(reqs, batch, {});
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      conv[i].push_back({"assistant", res[j].text});
      out[i] = reqs[j].prompt;
      out[i].insert(out[i].end(), res[j].tokens.begin(), res[j].tokens.end());
      full[i] = static_cast<int64_t>(out[i].size()) >= static_cast<int64_t>(corpus_seqs[i].size());
    }
  }
  return out;
}

Sequence target_features(model::CausalLM& target, const Tokens& ids, int64_t topk) {
  at::NoGradGuard no_grad;
  const int64_t T = static_cast<int64_t>(ids.size());
  model::KVCache cache = target.make_cache(1, T);
  const at::Tensor tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong);
  model::ForwardOptions opt;
  opt.final_hidden = true;
  const model::ForwardResult r = target.forward(tokens.view({1, T}), {0}, cache, opt);
  const at::Tensor logits = r.logits.select(0, 0).to(at::kCPU).to(at::kFloat);  // [T, V]
  const auto [p, idx] = at::topk(at::softmax(logits, -1), topk > 0 ? topk : 1, -1);
  return {tokens, r.hidden.select(0, 0).to(at::kCPU).to(at::kFloat).contiguous(), idx.contiguous(), p.contiguous()};
}

std::vector<at::Tensor> eagle_unroll(const model::DraftHead& head, const model::CausalLM& target, const Sequence& s,
                                     const at::Tensor& in, int64_t depth) {
  const int64_t n = s.ids.size(0) - 1;
  const at::Tensor emb = target.embed(s.ids).to(at::kCPU).to(at::kFloat);  // [T, d]: row i embeds t_i
  model::EagleOut o = head.eagle_forward(in, emb.narrow(0, 1, n), at::arange(n, at::kLong), {}, {}, {});
  std::vector<at::Tensor> preds = {o.features};
  at::Tensor k = o.k, v = o.v;  // every depth's keys and values so far: real rows, then depth 2, ...
  std::vector<int64_t> block;   // where depths 2, 3, ... start in k
  for (int64_t d = 2; d <= depth && n - d + 1 > 0; ++d) {
    const int64_t m = n - d + 1, P = k.size(0);
    // Row j (root j) sees the real rows 0..j, its own earlier depths and itself.
    at::Tensor mask = at::full({m, P + m}, -std::numeric_limits<float>::infinity(), at::kFloat);
    mask.narrow(1, 0, n).masked_fill_(at::ones({m, n}, at::kBool).tril(), 0);
    for (int64_t b : block) mask.narrow(1, b, m).diagonal().zero_();
    mask.narrow(1, P, m).diagonal().zero_();
    block.push_back(P);
    o = head.eagle_forward(preds.back().narrow(0, 0, m), emb.narrow(0, d, m), at::arange(d - 1, d - 1 + m, at::kLong),
                           k, v, mask);
    preds.push_back(o.features);
    k = at::cat({k, o.k});
    v = at::cat({v, o.v});
  }
  return preds;
}

at::Tensor sequence_loss(const model::DraftHead& head, const model::CausalLM& target, const OutputRows& rows,
                         const Sequence& s, const TrainOptions& opt, at::Generator* noise, Metrics* m) {
  const int64_t T = s.ids.size(0), n = T - 1;
  at::Tensor loss = at::zeros({}, at::kFloat);
  if (head.config().kind == "eagle") {
    // Depth 1: f_j (noised while training, as EAGLE does, so the head copes with its own errors
    // when it drafts from predicted features) and the embedding of t_{j+1} predict f_{j+1}.
    // Depths d = 2..opt.unroll: the head's own predictions, as it drafts, predict f_{j+d}.
    at::Tensor in = s.feat.narrow(0, 0, n);
    if (noise && opt.feature_noise > 0)
      in = in + (at::rand(in.sizes(), *noise, at::kFloat) - 0.5) * opt.feature_noise;
    const std::vector<at::Tensor> preds = eagle_unroll(head, target, s, in, opt.unroll);
    for (size_t i = 0; i < preds.size(); ++i) {
      const int64_t d = static_cast<int64_t>(i) + 1, m_rows = preds[i].size(0);
      const at::Tensor feat_loss = at::smooth_l1_loss(preds[i], s.feat.narrow(0, d, m_rows));
      const at::Tensor tok_loss = token_loss(preds[i], s, d, rows, opt, i == 0 ? m : nullptr);
      loss = loss + std::pow(0.8, i) * (feat_loss + opt.w_cls * tok_loss);
    }
    return loss;
  }
  // Medusa head i: from f_j, the target's distribution at j + i + 1 (token t_{j+i+2}).
  const at::Tensor h = head.medusa_forward(s.feat);  // [K, T, d]
  for (int64_t i = 0; i < head.config().n_medusa && n - i > 0; ++i)
    loss = loss + std::pow(0.8, i) * token_loss(h[i].narrow(0, 0, n - i), s, i + 1, rows, opt, m);
  return loss;
}

Metrics evaluate(const model::DraftHead& head, const model::CausalLM& target, const Dataset& data,
                 const TrainOptions& opt) {
  at::NoGradGuard no_grad;
  const OutputRows rows = output_rows(target, head.config());
  const std::vector<int64_t>& ids = head.config().draft_vocab;
  const at::Tensor vocab = ids.empty() ? at::Tensor() : at::tensor(ids, at::kLong);
  Metrics m;
  const bool eagle = head.config().kind == "eagle";
  const int64_t n_heads = eagle ? k_eval_depth : head.config().n_medusa;
  std::vector<double> hits(n_heads, 0), count(n_heads, 0);
  for (const Sequence& s : data) {
    m.loss += sequence_loss(head, target, rows, s, opt, nullptr, nullptr).item<double>() / data.size();
    const int64_t n = s.ids.size(0) - 1;
    // Agreement over the draft vocabulary, as the drafters choose: the target's output head (all
    // of it, or the vocabulary's rows of it). [rows] bool
    const auto agree = [&](const at::Tensor& pred, int64_t row0) {
      const at::Tensor best = vocab.defined() ? vocab.index_select(0, at::matmul(pred, rows.draft.t()).argmax(-1))
                                              : target.output_head(pred).to(at::kCPU).argmax(-1);
      return best.eq(s.top_ids.narrow(0, row0, pred.size(0)).select(1, 0));
    };
    if (eagle) {  // a chain: depth d counts where the first d drafts all agree
      const std::vector<at::Tensor> preds = eagle_unroll(head, target, s, s.feat.narrow(0, 0, n), n_heads);
      at::Tensor chain = agree(preds[0], 1);
      for (size_t i = 0; i < preds.size(); ++i) {
        const int64_t rows = preds[i].size(0);
        if (i > 0) chain = chain.narrow(0, 0, rows).logical_and(agree(preds[i], static_cast<int64_t>(i) + 1));
        hits[i] += chain.sum().item<double>();
        count[i] += rows;
      }
    } else {
      const at::Tensor h = head.medusa_forward(s.feat);
      for (int64_t i = 0; i < n_heads && n - i > 0; ++i) {
        hits[i] += agree(h[i].narrow(0, 0, n - i), i + 1).sum().item<double>();
        count[i] += n - i;
      }
    }
  }
  for (int64_t i = 0; i < n_heads; ++i) m.top1_per_head.push_back(count[i] > 0 ? hits[i] / count[i] : 0);
  m.top1 = m.top1_per_head[0];
  m.n = static_cast<int64_t>(count[0]);
  return m;
}

std::vector<int64_t> select_draft_vocab(const Dataset& data, int64_t n_vocab, int64_t n) {
  SD_CHECK(n > 0 && n <= n_vocab, "train-drafter: draft_vocab must be in [1, ", n_vocab, "] (0: the whole "
           "vocabulary), got ", n);
  at::Tensor counts = at::zeros({n_vocab}, at::kDouble);
  for (const Sequence& s : data)
    counts.index_add_(0, s.top_ids.select(1, 0), at::ones({s.top_ids.size(0)}, at::kDouble));
  // Ties (and never-seen ids) in id order: rank = count, then a small bonus for low ids.
  const at::Tensor rank = counts - at::arange(n_vocab, at::kDouble) / (2.0 * n_vocab);
  const at::Tensor top = std::get<0>(std::get<1>(at::topk(rank, n)).sort()).contiguous();
  return std::vector<int64_t>(top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + n);
}

double draft_vocab_coverage(const Dataset& data, const std::vector<int64_t>& vocab) {
  if (vocab.empty()) return 1;
  const at::Tensor ids = at::tensor(vocab, at::kLong);
  double in = 0, all = 0;
  for (const Sequence& s : data) {
    const at::Tensor best = s.top_ids.select(1, 0);
    in += at::isin(best, ids).sum().item<double>();
    all += best.size(0);
  }
  return all > 0 ? in / all : 1;
}

model::DraftHead new_head(const model::CausalLM& target, const TrainOptions& opt) {
  SD_CHECK(opt.kind == "eagle" || opt.kind == "medusa", "train-drafter: --kind must be eagle or medusa, got '",
           opt.kind, "'");
  return model::DraftHead::fresh(target, opt.kind, opt.target_name, opt.seed, opt.d_ff, opt.medusa_heads);
}

Metrics train_head(model::DraftHead& head, const model::CausalLM& target, const Dataset& data,
                   const TrainOptions& opt, const std::string& checkpoint_dir,
                   const std::function<void(int64_t, int64_t, const Metrics&)>& on_step, int64_t* resumed_at) {
  SD_CHECK(!data.empty(), "train-drafter: no training sequences");
  check_training_options(opt);
  const TrainingThreads threads(opt.threads);
  const OutputRows rows = output_rows(target, head.config());
  auto& params = head.params();
  std::map<std::string, at::Tensor> m1, m2;  // AdamW's first and second moments
  for (auto& [name, p] : params) {
    m1[name] = at::zeros_like(p);
    m2[name] = at::zeros_like(p);
  }
  const int64_t N = static_cast<int64_t>(data.size());
  const int64_t n_steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(opt.epochs * N / opt.batch_seqs)));
  int64_t step = 0;
  const std::string state = checkpoint_dir.empty() ? "" : checkpoint_dir + "/state.safetensors";
  if (!state.empty() && fs::exists(state)) {  // resume
    const auto f = io::SafetensorsFile::open(state);
    const auto read = [&](const std::string& key, at::Tensor& into) {
      const io::SafetensorsTensorInfo* info = f->find(key);
      SD_CHECK(info && info->shape == into.sizes().vec(), "train-drafter: checkpoint ", state, " does not match this "
               "head ('", key, "'): delete ", checkpoint_dir, " or pass another --out");
      f->read_f32(*info, into.data_ptr<float>());
    };
    for (auto& [name, p] : params) {
      read("param." + name, p);
      read("m1." + name, m1[name]);
      read("m2." + name, m2[name]);
    }
    step = std::stoll(f->metadata().at("step"));
    if (resumed_at) *resumed_at = step;
  }
  const auto save = [&]() {
    if (state.empty()) return;
    std::vector<io::SafetensorsF32> out;
    for (auto& [name, p] : params) {
      out.push_back({"param." + name, p.sizes().vec(), p.data_ptr<float>()});
      out.push_back({"m1." + name, p.sizes().vec(), m1[name].data_ptr<float>()});
      out.push_back({"m2." + name, p.sizes().vec(), m2[name].data_ptr<float>()});
    }
    io::write_safetensors(state, out, {{"step", std::to_string(step)}, {"n_steps", std::to_string(n_steps)}});
  };
  for (auto& [name, p] : params) p.requires_grad_(true);
  std::vector<at::Tensor> leaves;  // the parameters in params' order
  for (auto& [name, p] : params) leaves.push_back(p);
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8, clip = 0.5;
  Stopwatch clock, since_save;
  Metrics running;  // an average over the last ~20 steps
  at::Tensor order;  // this epoch's permutation of the sequences
  int64_t order_epoch = -1;
  while (step < n_steps) {
    // Sequence b of this step: position step * batch + b of the concatenated epoch orders,
    // each epoch a permutation seeded by (seed, epoch): a resumed run sees the same order.
    std::vector<int64_t> seq(opt.batch_seqs);
    for (int64_t b = 0; b < opt.batch_seqs; ++b) {
      const int64_t g = step * opt.batch_seqs + b, epoch = g / N;
      if (epoch != order_epoch) {
        auto order_gen = at::make_generator<at::CPUGeneratorImpl>(opt.seed * 7919 + epoch);
        order = at::randperm(N, order_gen, at::kLong);
        order_epoch = epoch;
      }
      seq[b] = order[g % N].item<int64_t>();
    }
    // Each sequence's loss and gradients on their own, single-threaded, on the pool's threads side
    // by side or on this thread alone, whichever parallel::Step finds faster lately (beside a busy
    // process one thread can win: LibTorch's own OpenMP threads, which these steps used before,
    // wait for each other at every operation). Then summed in sequence order, as backward()
    // accumulated them one sequence after another: the head does not depend on the threads, the
    // mode or the load.
    std::vector<at::Tensor> losses(opt.batch_seqs);
    std::vector<std::vector<at::Tensor>> grads(opt.batch_seqs);
    std::vector<Metrics> ms(opt.batch_seqs);
    {
      const parallel::Step kind(&head, -1);
      parallel::parallel_for(opt.batch_seqs, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          auto noise = at::make_generator<at::CPUGeneratorImpl>(opt.seed * 104729 + step * opt.batch_seqs + b);
          const at::Tensor loss = sequence_loss(head, target, rows, data[seq[b]], opt, &noise, &ms[b]) / opt.batch_seqs;
          grads[b] = torch::autograd::grad({loss}, leaves, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
          losses[b] = loss.detach();
        }
      });
    }
    at::Tensor loss_sum = at::zeros({}, at::kFloat);
    Metrics m;
    for (int64_t b = 0; b < opt.batch_seqs; ++b) {
      loss_sum += losses[b];
      m.top1 += ms[b].top1;
      m.n += ms[b].n;
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (!grads[b][i].defined()) continue;
        at::Tensor& acc = leaves[i].mutable_grad();
        if (acc.defined()) acc += grads[b][i];
        else acc = grads[b][i];
      }
    }
    {
      at::NoGradGuard no_grad;
      double norm2 = 0;
      for (auto& [name, p] : params)
        if (p.grad().defined()) norm2 += p.grad().square().sum().item<double>();
      const double scale = std::min(1.0, clip / (std::sqrt(norm2) + 1e-12));
      const double lr = learning_rate(opt, step, n_steps), t = static_cast<double>(step + 1);
      for (auto& [name, p] : params) {
        if (!p.grad().defined()) continue;
        const at::Tensor g = p.grad() * scale;
        m1[name].mul_(b1).add_(g, 1 - b1);
        m2[name].mul_(b2).addcmul_(g, g, 1 - b2);
        const at::Tensor denom = (m2[name] / (1 - std::pow(b2, t))).sqrt_().add_(eps);
        // Decoupled weight decay on matrices only (norm weights and biases keep theirs).
        if (p.dim() == 2) p.mul_(1 - lr * opt.weight_decay);
        p.addcdiv_(m1[name], denom, -lr / (1 - std::pow(b1, t)));
        p.mutable_grad().zero_();
      }
    }
    ++step;
    const double w = running.n == 0 ? 1.0 : 0.05;
    running.loss = (1 - w) * running.loss + w * loss_sum.item<double>();
    running.top1 = (1 - w) * running.top1 + w * (m.n ? m.top1 / m.n : 0);
    running.n += m.n;
    if (on_step) on_step(step, n_steps, running);
    const bool out_of_time = opt.minutes > 0 && clock.ms() > opt.minutes * 60e3;
    if (since_save.ms() > opt.checkpoint_s * 1e3 || step == n_steps || out_of_time) {
      save();
      since_save = Stopwatch();
    }
    if (out_of_time) break;
  }
  for (auto& [name, p] : params) p.requires_grad_(false);
  return running;
}

TrainReport train_drafter(const std::shared_ptr<model::CausalLM>& target_ptr,
                          const std::shared_ptr<tokenizer::Tokenizer>& tok, const TrainOptions& opt) {
  model::CausalLM& target = *target_ptr;
  SD_CHECK(!opt.out.empty(), "train-drafter: --out DIR is required (where the head is written)");
  SD_CHECK(opt.kind == "eagle" || opt.kind == "medusa", "train-drafter: --kind must be eagle or medusa, got '",
           opt.kind, "'");
  check_training_options(opt);  // before the features: they take minutes
  SD_CHECK(opt.data == "text" || opt.data == "chat", "train-drafter: --data must be text or chat, got '", opt.data,
           "'");
  SD_CHECK(opt.draft_vocab >= 0 && opt.draft_vocab <= target.config().n_vocab, "train-drafter: --draft-vocab must "
           "be in [0, ", target.config().n_vocab, "] (0: the whole vocabulary), got ", opt.draft_vocab);
  SD_CHECK(opt.train_on >= 0 && opt.train_on <= opt.tokens, "train-drafter: --train-on must be in [0, --tokens = ",
           opt.tokens, "] (0: all), got ", opt.train_on);
  SD_CHECK(opt.topk >= 0 && opt.topk <= target.config().n_vocab, "train-drafter: --topk must be in [0, ",
           target.config().n_vocab, "], got ", opt.topk);
  TrainReport report;
  ProgressLine bar(opt.progress);
  const Corpus corpus = read_corpus(opt.corpus.empty() ? default_corpus() : opt.corpus, *tok, opt.seq_len,
                                    opt.tokens, opt.held_out_tokens);
  const std::string ckpt = opt.out + "/checkpoint";
  fs::create_directories(ckpt);
  model::DraftHead head = new_head(target, opt);
  // The features on disk must be the ones these options make.
  const json want = data_options(opt, head.config().target, corpus);
  const std::string run_json = ckpt + "/data.json";
  if (fs::exists(run_json)) {
    std::ifstream f(run_json);
    json have;
    try {
      have = json::parse(f);
    } catch (const json::exception&) {
      have = json();
    }
    for (const auto& [key, value] : want.items())
      SD_CHECK(have.contains(key) && have[key] == value, "train-drafter: the checkpoint in ", ckpt,
               " was made with other data options (", key, " = ", have.contains(key) ? have[key].dump() : "missing",
               ", now ", value.dump(), "): delete it or pass another --out");
  } else {
    std::ofstream(run_json) << want.dump(2) << "\n";
  }
  Stopwatch clock;
  const int64_t n_seqs = static_cast<int64_t>(corpus.train.size() + corpus.held_out.size());
  const auto show = [&](int64_t done) {
    bar.show("features", static_cast<double>(done), static_cast<double>(n_seqs),
             std::to_string(done * opt.seq_len) + " tokens");
  };
  std::function<std::vector<Tokens>(const std::vector<Tokens>&)> prepare;
  if (opt.data == "chat") prepare = [&](const std::vector<Tokens>& s) { return chat_sequences(s, target_ptr, tok); };
  Dataset train =
      features_for(target, corpus.train, prepare, opt.topk, ckpt, "train", show, report.sequences_from_disk);
  const int64_t n_train = static_cast<int64_t>(train.size());
  const Dataset held = features_for(target, corpus.held_out, prepare, opt.topk, ckpt, "held_out",
                                    [&](int64_t done) { show(n_train + done); }, report.sequences_from_disk);
  bar.done();
  report.seconds_features = clock.ms() / 1000;
  if (opt.train_on > 0) {  // the first sequences that hold train_on tokens
    int64_t kept = 0;
    auto end = train.begin();
    while (end != train.end() && kept < opt.train_on) kept += (end++)->ids.size(0);
    train.erase(end, train.end());
  }
  for (const Sequence& q : train) report.train_tokens += q.ids.size(0);  // chat conversations may be shorter
  for (const Sequence& q : held) report.held_out_tokens += q.ids.size(0);
  if (opt.draft_vocab > 0 && opt.draft_vocab < target.config().n_vocab)
    head.config().draft_vocab = select_draft_vocab(train, target.config().n_vocab, opt.draft_vocab);
  report.draft_vocab_coverage = draft_vocab_coverage(held, head.config().draft_vocab);
  report.untrained = evaluate(head, target, held, opt);
  clock = Stopwatch();
  const Metrics last = train_head(head, target, train, opt, ckpt, [&](int64_t step, int64_t n, const Metrics& m) {
    if (step == report.resumed_at_step + 1 && report.resumed_at_step > 0) bar.done();
    report.steps = step;
    char extra[96];
    std::snprintf(extra, sizeof(extra), "step %lld/%lld  loss %.3f  top-1 %.3f", static_cast<long long>(step),
                  static_cast<long long>(n), m.loss, m.top1);
    bar.show("training", static_cast<double>(step), static_cast<double>(n), extra);
  }, &report.resumed_at_step);
  bar.done();
  report.steps = std::max(report.steps, report.resumed_at_step);  // resumed after the last step: none ran
  report.seconds_training = clock.ms() / 1000;
  report.trained = evaluate(head, target, held, opt);
  auto& t = head.config().training;
  t = {{"data", opt.data},
       {"corpus", corpus.files.empty() ? "" : fs::path(corpus.files.front()).parent_path().string()},
       {"files", std::to_string(corpus.files.size())},
       {"train_tokens", std::to_string(report.train_tokens)},
       {"held_out_tokens", std::to_string(report.held_out_tokens)},
       {"steps", std::to_string(report.steps)},
       {"topk", std::to_string(opt.topk)},
       {"draft_vocab", std::to_string(head.config().draft_vocab.size())},
       {"held_out_draft_vocab_coverage", std::to_string(report.draft_vocab_coverage)},
       {"train_loss", std::to_string(last.loss)},
       {"held_out_top1_untrained", std::to_string(report.untrained.top1)},
       {"held_out_top1", std::to_string(report.trained.top1)},
       {"held_out_loss", std::to_string(report.trained.loss)}};
  head.save(opt.out);
  return report;
}

}  // namespace specdec::train
