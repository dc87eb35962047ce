// recycling: Token Recycling (Luo et al. 2024, "Turning Trash into Treasure: Accelerating
// Inference of Large Language Models with Token Recycling"). Every target forward yields the
// top-k next tokens of each fed row; plain decoding keeps one of them and throws the rest away.
// This drafter keeps them in an adjacency table M: token u -> the k likeliest successors of u
// the last time the target saw u. Each round it grows a static-shape tree from the last
// committed token by breadth-first expansion through M (recycle_shape = children per node at
// each depth, like the tree drafter's tree_branching) and, after verification, overwrites
// M[u] with the target's latest top-k for every fed token u, as the paper does.
//
// Differences from the paper: the table lives for one generation (the paper keeps it across
// queries, a "hot start"); it is seeded from the prompt's bigrams (u -> the tokens that
// followed u in the prompt, newest first), which costs no target forward; when one token was
// fed several times in a round, the row of the accepted path wins (its context is the real
// one), then the latest in feed order. The shape is uniform per depth, not the paper's
// irregular tree (more children under higher-ranked nodes). Storage is a hash map with rows
// only for tokens fed or in the prompt (at most V rows of recycle_k <= 8 ids), not a dense
// V x k matrix. No distribution: verification is greedy or tokens_only, both lossless.
#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "speculative/proposer.h"

namespace specdec::strategies {
namespace {

constexpr int64_t k_max_recycle_k = 8;  // table width; the paper uses 8

// "4,3,2,1" -> children per node at depths 1, 2, ... (each in [1, k]).
std::vector<int64_t> parse_recycle_shape(const std::string& text, int64_t k) {
  return parse_int_list("drafter recycling", "recycle_shape", text, 1, k);
}

// Nodes of the full tree of this shape: b1 + b1*b2 + ...
int64_t shape_nodes(const std::vector<int64_t>& shape) {
  int64_t level = 1, total = 0;
  for (int64_t b : shape) total += (level = std::min<int64_t>(level * b, int64_t{1} << 40));
  return total;
}

struct RecyclingParams {
  int64_t k = 0;
  std::string shape_text;      // recycle_shape as given
  std::vector<int64_t> shape;  // parsed
  bool prompt_bigrams = true;
};

void check_recycling_params(RecyclingParams& p) {
  const int64_t k = p.k;
  SD_CHECK(k >= 1 && k <= k_max_recycle_k, "drafter recycling: recycle_k must be in [1, ", k_max_recycle_k, "], got ",
           k);
  p.shape = parse_recycle_shape(p.shape_text, k);
  const int64_t nodes = shape_nodes(p.shape);
  SD_CHECK(nodes <= k_max_draft_nodes, "drafter recycling: recycle_shape = '", p.shape_text, "' makes ", nodes,
           " nodes, more than the limit of ", k_max_draft_nodes);
}

class RecyclingDrafter : public Drafter {
 public:
  RecyclingDrafter(int64_t k, std::vector<int64_t> shape, bool seed_from_prompt, DraftGrammar grammar)
      : k_(k), shape_(std::move(shape)), seed_from_prompt_(seed_from_prompt), grammar_(std::move(grammar)) {}

  DraftProposal propose(const Tokens& seq, int64_t max_depth) override;
  TargetWants target_wants() const override { return {k_, false}; }
  void observe(const Round& round) override;
  void report(std::map<std::string, double>& out) const override;

 private:
  // The successors of u, best first (empty: u never seen).
  const Tokens& successors(TokenId u) const;
  void seed_bigrams(const Tokens& seq);
  void put_row(TokenId u, const Tokens& row);

