// Structured output on xgrammar's C++ core (sampling/grammar.h).
#include "sampling/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "sampling/processors.h"
#include "tokenizer/tokenizer.h"

namespace specdec::sampling {
namespace {

// xgrammar's message without what names xgrammar's own code: its "[hh:mm:ss] /path/file.cc:83: "
// prefix and "Check failed: (...) is false: ", and without the input it echoes ("The JSON string
// is: ..."). What stays names where the parser gave up, with the grammar's line and column
// where xgrammar gives them.
std::string message_of(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind('[', 0) == 0) {  // "[02:46:31] /root/.../regex_converter.cc:83: "
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? close : m.find(": ", close + 2);
    if (colon != std::string::npos && m.find(':', close + 2) < colon) m = m.substr(colon + 2);
  }
  if (m.rfind("Check failed: ", 0) == 0) {
    const size_t end = m.find(" is false: ");
    if (end != std::string::npos) m = m.substr(end + 11);
  }
  const size_t echo = m.find(" The JSON string is:");
  if (echo != std::string::npos) m.resize(echo);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string read_file(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SD_CHECK(in.good(), key, ": cannot read the file '", path, "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Inline text, or the content of the file `value` names (then `file` is its path).
std::string inline_or_file(const std::string& key, const std::string& value, bool looks_inline,
                           const std::string& what, std::string& file) {
  if (looks_inline) return value;
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) {
    file = value;
    return read_file(key, value);
  }
  fail(key, ": '", value.size() > 80 ? value.substr(0, 80) + "..." : value, "' is neither ", what,
       " nor the path of a readable file");
}

}  // namespace

// ---- Constraint ---------------------------------------------------------------------------

struct Compiled {
  xgrammar::CompiledGrammar grammar{xgrammar::NullObj{}};
  std::vector<int32_t> stop_ids;
  int64_t n_vocab;
};

struct Constraint::Impl {
  std::string key;
  std::string value;   // as the user gave it (from_params: the same key and value reuse this parse)
  std::string source;  // the grammar's text as given (a file's content), which names it in the cache
  xgrammar::Grammar grammar{xgrammar::NullObj{}};
};

namespace {
// Compiled grammars, process-wide: one per (constraint, tokenizer, logits width, end ids), so
// that the strategies a run creates for the same constraint compile it once. The least recently
// used goes beyond k_cache_size (a run over more prompt schemas than that, cell after cell,
// would otherwise compile every one of them again in each cell).
struct CacheEntry {
  std::string constraint;  // key + '\0' + source
  const tokenizer::Tokenizer* tok;
  std::string fingerprint;
  int64_t n_vocab;
  std::vector<int32_t> stop_ids;
  std::shared_ptr<const Compiled> compiled;
};
constexpr size_t k_cache_size = 32;
std::mutex g_cache_mu;
std::vector<CacheEntry> g_cache;
}  // namespace

const std::vector<std::string>& Constraint::keys() {
  static const std::vector<std::string> k = {"json_schema", "regex", "grammar", "response_format"};
  return k;
}

std::shared_ptr<const Constraint> Constraint::from_params(const std::map<std::string, std::string>& params,
                                                          const std::shared_ptr<const Constraint>& parsed) {
  std::string found;
  std::shared_ptr<const Constraint> out;
  for (const std::string& key : keys()) {
    const auto it = params.find(key);
    if (it == params.end() || trim(it->second).empty()) continue;
    if (key == "response_format" && trim(it->second) == "text") continue;
    SD_CHECK(found.empty(), "structured output: both '", found, "' and '", key,
             "' are set; give at most one of json_schema, regex, grammar, response_format");
    found = key;
    const bool same = parsed && parsed->impl_->key == key && parsed->impl_->value == it->second;
    out = same ? parsed : parse(key, it->second);
  }
  return out;
}

namespace {
// The tokens the matcher admits next, as xgrammar's bitmask: bit v of words[v / 32] set when
// token v is admitted. `words` is scratch, resized here.
void fill_bitmask(xgrammar::GrammarMatcher& matcher, int64_t n_vocab, std::vector<int32_t>& words) {
  words.assign(xgrammar::GetBitmaskSize(static_cast<int>(n_vocab)), 0);
  int64_t shape[1] = {static_cast<int64_t>(words.size())};
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  matcher.FillNextTokenBitmask(&t);
}

// Whether the grammar's language is empty as far as its start shows: compiled for a vocabulary of
// the 256 bytes and an end id, it admits neither a first byte nor the end. That vocabulary and
// its compiler are made once per process, and each grammar's answer is kept (by its key and
// text; the newest k_probe_memo), so that the same constraint parsed again (every prompt of a
// task set carrying one schema) compiles nothing again. This small compile is the only one at
// parse time; the tokenizer's comes with the first mask.
constexpr size_t k_probe_memo = 256;
std::mutex g_probe_mu;
int64_t g_probe_compiles = 0;

bool admits_nothing(const std::string& name, const xgrammar::Grammar& grammar) {
  static std::map<std::string, bool> memo;
  static std::vector<std::string> order;  // memo's keys, oldest first
  std::lock_guard<std::mutex> lock(g_probe_mu);
  if (const auto it = memo.find(name); it != memo.end()) return it->second;
  static xgrammar::GrammarCompiler* compiler = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    bytes.emplace_back("</s>");
    const xgrammar::TokenizerInfo info(bytes, xgrammar::VocabType::RAW, 257, std::vector<int32_t>{256});
    return new xgrammar::GrammarCompiler(info, /*max_threads=*/1, /*cache_enabled=*/false);  // never freed
  }();
  ++g_probe_compiles;
  xgrammar::GrammarMatcher matcher(compiler->CompileGrammar(grammar), std::vector<int32_t>{256});
  std::vector<int32_t> mask;
  fill_bitmask(matcher, 257, mask);
  const bool empty = std::all_of(mask.begin(), mask.end(), [](int32_t w) { return w == 0; });
  if (order.size() >= k_probe_memo) {
    memo.erase(order.front());
    order.erase(order.begin());
  }
  memo.emplace(name, empty);
  order.push_back(name);
  return empty;
}
}  // namespace

std::shared_ptr<const Constraint> Constraint::parse(const std::string& key, const std::string& value_in) {
  auto impl = std::make_shared<Impl>();
  impl->key = key;
  impl->value = value_in;
  const std::string value = trim(value_in);
  std::string file;  // the file the value names, if it names one
  try {
    if (key == "json_schema") {
      const bool is_inline = !value.empty() && (value[0] == '{' || value[0] == '[' || value == "true");
      const std::string schema = inline_or_file(key, value, is_inline, "inline JSON (starting with '{')", file);
      // Compact JSON (no free whitespace between tokens: a small model otherwise fills the
      // output with blank lines), properties in schema order, no extra properties.
      impl->source = schema;
      impl->grammar = xgrammar::Grammar::FromJSONSchema(schema, /*any_whitespace=*/false);
    } else if (key == "regex") {
      SD_CHECK(!value_in.empty(), key, ": empty regular expression");
      impl->source = value_in;
      impl->grammar = xgrammar::Grammar::FromRegex(value_in);
    } else if (key == "grammar") {
      const std::string ebnf = inline_or_file(key, value, value.find("::=") != std::string::npos,
                                              "an inline EBNF grammar (with a 'root ::= ...' rule)", file);
      impl->source = ebnf;
      impl->grammar = xgrammar::Grammar::FromEBNF(ebnf, "root");
    } else if (key == "response_format") {
      SD_CHECK(value == "json" || value == "json_object", key, ": '", value,
               "' is not a response format; expected json (any JSON value) or text (none)");
      impl->source = "json";
      impl->grammar = xgrammar::Grammar::BuiltinJSONGrammar();
    } else {
      fail("structured output: unknown key '", key, "' (json_schema, regex, grammar, response_format)");
    }
    // Inside the try: an exception of xgrammar's while compiling it is a named error as well.
    SD_CHECK(!admits_nothing(key + '\0' + impl->source, impl->grammar), key, ": ", file.empty() ? "" : "file '" + file + "': ",
             "the ", key == "regex" ? "regular expression" : key == "json_schema" ? "schema" : "grammar",
             " matches nothing (no output can start it or end it)");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const char* what = key == "json_schema" ? "malformed JSON schema (not JSON, or not a schema xgrammar takes)"
                       : key == "regex"     ? "malformed regular expression"
                                            : "malformed grammar";
    fail(key, ": ", file.empty() ? "" : "file '" + file + "': ", what, ": ", message_of(e));
  }
  return std::shared_ptr<const Constraint>(new Constraint(std::move(impl)));
}

const std::string& Constraint::key() const { return impl_->key; }

int64_t Constraint::emptiness_probes() {
  std::lock_guard<std::mutex> lock(g_probe_mu);
  return g_probe_compiles;
}

// ---- ConstraintState ----------------------------------------------------------------------

struct ConstraintState::Impl {
  std::shared_ptr<Constraint::Impl> constraint;
  const tokenizer::Tokenizer* tok = nullptr;
  std::vector<int32_t> stop_ids;
  size_t prompt_len = 0;
  Tokens accepted;
  std::shared_ptr<const Compiled> compiled;           // set by the first mask()
  std::unique_ptr<xgrammar::GrammarMatcher> matcher;  // likewise
  std::vector<int32_t> bitmask;                       // [words], scratch
  bool ended = false;                                 // an end id was committed

