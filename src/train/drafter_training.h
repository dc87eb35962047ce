#pragma once
// Training EAGLE and Medusa heads (model/draft_heads.h) on a target's own outputs
// (self-distillation), with LibTorch's autograd on the CPU. `specdec train-drafter` runs it.
//
//  1. Corpus: text files (by default Python's standard library source, which every Debian
//     python3 install ships: never an evaluation set of this repository) tokenized with the
//     target's tokenizer and cut into seq_len-token sequences; a fixed share is held out.
//  2. Features: one target forward per sequence gives its final normed hidden states f_j and
//     its top-k next-token probabilities (the distillation targets). They are written to
//     out/checkpoint/ as they are made, so a killed run does not make them again.
//  3. Training: AdamW (written out below: its state is checkpointed with the head) on
//       EAGLE:  SmoothL1(predicted f_{j+1}, f_{j+1}) + w_cls * CE(target's top-k p_{j+1} ||
//               head(predicted f_{j+1}) over the same k tokens), inputs f_j + uniform noise;
//               with unroll = D > 1 also depths 2..D (EAGLE-3's training-time test): the head
//               fed its own predicted features, as a chain drafts, the same losses at j + d,
//               weighted 0.8^(d-1);
//       Medusa: sum_i 0.8^i CE(target's top-k p_{j+i+1} || head(h_i(f_j))).
//     The cross-entropy runs over the target's top-k tokens (loss_vocab = topk), or over the
//     head's whole draft vocabulary (loss_vocab = draft, or topk = 0; dearer by the vocabulary's
//     rows), which also teaches the head to keep mass off the ids outside the target's top-k.
//     The state goes to out/checkpoint/state.safetensors every checkpoint_s seconds
//     (atomically), and a rerun with the same options continues from it.
//  4. The head goes to out/head.safetensors + out/head.json (the target it belongs to).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not in <ATen/ATen.h> of every LibTorch)

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/types.h"
#include "model/causal_lm.h"
#include "model/draft_heads.h"
#include "tokenizer/tokenizer.h"