  int64_t k_;
  std::vector<int64_t> shape_;
  bool seed_from_prompt_;
  bool seeded_ = false;
  DraftGrammar grammar_;
  std::unordered_map<TokenId, Tokens> table_;  // u -> <= k successors, best first
  int64_t n_rounds_ = 0, n_nodes_ = 0;
};

const Tokens& RecyclingDrafter::successors(TokenId u) const {
  static const Tokens none;
  const auto it = table_.find(u);
  return it == table_.end() ? none : it->second;
}

void RecyclingDrafter::put_row(TokenId u, const Tokens& row) {
  Tokens& dst = table_[u];
  dst.assign(row.begin(), row.begin() + std::min<int64_t>(k_, static_cast<int64_t>(row.size())));
}

// u -> the tokens that followed u in the prompt, the newest occurrence first: the same signal
// prompt lookup uses, available before the first target row.
void RecyclingDrafter::seed_bigrams(const Tokens& seq) {
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    Tokens& row = table_[seq[i]];
    row.erase(std::remove(row.begin(), row.end(), seq[i + 1]), row.end());
    row.insert(row.begin(), seq[i + 1]);
    if (static_cast<int64_t>(row.size()) > k_) row.pop_back();
  }
}

// Breadth-first from the last committed token: every node at depth d gets the first shape[d]
// successors of its token (fewer when its row is shorter or missing).
DraftProposal RecyclingDrafter::propose(const Tokens& seq, int64_t max_depth) {
  DraftProposal out;
  if (!seeded_) {
    if (seed_from_prompt_) seed_bigrams(seq);
    seeded_ = true;
  }
  if (max_depth <= 0 || seq.empty()) return out;
  const int64_t depth = std::min<int64_t>(max_depth, static_cast<int64_t>(shape_.size()));
  std::vector<int32_t> frontier = {-1};  // node indices; -1 = the last committed token
  for (int64_t d = 0; d < depth && !frontier.empty(); ++d) {
    std::vector<int32_t> next;
    for (int32_t parent : frontier) {
      const Tokens& row = successors(parent < 0 ? seq.back() : out.tokens[parent]);
      const int64_t n_children = std::min<int64_t>(shape_[d], static_cast<int64_t>(row.size()));
      for (int64_t c = 0; c < n_children; ++c) {
        next.push_back(static_cast<int32_t>(out.tokens.size()));
        out.tokens.push_back(row[c]);
        out.parents.push_back(parent);  // appended after its parent: topological order
      }
    }
    frontier = std::move(next);
  }
  keep_admitted(out, grammar_, seq);  // structured output: without the branches the grammar refuses
  ++n_rounds_;
  n_nodes_ += out.size();
  return out;
}

// Overwrite M[u] for every fed u (feed order), then again for the root and the accepted
// nodes, so a token fed on several paths keeps the successors it has in the committed text.
void RecyclingDrafter::observe(const Round& round) {
  const Tokens& fed = round.rows.fed;
  const std::vector<Tokens>& topk = round.rows.topk;
  SD_CHECK(fed.size() == topk.size(), "drafter recycling: ", fed.size(), " fed tokens but ", topk.size(),
           " top-k rows (internal error)");
  if (fed.empty()) return;
  for (size_t r = 0; r < fed.size(); ++r) put_row(fed[r], topk[r]);
  put_row(fed[0], topk[0]);
  for (int32_t node : round.accepted)
    if (node >= 0 && static_cast<size_t>(node) + 1 < fed.size()) put_row(fed[node + 1], topk[node + 1]);
}

void RecyclingDrafter::report(std::map<std::string, double>& out) const {
  out["recycle_table_rows"] = static_cast<double>(table_.size());
  if (n_rounds_ > 0) out["recycle_nodes_mean"] = double(n_nodes_) / double(n_rounds_);
}

}  // namespace

DrafterInfo recycling_drafter_info() {
  DrafterInfo info;
  info.name = "recycling";
  info.description = "Token Recycling: a static tree grown through a table of the target's past top-k "
                     "successors of each token (no draft model)";
  using R = RecyclingParams;
  declare_params(info, ParamTable<R>()
                           .field("recycle_k", &R::k, "8", "recycling: successors kept per token (table width, <= 8)")
                           .field("recycle_shape", &R::shape_text, "4,2,2,1",
                                  "recycling: children per node at each depth, each <= recycle_k (its length caps "
                                  "depth)")
                           .field("recycle_prompt_bigrams", &R::prompt_bigrams, "true",
                                  "recycling: seed the table with the prompt's bigrams")
                           .finish(check_recycling_params));
  info.factory = [](const DrafterContext& ctx) -> std::unique_ptr<Drafter> {
    const R& p = ctx.params.typed<R>();
    return std::make_unique<RecyclingDrafter>(p.k, p.shape, p.prompt_bigrams, draft_grammar(ctx));
  };
  return info;
}

}  // namespace specdec::strategies