  bool is_stop(TokenId t) const { return std::binary_search(stop_ids.begin(), stop_ids.end(), static_cast<int32_t>(t)); }

  void compile(int64_t n_vocab);
  // Compiles (once) for logits of width n_vocab and starts the matcher; logits of another width
  // than the first call's are a named error.
  void start_matcher(int64_t n_vocab);
  // Gives the next committed token to the matcher; false (and nothing changed) when the grammar
  // does not admit it there. An end id is admitted where the grammar is complete, and ends it.
  bool accept(TokenId t);
  void sync(const Tokens& context);
  // Rolls back what it accepted beyond its common prefix with `context` (which starts with the
  // prompt), then accepts the rest; false where a token is refused (the state then follows
  // `context` up to it).
  bool follow(const Tokens& context);
  // lead()'s tokens from the matcher's current state (left there).
  Lead lead_here(int64_t n_vocab, int64_t max, bool forced, bool jump);
  // The admitted tokens of the matcher's current state into row `out` ([V] bytes, 1 = admitted).
  void fill(uint8_t* out, int64_t V);
  // Whether the matcher's current state admits `t`, asked without a mask (false for an end id:
  // its admission is left to the mask).
  bool admits(TokenId t);
};

bool ConstraintState::Impl::admits(TokenId t) {
  if (ended || t < 0 || t >= tok->vocab_size() || is_stop(t) || tok->is_special(t) ||
      !matcher->AcceptToken(static_cast<int32_t>(t)))
    return false;
  matcher->Rollback(1);
  return true;
}

void ConstraintState::Impl::compile(int64_t n_vocab) {
  Constraint::Impl& c = *constraint;
  // A fingerprint of the vocabulary besides its address (an address can be reused).
  std::string fp = std::to_string(tok->vocab_size());
  for (int64_t i = 0; i < tok->vocab_size(); i += std::max<int64_t>(1, tok->vocab_size() / 16))
    fp += "|" + tok->token_bytes(static_cast<TokenId>(i));
  const std::string name = c.key + '\0' + c.source;
  std::lock_guard<std::mutex> lock(g_cache_mu);  // one compile at a time (it uses 2 threads itself)
  for (auto e = g_cache.begin(); e != g_cache.end(); ++e)
    if (e->constraint == name && e->tok == tok && e->fingerprint == fp && e->n_vocab == n_vocab &&
        e->stop_ids == stop_ids) {
      compiled = e->compiled;
      std::rotate(e, e + 1, g_cache.end());  // the most recently used last
      return;
    }
  const int64_t n_tok = tok->vocab_size();
  SD_CHECK(n_vocab >= n_tok, c.key, ": cannot compile the grammar for this model: its logits have ", n_vocab,
           " entries, fewer than its tokenizer's ", n_tok, " tokens");
  std::vector<std::string> vocab(n_tok);
  for (int64_t i = 0; i < n_tok; ++i) {
    const auto id = static_cast<TokenId>(i);
    const bool stop = std::find(stop_ids.begin(), stop_ids.end(), static_cast<int32_t>(i)) != stop_ids.end();
    // Special ids (chat markers, ...) are "" for xgrammar: never admitted. The end ids keep a
    // name: xgrammar admits them where the grammar is complete.
    vocab[i] = stop ? tok->token_string(id) : tok->is_special(id) ? std::string() : tok->token_bytes(id);
  }
  auto out = std::make_shared<Compiled>();
  try {
    xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, static_cast<int>(n_vocab),
                                 std::vector<int32_t>(stop_ids.begin(), stop_ids.end()));
    xgrammar::GrammarCompiler compiler(info, /*max_threads=*/2, /*cache_enabled=*/false);
    out->grammar = compiler.CompileGrammar(c.grammar);
  } catch (const std::exception& e) {
    fail(c.key, ": cannot compile the grammar for this model's tokenizer (", n_tok, " tokens): ", message_of(e));
  }
  out->stop_ids = stop_ids;
  out->n_vocab = n_vocab;
  if (g_cache.size() >= k_cache_size) g_cache.erase(g_cache.begin());
  g_cache.push_back({name, tok, fp, n_vocab, stop_ids, out});
  compiled = out;
}

