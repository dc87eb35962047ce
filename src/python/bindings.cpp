// specdec._specdec: the C++ engine, registries and harness for Python (pybind11). The pure-Python
// package (src/python/specdec/) wraps these functions; this file only converts and guards:
//   - every call into C++ that can take time runs with the GIL released;
//   - specdec::Error becomes specdec.Error (a ValueError) with the library's own message;
//   - Ctrl-C: a generation checks for signals each time tokens become final (a round, or a
//     token) and stops with KeyboardInterrupt; an experiment stops after the current generation,
//     as `specdec run` does, keeping the finished cells;
//   - drafters written in Python (PyDrafter) take the GIL only around their Python call, and
//     what they return is checked before the C++ verifier sees it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <csignal>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "core/error.h"
#include "harness/experiment.h"
#include "harness/model_catalog.h"
#include "harness/plan.h"
#include "harness/runner.h"
#include "harness/slurm.h"
#include "harness/trace.h"
#include "model/causal_lm.h"
#include "speculative/proposer.h"
#include "strategies/registry.h"
#include "strategies/trace.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;
using namespace specdec;

namespace {

// ---- conversions ---------------------------------------------------------------------------

py::object to_python(const nlohmann::json& j) {
  // One JSON text, parsed by Python's json: the same figures `specdec generate --json` prints.
  // Invalid UTF-8 (a generation cut inside a character) becomes U+FFFD, as in the CLI.
  return py::module_::import("json").attr("loads")(
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

py::list param_specs(const std::vector<strategies::ParamSpec>& specs) {
  py::list out;
  for (const auto& p : specs)
    out.append(py::dict(py::arg("name") = p.name, py::arg("type") = p.type, py::arg("default") = p.default_value,
                        py::arg("help") = p.help));
  return out;
}

// ---- models --------------------------------------------------------------------------------

struct Model {
  model::LoadedModel loaded;
  std::string name;  // as given (catalog name or path)
};

std::shared_ptr<Model> load_model(const std::string& name, const std::string& dtype, const std::string& device,
                                  int threads, const std::string& engine, const std::string& graphs,
                                  bool threads_oversubscribe, uint64_t seed) {
  auto m = std::make_shared<Model>();
  m->name = name;
  py::gil_scoped_release nogil;
  // As the CLI's load_model (cmd_generate.cpp): the catalog resolves the name, the spec
  // carries the engine settings, and the engine's threads are set for the process.
  model::ModelSpec spec = harness::resolve_model(name);
  spec.threads = threads;
  spec.threads_oversubscribe = threads_oversubscribe;
  spec.dtype = dtype;
  spec.device = device;
  spec.engine = engine;
  spec.graphs = graphs;
  spec.seed = seed;
  model::set_threads(threads, threads_oversubscribe);
  m->loaded = model::load(spec);
  return m;
}

const tokenizer::Tokenizer& tokenizer_of(const Model& m) {
  SD_CHECK(m.loaded.tokenizer != nullptr, "model '", m.name, "' has no tokenizer");
  return *m.loaded.tokenizer;
}

py::dict model_info(const Model& m) {
  const model::CausalLM& lm = *m.loaded.model;
  const model::ModelConfig& c = lm.config();
  return py::dict(py::arg("name") = m.name, py::arg("path") = m.loaded.spec.path, py::arg("arch") = c.arch,
                  py::arg("dtype") = m.loaded.spec.dtype, py::arg("device") = lm.device().str(),
                  py::arg("engine") = m.loaded.spec.engine, py::arg("n_vocab") = c.n_vocab,
                  py::arg("n_layers") = c.n_layers, py::arg("d_model") = c.d_model, py::arg("n_heads") = c.n_heads,
                  py::arg("n_kv_heads") = c.n_kv_heads, py::arg("n_ctx") = c.n_ctx,
                  py::arg("weight_bytes") = lm.weight_bytes(), py::arg("resident_bytes") = lm.resident_weight_bytes(),
                  py::arg("has_tokenizer") = m.loaded.tokenizer != nullptr);
}

// ---- generate ------------------------------------------------------------------------------

// Thrown out of the token callback to unwind a generation whose Python side raised (Ctrl-C,
// an exception in on_token): the Python error stays set and is raised once C++ has unwound.
struct PythonRaised {};

py::dict generate(const std::shared_ptr<Model>& target, const py::object& prompt, const std::string& strategy,
                  const std::shared_ptr<Model>& draft, const std::map<std::string, std::string>& given,
                  int64_t max_new_tokens, int64_t seed, const std::vector<std::string>& stop, double timeout_s,
                  bool chat, const py::object& on_token, bool trace) {
  SD_CHECK(seed >= 0, "seed must be >= 0, got ", seed);
  // The CLI's order (cmd_generate.cpp run_generate): parameters are resolved and checked by the
  // registry before anything runs; a strategy that needs a draft model says so.
  const strategies::Params params(given);
  const strategies::StrategyInfo& info = strategies::find(strategy);
  const strategies::Params resolved = strategies::resolve(info, params);
  auto strat = strategies::create(strategy, resolved);
  const strategies::StrategyNeeds needs = strategies::strategy_needs(info, resolved, draft != nullptr);
  SD_CHECK(!needs.draft_model || draft, "strategy '", strategy, "'",
           needs.drafter.empty() ? "" : " with drafter '" + needs.drafter + "'", " needs draft=<model>");
  strategies::Request req;
  req.target = target->loaded.model;
  req.tokenizer = target->loaded.tokenizer;
  if (draft) {
    req.draft = draft->loaded.model;
    req.draft_tokenizer = draft->loaded.tokenizer;
    if (req.tokenizer && req.draft_tokenizer) strategies::check_tokenizers_compatible(*req.tokenizer, *req.draft_tokenizer);
  }
  if (py::isinstance<py::str>(prompt)) {
    std::string text = prompt.cast<std::string>();
    const tokenizer::Tokenizer& tok = tokenizer_of(*target);
    if (chat) text = tok.apply_chat_template({{"user", text}}, true);
    req.prompt = tok.encode(text, /*add_special=*/true);
  } else {
    SD_CHECK(!chat, "chat=True needs the prompt as text, not token ids");
    req.prompt = prompt.cast<Tokens>();
    const int64_t v = req.target->config().n_vocab;
    for (TokenId t : req.prompt) SD_CHECK(t >= 0 && t < v, "prompt: token id ", t, " is outside the vocabulary [0, ", v, ")");
  }
  SD_CHECK(!req.prompt.empty(), "prompt: empty");
  if (req.tokenizer) req.stop.eos_ids = req.tokenizer->eos_ids();
  req.stop.max_new_tokens = max_new_tokens;
  req.stop.stop_strings = stop;
  req.stop.timeout_s = timeout_s;
  req.seed = static_cast<uint64_t>(seed);
  // `generate --trace`'s recorder: every round's drafts, accepted path and distributions.
  if (trace) req.trace = std::make_shared<strategies::TraceRecorder>(req.tokenizer, resolved);
  // Called (without the GIL) each time tokens become final: the boundary where a Ctrl-C or an
  // exception of on_token stops the generation.
  const bool call_back = !on_token.is_none();
  auto callback = [&](const Tokens& tokens, const std::string& text) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw PythonRaised{};
    if (!call_back) return;
    try {
      on_token(py::cast(tokens), py::bytes(text).attr("decode")("utf-8", "replace"));
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonRaised{};
    }
  };
  strategies::Result r;
  try {
    py::gil_scoped_release nogil;
    r = strat->generate(req, callback);
  } catch (const PythonRaised&) {
    throw py::error_already_set();
  }
  py::dict out = to_python(harness::generation_json(r, strategy));
  out["finish"] = strategies::to_string(r.finish);
  out["n_prompt"] = static_cast<int64_t>(req.prompt.size());
  if (req.trace) out["trace"] = to_python(req.trace->to_json());
  if (!r.sequences.empty()) {
    py::list seqs;
    for (const auto& s : r.sequences)
      seqs.append(py::dict(py::arg("tokens") = s.tokens, py::arg("text") = py::bytes(s.text).attr("decode")("utf-8", "replace"),
                           py::arg("score") = s.score));
    out["sequences"] = seqs;
  }
  return out;
}

// ---- drafters written in Python ------------------------------------------------------------

// A Python object whose last reference may be dropped by C++ code running without the GIL
// (a registry snapshot, a copied std::function): the GIL is taken to release it, and after the
// interpreter has shut down (static destructors at exit) it is left alone.
class PyRef {
 public:
  explicit PyRef(py::object o) : obj_(std::move(o)) {}
  ~PyRef() {
    if (!Py_IsInitialized()) {
      obj_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }
  const py::object& get() const { return obj_; }

 private:
  py::object obj_;
};

// The C++ side of a Python drafter: one per generation (DrafterInfo::factory), wrapping the
// instance the registered Python factory returned. propose() passes the committed sequence as
// an int32 numpy array and checks the answer; the C++ verifier decides what is accepted.
class PyDrafter : public strategies::Drafter {
 public:
  PyDrafter(std::string name, std::shared_ptr<PyRef> obj, int64_t n_vocab)
      : name_(std::move(name)), obj_(std::move(obj)), n_vocab_(n_vocab) {
    py::gil_scoped_acquire gil;
    has_observe_ = py::hasattr(obj_->get(), "observe");
    has_prefill_ = py::hasattr(obj_->get(), "prefill");
  }

  strategies::DraftProposal propose(const Tokens& seq, int64_t max_depth) override {
    if (max_depth <= 0) return {};  // nothing may be drafted (as every C++ drafter)
    py::gil_scoped_acquire gil;
    py::object ret;
    try {
      py::array_t<int32_t> context(static_cast<py::ssize_t>(seq.size()), seq.data());  // [n] copy
      ret = obj_->get().attr("propose")(context, max_depth);
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonRaised{};
    }
    return checked(ret, max_depth);
  }

  void observe(const strategies::Round& round) override {
    if (!has_observe_) return;
    call("observe", [&](const py::object& o) { o.attr("observe")(round.n_valid, round.accepted); });
  }
  void prefill(const Tokens& tokens, const at::Tensor&) override {
    if (!has_prefill_) return;
    call("prefill", [&](const py::object& o) {
      o.attr("prefill")(py::array_t<int32_t>(static_cast<py::ssize_t>(tokens.size()), tokens.data()));
    });
  }
  bool has_distribution() const override { return false; }  // per proposal: q given or not

 private:
  template <class F>
  void call(const char*, F&& f) {
    py::gil_scoped_acquire gil;
    try {
      f(obj_->get());
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonRaised{};
    }
  }

  template <class... A>
  [[noreturn]] void bad(A&&... parts) const {
    fail("python drafter '", name_, "': propose() returned ", std::forward<A>(parts)...);
  }

  // tokens | (tokens,) | (tokens, parents) | (tokens, parents, q); parents None = a chain.
  strategies::DraftProposal checked(const py::object& ret, int64_t max_depth) const {
    py::object tokens_obj = ret, parents_obj = py::none(), q_obj = py::none();
    if (py::isinstance<py::tuple>(ret)) {
      const py::tuple t = ret;
      if (t.size() < 1 || t.size() > 3) bad("a tuple of ", t.size(), " items; expected tokens [, parents [, q]]");
      tokens_obj = t[0];
      if (t.size() > 1) parents_obj = t[1];
      if (t.size() > 2) q_obj = t[2];
    }
    strategies::DraftProposal d;
    const py::array tok = py::module_::import("numpy").attr("asarray")(tokens_obj);
    if (tok.ndim() != 1) bad("tokens of ", tok.ndim(), " dimensions; expected a 1-D array of token ids");
    if (tok.size() > 0 && tok.dtype().kind() != 'i' && tok.dtype().kind() != 'u')
      bad("tokens of dtype ", py::str(tok.dtype()).cast<std::string>(), "; expected integer token ids");
    const auto ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(tok);
    const int64_t n = ids.size();
    if (n > strategies::k_max_draft_nodes)
      bad(n, " tokens; at most k_max_draft_nodes = ", strategies::k_max_draft_nodes, " per round");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = ids.at(i);
      if (t < 0 || t >= n_vocab_) bad("token id ", t, " at index ", i, ", outside the vocabulary [0, ", n_vocab_, ")");
      d.tokens.push_back(static_cast<TokenId>(t));
    }
    if (!parents_obj.is_none()) {
      const auto par = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(parents_obj);
      if (!par || par.ndim() != 1 || par.size() != n) bad("parents that are not a 1-D array of ", n, " entries");
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = par.at(i);
        if (p < -1 || p >= i) bad("parents[", i, "] = ", p, "; expected -1 <= parents[i] < i");
        d.parents.push_back(static_cast<int32_t>(p));
      }
    }
    const int64_t depth = strategies::max_depth(d);
    if (depth > max_depth) bad("a draft ", depth, " deep; this round allows max_depth = ", max_depth);
    if (!q_obj.is_none()) d.q = checked_q(q_obj, d);
    return d;
  }

  // q: [n, V] rows of probabilities, the one each token was drawn from. Each row must sum to 1
  // within 1e-3 (rows computed in single precision) and is passed on divided by its sum (in
  // double): this is the one place a drafter's q is renormalised, and the verifier (any backend,
  // batch-1 or batched, chain or tree) takes it from here. Unnormalised, a row off by 1e-3 would
  // shift every acceptance probability min(1, p/q) by as much.
  at::Tensor checked_q(const py::object& q_obj, const strategies::DraftProposal& d) const {
    const auto q = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(q_obj);
    const int64_t n = d.size();
    if (!q || q.ndim() != 2 || q.shape(0) != n || q.shape(1) != n_vocab_)
      bad("q of shape ", q ? shape_text(q) : "(not an array)", "; expected [", n, ", ", n_vocab_, "] (tokens x vocabulary)");
    at::Tensor out = at::empty({n, n_vocab_}, at::kFloat);  // [n, V]
    float* dst = out.data_ptr<float>();
    const float* src = q.data();
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t v = 0; v < n_vocab_; ++v) {
        const float x = src[i * n_vocab_ + v];
        if (!std::isfinite(x) || x < 0) bad("q[", i, ", ", v, "] = ", x, "; probabilities must be finite and >= 0");
        sum += x;
      }
      if (std::abs(sum - 1.0) > 1e-3) bad("q row ", i, " summing to ", sum, "; each row must sum to 1");
      // A token its own row gives no mass cannot have been drawn from it.
      if (src[i * n_vocab_ + d.tokens[i]] <= 0)
        bad("q[", i, ", ", d.tokens[i], "] = 0 for the proposed token ", d.tokens[i], "; it was not drawn from q");
      for (int64_t v = 0; v < n_vocab_; ++v) dst[i * n_vocab_ + v] = static_cast<float>(src[i * n_vocab_ + v] / sum);
    }
    return out;
  }

  static std::string shape_text(const py::array& a) {
    std::string s = "[";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + "]";
  }

  std::string name_;
  std::shared_ptr<PyRef> obj_;
  int64_t n_vocab_;
  bool has_observe_ = false, has_prefill_ = false;
};

