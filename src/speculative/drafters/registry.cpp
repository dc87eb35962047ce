// The drafter registry: a name table and one factory, like the strategy registry
// (DESIGN principle 3). Each drafter file defines `DrafterInfo <name>_drafter_info()`;
// adding a drafter is one file plus one line below (outside the library, examples/: one
// register_drafter line before the first read).
#include <atomic>
#include <cctype>
#include <mutex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "speculative/params.h"
#include "speculative/proposer.h"
#include "tokenizer/tokenizer.h"

#define SPECDEC_DRAFTER_LIST(X) \
  X(model)                      \
  X(ngram)                      \
  X(suffix)                     \
  X(tree)                       \
  X(layer_skip)                 \
  X(recycling)                  \
  X(lookahead)                  \
  X(eagle)                      \
  X(medusa)

namespace specdec::strategies {

#define SPECDEC_DECLARE_DRAFTER(name) DrafterInfo name##_drafter_info();
SPECDEC_DRAFTER_LIST(SPECDEC_DECLARE_DRAFTER)
#undef SPECDEC_DECLARE_DRAFTER

namespace {

std::string drafter_names(bool with_auto) {
  std::ostringstream os;
  if (with_auto) os << "auto";
  for (const auto& info : all_drafters()) os << (os.tellp() > 0 ? ", " : "") << info.name;
  return os.str();
}

// A draft model proposes token ids the target scores, so both must mean the same thing by
// every id: same vocabulary size and, when both tokenizers are known, the same tokens.
void check_draft_model(const std::string& drafter, const Request& req) {
  SD_CHECK(req.draft != nullptr, "speculative: drafter '", drafter,
           "' needs a draft model (generate --draft, or models.draft in an experiment)");
  SD_CHECK(req.target != nullptr, "speculative: drafter '", drafter, "' needs a target model");
  const int64_t v_tgt = req.target->config().n_vocab, v_dft = req.draft->config().n_vocab;
  SD_CHECK(v_tgt == v_dft, "speculative: draft vocabulary (", v_dft, ") differs from the target's (", v_tgt,
           "); the models cannot share token ids");
  if (req.tokenizer && req.draft_tokenizer) check_tokenizers_compatible(*req.tokenizer, *req.draft_tokenizer);
}

// The `drafter` parameter: "auto" or a registered name (checked again at each use: the table
// may have changed since the params were resolved).
std::string checked_choice(const std::string& name) {
  bool known = name == "auto";
  for (const auto& info : all_drafters()) known = known || info.name == name;
  SD_CHECK(known, "speculative: unknown drafter '", name, "' (parameter 'drafter'); valid values: ",
           drafter_names(true));
  return name;
}

// What make_drafter checks before building a drafter for a request.
// (Its parameters were checked when they were resolved: parse_drafter_params.)
void check_drafter_request(const DrafterInfo& info, const DrafterContext& ctx) {
  if (info.needs_draft_model) check_draft_model(info.name, ctx.request);
}

// A batch's drafters as the registry hands them out: each join is checked as make_drafter
// checks; the drafter's own batch form serves the slots, or else one factory drafter per slot.
class RegistryBatchDrafter : public BatchDrafter {
 public:
  RegistryBatchDrafter(const DrafterInfo& info, std::unique_ptr<BatchDrafter> shared, int64_t batch)
      : info_(info), shared_(std::move(shared)), own_(batch) {}
  void join(int64_t slot, const DrafterContext& ctx) override {
    SD_CHECK(slot >= 0 && slot < static_cast<int64_t>(own_.size()), "drafter '", info_.name, "': slot ", slot,
             " is outside the batch of ", own_.size());
    check_drafter_request(info_, ctx);
    if (shared_)
      shared_->join(slot, ctx);
    else
      own_[slot] = info_.factory(ctx);
  }
  Drafter& at(int64_t slot) override {
    if (shared_) return shared_->at(slot);
    SD_CHECK(own_.at(slot), "drafter '", info_.name, "': slot ", slot, " has not joined");
    return *own_[slot];
  }
  std::vector<DraftProposal> propose(const std::vector<const Tokens*>& seqs, const std::vector<int64_t>& max_depth,
                                     PhaseTimes& ms) override {
    return shared_ ? shared_->propose(seqs, max_depth, ms) : BatchDrafter::propose(seqs, max_depth, ms);
  }