void ConstraintState::Impl::start_matcher(int64_t n_vocab) {
  if (!compiled) {
    compile(n_vocab);
    matcher = std::make_unique<xgrammar::GrammarMatcher>(compiled->grammar, stop_ids);
  }
  SD_CHECK(n_vocab == compiled->n_vocab, "structured output: logits of width ", n_vocab, " after ", compiled->n_vocab);
}

bool ConstraintState::Impl::accept(TokenId t) {
  // An end id is never given to the matcher (xgrammar 0.2.8's Rollback leaves it terminated
  // after one): admitted where the grammar is complete, and nothing may follow it.
  const bool ok = !ended && t >= 0 && t < tok->vocab_size() &&
                  (is_stop(t) ? matcher->IsCompleted()
                              : !tok->is_special(t) && matcher->AcceptToken(static_cast<int32_t>(t)));
  if (!ok) return false;
  ended = ended || is_stop(t);
  accepted.push_back(t);
  return true;
}

void ConstraintState::Impl::sync(const Tokens& context) {
  const size_t done = prompt_len + accepted.size();
  SD_CHECK(context.size() >= done, "structured output (", constraint->key, "): the context has ", context.size(),
           " tokens, fewer than the ", done, " the matcher has seen");
  for (size_t i = done; i < context.size(); ++i) {
    const TokenId t = context[i];
    SD_CHECK(accept(t), "structured output (", constraint->key, "): committed token ", t, " ('",
             t >= 0 && t < tok->vocab_size() ? tok->token_bytes(t) : "?", "') after ", accepted.size(),
             " generated tokens is not admitted by the grammar");
  }
}

