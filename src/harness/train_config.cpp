// The drafter-training YAML (see train_config.h).
#include "harness/train_config.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"

namespace specdec::harness {
namespace {

using train::TrainOptions;

// One option: how a YAML/--set value sets it and how it is copied between option sets.
struct Field {
  std::function<void(TrainOptions&, const YAML::Node&)> set;
  std::function<void(TrainOptions&, const TrainOptions&)> copy;
};

template <typename T>
Field field(T TrainOptions::*member) {
  return {[member](TrainOptions& o, const YAML::Node& n) { o.*member = n.as<T>(); },
          [member](TrainOptions& d, const TrainOptions& s) { d.*member = s.*member; }};
}

// YAML key -> field. The command line spells the same keys with '-' for '_'.
const std::map<std::string, Field>& fields() {
  static const std::map<std::string, Field> f = {
      {"kind", field(&TrainOptions::kind)},
      {"out", field(&TrainOptions::out)},
      {"corpus", {[](TrainOptions& o, const YAML::Node& n) {
                    o.corpus.clear();
                    if (n.IsSequence())
                      for (const auto& e : n) o.corpus.push_back(e.as<std::string>());
                    else
                      o.corpus.push_back(n.as<std::string>());
                  },
                  [](TrainOptions& d, const TrainOptions& s) { d.corpus = s.corpus; }}},
      {"data", field(&TrainOptions::data)},
      {"tokens", field(&TrainOptions::tokens)},
      {"train_on", field(&TrainOptions::train_on)},
      {"held_out_tokens", field(&TrainOptions::held_out_tokens)},
      {"seq_len", field(&TrainOptions::seq_len)},
      {"epochs", field(&TrainOptions::epochs)},
      {"batch", field(&TrainOptions::batch_seqs)},
      {"lr", field(&TrainOptions::lr)},
      {"topk", field(&TrainOptions::topk)},
      {"d_ff", field(&TrainOptions::d_ff)},
      {"medusa_heads", field(&TrainOptions::medusa_heads)},
      {"draft_vocab", field(&TrainOptions::draft_vocab)},
      {"unroll", field(&TrainOptions::unroll)},
      {"loss_vocab", field(&TrainOptions::loss_vocab)},
      {"w_cls", field(&TrainOptions::w_cls)},
      {"feature_noise", field(&TrainOptions::feature_noise)},
      {"minutes", field(&TrainOptions::minutes)},
      {"seed", field(&TrainOptions::seed)},
      {"threads", field(&TrainOptions::threads)},
      {"checkpoint_every", field(&TrainOptions::checkpoint_s)},
  };
  return f;
}

std::string valid_keys() {
  std::string s = "model, dtype";
  for (const auto& [k, f] : fields()) s += ", " + k;
  return s;
}

void set_key(TrainConfig& c, const std::string& where, const std::string& key, const YAML::Node& value) {
  try {
    if (key == "model") {
      c.model = value.as<std::string>();
    } else if (key == "dtype") {
      c.dtype = value.as<std::string>();
    } else {
      const auto it = fields().find(key);
      SD_CHECK(it != fields().end(), where, ": unknown key '", key, "' (valid keys: ", valid_keys(), ")");
      it->second.set(c.options, value);
    }
  } catch (const YAML::Exception&) {
    std::ostringstream os;
    os << value;
    fail(where, ".", key, ": bad value '", os.str(), "'");
  }
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail(path, ": cannot open the drafter-training config");
  } catch (const YAML::Exception& e) {
    fail(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg);
  }
  SD_CHECK(doc.IsMap(), path, ": expected a mapping of train-drafter options (", valid_keys(), ")");
  TrainConfig c;
  for (const auto& kv : doc) set_key(c, path, kv.first.as<std::string>(), kv.second);
  for (const std::string& s : overrides) {
    const size_t eq = s.find('=');
    SD_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '", s, "'");
    YAML::Node value;
    try {
      value = YAML::Load(s.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      fail("--set ", s, ": bad YAML value: ", e.msg);
    }
    set_key(c, "--set", s.substr(0, eq), value);
  }
  SD_CHECK(!c.model.empty(), path, ": 'model' is required (the target the head is trained for)");
  return c;
}

void apply_train_option(TrainOptions& dst, const std::string& cli_key, const TrainOptions& src) {
  std::string key = cli_key;
  for (char& ch : key)
    if (ch == '-') ch = '_';
  const auto it = fields().find(key);
  SD_CHECK(it != fields().end(), "train-drafter: no option '", cli_key, "'");
  it->second.copy(dst, src);
}

}  // namespace specdec::harness