namespace specdec::train {

struct TrainOptions {
  std::string kind = "eagle";        // eagle | medusa
  std::vector<std::string> corpus;   // files or directories; empty: default_corpus()
  // text: the corpus's token sequences as they are. chat: self-distillation in the target's chat
  // format: each sequence is a conversation whose user turns ask about pieces of a corpus
  // sequence and whose assistant turns are the target's own greedy answers (chat_sequences).
  std::string data = "text";
  int64_t tokens = 65536;            // training tokens (features) to collect
  // Train on the first sequences holding this many of them (0: all): points of a data-scaling
  // curve from one stored feature set. The draft vocabulary is chosen from those sequences too.
  int64_t train_on = 0;
  int64_t held_out_tokens = 4096;    // held-out tokens, from files the training set never sees
  int64_t seq_len = 256;
  double epochs = 4;                 // passes over the training tokens
  int64_t batch_seqs = 4;            // sequences per optimizer step
  double lr = 2e-3;                  // AdamW peak learning rate (linear warm-up, cosine decay)
  double weight_decay = 0.01;
  double w_cls = 0.1;                // EAGLE: weight of the token loss beside the feature loss
  double feature_noise = 0.2;        // EAGLE: width of the uniform noise on input features
  int64_t unroll = 1;                // EAGLE: draft depths trained on the head's own predictions (1: none)
  int64_t topk = 64;                 // the target's top-k tokens stored per position; 0: top-1 (loss_vocab draft)
  // The token loss's softmax: topk, over the target's top-k candidates (the head is never told
  // about ids outside them); draft, over the head's whole draft vocabulary (all ids without
  // one), the label remade from the stored features: dearer by the vocabulary's rows.
  std::string loss_vocab = "topk";
  int64_t d_ff = 0;                  // EAGLE: the head's MLP width; 0: the target's
  int64_t medusa_heads = 4;
  int64_t draft_vocab = 0;           // ids the head drafts from (EAGLE-3's reduced vocabulary); 0: all
  double minutes = 0;                // wall-clock cap on the training steps; 0: none
  double checkpoint_s = 30;
  uint64_t seed = 1;
  std::string out;                   // the head's directory (checkpoints in out/checkpoint)
  std::string target_name;           // recorded in head.json
  int threads = 0;                   // the engine's threads while training; 0: all cores
  bool progress = true;              // a progress line on stderr
};

// The training and held-out token sequences of a corpus.
struct Corpus {
  std::vector<Tokens> train, held_out;
  std::vector<std::string> files;  // what was read, in order
};

// One sequence and what the target made of it.
struct Sequence {
  at::Tensor ids;      // [T] int64
  at::Tensor feat;     // [T, d] float32: final normed hidden state at each position
  at::Tensor top_ids;  // [T, k] int64: the target's k likeliest next tokens (row j: t_{j+1}), best first
  at::Tensor top_p;    // [T, k] float32: their probabilities under the full softmax
};
using Dataset = std::vector<Sequence>;

// Python's standard library (the newest /usr/lib/python3.*), or an error saying to pass --corpus.
std::vector<std::string> default_corpus();
// Files under the paths (directories recursively: *.py *.txt *.md *.rst *.c *.h *.cpp), sorted;
// files are assigned to held-out by a hash of their path, so no text is in both splits.
Corpus read_corpus(const std::vector<std::string>& paths, const tokenizer::Tokenizer& tok, int64_t seq_len,
                   int64_t train_tokens, int64_t held_out_tokens);
// data = chat: for each corpus sequence a conversation of up to seq_len tokens (the length of
// the sequence), in the target's chat template: user turns ask one of a few fixed questions
// (explain, review, document, test) about the next quarter of the sequence's text, assistant
// turns are the target's greedy answers (strategy greedy, in batches of 8). Deterministic.
std::vector<Tokens> chat_sequences(const std::vector<Tokens>& corpus_seqs,
                                   const std::shared_ptr<model::CausalLM>& target,
                                   const std::shared_ptr<tokenizer::Tokenizer>& tok);

// The target's features of one sequence (one forward, fresh cache).
Sequence target_features(model::CausalLM& target, const Tokens& ids, int64_t topk);

struct Metrics {
  double loss = 0;   // the training loss (mean over sequences)
  double top1 = 0;   // share of predicted positions whose argmax equals the target's (Medusa: head 0's)
  int64_t n = 0;     // predicted positions
  // evaluate(): Medusa, each head's agreement; EAGLE, per chain depth d = 1..4 the share of
  // positions whose first d drafts (the head fed its own predictions) all agree.
  std::vector<double> top1_per_head;
};
// EAGLE drafting as a chain over sequence s (EAGLE-3's "training-time test"): depth 1 reads
// `in` [n, d] (s's real features f_j, maybe noised) with t_{j+1} at position j; depth d > 1
// reads depth d - 1's predictions with t_{j+d} at position j + d - 1, attending to the real
// rows 0..j, its own earlier depths and itself: what the d-th draft after a prefix ending at j
// sees (the eagle drafter's mask). Returns each depth's predictions [n - d + 1, d_model], row j
// predicting f_{j+d}. n = s.ids.size(0) - 1.
std::vector<at::Tensor> eagle_unroll(const model::DraftHead& head, const model::CausalLM& target, const Sequence& s,
                                     const at::Tensor& in, int64_t depth);
// The target's output-head rows [n, d] the losses read (CausalLM::head_rows): all of them (the
// top-k candidates index them) and the head's draft vocabulary's (all of them without one).
struct OutputRows {
  at::Tensor all, draft;
};
OutputRows output_rows(const model::CausalLM& target, const model::DraftHeadConfig& head);
// The loss of one sequence (with autograd when the head's parameters require it) and its
// agreement over the candidates the token loss reads (TrainOptions::loss_vocab). noise: the
// generator of EAGLE's input noise (null: none).
at::Tensor sequence_loss(const model::DraftHead& head, const model::CausalLM& target, const OutputRows& rows,
                         const Sequence& s, const TrainOptions& opt, at::Generator* noise, Metrics* m);
// Agreement over the head's draft vocabulary (argmax of those rows of the target's output head;
// all rows when it has none) and the loss, no
// gradient: what "the head beats an untrained one on held-out text" is measured with. EAGLE
// counts each position's next draft token; Medusa counts every head's.
Metrics evaluate(const model::DraftHead& head, const model::CausalLM& target, const Dataset& data,
                 const TrainOptions& opt);

// A draft vocabulary of n ids, ascending: the tokens the target most often ranks first on
// `data` (its argmax next tokens), then, to fill it, the lowest ids not yet taken (a BPE
// vocabulary's early merges, its commonest pieces).
std::vector<int64_t> select_draft_vocab(const Dataset& data, int64_t n_vocab, int64_t n);
// Share of `data`'s positions whose target argmax is in `vocab` (empty: 1): the most of those
// positions a head drafting from it can agree on.
double draft_vocab_coverage(const Dataset& data, const std::vector<int64_t>& vocab);

// A fresh head for this target (kind, d_ff, medusa_heads from opt).
model::DraftHead new_head(const model::CausalLM& target, const TrainOptions& opt);
// Trains `head` on `data` in place for opt.epochs (or until opt.minutes); resumes from and
// writes checkpoint_dir/state.safetensors when checkpoint_dir is not empty (*resumed_at: the
// step it continued from). on_step(step, n_steps, running metrics) after every optimizer step.
// Returns the last steps' metrics.
Metrics train_head(model::DraftHead& head, const model::CausalLM& target, const Dataset& data,
                   const TrainOptions& opt, const std::string& checkpoint_dir,
                   const std::function<void(int64_t, int64_t, const Metrics&)>& on_step = {},
                   int64_t* resumed_at = nullptr);

struct TrainReport {
  Metrics untrained, trained;  // held-out
  double draft_vocab_coverage = 1;  // held-out positions whose target argmax is in the draft vocabulary
  int64_t resumed_at_step = 0;    // > 0: training continued from a checkpoint at this step
  int64_t sequences_from_disk = 0;  // feature sequences read back from the checkpoint
  int64_t train_tokens = 0, held_out_tokens = 0, steps = 0;
  double seconds_features = 0, seconds_training = 0;
};
// The whole command: corpus -> features (resumable) -> training (resumable) -> opt.out.
TrainReport train_drafter(const std::shared_ptr<model::CausalLM>& target,
                          const std::shared_ptr<tokenizer::Tokenizer>& tok, const TrainOptions& opt);

}  // namespace specdec::train