bool ConstraintState::Impl::follow(const Tokens& context) {
  SD_CHECK(context.size() >= prompt_len, "structured output (", constraint->key, "): a draft path of ", context.size(),
           " tokens is shorter than the prompt (", prompt_len, ")");
  size_t common = 0;
  while (common < accepted.size() && prompt_len + common < context.size() &&
         accepted[common] == context[prompt_len + common])
    ++common;
  // End ids were never given to the matcher: only the others roll back.
  const auto n_back = std::count_if(accepted.begin() + static_cast<std::ptrdiff_t>(common), accepted.end(),
                                    [this](TokenId t) { return !is_stop(t); });
  if (n_back > 0) matcher->Rollback(static_cast<int>(n_back));
  accepted.resize(common);
  ended = !accepted.empty() && is_stop(accepted.back());
  for (size_t i = prompt_len + common; i < context.size(); ++i)
    if (!accept(context[i])) return false;
  return true;
}

void ConstraintState::Impl::fill(uint8_t* out, int64_t V) {
  fill_bitmask(*matcher, V, bitmask);
  for (int64_t v = 0; v < V; ++v) out[v] = static_cast<uint8_t>((static_cast<uint32_t>(bitmask[v >> 5]) >> (v & 31)) & 1u);
}

std::shared_ptr<ConstraintState> Constraint::start(const tokenizer::Tokenizer* tok_ptr, const Tokens& prompt,
                                                   const std::vector<TokenId>& eos_ids) const {
  SD_CHECK(tok_ptr != nullptr, impl_->key, ": cannot compile the grammar for this model: it has no tokenizer");
  const tokenizer::Tokenizer& tok = *tok_ptr;
  auto s = std::make_unique<ConstraintState::Impl>();
  s->constraint = impl_;
  s->tok = &tok;
  for (TokenId id : eos_ids.empty() ? tok.eos_ids() : eos_ids)
    if (id >= 0 && id < tok.vocab_size()) s->stop_ids.push_back(static_cast<int32_t>(id));
  std::sort(s->stop_ids.begin(), s->stop_ids.end());
  s->stop_ids.erase(std::unique(s->stop_ids.begin(), s->stop_ids.end()), s->stop_ids.end());
  SD_CHECK(!s->stop_ids.empty(), impl_->key, ": cannot compile the grammar for this model: no end-of-sequence id ",
           "to end it with (neither the request nor the tokenizer names one)");
  s->prompt_len = prompt.size();
  return std::make_shared<ConstraintState>(std::move(s));
}