// The context a Python drafter factory receives (a plain dict).
py::dict drafter_context(const strategies::DrafterContext& ctx) {
  py::dict params;
  for (const auto& [k, v] : ctx.params.values()) params[py::str(k)] = v;
  const Tokens& prompt = ctx.request.prompt;
  return py::dict(py::arg("n_vocab") = ctx.request.target->config().n_vocab, py::arg("max_depth") = ctx.max_depth,
                  py::arg("capacity") = ctx.capacity,
                  py::arg("seed") = strategies::drafter_seed(ctx.request.seed),  // not the verifier's
                  py::arg("temperature") = ctx.proc.temperature, py::arg("params") = params,
                  py::arg("prompt") = py::array_t<int32_t>(static_cast<py::ssize_t>(prompt.size()), prompt.data()));
}

void register_python_drafter(const std::string& name, const py::object& factory, const std::string& description,
                             bool chains_with_q) {
  SD_CHECK(PyCallable_Check(factory.ptr()), "register_drafter: the factory of drafter '", name, "' is not callable");
  strategies::DrafterInfo info;
  info.name = name;
  info.description = description.empty() ? "drafter written in Python" : description;
  info.chains_with_q = chains_with_q;
  // shared_ptr: the std::function is copied with the registry's snapshots without the GIL.
  auto ref = std::make_shared<PyRef>(factory);
  info.factory = [name, ref](const strategies::DrafterContext& ctx) -> std::unique_ptr<strategies::Drafter> {
    std::shared_ptr<PyRef> inst;
    {
      py::gil_scoped_acquire gil;
      try {
        inst = std::make_shared<PyRef>(ref->get()(drafter_context(ctx)));
      } catch (py::error_already_set& e) {
        e.restore();
        throw PythonRaised{};
      }
      SD_CHECK(py::hasattr(inst->get(), "propose"), "python drafter '", name,
               "': the factory returned an object without a propose(context, max_depth) method");
    }
    return std::make_unique<PyDrafter>(name, inst, ctx.request.target->config().n_vocab);
  };
  strategies::register_drafter(std::move(info));
}

