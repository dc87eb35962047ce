// Measuring a cell: timed generations, conversations, warm-up, traces (cell_runner.h).
#include "harness/cell_runner.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "harness/checks.h"
#include "harness/load.h"
#include "harness/planted_bug.h"
#include "harness/trace.h"
#include "model/device.h"
#include "sampling/grammar.h"
#include "strategies/common.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"

namespace specdec::harness {

namespace reg = specdec::strategies;
using nlohmann::json;

namespace {

uint64_t measure_seed(uint64_t base, int64_t repeat, size_t prompt) {
  return base + 1000 * static_cast<uint64_t>(repeat) + prompt;
}

}  // namespace

reg::Request CellRunner::request(const PromptItem& item, const Tokens& prompt, uint64_t seed, int64_t max_new,
                                 bool candidate) const {
  reg::Request req;
  req.prompt = prompt;
  if (!item.constraint_params.empty()) req.constraint = item.constraint;
  req.target = models_.target.model;
  if (models_.draft) {
    req.draft = models_.draft->model;
    req.draft_tokenizer = models_.draft->tokenizer;
  }
  req.tokenizer = models_.target.tokenizer;
  req.stop.max_new_tokens = max_new;
  if (cfg_.eos && req.tokenizer) req.stop.eos_ids = req.tokenizer->eos_ids();
  req.stop.stop_strings = cfg_.stop;
  req.stop.timeout_s = cfg_.timeout_s;
  req.seed = seed;
  if (candidate) req.backend = planted_;
  return req;
}

void CellRunner::compile_constraint(const reg::Request& req, const reg::Params& params) const {
  if (const auto c = reg::constraint_for(req, params.constraint()))
    c->compile(req.tokenizer.get(), models_.target.model->config().n_vocab, req.stop.eos_ids);
}

json CellRunner::validity(const reg::Request& req, const reg::Params& params, const reg::Result& r) const {
  const auto constraint = reg::constraint_for(req, params.constraint());
  if (!cfg_.checks.valid || !constraint) return nullptr;
  return constraint->matches(req.tokenizer.get(), models_.target.model->config().n_vocab, r.tokens, req.stop.eos_ids);
}

CellRunner::Timed CellRunner::generate(reg::Strategy& s, const reg::Request& req, const std::string& what) {
  check_interrupt();
  Timed t;
  Stopwatch clock;
  bool first = true;
  t.result = s.generate(req, [&](const Tokens& toks, const std::string&) {
    if (first && !toks.empty()) {
      t.ttft_ms = clock.ms();
      first = false;
    }
  });
  t.wall_ms = clock.ms();
  if (first) t.ttft_ms = t.result.stats.ms_first_token > 0 ? t.result.stats.ms_first_token : t.wall_ms;
  progress_.step(what);
  return t;
}

std::vector<CellRunner::Timed> CellRunner::generate_many(reg::Strategy& s, const std::vector<reg::Request>& reqs,
                                                         int64_t batch_size, const std::string& what,
                                                         size_t per_call) {
  std::vector<Timed> out;
  const auto label = [&](size_t i) { return what + " " + std::to_string(i + 1) + "/" + std::to_string(reqs.size()); };
  if (batch_size <= 1) {
    for (size_t i = 0; i < reqs.size(); ++i) out.push_back(generate(s, reqs[i], label(i)));
    return out;
  }
  const size_t chunk = per_call > 0 ? per_call : reqs.size();
  for (size_t i0 = 0; i0 < reqs.size(); i0 += chunk) {
    check_interrupt();
    const std::vector<reg::Request> part(reqs.begin() + i0, reqs.begin() + std::min(reqs.size(), i0 + chunk));
    for (reg::Result& r : s.generate_batch(part, {batch_size, 0}, {})) {
      Timed t;
      t.wall_ms = r.stats.ms_total;
      t.ttft_ms = r.stats.ms_first_token > 0 ? r.stats.ms_first_token : t.wall_ms;
      t.result = std::move(r);
      out.push_back(std::move(t));
      progress_.step(label(out.size() - 1));
    }
  }
  return out;
}

json CellRunner::sample_line(const std::string& cell_key, const std::string& role, const EncodedPrompt& p,
                             int64_t repeat, uint64_t seed, const Timed& t) const {
  const auto& s = t.result.stats;
  json j = {{"cell", cell_key}, {"role", role}, {"prompt", p.item->id}, {"category", p.item->category},
            {"repeat", repeat}, {"seed", seed}, {"n_prompt", s.n_prompt}, {"n_generated", s.n_generated},
            {"finish", reg::to_string(t.result.finish)}, {"wall_ms", t.wall_ms}, {"ttft_ms", t.ttft_ms},
            {"tokens", t.result.tokens}};
  if (!p.item->subcategory.empty()) j["subcategory"] = p.item->subcategory;
  if (role == "baseline" || role == "candidate") {
    j["text"] = t.result.text.empty() ? decode_text(t.result.tokens, models_.target) : t.result.text;
    j["n_target_forwards"] = s.n_target_forwards;
    j["n_drafted"] = s.n_drafted;
    j["n_accepted"] = s.n_accepted;
    // Everything the cell's figures are computed from (cell_metrics reads it back).
    j["stats"] = {{"n_draft_forwards", s.n_draft_forwards}, {"n_rounds", s.n_rounds},
                  {"n_tree_rounds", s.n_tree_rounds}, {"verify_modes", s.verify_mode_rounds},
                  {"accepted_per_position", s.accepted_per_position},
                  {"drafted_per_position", s.drafted_per_position}, {"gamma_rounds", s.gamma_rounds},
                  {"n_aside_tokens", s.n_aside_tokens}, {"phase_ms", to_json(s.phase_ms)}};
    if (!s.drafter_stats.empty()) j["drafter_stats"] = s.drafter_stats;
    if (!s.per_drafter.empty()) j["stats"]["per_drafter"] = per_drafter_json(s.per_drafter);
    if (!s.synthetic_acceptance.empty()) j["synthetic_acceptance"] = s.synthetic_acceptance;
    if (s.n_forced > 0) j["stats"]["n_forced"] = s.n_forced;  // structured output's forced tokens
    if (s.n_refused > 0) j["stats"]["n_refused"] = s.n_refused;  // draft tokens the grammar refused
    if (s.n_jump_drafted > 0) {  // its jump-forward tokens: drafted, accepted
      j["stats"]["n_jump_drafted"] = s.n_jump_drafted;
      j["stats"]["n_jump"] = s.n_jump;
    }
  }
  return j;
}

void CellRunner::trace(const PlannedCell& pc, const std::string& html_path) {
  auto s = reg::create(pc.cell.strategy, pc.resolved);
  const uint64_t seed = measure_seed(cfg_.seed, 0, 0);
  reg::Request req = request(*prompts_[0].item, prompts_[0].tokens, seed, cfg_.max_new_tokens);
  req.trace = std::make_shared<reg::TraceRecorder>(models_.target.tokenizer, pc.resolved);
  const reg::Result r = s->generate(req, {});
  const json what = {{"model", cfg_.target.name}, {"draft", cfg_.draft ? cfg_.draft->name : ""},
                     {"strategy", pc.cell.strategy}, {"cell", pc.cell.key}, {"params", pc.resolved.values()},
                     {"params_set", pc.cell.params}, {"seed", seed}, {"prompt", prompts_[0].item->text},
                     {"prompt_id", prompts_[0].item->id}, {"n_prompt", req.prompt.size()}};
  write_trace(html_path, trace_document(what, r, pc.cell.strategy, *req.trace));
}

void CellRunner::converse(reg::Strategy& s, const reg::Params& params, const std::string& cell_key,
                          const std::string& role, size_t prompt, int64_t repeat, std::vector<json>& samples) {
  const EncodedPrompt& p = prompts_[prompt];
  const auto& tok = models_.target.tokenizer;
  std::vector<tokenizer::ChatMessage> chat = {{"user", p.item->text}};
  Tokens ids = p.tokens;
  const size_t n_turns = 1 + p.item->follow_ups.size();
  for (size_t k = 0;; ++k) {
    const uint64_t seed = measure_seed(cfg_.seed, repeat, prompt) + 1000003 * k;
    std::string what = "prompt " + std::to_string(prompt + 1) + "/" + std::to_string(prompts_.size());
    if (n_turns > 1) what += " turn " + std::to_string(k + 1) + "/" + std::to_string(n_turns);
    what += " repeat " + std::to_string(repeat + 1) + "/" + std::to_string(cfg_.repeats);
    const reg::Request req = request(*p.item, ids, seed, cfg_.max_new_tokens, role == "candidate");
    compile_constraint(req, params);
    const Timed t = generate(s, req, what);
    samples.push_back(sample_line(cell_key, role, p, repeat, seed, t));
    if (json v = validity(req, params, t.result); !v.is_null()) samples.back()["valid"] = v;
    if (k > 0) samples.back()["turn"] = k;
    if (k + 1 == n_turns) return;
    // The next turn is asked after this answer, as Spec-Bench does (the model sees its own
    // answer, re-encoded through the chat template). Tokenizer-less models append raw ids.
    const std::string& next = p.item->follow_ups[k];
    if (tok) {
      chat.push_back({"assistant", samples.back().at("text").get<std::string>()});
      chat.push_back({"user", next});
      ids = tok->encode(tok->apply_chat_template(chat, true), true);
    } else {
      ids.insert(ids.end(), t.result.tokens.begin(), t.result.tokens.end());
      PromptItem turn;
      turn.text = next;
      const Tokens more = encode_prompt(turn, models_.target);
      ids.insert(ids.end(), more.begin(), more.end());
    }
  }
}

void CellRunner::warmup(reg::Strategy& s, int64_t batch_size) {  // warms caches and allocators; not recorded
  if (batch_size <= 1) {
    generate(s, request(*prompts_[0].item, prompts_[0].tokens, cfg_.seed, cfg_.max_new_tokens), "warmup");
    return;
  }
  std::vector<reg::Request> reqs;
  for (size_t i = 0; i < std::min(prompts_.size(), static_cast<size_t>(batch_size)); ++i)
    reqs.push_back(request(*prompts_[i].item, prompts_[i].tokens, cfg_.seed, cfg_.max_new_tokens));
  check_interrupt();
  s.generate_batch(reqs, {batch_size, 0}, {});
  progress_.step("warmup");
}

void CellRunner::measure_batch(reg::Strategy& s, const PlannedCell& pc, const std::string& role, int64_t repeat,
                               std::vector<json>& samples) {
  std::vector<reg::Request> reqs;
  for (size_t i = 0; i < prompts_.size(); ++i)
    reqs.push_back(request(*prompts_[i].item, prompts_[i].tokens, measure_seed(cfg_.seed, repeat, i),
                           cfg_.max_new_tokens, role == "candidate"));
  const reg::Params& params = role == "candidate" ? pc.resolved : pc.baseline_params;
  for (const reg::Request& req : reqs) compile_constraint(req, params);
  Stopwatch clock;
  const std::vector<Timed> runs = generate_many(s, reqs, pc.batch_size,
                                                role + " repeat " + std::to_string(repeat + 1) + "/" +
                                                    std::to_string(cfg_.repeats) + " prompt",
                                                0);
  const double batch_wall_ms = clock.ms();
  for (size_t i = 0; i < runs.size(); ++i) {
    samples.push_back(sample_line(pc.cell.key, role, prompts_[i], repeat, reqs[i].seed, runs[i]));
    samples.back()["batch_size"] = pc.batch_size;
    samples.back()["batch_wall_ms"] = batch_wall_ms;  // the repeat's throughput is over this (SideFigures)
    if (json v = validity(reqs[i], params, runs[i].result); !v.is_null()) samples.back()["valid"] = v;
  }
}

void CellRunner::measure(const PlannedCell& pc, CellMetrics& m, std::vector<json>& samples) {
  auto cand = reg::create(pc.cell.strategy, pc.resolved);
  std::unique_ptr<reg::Strategy> base;
  if (!pc.baseline.empty()) base = reg::create(pc.baseline, pc.baseline_params);
  if (pc.batch_size > 1)
    SD_CHECK(models_.target.model->ragged_batches(), cfg_.file, ": cell ", pc.cell.key, ": batch_size ",
             pc.batch_size, " needs a target that takes ragged batches (a Llama-architecture model, on either "
             "engine); this one does not (use batch_size 1)");
  for (int64_t w = 0; w < cfg_.warmup; ++w) {
    if (base) warmup(*base, pc.batch_size);
    warmup(*cand, pc.batch_size);
  }
  for (int64_t r = 0; r < cfg_.repeats; ++r) {
    if (pc.batch_size > 1) {  // interleaved per repeat: the baseline's batch, then the candidate's
      if (base) measure_batch(*base, pc, "baseline", r, samples);
      measure_batch(*cand, pc, "candidate", r, samples);
      continue;
    }
    for (size_t i = 0; i < prompts_.size(); ++i) {
      // Interleaved: the baseline runs right before the candidate on the same prompt and seed.
      if (base) converse(*base, pc.baseline_params, pc.cell.key, "baseline", i, r, samples);
      converse(*cand, pc.resolved, pc.cell.key, "candidate", i, r, samples);
    }
  }
  m = cell_metrics(pc, lines_of(samples, pc.cell.key, "candidate"), lines_of(samples, pc.cell.key, "baseline"));
}

CellMetrics CellRunner::run(const PlannedCell& pc, std::vector<json>& samples) {
  planted_ = nullptr;
  if (cfg_.checks.inject_residual_bug && pc.checked) {
    // The self-check: the checked strategy verifies through a backend that emits wrong
    // correction tokens (planted_bug.h); a working check must flag it.
    SD_CHECK(!pc.needs.drafter.empty(),
             "checks.inject_residual_bug: strategy '", pc.cell.strategy,
             "' verifies no drafts, so there is no residual to plant the bug in");
    planted_ = residual_bug_backend(model::backend_of(models_.target.model->device()));
  }
  Stopwatch clock;
  CellMetrics m;
  LoadMonitor load;  // the speed figures come from measure(): judge the machine's load there
  load.start();
  measure(pc, m, samples);
  m.load = load.stop();
  if (pc.checked && pc.greedy && cfg_.checks.greedy_equality && pc.baseline == "greedy") {
    m.checks.push_back(greedy_equality(lines_of(samples, pc.cell.key, "candidate"),
                                       lines_of(samples, pc.cell.key, "baseline")));
  } else if (pc.checked && !pc.greedy) {
    sampling_checks(pc, m, samples);
  }
  m.wall_s = clock.seconds();
  return m;
}

}  // namespace specdec::harness
