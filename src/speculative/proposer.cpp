// DraftProposal helpers and the draft/target tokenizer check. The drafters themselves live in drafters/ (one file each) and are
// listed in drafters/registry.cpp.
#include "speculative/proposer.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "speculative/params.h"
#include "strategies/common.h"
#include "tokenizer/tokenizer.h"

namespace specdec::strategies {

int64_t DraftProposal::depth(int64_t i) const {
  SD_CHECK(i >= 0 && i < size(), "draft node ", i, " is outside the proposal of ", size(), " nodes");
  if (is_chain()) return i + 1;
  int64_t d = 1;
  // parents[j] < j (topological order), so this walk ends at a root within i steps.
  for (int32_t j = parents[i]; j >= 0; j = parents[j]) ++d;
  return d;
}

void DeviceTokens::hold(const at::Tensor& ids) {
  device = ids;
  host = model::to_host_async(ids);
}

at::Tensor DeviceTokens::on(const at::Device& to) const {
  return to.is_cpu() && !device.is_cpu() ? model::on_host(device) : model::to_device_async(device, to);
}

at::Tensor DeviceTokens::read(bool synced) {
  const at::Tensor out = synced ? host : model::on_host(device);
  device = host = at::Tensor();
  return out;
}

void DraftProposal::read_drawn(bool synced) {
  if (!drawn.defined()) return;
  if (drawn_parents.defined()) {  // the tree's shape first: is_chain() below needs it
    const at::Tensor par = drawn_parents.read(synced).to(at::kInt).contiguous();
    parents.assign(par.data_ptr<int32_t>(), par.data_ptr<int32_t>() + par.numel());
  }
  const at::Tensor ids = drawn.read(synced).contiguous();  // [N] int64
  const int64_t* p = ids.data_ptr<int64_t>();
  tokens.clear();
  for (int64_t j = 0; j < ids.size(0); ++j) {
    SD_CHECK(p[j] >= 0, is_chain() ? "drafter" : "tree drafter", ": the draft distribution q at draft ",
             is_chain() ? "position " : "node ", j,
             " has no positive entry (the draft's logits are NaN or every token was filtered)");
    tokens.push_back(static_cast<TokenId>(p[j]));
  }
}

void DraftProposal::hold_drawn(const std::vector<at::Tensor>& picks) { drawn.hold(at::cat(picks)); }

void DraftProposal::hold_tree(const at::Tensor& tokens, const at::Tensor& tree_parents) {
  drawn.hold(tokens);
  drawn_parents.hold(tree_parents);
}

at::Tensor DraftProposal::drawn_on(const at::Device& device) const { return drawn.on(device).clamp_min(0); }

uint64_t drafter_seed(uint64_t request_seed) {
  const auto mix = [](uint64_t z) {  // SplitMix64's finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  constexpr uint64_t kTag = 0x64726166746572ULL;  // "drafter"
  return mix(mix(request_seed) ^ kTag);
}

void pick_draft(const at::Tensor& row, const sampling::ProcessorConfig& proc, const Tokens& context,
                std::vector<at::Tensor>& drafted, double u, std::vector<at::Tensor>& q_rows) {
  const at::Tensor logits = row.unsqueeze(0);  // [1, V]
  sampling::DeviceDraft so_far;                // the row follows the last token drafted
  if (proc.repetition_penalty != 1.0 && !drafted.empty()) {
    so_far.tokens = at::cat(drafted);
    so_far.rows = at::full({1}, so_far.tokens.size(0) - 1, so_far.tokens.options());
  }
  if (proc.greedy()) {  // q is one-hot; the greedy verifier ignores it
    drafted.push_back(sampling::pick_tokens(
        proc.repetition_penalty != 1.0 ? sampling::process_logits(logits, proc, context, so_far) : logits));
    return;
  }
  const at::Tensor q = sampling::probabilities(logits, proc, context, so_far);  // [1, V]
  q_rows.push_back(q);
  drafted.push_back(sampling::pick_tokens(q, {u}));
}

double drawn_probability(const at::Tensor& row, const std::vector<at::Tensor>& q_rows, const at::Tensor& token) {
  const at::Tensor q = q_rows.empty() ? at::softmax(row.to(at::kFloat), -1) : q_rows.back()[0];  // [V]
  return q.index_select(0, token.clamp_min(0)).item<double>();
}

std::vector<int64_t> parse_int_list(const std::string& drafter, const std::string& key, const std::string& text,
                                    int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = lo - 1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SD_CHECK(used == item.size() && !item.empty() && v >= lo && v <= hi, drafter, ": ", key, " = '", text,
             "': entry '", item, "' must be an integer in [", lo, ", ", hi, "]");
    out.push_back(v);
  }
  SD_CHECK(!out.empty(), drafter, ": ", key, " = '", text, "' is empty");
  return out;
}

DraftGrammar draft_grammar(const DrafterContext& ctx) {
  if (!constraint_for(ctx.request, ctx.params.constraint()) || !ctx.params.typed<SpeculativeParams>().draft_mask) return {};
  return {start_constraint(ctx.request, ctx.params.constraint()), ctx.request.target->config().n_vocab};
}

std::vector<int32_t> keep_admitted(DraftProposal& d, const DraftGrammar& g, const Tokens& seq) {
  std::vector<int32_t> kept;
  if (!g) {
    kept.resize(static_cast<size_t>(d.size()));
    for (size_t i = 0; i < kept.size(); ++i) kept[i] = static_cast<int32_t>(i);
    return kept;
  }
  d.read_drawn(/*synced=*/false);
  const std::vector<bool> ok = g.state->admitted(seq, d.tokens, d.parents, g.n_vocab);
  std::vector<int32_t> index_of(d.tokens.size(), -1);
  Tokens tokens;
  std::vector<int32_t> parents;
  for (size_t i = 0; i < ok.size(); ++i) {
    if (!ok[i]) continue;
    index_of[i] = static_cast<int32_t>(kept.size());
    kept.push_back(static_cast<int32_t>(i));
    tokens.push_back(d.tokens[i]);
    if (!d.parents.empty()) parents.push_back(d.parents[i] < 0 ? -1 : index_of[d.parents[i]]);  // kept: parent kept
  }
  if (kept.size() == d.tokens.size()) return kept;
  if (d.q.defined())
    d.q = kept.empty() ? at::Tensor() : d.q.index_select(0, at::tensor(std::vector<int64_t>(kept.begin(), kept.end()), at::kLong).to(d.q.device()));
  d.tokens = std::move(tokens);
  d.parents = std::move(parents);
  return kept;
}

void prepend_forced(DraftProposal& d, const Tokens& forced) {
  const auto m = static_cast<int64_t>(forced.size());
  if (m == 0) return;
  d.read_drawn(/*synced=*/false);
  if (!d.parents.empty()) {
    std::vector<int32_t> parents(m);
    for (int64_t j = 0; j < m; ++j) parents[j] = static_cast<int32_t>(j - 1);
    for (int32_t p : d.parents) parents.push_back(p < 0 ? static_cast<int32_t>(m - 1) : p + static_cast<int32_t>(m));
    d.parents = std::move(parents);
  }
  if (d.q.defined()) {
    const at::Tensor ids = at::tensor(std::vector<int64_t>(forced.begin(), forced.end()), at::kLong);
    const at::Tensor one_hot = at::zeros({m, d.q.size(1)}, d.q.options()).scatter_(1, ids.to(d.q.device()).unsqueeze(1), 1.0);
    d.q = at::cat({one_hot, d.q});
  }
  d.tokens.insert(d.tokens.begin(), forced.begin(), forced.end());
}

Round drafter_round(const Round& round, int64_t n_forced) {
  if (n_forced == 0) return round;
  Round r;
  r.n_valid = round.n_valid;
  for (int32_t node : round.accepted)
    if (node >= n_forced) r.accepted.push_back(node - static_cast<int32_t>(n_forced));
  const TargetRows& in = round.rows;
  if (in.fed.empty()) return r;
  r.rows.fed.assign(in.fed.begin() + n_forced, in.fed.end());
  for (size_t j = static_cast<size_t>(n_forced); j < in.parents.size(); ++j)
    r.rows.parents.push_back(in.parents[j] - static_cast<int32_t>(n_forced));
  if (!in.topk.empty()) r.rows.topk.assign(in.topk.begin() + n_forced, in.topk.end());
  if (in.hidden.defined()) r.rows.hidden = in.hidden.narrow(0, n_forced, in.hidden.size(0) - n_forced);
  return r;
}

Round sat_out(const Round& round) {
  Round r;
  r.n_valid = round.n_valid;
  const TargetRows& in = round.rows;
  if (in.fed.empty()) return r;
  r.rows.fed = {in.fed[0]};
  if (!in.topk.empty()) r.rows.topk = {in.topk[0]};
  if (in.hidden.defined()) r.rows.hidden = in.hidden.narrow(0, 0, 1);
  return r;
}

// Longest root-to-leaf path of a proposal (a chain: its length).
int64_t max_depth(const DraftProposal& d) {
  int64_t deepest = 0;
  for (int64_t i = 0; i < d.size(); ++i) deepest = std::max(deepest, d.depth(i));
  return deepest;
}

void check_tokenizers_compatible(const tokenizer::Tokenizer& tgt, const tokenizer::Tokenizer& dft) {
  const int64_t n_vocab = tgt.vocab_size();
  SD_CHECK(dft.vocab_size() == n_vocab, "draft tokenizer has ", dft.vocab_size(),
           " tokens, the target's has ", n_vocab, ": incompatible draft model");
  SD_CHECK(dft.bos_id() == tgt.bos_id(), "draft tokenizer BOS id ", dft.bos_id(), " differs from the target's ",
           tgt.bos_id());
  SD_CHECK(dft.eos_ids() == tgt.eos_ids(), "draft tokenizer EOS ids differ from the target's");
  // A spread sample plus the last ids (where added/special tokens live).
  const int64_t stride = std::max<int64_t>(1, n_vocab / 509);
  auto check_id = [&](int64_t id) {
    const TokenId t = static_cast<TokenId>(id);
    SD_CHECK(tgt.token_string(t) == dft.token_string(t) && tgt.is_special(t) == dft.is_special(t),
             "draft tokenizer differs from the target's at token ", id, ": '", dft.token_string(t), "' vs '",
             tgt.token_string(t), "'");
  };
  for (int64_t id = 0; id < n_vocab; id += stride) check_id(id);
  for (int64_t id = std::max<int64_t>(0, n_vocab - 64); id < n_vocab; ++id) check_id(id);
}

}  // namespace specdec::strategies