void Constraint::compile(const tokenizer::Tokenizer* tok, int64_t n_vocab, const std::vector<TokenId>& eos_ids) const {
  start(tok, {}, eos_ids)->impl_->start_matcher(n_vocab);
}

bool Constraint::matches(const tokenizer::Tokenizer* tok, int64_t n_vocab, const Tokens& output,
                         const std::vector<TokenId>& eos_ids) const {
  const auto state = start(tok, {}, eos_ids);
  ConstraintState::Impl& s = *state->impl_;
  s.start_matcher(n_vocab);
  for (const TokenId t : output)
    if (!s.accept(t)) return false;
  return s.ended || s.matcher->IsCompleted();
}

ConstraintState::ConstraintState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintState::~ConstraintState() = default;

bool ConstraintState::terminated() const { return impl_->ended; }
int64_t ConstraintState::n_accepted() const { return static_cast<int64_t>(impl_->accepted.size()); }

namespace {
// `text` cut to whole UTF-8 characters: nothing where it starts inside one (a continuation byte),
// and without a character its end cuts short.
std::string whole_characters(std::string text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  if (text.empty() || (byte(0) & 0xC0) == 0x80) return "";
  size_t last = text.size() - 1;  // the last character's first byte (text[0] is one)
  while ((byte(last) & 0xC0) == 0x80) --last;
  const size_t need = byte(last) >= 0xF0 ? 4 : byte(last) >= 0xE0 ? 3 : byte(last) >= 0xC0 ? 2 : 1;
  if (text.size() - last < need) text.resize(last);
  return text;
}
}  // namespace

ConstraintState::Lead ConstraintState::lead(const Tokens& context, int64_t n_vocab, int64_t max, bool forced,
                                           bool jump) {
  Impl& s = *impl_;
  s.start_matcher(n_vocab);
  s.sync(context);
  return s.lead_here(n_vocab, max, forced, jump);
}

