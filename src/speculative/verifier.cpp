// One round's verification for one sequence or a batch (verifier.h: verify_round): the kernel
// mode of each proposal, the kernel inputs packed on the target's device (p, q, tokens, 53-bit
// uniforms) and one kernel call per (shape, mode) group. The round loop (loop.cpp) calls it with
// every active sequence: one in a batch-1 run.
#include <algorithm>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/host_reads.h"
#include "kernels/backend.h"
#include "model/device.h"
#include "speculative/verifier.h"

namespace specdec::strategies {
namespace {

// The padded kernel inputs of a group of sequences (`rows`, indices into drafts): W = the
// longest draft; tokens and node counts; p [R, W + 1, V]; q [R, W, V] (with_q); uniforms
// [R, W + 1]. Both kernels read the final sample's uniform from column W, so each sequence's
// last uniform goes there and a row sees exactly the uniforms of its batch-1 call. p and q end
// up on p's device (the target's): a draft model on another device hands its q over here.
// Where a proposal's tokens are still on the draft's device (DraftProposal::drawn: a chain or a
// static tree), all rows' tokens go to p's device too (on_device [R, W] int32;
// DraftProposal::drawn_on).
struct Packed {
  int64_t W = 0;
  std::vector<int32_t> tokens, n_draft;
  at::Tensor p, q, on_device;
  std::vector<double> uniforms;
};

// host [R, W] int32 on `device`, with row r's first drafts[rows[r]]->size() entries replaced by
// unread(draft) where that is defined (a draft's entries still on the drafter's device).
// Undefined when no row has any: the kernel then takes the host array.
at::Tensor rows_on_device(std::vector<int32_t>& host, int64_t W, const std::vector<const DraftProposal*>& drafts,
                          const std::vector<size_t>& rows, const at::Device& device,
                          at::Tensor (*unread)(const DraftProposal&, const at::Device&)) {
  const int64_t R = static_cast<int64_t>(rows.size());
  at::Tensor out;
  for (int64_t r = 0; r < R; ++r) {
    const DraftProposal& d = *drafts[rows[r]];
    const at::Tensor from = unread(d, device);
    if (!from.defined()) continue;
    if (!out.defined()) out = model::to_device_async(at::from_blob(host.data(), {R, W}, at::kInt).clone(), device);
    out[r].narrow(0, 0, d.size()).copy_(from);  // int64 -> int32
  }
  return out;
}

at::Tensor unread_tokens(const DraftProposal& d, const at::Device& device) {
  return d.drawn.defined() ? d.drawn_on(device) : at::Tensor();
}
at::Tensor unread_parents(const DraftProposal& d, const at::Device& device) {
  return d.drawn_parents.defined() ? d.drawn_parents.on(device) : at::Tensor();
}

Packed pack(const std::vector<const DraftProposal*>& drafts, const std::vector<at::Tensor>& p,
            const std::vector<std::vector<double>>& u, const std::vector<size_t>& rows, bool with_q) {
  Packed k;
  const int64_t R = static_cast<int64_t>(rows.size()), V = p[rows[0]].size(1);
  for (size_t i : rows) k.W = std::max(k.W, drafts[i]->size());
  const int64_t W = k.W;
  k.tokens.assign(R * W, 0);
  k.n_draft.resize(R);
  k.uniforms.assign(R * (W + 1), 0.5);  // entries past a sequence's draft are never read
  const at::TensorOptions on = p[rows[0]].options();
  if (R == 1) {  // one sequence (batch-1 decoding): the rows as they are, no padded copy
    k.p = p[rows[0]].contiguous();
    if (with_q) k.q = drafts[rows[0]]->q.to(on.device()).contiguous();
  } else {
    k.p = at::zeros({R, W + 1, V}, on);
    if (with_q) k.q = at::zeros({R, W, V}, on);
  }
  for (int64_t r = 0; r < R; ++r) {
    const size_t i = rows[r];
    const DraftProposal& d = *drafts[i];
    const int64_t n = d.size();
    std::copy(d.tokens.begin(), d.tokens.end(), k.tokens.begin() + r * W);
    k.n_draft[r] = static_cast<int32_t>(n);
    std::copy(u[i].begin(), u[i].begin() + n, k.uniforms.begin() + r * (W + 1));
    k.uniforms[r * (W + 1) + W] = u[i][n];
    if (R == 1) continue;
    k.p[r].narrow(0, 0, n + 1).copy_(p[i]);
    if (with_q && n > 0) k.q[r].narrow(0, 0, n).copy_(d.q);  // copy_ crosses devices
  }
  k.on_device = rows_on_device(k.tokens, W, drafts, rows, on.device(), unread_tokens);
  return k;
}

// Runs a backend's verification: the verdict, the CUDA backend's one synchronising copy back.
// The logits' finiteness flags came in before it, and they name a cause first: NaN logits of
// the draft or the target are the likeliest reason for a kernel to refuse its rows, too.
void verdict(const std::function<void()>& verify) {
  count_host_read();
  try {
    verify();
  } catch (const Error&) {
    model::checks_after_read();
    throw;
  }
  model::checks_after_read();
}

// Verifies a group of chains with the chain kernel (ragged n_draft), one call.
void verify_chains(kernels::Backend& backend, kernels::VerifyMode mode, const std::vector<const DraftProposal*>& drafts,
                   const std::vector<at::Tensor>& p, const std::vector<std::vector<double>>& u,
                   const std::vector<size_t>& rows, std::vector<Verdict>& out) {
  const bool with_q = mode == kernels::VerifyMode::sampling || mode == kernels::VerifyMode::block;
  Packed k = pack(drafts, p, u, rows, with_q);
  const int64_t B = static_cast<int64_t>(rows.size()), G = k.W;
  std::vector<int32_t> n_accepted(B, 0), emitted(B * (G + 1), -1);
  kernels::VerifyArgs args;
  args.batch = B;
  args.gamma = G;
  args.vocab = k.p.size(-1);
  args.mode = mode;
  args.draft_tokens = k.on_device.defined() ? k.on_device.data_ptr<int32_t>() : k.tokens.data();
  args.draft_tokens_on_device = k.on_device.defined();
  args.n_draft = k.n_draft.data();
  args.q = with_q ? k.q.data_ptr<float>() : nullptr;
  args.p = k.p.data_ptr<float>();
  args.uniforms = k.uniforms.data();
  args.n_accepted = n_accepted.data();
  args.out_tokens = emitted.data();
  verdict([&] { backend.verify(args); });
  for (int64_t r = 0; r < B; ++r) {
    Verdict& v = out[rows[r]];
    if (drafts[rows[r]]->size() > 0) v.mode = mode;  // none: a plain step (no draft)
    v.path.resize(n_accepted[r]);
    for (int32_t j = 0; j < n_accepted[r]; ++j) v.path[j] = j;
    v.emitted.assign(emitted.begin() + r * (G + 1), emitted.begin() + r * (G + 1) + n_accepted[r] + 1);
  }
}

// Verifies a group of token trees with the tree kernel (ragged n_nodes), one call.
void verify_trees(kernels::Backend& backend, kernels::VerifyMode mode, const std::vector<const DraftProposal*>& drafts,
                  const std::vector<at::Tensor>& p, const std::vector<std::vector<double>>& u,
                  const std::vector<size_t>& rows, std::vector<Verdict>& out) {
  const bool with_q = mode == kernels::VerifyMode::sampling;
  Packed k = pack(drafts, p, u, rows, with_q);
  const int64_t B = static_cast<int64_t>(rows.size()), N = k.W;
  std::vector<int32_t> parents(B * N, -1), n_accepted(B, 0), path(B * N, -1), emitted(B * (N + 1), -1);
  for (int64_t r = 0; r < B; ++r) {
    const std::vector<int32_t>& par = drafts[rows[r]]->parents;
    std::copy(par.begin(), par.end(), parents.begin() + r * N);
  }
  // A tree whose shape is still on the drafter's device (DraftProposal::drawn_parents): all rows'
  // parents go to p's device, as its tokens do.
  const at::Tensor on_parents = rows_on_device(parents, N, drafts, rows, k.p.device(), unread_parents);
  kernels::TreeVerifyArgs args;
  args.batch = B;
  args.max_nodes = N;
  args.vocab = k.p.size(-1);
  args.mode = mode;
  args.tokens = k.on_device.defined() ? k.on_device.data_ptr<int32_t>() : k.tokens.data();
  args.tokens_on_device = k.on_device.defined();
  args.parents = on_parents.defined() ? on_parents.data_ptr<int32_t>() : parents.data();
  args.parents_on_device = on_parents.defined();
  args.n_nodes = k.n_draft.data();
  args.q = with_q ? k.q.data_ptr<float>() : nullptr;
  args.p = k.p.data_ptr<float>();
  args.uniforms = k.uniforms.data();
  args.n_accepted = n_accepted.data();
  args.path = path.data();
  args.out_tokens = emitted.data();
  verdict([&] { backend.verify_tree(args); });
  for (int64_t r = 0; r < B; ++r) {
    Verdict& v = out[rows[r]];
    if (drafts[rows[r]]->size() > 0) v.mode = mode;  // none: a plain step (no draft)
    v.path.assign(path.begin() + r * N, path.begin() + r * N + n_accepted[r]);
    v.emitted.assign(emitted.begin() + r * (N + 1), emitted.begin() + r * (N + 1) + n_accepted[r] + 1);
  }
}

}  // namespace

void refuse_block_verify(const std::string& drafter, const std::string& what) {
  std::string serve;
  for (const DrafterInfo& info : all_drafters())
    if (info.chains_with_q) serve += (serve.empty() ? "" : ", ") + info.name;
  fail("speculative: verify=block serves chains with a draft distribution q, but drafter '", drafter, "' ", what,
       " (block verification at temperature > 0 needs a drafter of chains with q: ", serve,
       "); use verify=tokenwise for this drafter");
}

kernels::VerifyMode verify_mode(const VerifySetup& cfg, const DraftProposal& d) {
  if (cfg.proc.greedy()) return kernels::VerifyMode::greedy;  // every mode is exactly this at T = 0
  const bool has_q = d.q.defined();
  if (cfg.block_verify) {
    if (!d.is_chain() || !has_q)
      refuse_block_verify(cfg.drafter, d.is_chain() ? "proposed a chain without q" : "proposed a token tree");
    return kernels::VerifyMode::block;
  }
  return has_q ? kernels::VerifyMode::sampling : kernels::VerifyMode::tokens_only;
}

std::vector<Verdict> verify_round(kernels::Backend& backend, const VerifySetup& cfg,
                                  const std::vector<const DraftProposal*>& drafts, const std::vector<at::Tensor>& p,
                                  const std::vector<Rng*>& rngs) {
  const size_t n = drafts.size();
  std::vector<Verdict> out(n);
  std::vector<std::vector<double>> u(n);
  std::vector<std::vector<size_t>> chains(4), trees(4);  // by kernels::VerifyMode
  std::vector<size_t> plain;  // sequences without a draft this round
  for (size_t i = 0; i < n; ++i) {
    const DraftProposal& d = *drafts[i];
    u[i].resize(d.size() + 1);
    for (auto& x : u[i]) x = rngs[i]->uniform();
    if (d.size() == 0) {
      plain.push_back(i);
      continue;
    }
    const auto mode = static_cast<size_t>(verify_mode(cfg, d));
    (d.is_chain() ? chains : trees)[mode].push_back(i);
  }
  // A plain decoding step is a chain of 0 drafts, or a tree of 0 nodes: either kernel draws its
  // token from p with its last uniform, the same law and the same token in every mode (greedy:
  // the arg-max). It joins the round's first chain group, else its first tree group, so the
  // round still costs one read, the verdict.
  if (!plain.empty()) {
    const auto first = [](std::vector<std::vector<size_t>>& groups) -> std::vector<size_t>* {
      for (auto& g : groups)
        if (!g.empty()) return &g;
      return nullptr;
    };
    std::vector<size_t>* group = first(chains);
    if (!group) group = first(trees);
    if (!group)
      group = &chains[static_cast<size_t>(cfg.proc.greedy() ? kernels::VerifyMode::greedy
                                                            : kernels::VerifyMode::tokens_only)];
    group->insert(group->end(), plain.begin(), plain.end());
  }
  for (size_t m = 0; m < chains.size(); ++m) {
    const auto mode = static_cast<kernels::VerifyMode>(m);
    if (!chains[m].empty()) verify_chains(backend, mode, drafts, p, u, chains[m], out);
    if (!trees[m].empty()) verify_trees(backend, mode, drafts, p, u, trees[m], out);
  }
  return out;
}

std::vector<double> parse_synthetic(const std::string& text) {
  std::vector<double> ranks;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double a = -1;
    try {
      a = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SD_CHECK(!item.empty() && used == item.size() && a >= 0.0 && a <= 1.0, "speculative: synthetic_acceptance = '",
             text, "': entry '", item, "' must be a probability in [0, 1] (off, a, or a1,a2,... by child rank)");
    ranks.push_back(a);
  }
  SD_CHECK(!ranks.empty() && ranks.size() == size_t(std::count(text.begin(), text.end(), ',')) + 1,
           "speculative: synthetic_acceptance = '", text, "' has an empty entry");
  return ranks;
}

Verdict synthetic_verdict(const DraftProposal& d, const std::vector<Tokens>& best, const std::vector<double>& ranks,
                          Rng& rng) {
  SD_CHECK(!ranks.empty(), "synthetic_verdict: no acceptance probability");
  Verdict v;
  int32_t node = -1;  // the last accepted node (-1: the root, the last committed token)
  for (bool accepted = true; accepted;) {
    accepted = false;
    size_t rank = 0;  // the children tried so far at this node
    for (int32_t c = node + 1; c < d.size(); ++c) {  // a node's children come after it
      if ((d.parents.empty() ? c - 1 : d.parents[c]) != node) continue;
      if (rng.uniform() < ranks[std::min(rank++, ranks.size() - 1)]) {
        v.path.push_back(c);
        v.emitted.push_back(d.tokens[c]);
        node = c;
        accepted = true;
        break;
      }
    }
  }
  v.emitted.push_back(best.at(node + 1).at(0));
  return v;
}

// Counts one verification round into the statistics (per position = per depth for trees).
void count_round(Stats& st, const DraftProposal& d, const Verdict& v) {
  ++st.n_target_forwards;
  ++st.n_rounds;
  st.n_tree_rounds += d.is_chain() ? 0 : 1;
  st.n_draft_forwards += d.n_forwards;
  st.n_drafted += d.size();
  st.n_accepted += v.n_accepted();
  if (v.mode) ++st.verify_mode_rounds[kernels::mode_name(*v.mode)];
  const int64_t depth = std::min<int64_t>(max_depth(d), static_cast<int64_t>(st.drafted_per_position.size()));
  for (int64_t i = 0; i < depth; ++i) ++st.drafted_per_position[i];
  for (int64_t i = 0; i < v.n_accepted() && i < depth; ++i) ++st.accepted_per_position[i];
}

}  // namespace specdec::strategies