// ---- harness -------------------------------------------------------------------------------

harness::ExperimentConfig experiment_config(const std::string& path, const std::string& text,
                                            const std::vector<std::string>& overrides) {
  // text: an experiment given as a Python dict (serialised as JSON, which is YAML); "<dict>"
  // names it in messages and relative prompt files resolve against the working directory.
  return text.empty() ? harness::load_experiment(path, overrides) : harness::parse_experiment(text, path, overrides);
}

std::string validate_experiment(const std::string& path, const std::string& text,
                                const std::vector<std::string>& overrides) {
  py::gil_scoped_release nogil;
  const auto cfg = experiment_config(path, text, overrides);
  const auto plan = harness::make_plan(cfg);
  cli::check_plan_strategies(cfg, plan);
  return harness::format_plan(cfg, plan);
}

// `specdec run` (local executor), cmd_run.cpp: the same steps with the same library calls. Ctrl-C
// goes to the harness's handler while it runs (stop after the current generation; finished
// cells are committed), then Python's handlers come back.
py::dict run_experiment(const std::string& path, const std::string& text, const std::vector<std::string>& overrides,
                        const std::string& out, const std::string& results_root, bool resume, bool progress,
                        const std::string& cells, bool threads_oversubscribe) {
  harness::RunOutcome r;
  {
    py::gil_scoped_release nogil;
    const auto cfg = experiment_config(path, text, overrides);
    const auto plan = harness::make_plan(cfg);
    cli::check_plan_strategies(cfg, plan);  // before the run folder is created
    harness::RunOptions ro;
    ro.out_dir = out;
    ro.results_root = results_root;
    ro.resume = resume;
    ro.progress = progress;
    ro.threads_oversubscribe = threads_oversubscribe;
    if (!cells.empty()) std::tie(ro.cells_begin, ro.cells_end) = harness::parse_index_range(cells, "cells");
    struct sigaction old_int{}, old_term{};
    sigaction(SIGINT, nullptr, &old_int);
    sigaction(SIGTERM, nullptr, &old_term);
    harness::clear_stop_request();
    harness::install_stop_handlers();
    try {
      r = harness::run_experiment(cfg, ro);
    } catch (...) {
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      throw;
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    harness::clear_stop_request();
  }
  return py::dict(py::arg("run_dir") = r.run_dir, py::arg("unit") = r.unit, py::arg("n_cells") = r.n_cells,
                  py::arg("n_resumed") = r.n_resumed, py::arg("n_finished") = r.n_finished,
                  py::arg("interrupted") = r.interrupted, py::arg("checks_passed") = r.checks_passed);
}

}  // namespace