ConstraintState::Lead ConstraintState::lead_along(const Tokens& path, int64_t n_vocab, int64_t max, bool forced,
                                                  bool jump) {
  Impl& s = *impl_;
  s.start_matcher(n_vocab);
  if (!s.follow(path)) return {};
  return s.lead_here(n_vocab, max, forced, jump);
}

ConstraintState::Lead ConstraintState::Impl::lead_here(int64_t n_vocab, int64_t max, bool forced, bool jump) {
  Impl& s = *this;
  Lead out;
  // Where every continuation starts with nothing in common there is neither a forced token nor
  // a jump (a single admitted token would start them all), so the mask is not filled to ask.
  if (s.ended || s.matcher->FindJumpForwardString().empty()) return out;
  const auto room = [&] { return static_cast<int64_t>(out.tokens.size()) < max; };
  while (forced && room()) {
    fill_bitmask(*s.matcher, n_vocab, s.bitmask);
    int64_t n_admitted = 0, only = -1;
    for (size_t w = 0; w < s.bitmask.size() && n_admitted < 2; ++w) {
      const auto bits = static_cast<uint32_t>(s.bitmask[w]);
      if (bits == 0) continue;
      n_admitted += __builtin_popcount(bits);
      only = static_cast<int64_t>(w) * 32 + __builtin_ctz(bits);
    }
    if (n_admitted != 1 || s.is_stop(static_cast<TokenId>(only)) ||
        !s.matcher->AcceptToken(static_cast<int32_t>(only)))
      break;
    out.tokens.push_back(static_cast<TokenId>(only));
  }
  out.n_forced = static_cast<int64_t>(out.tokens.size());
  if (jump && room()) {
    const std::string text = whole_characters(s.matcher->FindJumpForwardString());
    for (const TokenId t : text.empty() ? Tokens() : s.tok->encode(text, /*add_special=*/false)) {
      if (!room() || t < 0 || t >= s.tok->vocab_size() || s.is_stop(t) || s.tok->is_special(t) ||
          !s.matcher->AcceptToken(static_cast<int32_t>(t)))
        break;
      out.tokens.push_back(t);
    }
  }
  if (!out.tokens.empty()) s.matcher->Rollback(static_cast<int>(out.tokens.size()));
  return out;
}

bool ConstraintState::mask_draft(const at::Tensor& row, const Tokens& path) {
  Impl& s = *impl_;
  const int64_t V = row.size(-1);
  SD_CHECK(row.dim() == 1 || (row.dim() == 2 && row.size(0) == 1), "structured output: a draft row must be [V] or [1, V], got ",
           row.sizes());
  s.start_matcher(V);
  if (!s.follow(path) || s.ended) return false;
  at::Tensor allowed = at::empty({V}, at::kByte);
  s.fill(allowed.data_ptr<uint8_t>(), V);
  row.masked_fill_(allowed.eq(0).to(row.device()).view(row.sizes()), -std::numeric_limits<float>::infinity());
  return true;
}

std::vector<bool> ConstraintState::admitted(const Tokens& context, const Tokens& draft,
                                           const std::vector<int32_t>& parents, int64_t n_vocab) {
  Impl& s = *impl_;
  SD_CHECK(parents.empty() || parents.size() == draft.size(), "structured output: ", parents.size(), " parents for ",
           draft.size(), " draft tokens");
  s.start_matcher(n_vocab);
  std::vector<bool> ok(draft.size(), false);
  Tokens path;  // context + node i's root-to-node path
  for (size_t i = 0; i < draft.size(); ++i) {
    const int32_t up = parents.empty() ? static_cast<int32_t>(i) - 1 : parents[i];
    if (up >= 0 && !ok[up]) continue;
    path.clear();
    for (int64_t n = static_cast<int64_t>(i); n >= 0; n = parents.empty() ? n - 1 : parents[n]) path.push_back(draft[n]);
    path.insert(path.end(), context.rbegin(), context.rend());
    std::reverse(path.begin(), path.end());
    ok[i] = s.follow(path);  // rolls back to the common prefix with the last path first
  }
  return ok;
}