 private:
  const DrafterInfo& info_;
  std::unique_ptr<BatchDrafter> shared_;      // the drafter's batch form, or null
  std::vector<std::unique_ptr<Drafter>> own_;  // else one per slot
};

}  // namespace

std::vector<DraftProposal> BatchDrafter::propose(const std::vector<const Tokens*>& seqs,
                                                 const std::vector<int64_t>& max_depth, PhaseTimes& ms) {
  std::vector<DraftProposal> out(seqs.size());
  for (size_t b = 0; b < seqs.size(); ++b) {
    if (seqs[b] == nullptr) continue;  // max_depth 0 included, as a batch-1 run calls it
    out[b] = at(static_cast<int64_t>(b)).propose(*seqs[b], max_depth[b]);
    ms += out[b].ms;
  }
  return out;
}

// The table is an immutable snapshot; register_drafter / unregister_drafter publish a new one
// and retire the old one without freeing it, so every reference handed out (all_drafters,
// find_drafter, a running RegistryBatchDrafter's info_) stays valid while another thread
// changes the table. Registrations are rare (a few per session), so the retired copies are few.
namespace {
std::mutex g_table_mutex;  // serialises writers; readers take the current snapshot atomically
bool g_params_read = false;  // drafter_params() was called: the speculative schema is made
// Never freed (see above), and itself on the heap: no destructor at exit drops the last pointer
// to a retired snapshot (LeakSanitizer would call that a leak). Made on first use, so that a
// drafter registered from another file's static initializer finds it.
std::vector<const std::vector<DrafterInfo>*>& retired() {
  static auto* const r = new std::vector<const std::vector<DrafterInfo>*>();
  return *r;
}

std::atomic<const std::vector<DrafterInfo>*>& drafter_table() {
#define SPECDEC_DRAFTER_ENTRY(name) name##_drafter_info(),
  static std::atomic<const std::vector<DrafterInfo>*> table{
      new std::vector<DrafterInfo>{SPECDEC_DRAFTER_LIST(SPECDEC_DRAFTER_ENTRY)}};
#undef SPECDEC_DRAFTER_ENTRY
  return table;
}

// How many drafters are built in (the first entries of every snapshot).
size_t n_builtin_drafters() {
  static const size_t n = drafter_table().load()->size();
  return n;
}

void publish(std::vector<DrafterInfo> next) {  // with g_table_mutex held
  retired().push_back(drafter_table().exchange(new std::vector<DrafterInfo>(std::move(next))));
}
}  // namespace

const std::vector<DrafterInfo>& all_drafters() { return *drafter_table().load(); }

void register_drafter(DrafterInfo info) {
  const std::string& name = info.name;
  bool ok_name = !name.empty() && name.size() <= 64;
  for (char c : name) ok_name = ok_name && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  SD_CHECK(ok_name, "register_drafter: bad drafter name '", name, "' (expected 1-64 of [A-Za-z0-9_])");
  SD_CHECK(name != "auto", "register_drafter: 'auto' is the drafter parameter's automatic choice, not a name");
  SD_CHECK(info.factory != nullptr, "register_drafter: drafter '", name, "' has no factory");
  n_builtin_drafters();  // counted before the first registration
  std::lock_guard<std::mutex> lock(g_table_mutex);
  // The speculative schema (and so every drafter's parameters) is made when the strategy
  // registry is first read: a drafter registered after that takes its settings another way.
  SD_CHECK(info.params.empty() || !g_params_read, "register_drafter: drafter '", name, "' declares parameters (",
           info.params[0].name, ") after the speculative schema was made (the strategy registry's first read); "
           "register it at the start of main(), or take none");
  std::vector<DrafterInfo> next = all_drafters();
  for (const auto& d : next)
    SD_CHECK(d.name != name, "register_drafter: a drafter named '", name, "' is already registered",
             &d - next.data() < static_cast<std::ptrdiff_t>(n_builtin_drafters()) ? " (built in)" : "");
  next.push_back(std::move(info));
  publish(std::move(next));
}

void unregister_drafter(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_table_mutex);
  std::vector<DrafterInfo> next = all_drafters();
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i].name != name) continue;
    SD_CHECK(i >= n_builtin_drafters(), "unregister_drafter: '", name, "' is a built-in drafter");
    next.erase(next.begin() + static_cast<std::ptrdiff_t>(i));
    publish(std::move(next));
    return;
  }
  fail("unregister_drafter: unknown drafter '", name, "'; valid drafters: ", drafter_names(false));
}

const DrafterInfo& find_drafter(const std::string& name) {
  for (const auto& info : all_drafters())
    if (info.name == name) return info;
  fail("unknown drafter '", name, "'; valid drafters: ", drafter_names(false));
}

std::vector<ParamSpec> drafter_params() {
  {
    std::lock_guard<std::mutex> lock(g_table_mutex);
    g_params_read = true;
  }
  std::vector<ParamSpec> out;
  std::set<std::string> seen;
  for (const auto& info : all_drafters())
    for (const auto& p : info.params) {
      // One flat namespace (they join the speculative schema): a clash would let one drafter
      // silently read another's value.
      SD_CHECK(seen.insert(p.name).second, "drafter '", info.name, "': parameter '", p.name,
               "' is already declared by another drafter");
      out.push_back(p);
    }
  return out;
}

std::string resolve_drafter_name(const Params& params, bool have_draft_model) {
  const std::string name = checked_choice(params.typed<SpeculativeParams>().drafter);
  if (name == "auto") return have_draft_model ? "model" : "ngram";
  return name;
}

std::vector<std::string> resolve_drafter_names(const Params& params, bool have_draft_model) {
  const std::vector<std::string>& list = params.typed<SpeculativeParams>().drafter_list;
  if (list.empty()) return {resolve_drafter_name(params, have_draft_model)};
  for (const std::string& name : list) find_drafter(name);  // still registered
  return list;
}

void parse_drafter_params(Params& resolved, const std::string& drafter) {
  checked_choice(drafter);
  // Every drafter's values, not only the chosen one's: a bad value is a mistake even when
  // "auto" happens not to pick its drafter in this run.
  for (const auto& info : all_drafters())
    if (info.parse) info.parse(resolved);
}

std::unique_ptr<Drafter> make_drafter(const std::string& name, const DrafterContext& ctx) {
  const DrafterInfo& info = find_drafter(name);
  check_drafter_request(info, ctx);
  return info.factory(ctx);
}

std::unique_ptr<BatchDrafter> make_batch_drafter(const std::string& name, const Request& first, const Params& params,
                                                 const sampling::ProcessorConfig& proc, int64_t batch,
                                                 int64_t capacity) {
  const DrafterInfo& info = find_drafter(name);
  std::unique_ptr<BatchDrafter> shared;
  if (info.batch_factory && batch > 1) shared = info.batch_factory(first, params, proc, batch, capacity);
  return std::make_unique<RegistryBatchDrafter>(info, std::move(shared), batch);
}

}  // namespace specdec::strategies
