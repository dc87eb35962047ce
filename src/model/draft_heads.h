#pragma once
// Trained draft heads over a target's own features: EAGLE (Li et al. 2024) and Medusa (Cai et
// al. 2024). Both read the target's final normed hidden state f_j (ForwardOptions::final_hidden,
// the output head's input: target logits at j = head(f_j)) and reuse the target's frozen
// embedding and output head (CausalLM::embed / head_rows / output_head), so a head holds only
// its own small layers.
//
// EAGLE: position j takes x_j = fc([f_j, embed(t_{j+1})]) (t_{j+1} the token that follows j)
// through one Llama decoder layer (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU) and
// predicts f_{j+1}; head(predicted f_{j+1}) is the draft distribution of t_{j+2}. While
// drafting, the predicted feature feeds the next position, so a head drafts autoregressively
// with its own small KV cache.
// Medusa: head i (0-based) maps f_j to h_i = f_j + SiLU(W_i f_j + b_i); head(h_i) predicts
// t_{j+i+2}, the token i + 1 places after the target's own next token.
//
// Draft vocabulary (EAGLE-3's reduced vocabulary): a head may name the ids it drafts from
// (DraftHeadConfig::draft_vocab, the target's likeliest next tokens on the training data); the
// drafters then apply only those rows of the output head, a fraction of its cost.
//
// On disk a head is a directory: head.safetensors (float32 tensors, names as params(), and
// "draft_vocab" when set: the ids as exact float32 integers) and head.json (DraftHeadConfig,
// the target it was trained on). Loading it for another target is a named error
// (check_head_target).
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/linear.h"

namespace specdec::model {

// Which target a head belongs to: its shape and a fingerprint of its embedding table (row sums
// of 16 rows spread over the vocabulary), which tells models apart but tolerates the target
// being loaded at another precision (GGUF blocks, float32, bfloat16).
struct HeadTarget {
  std::string name;  // what the trainer called it (catalog name or path); informational
  std::string arch;
  int64_t n_vocab = 0, d_model = 0, n_layers = 0;
  std::vector<double> fingerprint;  // [16]
};
HeadTarget describe_target(const CausalLM& target, const std::string& name);
// Throws specdec::Error naming the head and both targets when `actual` is not `trained_on`.
void check_head_target(const std::string& head_dir, const HeadTarget& trained_on, const HeadTarget& actual);

struct DraftHeadConfig {
  std::string kind;  // "eagle" | "medusa"
  int64_t d_model = 0;
  // eagle: the decoder layer's shape (the target's by default, d_ff may be smaller)
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0;
  double norm_eps = 1e-6, rope_theta = 10000.0;
  int64_t n_medusa = 0;  // medusa: heads (draft depth)
  std::vector<int64_t> draft_vocab;  // ids the head drafts from, ascending; empty: the whole vocabulary
  HeadTarget target;
  std::map<std::string, std::string> training;  // how it was trained (corpus, steps, losses): informational
};

// What one EAGLE forward returns: the predicted features and this forward's keys and values
// (the caller stores them in its cache; training discards them).
struct EagleOut {
  at::Tensor features;  // [T, d] predicted f_{j+1} for each fed position j
  at::Tensor k, v;      // [T, Hkv, hd] after RoPE (k)
};

// One sequence's rows in a batched EAGLE forward (DraftHead::eagle_forward over slots): the
// next `rows` rows of feat/emb/positions, the keys and values before them in its own cache
// ([P, Hkv, hd], or undefined: P = 0) and their mask ([rows, P + rows] additive, undefined: a
// chain).
struct EagleSlot {
  int64_t rows = 0;
  at::Tensor k_past, v_past, mask;
};

class DraftHead {
 public:
  DraftHead() = default;
  // A fresh head: random layers (seed), EAGLE's fc starting as the identity on the token-embedding
  // half of its input (an untrained head's predicted feature is about the embedding of the token
  // it was fed; the feature half, tried once on SmolLM2 on 2026-11-29, trained no better) and
  // Medusa's residual branches at zero (an untrained head repeats the target's next-token
  // distribution).
  static DraftHead init(const DraftHeadConfig& cfg, uint64_t seed);
  // A fresh (untrained) head for `target`: EAGLE's layer takes the target's attention shape and
  // d_ff (or the one given), Medusa n_medusa heads. target_name is recorded in the config.
  static DraftHead fresh(const CausalLM& target, const std::string& kind, const std::string& target_name,
                         uint64_t seed, int64_t d_ff = 0, int64_t n_medusa = 4);
  // From a directory written by save(); errors name the directory and the file.
  static DraftHead load(const std::string& dir);
  void save(const std::string& dir) const;

  const DraftHeadConfig& config() const { return cfg_; }
  DraftHeadConfig& config() { return cfg_; }
  // name -> float32 tensor; the trainer sets requires_grad on them.
  std::map<std::string, at::Tensor>& params() { return params_; }
  const std::map<std::string, at::Tensor>& params() const { return params_; }

  // The inference form: every weight matrix as a packed Linear (model/linear.h: the engine's
  // panel kernel on all its threads) in dtype (at::kBFloat16 halves the bytes a draft step
  // reads). The forwards then use them; call it after the last change to params(), never on a
  // head being trained (the packed copies carry no gradient).
  void pack(at::ScalarType dtype);
  // The inference form on a device (a target's GPU): the float32 parameters moved there, run by
  // ATen ops. A packed head stays on the host (call one of the two, never both).
  void to(const at::Device& device);

  // EAGLE. feat, emb: [T, d]; positions [T] int64 (RoPE); k_past, v_past: [P, Hkv, hd] (P may
  // be 0: undefined tensors); mask: [T, P + T] additive (0 attend, -inf not), undefined for a
  // chain (row t attends to the past and to fed rows <= t).
  EagleOut eagle_forward(const at::Tensor& feat, const at::Tensor& emb, const at::Tensor& positions,
                         const at::Tensor& k_past, const at::Tensor& v_past, const at::Tensor& mask) const;
  // The same for several sequences at once, each with its own cache (slots, in row order): the
  // projections and the MLP run once over all rows, so the layer's weights are read once; each
  // slot attends to its own past. A row's result does not depend on the rows beside it.
  EagleOut eagle_forward(const at::Tensor& feat, const at::Tensor& emb, const at::Tensor& positions,
                         const std::vector<EagleSlot>& slots) const;
  // Medusa. f: [N, d] -> [n_medusa, N, d], the features the output head turns into each head's logits.
  at::Tensor medusa_forward(const at::Tensor& f) const;

 private:
  const at::Tensor& p(const std::string& name) const;
  // x W^T (+ b) for the weight `w` (bias `b`, or ""), packed when pack() ran.
  at::Tensor linear(const std::string& w, const std::string& b, const at::Tensor& x) const;
  DraftHeadConfig cfg_;
  std::map<std::string, at::Tensor> params_;
  std::map<std::string, Linear> packed_;  // weight name -> packed (inference form), or empty
  at::Tensor inv_freq_;  // [hd/2] RoPE (eagle)
};

}  // namespace specdec::model