PYBIND11_MODULE(_specdec, m) {
  m.doc() = "specdec's C++ engine (see the specdec package for the documented API)";
  // specdec.Error is a ValueError: a bad key or value, with the library's message naming it.
  static py::exception<Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const PythonRaised&) {  // should have become error_already_set; keep the error set
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "python drafter or callback failed");
    }
  });

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def("info", &model_info)
      .def("encode", [](const Model& mdl, const std::string& text, bool add_special) {
        return tokenizer_of(mdl).encode(text, add_special);
      }, py::arg("text"), py::arg("add_special") = true)
      .def("decode", [](const Model& mdl, const Tokens& ids, bool skip_special) {
        const std::string s = tokenizer_of(mdl).decode(ids, skip_special);
        return py::bytes(s).attr("decode")("utf-8", "replace");
      }, py::arg("tokens"), py::arg("skip_special") = false)
      .def("chat_template", [](const Model& mdl, const std::vector<std::pair<std::string, std::string>>& turns,
                                bool add_generation_prompt) {
        std::vector<tokenizer::ChatMessage> msgs;
        for (const auto& [role, content] : turns) msgs.push_back({role, content});
        return tokenizer_of(mdl).apply_chat_template(msgs, add_generation_prompt);
      }, py::arg("messages"), py::arg("add_generation_prompt") = true)
      .def("eos_ids", [](const Model& mdl) { return tokenizer_of(mdl).eos_ids(); })
      .def_property_readonly("name", [](const Model& mdl) { return mdl.name; });

  const model::ModelOptions defaults;  // the CLI's and the YAML's defaults (model/model_options.h)
  m.def("load", &load_model, py::arg("name"), py::arg("dtype") = defaults.dtype, py::arg("device") = defaults.device,
        py::arg("threads") = defaults.threads, py::arg("engine") = defaults.engine, py::arg("graphs") = defaults.graphs,
        py::arg("threads_oversubscribe") = defaults.threads_oversubscribe, py::arg("seed") = defaults.seed);
  m.def("generate", &generate, py::arg("target"), py::arg("prompt"), py::arg("strategy"), py::arg("draft"),
        py::arg("params"), py::arg("max_new_tokens"), py::arg("seed"), py::arg("stop"), py::arg("timeout"),
        py::arg("chat"), py::arg("on_token"), py::arg("trace"));

  m.def("strategies", [] {
    py::list out;
    for (const auto& s : strategies::all()) {
      const bool needs_draft = strategies::strategy_needs(s, strategies::resolve(s, {}), false).draft_model;
      out.append(py::dict(py::arg("name") = s.name, py::arg("description") = s.description,
                          py::arg("needs_draft_model") = needs_draft, py::arg("params") = param_specs(s.params)));
    }
    return out;
  });
  m.def("drafters", [] {
    py::list out;
    for (const auto& d : strategies::all_drafters())
      out.append(py::dict(py::arg("name") = d.name, py::arg("description") = d.description,
                          py::arg("needs_draft_model") = d.needs_draft_model,
                          py::arg("chains_with_q") = d.chains_with_q, py::arg("params") = param_specs(d.params)));
    return out;
  });
  m.def("processor_params", [] { return param_specs(strategies::processor_params()); });
  m.def("resolve_params", [](const std::string& strategy, const std::map<std::string, std::string>& given) {
    return strategies::resolve(strategy, strategies::Params(given)).values();
  });
  m.def("register_drafter", &register_python_drafter, py::arg("name"), py::arg("factory"), py::arg("description"),
        py::arg("chains_with_q"));
  m.def("unregister_drafter", [](const std::string& name) { strategies::unregister_drafter(name); });

  m.def("validate", &validate_experiment, py::arg("path"), py::arg("text"), py::arg("overrides"));
  m.def("run", &run_experiment, py::arg("path"), py::arg("text"), py::arg("overrides"), py::arg("out"),
        py::arg("results_root"), py::arg("resume"), py::arg("progress"), py::arg("cells"),
        py::arg("threads_oversubscribe"));
  m.def("repo_root", &harness::repo_root);
}