int64_t ConstraintState::mask(const at::Tensor& logits, const Tokens& context, const Tokens& draft,
                              const std::vector<int32_t>& parents, const ProcessorConfig* argmax) {
  Impl& s = *impl_;
  SD_CHECK(logits.dim() == 2, "structured output: logits must be [N, V], got ", logits.sizes());
  const int64_t N = logits.size(0), V = logits.size(1);
  s.start_matcher(V);
  SD_CHECK(static_cast<int64_t>(draft.size()) + 1 >= N, "structured output: ", N, " rows need ", N - 1,
           " draft tokens, got ", draft.size());
  SD_CHECK(parents.empty() || parents.size() == draft.size(), "structured output: ", parents.size(), " parents for ",
           draft.size(), " draft tokens");
  s.sync(context);
  if (argmax && !(logits.is_cpu() && logits.scalar_type() == at::kFloat && logits.stride(1) == 1)) argmax = nullptr;
  at::Tensor allowed = at::ones({N, V}, at::kByte);  // 1: kept (a row off the grammar stays whole)
  uint8_t* a = allowed.data_ptr<uint8_t>();
  std::vector<int64_t> masked;  // the rows that got a mask
  xgrammar::GrammarMatcher& m = *s.matcher;
  std::vector<int32_t> stack;  // draft nodes the matcher has accepted, root first
  // Row i after the matcher's state (context + the draft nodes on `stack`).
  const auto mask_row = [&](int64_t i) {
    if (argmax) {
      Tokens seen = context;  // what the repetition penalty sees: the row's own path
      for (int32_t n : stack) seen.push_back(draft[n]);
      if (s.admits(host_greedy_token(logits[i], *argmax, seen))) return;
    }
    s.fill(a + i * V, V);
    masked.push_back(i);
  };
  if (!s.ended) mask_row(0);
  // Rows 1..N-1: walk each node's path from the nodes accepted so far (a chain never rolls back;
  // a tree rolls back to the common prefix of the previous path).
  std::vector<int32_t> path;
  int64_t refused = 0;
  for (int64_t i = 1; i < N; ++i) {
    path.clear();
    for (int64_t n = i - 1; n >= 0; n = parents.empty() ? n - 1 : parents[n]) path.push_back(static_cast<int32_t>(n));
    std::reverse(path.begin(), path.end());
    size_t common = 0;
    while (common < stack.size() && common < path.size() && stack[common] == path[common]) ++common;
    if (stack.size() > common) {
      m.Rollback(static_cast<int>(stack.size() - common));
      stack.resize(common);
    }
    // A path through an end id ends there: the row after it is never used (generation stops).
    bool on_grammar = !s.ended;
    for (size_t k = common; k < path.size() && on_grammar; ++k) {
      const TokenId t = draft[path[k]];
      // Special ids (a drafter may propose them) never match: asked, xgrammar would log a warning.
      on_grammar = !s.is_stop(t) && t >= 0 && t < s.tok->vocab_size() && !s.tok->is_special(t) &&
                   m.AcceptToken(static_cast<int32_t>(t));
      if (on_grammar) stack.push_back(path[k]);
      // Node i - 1 itself refused after its admitted path (an end id only where incomplete).
      else if (k + 1 == path.size() && !(s.is_stop(t) && m.IsCompleted())) ++refused;
    }
    if (on_grammar) mask_row(i);
  }
  if (!stack.empty()) m.Rollback(static_cast<int>(stack.size()));
  if (masked.size() == static_cast<size_t>(N)) {
    logits.masked_fill_(allowed.eq(0).to(logits.device()), -std::numeric_limits<float>::infinity());
  } else {
    for (const int64_t i : masked)
      logits[i].masked_fill_(allowed[i].eq(0).to(logits.device()), -std::numeric_limits<float>::infinity());
  }
  return refused;
}

}  // namespace specdec::sampling
